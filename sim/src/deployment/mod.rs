//! Deployments: model + hardware + cost-model profile + parallelism + engine knobs + prices + frozen SLO
//! targets. A deployment is resolved once, when it is read: it holds the [`ModelSpec`],
//! [`HardwareSpec`] and [`Profile`] themselves, never names to look up later. Presets are the files of
//! `presets/deployments/`; a YAML file names a `base` preset and overrides any field (`file`). Parsing is
//! pure (no file IO here).

mod engines;
mod file;

pub use crate::engine::{
    EngineConfig, KindAcceptance, Preemption, SpecMethod, Speculative, MAX_BLOCK_SIZE,
    MAX_DRAFT_PARAMS, MAX_NUM_SEQS, MAX_SWAP_SPACE_GIB,
};
pub use engines::{engine_preset, vllm_block_size, ENGINE_PRESETS};
pub use file::{DeploymentFile, Referenced};

use serde::{Deserialize, Serialize};
use serverbench_calibration::{
    memory_plan, weight_bytes, CostInputs, CostModel, DpAttentionCost, FieldError, HardwareSpec,
    MemoryPlan, ModelSpec, Profile, StateDtype, WeightDtype, GIB,
};

pub use crate::engine::Policy;
use crate::engine::{CapacityError, KvLayout, Replica, ReplicaOptions};

/// How requests are spread over data-parallel replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    /// Each request to the next replica in turn.
    RoundRobin,
    /// To the replica with the fewest running + waiting sequences (lowest index on ties).
    LeastLoaded,
    /// A lane (and its sub-agents) always to the same replica.
    SessionAffinity,
    /// To the replica holding the longest cached prefix of the prompt, least loaded on ties.
    PrefixAware,
}

/// Prices per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Dollars per million input tokens.
    pub input_per_m: f64,
    /// Dollars per million output tokens.
    pub output_per_m: f64,
}

/// Frozen latency targets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Time-to-first-token target τ_first, seconds.
    pub ttft_s: f64,
    /// Time-per-output-token target τ_token, seconds.
    pub tpot_s: f64,
}

/// The default deployment.
pub const DEFAULT_DEPLOYMENT: &str = "qwen3.5-9b-2xl40";

/// Most GPUs one replica may span (`tp`).
pub const MAX_TP: u32 = 64;
/// Most data-parallel replicas (`dp`).
pub const MAX_DP: u32 = 1024;
/// Longest context a deployment may accept, tokens (2²⁴).
pub const MAX_CONTEXT: u32 = 16_777_216;

/// Everything that defines the served system and how it is scored. `M`, `H` and `P` are how the model,
/// GPU and cost-model profile are held: the specs themselves in a resolved [`Deployment`], YAML values
/// (a preset name, or a mapping of fields) in a [`DeploymentFile`]. Read deployments with
/// [`Deployment::from_yaml`] or [`Deployment::preset`], which resolve and check them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentOf<M, H, P> {
    /// Preset name (or the file's own name).
    pub name: String,
    /// The model.
    pub model: M,
    /// The GPU.
    pub hardware: H,
    /// The cost model's efficiencies for this GPU and engine.
    pub profile: P,
    /// Tensor-parallel degree (GPUs per replica).
    pub tp: u32,
    /// Data-parallel replicas.
    pub dp: u32,
    /// How requests are spread over replicas (when `dp > 1`).
    #[serde(default = "default_router")]
    pub router: Router,
    /// Weight format.
    pub weights: WeightDtype,
    /// Quantisation group size (int4).
    pub quant_group_size: u32,
    /// Precision of linear-attention (Gated DeltaNet) state: `bf16` or `fp32`.
    #[serde(default)]
    pub state_dtype: StateDtype,
    /// Longest prompt + output the deployment accepts, tokens.
    pub context_limit: u32,
    /// Token prices.
    pub prices: Prices,
    /// Price of one GPU-hour, dollars.
    pub gpu_hour_dollars: f64,
    /// Frozen SLO targets.
    pub slo: Slo,
    /// Engine knobs.
    pub engine: EngineConfig,
    /// The built-in workload spec commands replay on this deployment when none is named (absent:
    /// the default, `agentic-coding`): its frozen targets were measured on that workload.
    /// Printed as `null` when absent, so that a printed deployment read back (on the default
    /// deployment as its base) keeps it absent.
    #[serde(default)]
    pub workload: Option<String>,
    /// The replay protocol commands use on this deployment when none is named (absent: `cold`): its
    /// frozen targets were measured under it.
    #[serde(default)]
    pub protocol: Option<crate::replay::Protocol>,
    /// The configuration the frozen targets were measured on, when it is not the deployment's own
    /// engine section (the benchmark's reference arms): `slo` freezes on it unless told otherwise.
    #[serde(default)]
    pub reference: Option<ReferenceArm>,
}

/// A reference arm: an engine preset started with at most `concurrency` running sequences and a fixed
/// memory fraction, replayed at that concurrency (the benchmark's task files pass SGLang
/// `--max-running-requests C --mem-fraction-static 0.90`, vLLM `--max-num-seqs C
/// --gpu-memory-utilization 0.90`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceArm {
    /// The engine preset (one of [`ENGINE_PRESETS`]).
    pub engine: String,
    /// Sessions replayed at once, and the engine's most running sequences.
    pub concurrency: u32,
    /// The fraction of GPU memory the engine takes for weights and KV (nothing kept back for
    /// activations beyond it, as a fixed fraction leaves none).
    pub gpu_memory_utilization: f64,
}

impl ReferenceArm {
    /// Checks the arm; the error names the field (relative to `reference`).
    pub fn check(&self) -> Result<(), FieldError> {
        if !ENGINE_PRESETS.contains(&self.engine.as_str()) {
            return Err(FieldError::new(
                "engine",
                format!(
                    "unknown engine preset {:?} (one of: {})",
                    self.engine,
                    ENGINE_PRESETS.join(", ")
                ),
            ));
        }
        if self.concurrency == 0 || self.concurrency > MAX_NUM_SEQS {
            return Err(FieldError::new(
                "concurrency",
                format!("must be between 1 and {MAX_NUM_SEQS}"),
            ));
        }
        if !(self.gpu_memory_utilization > 0.0 && self.gpu_memory_utilization <= 1.0) {
            return Err(FieldError::new(
                "gpu_memory_utilization",
                "must be in (0, 1]",
            ));
        }
        Ok(())
    }
}

fn default_router() -> Router {
    Router::RoundRobin
}

/// A resolved deployment: the model, GPU and profile are the specs themselves.
pub type Deployment = DeploymentOf<ModelSpec, HardwareSpec, Profile>;

/// How an engine refuses a request it cannot take ([`Deployment::refusal`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Prompt + output pass the context limit: the server's "context length" error (SGLang's
    /// tokenizer manager, vLLM's), which AgentX counts as a context overflow and which ends that
    /// agent's stream.
    ContextOverflow,
    /// Within the context limit but longer than the KV pool holds (`cap_requests_at_pool`): SGLang's
    /// scheduler aborts it ("Input length … exceeds the maximum allowed length",
    /// `validate_input_length`), an error that matches none of AgentX's context-overflow phrases, so
    /// the stream goes on to its next turn.
    PoolExceeded,
}

impl Refusal {
    /// The error a pool-exceeded request's record carries.
    pub const POOL_EXCEEDED: &'static str =
        "pool_exceeded: the prompt and output exceed what the KV pool holds";
}

impl Deployment {
    /// GPUs in the deployment, `d = tp × dp` (both bounded by [`Deployment::check`], so it cannot overflow).
    pub fn gpus(&self) -> u32 {
        self.tp * self.dp
    }

    /// Dollars the deployment costs for `window_s` seconds.
    pub fn cost(&self, window_s: f64) -> f64 {
        self.gpus() as f64 * self.gpu_hour_dollars * window_s / 3600.0
    }

    /// This deployment as its reference arm ran it at concurrency `c`: the arm's engine preset with at
    /// most `c` running sequences and the arm's memory fraction. `None` without an arm; an error when
    /// the result does not check (e.g. the pool no longer holds a request).
    pub fn as_reference_arm(&self, c: u32) -> Option<Result<Deployment, FieldError>> {
        let arm = self.reference.as_ref()?;
        let mut d = self.clone();
        let Some(engine) = engine_preset(&arm.engine, &d) else {
            return Some(Err(FieldError::new(
                "reference.engine",
                format!("unknown engine preset {:?}", arm.engine),
            )));
        };
        d.engine = EngineConfig {
            max_num_seqs: c.clamp(1, MAX_NUM_SEQS),
            gpu_memory_utilization: arm.gpu_memory_utilization,
            activation_reserve_gib: 0.0,
            ..engine
        };
        if let Some(g) = d.engine.cuda_graph_max_tokens {
            // Graphs are captured for batches up to the running limit at most (SGLang's
            // `cuda_graph_max_bs` is capped by `max_running_requests`; vLLM's capture sizes follow
            // `max_num_seqs`: 2 × c).
            let cap = match d.engine.cuda_graph_mixed {
                true => 2 * d.engine.max_num_seqs,
                false => d.engine.max_num_seqs,
            };
            d.engine.cuda_graph_max_tokens = Some(g.min(cap));
        }
        Some(d.check().map(|_| d))
    }

    /// The built-in presets (`presets/deployments/`).
    pub fn presets() -> Vec<Deployment> {
        serverbench_config::preset_files("deployments")
            .map(file::parse_preset)
            .collect()
    }

    /// A preset by name (only its file is parsed).
    pub fn preset(name: &str) -> Option<Deployment> {
        serverbench_config::preset_file("deployments", name).map(file::parse_preset)
    }

    /// Names of the presets, for error messages.
    pub fn preset_names() -> String {
        serverbench_config::preset_names("deployments")
    }

    /// Checks that the numbers make sense; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        let bad = |field: &str, reason: String| Err(FieldError::new(field, reason));
        if self.tp == 0 || self.tp > MAX_TP {
            return bad("tp", format!("must be between 1 and {MAX_TP}"));
        }
        if self.dp == 0 || self.dp > MAX_DP {
            return bad("dp", format!("must be between 1 and {MAX_DP}"));
        }
        let m = &self.model;
        if self.engine.expert_routing_skew != 0.0 && m.experts.is_none() {
            return bad(
                "engine.expert_routing_skew",
                "the model has no routed experts to route".into(),
            );
        }
        if self.engine.expert_parallel {
            let Some(e) = &m.experts else {
                return bad(
                    "engine.expert_parallel",
                    "the model has no routed experts to spread".into(),
                );
            };
            if e.count % self.tp != 0 {
                return bad(
                    "engine.expert_parallel",
                    format!(
                        "the model's {} experts do not spread evenly over tp = {} GPUs",
                        e.count, self.tp
                    ),
                );
            }
        }
        if self.engine.data_parallel_attention {
            if m.experts.is_none() {
                return bad(
                    "engine.data_parallel_attention",
                    "the model has no routed experts: data-parallel attention spreads a mixture of experts' routed layers over the attention ranks (a dense model is served by `dp` replicas)".into(),
                );
            }
            if self.tp < 2 {
                return bad(
                    "engine.data_parallel_attention",
                    "needs tp of at least 2: each of the tp GPUs is an attention rank, and with one there is nothing to spread".into(),
                );
            }
        }
        // vLLM and SGLang split each attention kind's query heads evenly, and its KV heads evenly or
        // by replicating each over tp ÷ kv GPUs.
        for a in std::iter::once(&m.full_attention).chain(m.sliding_attention.as_ref()) {
            let (q, kv) = (a.q_heads, a.kv_heads);
            if a.layers == 0 || q == 0 || kv == 0 {
                continue;
            }
            if q % self.tp != 0 || !(kv % self.tp == 0 || self.tp % kv == 0) {
                return bad(
                    "tp",
                    format!(
                        "{} does not divide the model's {q} query heads, or neither divides nor is divided by its {kv} KV heads (vLLM and SGLang refuse it)",
                        self.tp
                    ),
                );
            }
        }
        if self.context_limit == 0 || self.context_limit > MAX_CONTEXT {
            return bad(
                "context_limit",
                format!("must be between 1 and {MAX_CONTEXT} tokens"),
            );
        }
        if self.quant_group_size == 0 {
            return bad("quant_group_size", "must be positive".into());
        }
        if let Some(w) = &self.workload {
            if serverbench_config::preset_file("workloads", w).is_none() {
                return bad(
                    "workload",
                    format!(
                        "unknown built-in workload spec {w:?} (one of: {})",
                        serverbench_workloads::WorkloadSpec::preset_names()
                    ),
                );
            }
        }
        if let Some(arm) = &self.reference {
            arm.check().map_err(|e| e.under("reference"))?;
        }
        if !(self.gpu_hour_dollars > 0.0 && self.gpu_hour_dollars.is_finite()) {
            return bad("gpu_hour_dollars", "must be a positive number".into());
        }
        for (field, v) in [
            ("prices.input_per_m", self.prices.input_per_m),
            ("prices.output_per_m", self.prices.output_per_m),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return bad(field, "must be a non-negative number".into());
            }
        }
        for (field, v) in [
            ("slo.ttft_s", self.slo.ttft_s),
            ("slo.tpot_s", self.slo.tpot_s),
        ] {
            if !(v > 0.0 && v.is_finite()) {
                return bad(field, "must be a positive number of seconds".into());
            }
        }
        if self.profile.hardware != self.hardware.name {
            return bad(
                "profile",
                format!(
                    "profile {:?} describes hardware {:?}, but the deployment runs on {:?}",
                    self.profile.name, self.profile.hardware, self.hardware.name
                ),
            );
        }
        self.model.check().map_err(|e| e.under("model"))?;
        self.hardware.check().map_err(|e| e.under("hardware"))?;
        self.profile.check().map_err(|e| e.under("profile"))?;
        self.engine.check().map_err(|e| e.under("engine"))?;
        self.kv_layout()
            .pool(&self.engine)
            .map(|_| ())
            .map_err(|e| {
                let field = match e {
                    CapacityError::NoRoom { .. } => "engine.gpu_memory_utilization",
                    CapacityError::ContextTooLong { .. } => "context_limit",
                    CapacityError::NoTokenKv => "model",
                };
                FieldError::new(field, e.to_string())
            })
    }

    /// The model, with the deployment's state precision.
    pub fn model_spec(&self) -> ModelSpec {
        self.model.clone().with_state_dtype(self.state_dtype)
    }

    /// The memory plan of one GPU. Under data-parallel attention a GPU holds the model's dense part
    /// whole (attention, dense layers, embeddings), `1 ÷ tp` of its routed experts, and every KV head
    /// of its own requests.
    pub fn memory_plan(&self) -> MemoryPlan {
        let e = &self.engine;
        let m = self.model_spec();
        if e.data_parallel_attention {
            if let Some(dense) = serverbench_calibration::dense_part(&m) {
                let mut plan = memory_plan(
                    &m,
                    &self.hardware,
                    self.weights,
                    self.quant_group_size,
                    1,
                    e.gpu_memory_utilization,
                    e.activation_reserve_gib * GIB,
                );
                let all = weight_bytes(&m, self.weights, self.quant_group_size);
                let held = weight_bytes(&dense, self.weights, self.quant_group_size);
                plan.weights_bytes = held + (all - held) / self.tp.max(1) as f64;
                plan.kv_pool_bytes = plan.budget_bytes - plan.weights_bytes - plan.activation_bytes;
                return plan;
            }
        }
        memory_plan(
            &m,
            &self.hardware,
            self.weights,
            self.quant_group_size,
            self.tp,
            e.gpu_memory_utilization,
            e.activation_reserve_gib * GIB,
        )
    }

    /// The lockstep step cost of the attention ranks under `engine.data_parallel_attention`; `None`
    /// without it.
    pub fn dp_attention_cost(&self) -> Option<DpAttentionCost> {
        if !self.engine.data_parallel_attention {
            return None;
        }
        let m = self.model_spec();
        DpAttentionCost::new(self.cost_inputs(&m))
    }

    /// What one replica's KV pool is sized from.
    pub fn kv_layout(&self) -> KvLayout {
        KvLayout {
            plan: self.memory_plan(),
            context_limit: self.context_limit,
            window: self.model.sliding_attention.as_ref().and_then(|s| s.window),
            host_bandwidth: self.hardware.host_bandwidth,
        }
    }

    /// Whether the engine refuses a request of `input` prompt and `output` requested tokens, and how
    /// ([`Refusal`]); `None` when it takes it. Shared by the simulator and the real-time replay.
    pub fn refusal(&self, input: u32, output: u32, request_limit: u32) -> Option<Refusal> {
        let total = input as u64 + output as u64;
        if total > self.context_limit as u64 {
            Some(Refusal::ContextOverflow)
        } else if total > request_limit as u64 {
            Some(Refusal::PoolExceeded)
        } else {
            None
        }
    }

    /// The longest request (prompt + output) this deployment's engine accepts: its context limit, or
    /// less when the engine caps requests at its KV pool ([`EngineConfig::cap_requests_at_pool`]). A
    /// longer request is never sent: past the context limit it fails as a context overflow, past
    /// only the pool as an error ([`Deployment::refusal`]), in the simulator and in a replay.
    pub fn request_limit(&self) -> u32 {
        self.kv_layout().request_limit(&self.engine)
    }

    /// One engine replica of this deployment; fails if one request of the context limit cannot fit.
    pub fn replica(&self, opts: ReplicaOptions) -> Result<Replica, CapacityError> {
        Replica::new(&self.engine, &self.kv_layout(), opts)
    }

    /// The cost model of the deployment's profile.
    pub fn cost_model(&self) -> CostModel {
        let m = self.model_spec();
        CostModel::new(self.cost_inputs(&m))
    }

    /// What the cost model is built from, for the model `m` (the deployment's, with its state precision).
    fn cost_inputs<'a>(&'a self, m: &'a ModelSpec) -> CostInputs<'a> {
        CostInputs {
            model: m,
            hardware: &self.hardware,
            profile: &self.profile,
            dtype: self.weights,
            group_size: self.quant_group_size,
            tp: self.tp,
            draft_params: self
                .engine
                .speculative
                .as_ref()
                .map_or(0.0, |s| s.draft_params(m)),
            graphs: self.engine.graph_rule(),
            expert_parallel: self.engine.expert_parallel,
            routing_skew: self.engine.expert_routing_skew,
            split_kv_decode: self.engine.split_kv_decode,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_arm_runs_its_engine_preset_at_its_concurrency() {
        let d = Deployment::preset("qwen3.8-27b-int4-2xl40").unwrap();
        let arm = d.reference.clone().unwrap();
        assert_eq!((arm.engine.as_str(), arm.concurrency), ("sglang-0.5.19", 4));
        let r = d.as_reference_arm(4).unwrap().unwrap();
        assert_eq!(r.engine.max_num_seqs, 4);
        assert_eq!(r.engine.gpu_memory_utilization, 0.9);
        assert_eq!(r.engine.activation_reserve_gib, 0.0);
        // SGLang's decode graphs up to the running limit; its extend graphs up to 4096 tokens.
        assert_eq!(r.engine.cuda_graph_max_tokens, Some(4));
        assert_eq!(r.engine.cuda_graph_prefill_max_tokens, Some(4096));
        assert!(r.engine.cap_requests_at_pool);
        // A deployment without an arm has none; a bad arm names its field.
        assert!(Deployment::preset("qwen3-8b-1xh200")
            .unwrap()
            .as_reference_arm(1)
            .is_none());
        let e = Deployment::from_yaml(
            "arm.yaml",
            "reference: {engine: tgi, concurrency: 1, gpu_memory_utilization: 0.9}\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "reference.engine", "{e}");
        let e = Deployment::from_yaml(
            "arm.yaml",
            "reference: {engine: vllm, concurrency: 0, gpu_memory_utilization: 0.9}\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "reference.concurrency", "{e}");
    }
    use serverbench_calibration::BatchShape;

    #[test]
    fn an_fp32_linear_attention_state_costs_memory_and_step_time() {
        // The default model is hybrid (Gated DeltaNet layers): its per-sequence state doubles in fp32,
        // so fewer sequences fit beside the KV and every decode step reads and writes twice the state.
        let bf16 = Deployment::preset(DEFAULT_DEPLOYMENT).unwrap();
        let fp32 = bf16
            .clone()
            .with_overrides("fp32.yaml", "state_dtype: fp32")
            .unwrap();
        let (a, b) = (bf16.memory_plan(), fp32.memory_plan());
        assert!((b.state_bytes_per_seq / a.state_bytes_per_seq - 2.0).abs() < 1e-9);
        assert_eq!(
            a.kv_pool_bytes, b.kv_pool_bytes,
            "the pool is the same; more of it per sequence"
        );
        let mut decode = BatchShape::default();
        for _ in 0..16 {
            decode.add_decode(40_000, None);
        }
        let (ta, tb) = (
            bf16.cost_model().step_seconds(&decode),
            fp32.cost_model().step_seconds(&decode),
        );
        assert!(
            tb > ta * 1.01,
            "batch-16 decode {ta} s with bf16 state, {tb} s with fp32"
        );
        // A dense model has no such state: the knob changes nothing.
        let dense = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let dense32 = dense
            .clone()
            .with_overrides("d.yaml", "state_dtype: fp32")
            .unwrap();
        assert_eq!(dense.memory_plan().state_bytes_per_seq, 0.0);
        assert_eq!(dense32.memory_plan().state_bytes_per_seq, 0.0);
        assert!(
            Deployment::from_yaml("bad.yaml", "base: qwen3.5-9b-2xl40\nstate_dtype: fp64\n")
                .unwrap_err()
                .to_string()
                .contains("state_dtype")
        );
    }

    #[test]
    fn presets_are_valid_and_overridable() {
        for d in Deployment::presets() {
            d.check().unwrap();
        }
        let d = Deployment::from_yaml(
            "d.yaml",
            "base: gemma4-e4b-1xl40\nengine:\n  max_num_seqs: 8\nslo:\n  ttft_s: 1.5\n",
        )
        .unwrap();
        assert_eq!(d.engine.max_num_seqs, 8);
        assert_eq!(
            d.engine.block_size, 16,
            "untouched fields keep the preset's value"
        );
        assert_eq!(d.slo.ttft_s, 1.5);
        assert_eq!(d.model.name, "gemma4-e4b");
    }

    #[test]
    /// `engine.expert_routing_skew`: a Zipf exponent in [0, 4], refused (naming it) out of range, not a
    /// number, or on a dense model; on a mixture of experts it reaches the cost model, whose batch
    /// decode it speeds (the tokens share experts), and at 0 it is not written back.
    fn expert_routing_skew_is_checked_and_reaches_the_cost_model() {
        for bad in ["-0.5", "4.5", ".nan", ".inf"] {
            let e = Deployment::from_yaml(
                "d.yaml",
                &format!("engine:\n  expert_routing_skew: {bad}\n"),
            )
            .unwrap_err();
            assert_eq!(e.field, "engine.expert_routing_skew", "{bad}: {e}");
        }
        // The default deployment's model is dense.
        let e = Deployment::from_yaml("d.yaml", "engine:\n  expert_routing_skew: 1\n").unwrap_err();
        assert_eq!(e.field, "engine.expert_routing_skew", "{e}");
        assert!(e.reason.contains("no routed experts"), "{e}");
        let mut d = Deployment::preset("qwen3-8b-1xh200-vllm").unwrap();
        d.model = serverbench_calibration::hf::from_config(
            "qwen3-30b-a3b",
            include_str!("../../../tests/fixtures/hf/qwen3-30b-a3b.json"),
        )
        .unwrap();
        d.check().unwrap();
        let mut decode = BatchShape::default();
        for _ in 0..8 {
            decode.add_decode(2048, None);
        }
        let uniform = d.cost_model().step_seconds(&decode);
        assert!(!serde_yaml::to_string(&d.engine)
            .unwrap()
            .contains("expert_routing_skew"));
        d.engine.expert_routing_skew = 1.0;
        d.check().unwrap();
        let skewed = d.cost_model().step_seconds(&decode);
        assert!(skewed < 0.95 * uniform, "{skewed} against {uniform}");
        d.engine.expert_routing_skew = 4.5;
        assert_eq!(d.check().unwrap_err().field, "engine.expert_routing_skew");
    }

    #[test]
    fn bad_deployment_files_name_the_field() {
        let e = Deployment::from_yaml("d.yaml", "engine:\n  max_num_seqz: 8\n").unwrap_err();
        assert!(
            e.field.contains("engine") && e.reason.contains("max_num_seqz"),
            "{e}"
        );
        let e = Deployment::from_yaml("d.yaml", "tp: -1\n").unwrap_err();
        assert_eq!(e.field, "tp");
        let e = Deployment::from_yaml("d.yaml", "base: nope\n").unwrap_err();
        assert_eq!(e.field, "base");
        let e = Deployment::from_yaml("d.yaml", "engine:\n  gpu_memory_utilization: 1.5\n")
            .unwrap_err();
        assert_eq!(e.field, "engine.gpu_memory_utilization");
        let e = Deployment::from_yaml("d.yaml", "tp: [\n").unwrap_err();
        assert_eq!(e.file, "d.yaml");
        assert!(e.line > 0);
    }

    /// `engine.data_parallel_attention`: refused naming the field on a dense model and at tp = 1; on a
    /// mixture of experts over 8 GPUs each GPU holds the dense part whole, an eighth of the experts and
    /// every KV head of its own requests, so a DeepSeek-V3-shaped model (latent KV, which tensor
    /// parallelism copies to every GPU) gets a pool of its own on each; off, nothing changes.
    #[test]
    fn data_parallel_attention_is_checked_and_sizes_a_pool_per_rank() {
        let e = Deployment::from_yaml("d.yaml", "engine:\n  data_parallel_attention: true\n")
            .unwrap_err();
        assert_eq!(e.field, "engine.data_parallel_attention", "{e}");
        assert!(e.reason.contains("no routed experts"), "{e}");
        let mut d = Deployment::preset("qwen3-8b-1xh200-vllm").unwrap();
        d.model = serverbench_calibration::hf::from_config(
            "deepseek-r1",
            include_str!("../../../tests/fixtures/hf/deepseek-r1.json"),
        )
        .unwrap();
        d.weights = WeightDtype::Fp8;
        d.engine.data_parallel_attention = true;
        let e = d.check().unwrap_err();
        assert_eq!(e.field, "engine.data_parallel_attention", "{e}");
        assert!(e.reason.contains("tp of at least 2"), "{e}");
        d.tp = 8;
        d.check().unwrap();
        let (dpa, plan) = (d.dp_attention_cost().unwrap(), d.memory_plan());
        assert_eq!(dpa.ranks(), 8);
        d.engine.data_parallel_attention = false;
        assert!(d.dp_attention_cost().is_none());
        let tp = d.memory_plan();
        // The same latent KV per token on each GPU; more weights (the dense part whole), so a smaller
        // pool per GPU, but eight pools instead of one copied eight times.
        assert_eq!(plan.kv_bytes_per_token, tp.kv_bytes_per_token);
        assert!(plan.weights_bytes > tp.weights_bytes);
        assert!(8.0 * plan.kv_pool_bytes > 4.0 * tp.kv_pool_bytes);
        assert!(!serde_yaml::to_string(&d.engine)
            .unwrap()
            .contains("data_parallel_attention"));
    }
}
