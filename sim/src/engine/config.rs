//! The engine's knobs: scheduler policy, batching budgets, KV memory, preemption, prefix caching and
//! speculative decoding, each a YAML field of a deployment's `engine` section.

use super::policy::Policy;
use serde::{Deserialize, Serialize};
use serverbench_calibration::{FieldError, ModelSpec};
use serverbench_workloads::RequestKind;

/// How a preempted request gives back its KV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preemption {
    /// Drop its KV and recompute prompt + generated tokens when it is scheduled again.
    Recompute,
    /// Copy its KV to host memory over the host link and back when it is scheduled again
    /// (falls back to recompute when `swap_space_gib` is full).
    Swap,
}

/// How draft tokens are proposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecMethod {
    /// A small draft model runs `k` sequential passes.
    Draft,
    /// Prompt-lookup (n-gram) drafts: no GPU cost to propose.
    Ngram,
    /// A multi-token-prediction head: `k` passes of about one decoder layer.
    Mtp,
}

/// Which unreferenced prefix-cache blocks go first when blocks run out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheEviction {
    /// Least recently used first (vLLM, SGLang, serverbench's CUDA engine).
    #[default]
    Lru,
    /// Most recently freed first: `transformers serve` keeps its free cached blocks in insertion order
    /// and takes the newest back (a finished turn's prefix goes before older ones).
    NewestFirst,
}

impl CacheEviction {
    fn is_lru(&self) -> bool {
        *self == CacheEviction::Lru
    }
}

/// When a prompt's blocks enter the prefix cache, where a later request can find them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheEntry {
    /// Once the whole prompt is computed (serverbench's CUDA engine, and the default).
    #[default]
    Prompt,
    /// Each chunk's whole blocks when the chunk is scheduled, so that a request scheduled after it,
    /// later in the same step or in a later one, finds them: vLLM v1 (`KVCacheManager.allocate_slots`
    /// caches every full block up to the tokens it allocates for the step). Requests that arrive
    /// together with a shared prefix compute it once.
    Scheduled,
}

impl CacheEntry {
    fn is_prompt(&self) -> bool {
        *self == CacheEntry::Prompt
    }
}

/// The order in which waiting requests are considered for admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitingOrder {
    /// Arrival order (vLLM's only order; SGLang's `--schedule-policy fcfs`, its default).
    Fcfs,
    /// Longest cached prefix first while the queue is short (SGLang's `--schedule-policy lpm`).
    Lpm,
}

/// Per-kind acceptance overrides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindAcceptance {
    /// Root turns.
    #[serde(default)]
    pub root_turn: Option<f64>,
    /// Sub-agent turns.
    #[serde(default)]
    pub subagent_turn: Option<f64>,
    /// Compaction requests.
    #[serde(default)]
    pub compaction: Option<f64>,
}

/// Speculative decoding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    /// How drafts are proposed.
    pub method: SpecMethod,
    /// Draft length: tokens proposed per verify step.
    pub k: u32,
    /// Per-token acceptance probability α (each draft token is accepted with α until the first rejection).
    pub acceptance: f64,
    /// α per request kind, overriding `acceptance`.
    #[serde(default)]
    pub acceptance_by_kind: KindAcceptance,
    /// Parameters one draft pass streams; default: 0.6 B for `draft`, one decoder layer for `mtp`, 0 for `ngram`.
    #[serde(default)]
    pub draft_params: Option<f64>,
}

/// The largest draft model a verify step may stream, parameters: above it a "draft" is no cheaper
/// than the model it drafts for.
pub const MAX_DRAFT_PARAMS: f64 = 1e12;

impl Speculative {
    /// Expected tokens per verify step: `(1 − α^(k+1)) / (1 − α)`.
    pub fn expected_tokens(alpha: f64, k: u32) -> f64 {
        if alpha >= 1.0 {
            (k + 1) as f64
        } else {
            (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
        }
    }

    /// Parameters one draft pass streams, for `model`.
    pub fn draft_params(&self, model: &ModelSpec) -> f64 {
        self.draft_params.unwrap_or(match self.method {
            SpecMethod::Draft => 0.6e9,
            SpecMethod::Ngram => 0.0,
            SpecMethod::Mtp => model.matmul_params / model.layers as f64,
        })
    }

    /// Draft passes per verify step.
    pub fn draft_passes(&self) -> u32 {
        match self.method {
            SpecMethod::Ngram => 0,
            _ => self.k,
        }
    }

    /// α for a request kind.
    pub fn alpha(&self, kind: RequestKind) -> f64 {
        let by = &self.acceptance_by_kind;
        match kind {
            RequestKind::RootTurn => by.root_turn,
            RequestKind::SubagentTurn => by.subagent_turn,
            RequestKind::Compaction => by.compaction,
        }
        .unwrap_or(self.acceptance)
    }

    /// Checks the draft length, acceptances and draft size; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        let by = &self.acceptance_by_kind;
        let alphas = [
            ("acceptance", Some(self.acceptance)),
            ("acceptance_by_kind.root_turn", by.root_turn),
            ("acceptance_by_kind.subagent_turn", by.subagent_turn),
            ("acceptance_by_kind.compaction", by.compaction),
        ];
        for (field, a) in alphas {
            if let Some(a) = a.filter(|a| !(0.0..=1.0).contains(a)) {
                return Err(FieldError::new(
                    field,
                    format!("must be in [0, 1], got {a}"),
                ));
            }
        }
        if self.k == 0 || self.k > 16 {
            return Err(FieldError::new("k", "must be between 1 and 16"));
        }
        if let Some(p) = self.draft_params {
            if !(0.0..=MAX_DRAFT_PARAMS).contains(&p) {
                return Err(FieldError::new(
                    "draft_params",
                    format!("must be between 0 and {MAX_DRAFT_PARAMS:e} parameters, got {p}"),
                ));
            }
        }
        Ok(())
    }
}

/// The engine's knobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Scheduler policy (a name from the policy registry).
    pub policy: Policy,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Token budget of one step (prefill chunk tokens + decode tokens).
    pub max_num_batched_tokens: u32,
    /// Most sequences running at once.
    pub max_num_seqs: u32,
    /// Fraction of GPU memory the engine may use.
    pub gpu_memory_utilization: f64,
    /// Memory reserved for activations per GPU, GiB.
    pub activation_reserve_gib: f64,
    /// Preemption mode.
    pub preemption: Preemption,
    /// Whether the prefix cache is on.
    pub prefix_caching: bool,
    /// Which unreferenced cached blocks are evicted first (`lru` unless given).
    #[serde(default, skip_serializing_if = "CacheEviction::is_lru")]
    pub cache_eviction: CacheEviction,
    /// When a prompt's blocks enter the prefix cache (`prompt` unless given; `scheduled` in the `vllm`
    /// presets).
    #[serde(default, skip_serializing_if = "CacheEntry::is_prompt")]
    pub cache_entry: CacheEntry,
    /// Host memory for swapped-out KV per GPU, GiB (`preemption: swap`).
    #[serde(default = "default_swap_space")]
    pub swap_space_gib: f64,
    /// `sglang`: the fraction of each running request's remaining output that admission reserves room for.
    #[serde(default = "default_new_token_ratio")]
    pub new_token_ratio: f64,
    /// Speculative decoding, when on.
    #[serde(default)]
    pub speculative: Option<Speculative>,
    /// `sglang`: the waiting queue's order (`lpm` unless given); `vllm` and `transformers` always
    /// serve arrival order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_order: Option<WaitingOrder>,
    /// Accept requests only as long as the KV pool holds (SGLang's `max_req_len`: the context limit or
    /// the pool's tokens, whichever is smaller; a longer request fails as a context overflow). Off: the
    /// pool must hold one request at the context limit, or the deployment is refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cap_requests_at_pool: bool,
    /// Steps of at most this many tokens replay captured CUDA graphs; longer ones (and, unless
    /// `cuda_graph_mixed`, every step with prefill) run eagerly and take at least the profile's
    /// `eager_s_per_layer` × layers. Absent: every step's launches are hidden (0: no graphs at all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graph_max_tokens: Option<u32>,
    /// Whether steps with prefill tokens replay (piecewise) graphs too, as vLLM's do; else only
    /// decode-only steps, as SGLang's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cuda_graph_mixed: bool,
    /// Steps with prefill of at most this many tokens replay piecewise graphs although decode-only
    /// steps have their own limit (`cuda_graph_max_tokens`): SGLang's extend graphs, on by default from
    /// 0.5.10 for the models it lists. Not with `cuda_graph_mixed` (which gives prefill steps the
    /// decode limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graph_prefill_max_tokens: Option<u32>,
    /// A mixture of experts' routed experts spread whole over the replica's `tp` GPUs (vLLM
    /// `--enable-expert-parallel`, SGLang `--ep-size` equal to `--tp-size`) instead of each split over
    /// them; attention stays tensor-parallel. Off in both engines unless asked for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expert_parallel: bool,
    /// Data-parallel attention for a mixture of experts (SGLang `--enable-dp-attention`, vLLM's
    /// `--data-parallel-size` with its MoE layers spread over the ranks): each of the replica's `tp`
    /// GPUs is an attention rank with its own requests (dealt by the deployment's `router`) and its own
    /// KV pool holding every KV head of them; the routed layers run over all ranks' tokens, which move
    /// by all-to-all dispatch and combine over the GPUs' link, and the ranks step together, each step
    /// waiting for the slowest (`serverbench_calibration::dpattn`). Off in both engines unless asked for.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_parallel_attention: bool,
    /// How unevenly a mixture of experts' router picks its experts: expert popularity follows a Zipf law
    /// of this exponent (the expert of rank `r` is chosen in proportion to `r^−s`), so a step's tokens
    /// share more experts and, under `expert_parallel`, the GPUs holding the popular ones wait longer
    /// (docs/models-and-hardware.md). 0 (default): uniform routing. Between 0 and 4.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expert_routing_skew: f64,
    /// Decode attention splits each sequence's KV into pieces as FlashAttention 3 does (vLLM's
    /// `FLASH_ATTN` backend on Hopper), and a batch whose pieces overflow the SMs pays for a second pass
    /// (`serverbench_calibration::splitkv`); modelled on GPUs that give their SM count. On in the `vllm`
    /// presets.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_kv_decode: bool,
    /// The scheduler works one step ahead of the GPU (vLLM's asynchronous scheduling, on by default from
    /// 0.11): it picks step n + 1 while step n runs, so a request that reaches a busy engine waits for the
    /// step in progress and the one after it before its first chunk runs. Off (default, the presets
    /// too): it joins the next step (docs/simulator.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub async_scheduling: bool,
    /// A model with linear-attention (Gated DeltaNet) layers keeps its recurrent states in a pool of
    /// their own, sized at this ratio of state memory to KV memory, as SGLang does
    /// (`--mamba-full-memory-ratio`, default 0.9: the states take 0.9 / 1.9 of the memory left after
    /// the weights, the KV pool the rest, and a running sequence's state no longer counts against KV
    /// blocks). Absent: one pool, each running sequence's state counted in it (vLLM). Ignored for
    /// models without such layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_pool_ratio: Option<f64>,
    /// A sliding-window model's request frees its sliding layers' KV more than a window behind the
    /// token it decodes, every this many tokens, as SGLang's radix cache does
    /// (`ScheduleBatch.maybe_evict_swa`, `SGLANG_SWA_EVICTION_INTERVAL` 128): a later hit must end
    /// where a window of that KV is intact, so the prompt's last prefill chunk (the part not yet in the
    /// cache when decoding starts) stays hittable only if it and the output together stay under a
    /// window plus this interval. Absent: a whole prompt stays hittable. Ignored for models without a
    /// sliding window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window_eviction_interval: Option<u32>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// Largest `expert_routing_skew` (a Zipf exponent; at 4 the top expert takes 92 % of the weight).
pub const MAX_EXPERT_ROUTING_SKEW: f64 = 4.0;

fn default_swap_space() -> f64 {
    64.0
}

fn default_new_token_ratio() -> f64 {
    0.7
}

/// Largest `state_pool_ratio` (state memory over KV memory).
pub const MAX_STATE_POOL_RATIO: f64 = 100.0;

/// Largest KV block, tokens.
pub const MAX_BLOCK_SIZE: u32 = 4096;
/// Most sequences one engine may run at once.
pub const MAX_NUM_SEQS: u32 = 65_536;
/// Largest swap space, GiB per GPU.
pub const MAX_SWAP_SPACE_GIB: f64 = 1_048_576.0;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: Policy::VLLM,
            block_size: 16,
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            gpu_memory_utilization: 0.9,
            activation_reserve_gib: 1.0,
            preemption: Preemption::Recompute,
            prefix_caching: true,
            cache_eviction: CacheEviction::Lru,
            cache_entry: CacheEntry::Prompt,
            swap_space_gib: default_swap_space(),
            new_token_ratio: default_new_token_ratio(),
            speculative: None,
            waiting_order: None,
            cap_requests_at_pool: false,
            cuda_graph_max_tokens: None,
            cuda_graph_mixed: false,
            cuda_graph_prefill_max_tokens: None,
            expert_parallel: false,
            data_parallel_attention: false,
            expert_routing_skew: 0.0,
            split_kv_decode: false,
            async_scheduling: false,
            state_pool_ratio: None,
            sliding_window_eviction_interval: None,
        }
    }
}

impl EngineConfig {
    /// Which steps replay CUDA graphs, for the cost model; `None` when the engine gives no limit.
    pub fn graph_rule(&self) -> Option<serverbench_calibration::GraphRule> {
        self.cuda_graph_max_tokens
            .map(|max_tokens| serverbench_calibration::GraphRule {
                max_tokens,
                prefill_max_tokens: match (
                    self.cuda_graph_mixed,
                    self.cuda_graph_prefill_max_tokens,
                ) {
                    (true, _) => max_tokens,
                    (false, cap) => cap.unwrap_or(0),
                },
            })
    }

    /// Checks every knob; the error names the field (relative to `engine`).
    pub fn check(&self) -> Result<(), FieldError> {
        let checks = [
            (
                self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE,
                "block_size",
                format!("must be between 1 and {MAX_BLOCK_SIZE}"),
            ),
            (
                self.max_num_batched_tokens == 0,
                "max_num_batched_tokens",
                "must be positive".into(),
            ),
            (
                self.max_num_seqs == 0 || self.max_num_seqs > MAX_NUM_SEQS,
                "max_num_seqs",
                format!("must be between 1 and {MAX_NUM_SEQS}"),
            ),
            (
                !(self.gpu_memory_utilization > 0.0 && self.gpu_memory_utilization <= 1.0),
                "gpu_memory_utilization",
                "must be in (0, 1]".into(),
            ),
            (
                !(self.activation_reserve_gib >= 0.0 && self.activation_reserve_gib.is_finite()),
                "activation_reserve_gib",
                "must be a non-negative number".into(),
            ),
            (
                !(self.swap_space_gib >= 0.0 && self.swap_space_gib <= MAX_SWAP_SPACE_GIB),
                "swap_space_gib",
                format!("must be between 0 and {MAX_SWAP_SPACE_GIB}"),
            ),
            (
                !(self.new_token_ratio >= 0.0 && self.new_token_ratio <= 1.0),
                "new_token_ratio",
                "must be in [0, 1]".into(),
            ),
            (
                !(self.expert_routing_skew >= 0.0
                    && self.expert_routing_skew <= MAX_EXPERT_ROUTING_SKEW),
                "expert_routing_skew",
                format!("must be between 0 and {MAX_EXPERT_ROUTING_SKEW} (a Zipf exponent)"),
            ),
        ];
        if let Some(r) = self.state_pool_ratio {
            if !(r > 0.0 && r <= MAX_STATE_POOL_RATIO) {
                return Err(FieldError::new(
                    "state_pool_ratio",
                    format!("must be in (0, {MAX_STATE_POOL_RATIO}], got {r}"),
                ));
            }
        }
        if let Some((_, field, reason)) = checks.into_iter().find(|c| c.0) {
            return Err(FieldError::new(field, reason));
        }
        if let Some(sp) = &self.speculative {
            sp.check().map_err(|e| e.under("speculative"))?;
        }
        if self.cuda_graph_mixed && self.cuda_graph_max_tokens.is_none() {
            return Err(FieldError::new(
                "cuda_graph_mixed",
                "needs cuda_graph_max_tokens (which steps replay graphs at all)",
            ));
        }
        if self.cuda_graph_prefill_max_tokens.is_some()
            && (self.cuda_graph_mixed || self.cuda_graph_max_tokens.is_none())
        {
            return Err(FieldError::new(
                "cuda_graph_prefill_max_tokens",
                "needs cuda_graph_max_tokens (the decode steps' limit) and not cuda_graph_mixed (which gives prefill steps that limit)",
            ));
        }
        if self.waiting_order == Some(WaitingOrder::Lpm) && self.policy.name() != "sglang" {
            return Err(FieldError::new(
                "waiting_order",
                format!(
                    "lpm is the sglang policy's order; the {} policy serves arrival order",
                    self.policy.name()
                ),
            ));
        }
        Ok(())
    }
}
