//! The step-time cost model: a batch's FLOPs and bytes from the model shape, turned into seconds by a profile.
//! `t = max(t_compute, t_memory) + t_allreduce + t_overhead` (docs/simulator.md). Pure arithmetic, no state.

use crate::compile::MoeCompiles;
pub use crate::graphs::GraphRule;
use crate::model::{streamed_weight_bytes, AttentionLayers, HardwareSpec, ModelSpec, WeightDtype};
use crate::padding::ExpertPadding;
use crate::profile::{AttentionLayout, Profile, StepTime};
use crate::splitkv::{SplitCost, SplitKv, MAX_SPLITS};
use crate::varlen::{Seq, Varlen};

/// What a step computes, accumulated one sequence at a time by the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchShape {
    /// Prefill tokens in the step (sum of chunk lengths).
    pub prefill_tokens: u64,
    /// Sequences prefilling in the step.
    pub prefill_seqs: u32,
    /// Decode sequences in the step (one new token each).
    pub decode_seqs: u32,
    /// Tokens of cached context read by prefill chunks (sum of their prefixes).
    pub prefill_context: u64,
    /// Context tokens read by decode sequences (sum of their contexts).
    pub decode_context: u64,
    /// Full-attention (query, key) pairs of the prefill chunks: `Σ l·p + l(l+1)/2`.
    pub full_pairs: f64,
    /// Sliding-window pairs of all sequences (queries × min(context, window)).
    pub sliding_pairs: f64,
    /// Sliding-window KV tokens read (each sequence's context capped at the window).
    pub sliding_context: u64,
    /// Extra query tokens of speculative verification (`k` per verifying sequence).
    pub spec_tokens: u64,
    /// Sequential draft passes before the verify step (`k` for a draft model or MTP head, 0 otherwise).
    pub draft_passes: u32,
    /// The longest mean KV span of a prefill chunk's queries (`prefix + len / 2`), tokens.
    pub prefill_span_max: u32,
    /// Of `decode_context`, the tokens another decode sequence of the step reads too (the repeats of shared
    /// prefix blocks: the sum of the contexts minus the distinct tokens read); 0 when unknown.
    pub decode_shared: u64,
    /// Decode context tokens' worth of reading the split-KV schedule adds when its thread blocks
    /// overflow the GPU's SMs ([`SplitKv::excess_tokens`]); 0 when not modelled.
    pub decode_split_excess: u64,
    /// Seconds the step's attention, one FlashAttention 3 varlen call over its decodes and prefill
    /// chunks together, takes beyond the two alone ([`VarlenStep::excess_s`], set by the engine where
    /// the cost model gives a [`CostModel::varlen`]; 0 otherwise).
    pub varlen_excess_s: f64,
    /// Decode context tokens' worth of reading the L2 saves on blocks several decodes share
    /// ([`crate::SplitCost::l2_saved`]); 0 when not modelled.
    pub decode_l2_saved: u64,
}

impl BatchShape {
    /// Adds a prefill chunk of `len` tokens after `prefix` tokens already in KV.
    #[inline]
    pub fn add_prefill(&mut self, len: u32, prefix: u32, window: Option<u32>) {
        let (l, p) = (len as f64, prefix as f64);
        self.prefill_tokens += len as u64;
        self.prefill_seqs += 1;
        self.prefill_context += prefix as u64;
        self.full_pairs += l * p + l * (l + 1.0) / 2.0;
        self.prefill_span_max = self.prefill_span_max.max(prefix.saturating_add(len / 2));
        if let Some(w) = window {
            self.sliding_pairs += windowed_pairs(prefix as u64, len as u64, w as u64);
            self.sliding_context += prefix.min(w) as u64;
        }
    }

    /// Adds a decode sequence whose context (KV already present) is `context` tokens.
    #[inline]
    pub fn add_decode(&mut self, context: u32, window: Option<u32>) {
        self.decode_seqs += 1;
        self.decode_context += context as u64;
        if let Some(w) = window {
            let c = context.min(w) as f64;
            self.sliding_pairs += c + 1.0;
            self.sliding_context += c as u64;
        }
    }

    /// Adds a decode sequence that verifies `k` draft tokens after its `context` (k + 1 query tokens).
    #[inline]
    pub fn add_verify(&mut self, context: u32, k: u32, window: Option<u32>) {
        self.add_decode(context, window);
        let (c, kf) = (context as f64, k as f64);
        self.spec_tokens += k as u64;
        self.full_pairs += kf * (c + 1.0) + kf * (kf + 1.0) / 2.0;
        if let Some(w) = window {
            self.sliding_pairs += kf * (c.min(w as f64) + 1.0);
        }
    }

    /// Tokens the step runs through the linear layers.
    pub fn tokens(&self) -> u64 {
        self.prefill_tokens + self.decode_seqs as u64 + self.spec_tokens
    }

    /// Sequences in the step.
    pub fn seqs(&self) -> u32 {
        self.prefill_seqs + self.decode_seqs
    }

    /// The span the prefill attention's first round pays for: the longest span with prefill, 0 without.
    pub fn first_round_span(&self) -> f64 {
        if self.prefill_seqs > 0 {
            self.prefill_span_max as f64
        } else {
            0.0
        }
    }
}

/// `Σ_{i=p}^{p+l-1} min(i + 1, w)`: the pairs a chunk's queries attend to under a window.
fn windowed_pairs(p: u64, l: u64, w: u64) -> f64 {
    let end = p + l; // queries at positions p..end, each sees min(pos + 1, w) keys
    let ramp_end = end.min(w.saturating_sub(1)).max(p);
    // positions p..ramp_end see pos + 1 keys; the rest see w
    let ramp = (ramp_end - p) as f64;
    let ramp_sum = ramp * (p as f64 + 1.0) + ramp * (ramp - 1.0) / 2.0;
    ramp_sum + (end - ramp_end) as f64 * w as f64
}

/// One step's time by kind of work, before the profile's composition combines them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepParts {
    /// Linear layers at the GEMM efficiency: `2 · params · tokens / (peak · gemm_efficiency)`.
    pub gemm_s: f64,
    /// Streaming the weights once at `memory_efficiency` (`single_row_memory_efficiency` in a step of
    /// exactly one token).
    pub weights_s: f64,
    /// Attention of prefill chunks and verify tokens (and sliding/linear layers): compute at
    /// `attention_efficiency`, plus the prefill sweep (see [`CostModel::prefill_waves`]).
    pub attention_s: f64,
    /// KV (and recurrent state) read and written at `kv_efficiency`; decode re-reads of blocks another
    /// sequence of the step reads too at `shared_kv_efficiency`.
    pub kv_s: f64,
    /// Terms no efficiency of the fit scales: fixed step overhead, collectives, speculative drafts.
    pub fixed_s: f64,
}

/// Seconds per unit of each batch feature, precomputed for one deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    linear_s_per_token: f64,
    gemm_half_tokens: f64,
    full_s_per_pair: f64,
    /// A decode query's compute per context token: `full_s_per_pair`, or absorbed latent attention's.
    decode_s_per_pair: f64,
    /// Absorbed latent attention: what a decode context token's compute takes beyond its read, where
    /// the kernel is bound by compute (0 otherwise).
    decode_compute_excess_s_per_token: f64,
    sweep_s_per_token: f64,
    span_s_per_token: f64,
    tile_tokens: f64,
    parallel_tiles: f64,
    q_heads: f64,
    sliding_s_per_pair: f64,
    linear_attention_s_per_token: f64,
    weights_s: f64,
    /// `weights_s` for a step of exactly one token (the profile's single-row efficiency).
    weights_single_row_s: f64,
    /// A mixture of experts: what each distinct expert a step reads adds to `weights_s`.
    experts: Option<ExpertReads>,
    /// A mixture of experts whose profile gives the fused-MoE kernel's tile table: the rows it pads.
    expert_padding: Option<ExpertPadding>,
    /// Seconds of one routed row (one token in one expert) through every routed layer's GEMMs, on this GPU.
    expert_s_per_row: f64,
    full_read_s_per_token: f64,
    /// `full_read_s_per_token` for a re-read of a block another decode of the step reads too.
    shared_read_s_per_token: f64,
    sliding_read_s_per_token: f64,
    kv_write_s_per_token: f64,
    state_s_per_seq: f64,
    allreduce_s: f64,
    allreduce_s_per_token: f64,
    step_overhead_s: f64,
    per_sequence_overhead_s: f64,
    draft_weights_s: f64,
    draft_s_per_token: f64,
    kernel_sum: bool,
    /// The profile's attention computes every (query, key) pair of the packed step ([`AttentionLayout::Packed`]).
    packed: bool,
    request_latency_ns: u64,
    frontend_ns_per_token: f64,
    tokenize_ns_per_token: f64,
    /// The steps that replay CUDA graphs, when the engine has a rule and the profile an eager cost.
    graphs: Option<GraphRule>,
    /// Host launch time of an eager step: layers × the profile's `eager_s_per_layer`.
    eager_floor_s: f64,
    /// What an eager step and a piecewise-graph step spend beyond their GPU work: layers × the
    /// profile's `eager_gap_s_per_layer` and `piecewise_gap_s_per_layer`.
    eager_gap_s: f64,
    piecewise_gap_s: f64,
    /// The sliding window of the model, if it has sliding layers.
    pub window: Option<u32>,
    /// The decode attention's split-KV schedule, where the engine runs one and the GPU's SMs are known.
    split_kv: Option<SplitKv>,
    varlen: Option<VarlenStep>,
    /// A mixture of experts whose profile gives its fused-MoE kernels and their compile time.
    moe_compiles: Option<MoeCompiles>,
}

/// The weight reads of a mixture of experts' routed experts ([`crate::model::Experts`]): a step of `n`
/// tokens reads `count × (1 − keep^n)` distinct experts per layer. Under expert parallelism each of
/// the `gpus` holds `count ÷ gpus` experts whole and the step waits for the GPU whose experts its tokens
/// chose most: the expected largest of the GPUs' counts, each binomial (`count ÷ gpus` experts, each
/// chosen with `p = 1 − keep^n`), taken as the mean plus `spread` standard deviations (the expected
/// largest of `gpus` standard normal draws), never above `count ÷ gpus`.
///
/// With skewed routing ([`CostInputs::routing_skew`] > 0) expert `e` is chosen by a token with its own
/// `q_e` ([`crate::model::Experts::inclusion_probabilities`]) and by a step of `n` tokens with
/// `p_e = 1 − (1 − q_e)^n`: the step reads `Σ p_e` distinct experts. Under expert parallelism the
/// experts are dealt to the GPUs round robin by popularity rank (engines place experts by index, which
/// carries no popularity); each GPU's count is a sum of independent Bernoulli draws (mean `Σ p_e`,
/// variance `Σ p_e (1 − p_e)` over its experts) and the step waits for the largest over the GPUs of
/// mean plus `spread` standard deviations, each never above the GPU's expert count.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ExpertReads {
    count: f64,
    /// `1 − per_token / count`: the chance that one token leaves a given expert out (uniform routing).
    keep: f64,
    /// Seconds to stream one expert of every routed layer (this GPU's share: all of it under expert
    /// parallelism).
    s_per_expert: f64,
    /// The same at the single-row efficiency (a step of one token).
    single_row_s_per_expert: f64,
    /// GPUs the experts are spread over whole (expert parallelism); 1 when tensor parallelism splits
    /// each expert instead.
    gpus: f64,
    /// The expected largest of `gpus` standard normal draws.
    spread: f64,
    /// Skewed routing: for each GPU (one list when tensor parallelism splits every expert), the chance
    /// `1 − q_e` that one token leaves each of its experts out. `None`: uniform routing (the closed form).
    skewed_keeps: Option<Vec<Vec<f64>>>,
}

impl ExpertReads {
    pub(crate) fn new(
        experts: &crate::model::Experts,
        skew: f64,
        gpus: f64,
        s_per_expert: f64,
        single_row_s_per_expert: f64,
    ) -> ExpertReads {
        let skewed_keeps = (skew > 0.0).then(|| skewed_keeps(experts, skew, gpus as usize));
        ExpertReads {
            count: experts.count as f64,
            keep: 1.0 - experts.per_token as f64 / experts.count as f64,
            s_per_expert,
            single_row_s_per_expert,
            gpus,
            spread: expected_normal_max(gpus as u32),
            skewed_keeps,
        }
    }

    /// Experts per routed layer a step of `tokens` tokens waits for: the distinct experts it reads, or
    /// under expert parallelism those its busiest GPU reads.
    #[inline]
    fn experts(&self, tokens: f64) -> f64 {
        if let Some(per_gpu) = &self.skewed_keeps {
            let mut busiest = 0.0f64;
            let mut all = 0.0;
            for keeps in per_gpu {
                let (mut mean, mut var) = (0.0, 0.0);
                for &k in keeps {
                    let p = 1.0 - k.powf(tokens);
                    mean += p;
                    var += p * (1.0 - p);
                }
                all += mean;
                let m = keeps.len() as f64;
                busiest = busiest.max((mean + self.spread * var.sqrt()).min(m));
            }
            return if self.gpus > 1.0 { busiest } else { all };
        }
        let p = 1.0 - self.keep.powf(tokens);
        if self.gpus > 1.0 {
            let m = self.count / self.gpus;
            (m * p + self.spread * (m * p * (1.0 - p)).sqrt()).min(m)
        } else {
            self.count * p
        }
    }

    /// Seconds of expert weights a step of `tokens` tokens streams.
    #[inline]
    pub(crate) fn seconds(&self, tokens: f64) -> f64 {
        let experts = self.experts(tokens);
        if tokens == 1.0 {
            experts * self.single_row_s_per_expert
        } else {
            experts * self.s_per_expert
        }
    }
}

/// The chance `1 − q_e` that one token leaves each expert out, the experts dealt round robin by
/// popularity rank to `gpus` lists (one list when `gpus` is 1).
fn skewed_keeps(experts: &crate::model::Experts, skew: f64, gpus: usize) -> Vec<Vec<f64>> {
    let gpus = gpus.max(1);
    let mut per_gpu = vec![Vec::new(); gpus];
    for (r, q) in experts
        .inclusion_probabilities(skew)
        .into_iter()
        .enumerate()
    {
        per_gpu[r % gpus].push(1.0 - q);
    }
    per_gpu
}

/// The expected largest of `n` independent standard normal draws (Teichroew's table at powers of two,
/// interpolated in log₂ n between them; 2.34 from 64 on, where expert-parallel groups end).
pub fn expected_normal_max(n: u32) -> f64 {
    const AT_POWERS_OF_TWO: [f64; 7] = [0.0, 0.5642, 1.0294, 1.4236, 1.7660, 2.0697, 2.3423];
    let x = (n.max(1) as f64).log2().min(6.0);
    let i = (x.floor() as usize).min(5);
    let f = x - i as f64;
    AT_POWERS_OF_TWO[i] + f * (AT_POWERS_OF_TWO[i + 1] - AT_POWERS_OF_TWO[i])
}

/// What the cost model needs to know about a deployment.
#[derive(Clone, Copy, Debug)]
pub struct CostInputs<'a> {
    /// The model.
    pub model: &'a ModelSpec,
    /// The GPU.
    pub hardware: &'a HardwareSpec,
    /// The efficiencies.
    pub profile: &'a Profile,
    /// Weight format.
    pub dtype: WeightDtype,
    /// Quantisation group size (int4).
    pub group_size: u32,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Parameters one speculative draft pass streams (a draft model, an MTP head; 0 for n-gram drafts).
    pub draft_params: f64,
    /// Which steps the engine replays as CUDA graphs; `None`: every step's launches are hidden.
    pub graphs: Option<GraphRule>,
    /// A mixture of experts' routed experts spread whole over the `tp` GPUs (expert parallelism)
    /// instead of split by tensor parallelism; attention stays tensor-parallel, so the hidden states
    /// every GPU holds are combined by the same all-reduce.
    pub expert_parallel: bool,
    /// The Zipf exponent of a mixture of experts' routing: the expert of popularity rank `r` is chosen
    /// in proportion to `r^−s` ([`crate::model::Experts::inclusion_probabilities`]); 0: uniform routing.
    pub routing_skew: f64,
    /// The engine's decode attention splits each sequence's KV as FlashAttention 3 does
    /// ([`crate::splitkv`]); modelled where the GPU gives its SMs and the model's full-attention layers
    /// have heads of 128 (the block size read for that head size).
    pub split_kv_decode: bool,
}

impl GraphRule {
    /// Whether a step of this shape replays a graph.
    #[inline]
    pub fn replays(&self, b: &BatchShape) -> bool {
        self.replays_tokens(b.tokens(), b.prefill_seqs > 0)
    }
}

/// The split-KV schedule a deployment's decode attention runs, if modelled: the engine's FlashAttention 3
/// decode, a GPU with its SMs given, full-attention heads of 128 not stored as a latent.
fn split_kv(i: &CostInputs<'_>) -> Option<SplitKv> {
    let fa = &i.model.full_attention;
    if !i.split_kv_decode || fa.head_dim != 128 || fa.latent_kv_bytes.is_some() || fa.layers == 0 {
        return None;
    }
    let (sms, saturating_blocks) = i.hardware.split_kv_sms()?;
    Some(SplitKv {
        sms,
        saturating_blocks,
        kv_heads: fa.kv_heads.div_ceil(i.tp.max(1)),
        l2: i.hardware.l2_reuse,
    })
}

/// The varlen attention a deployment's mixed steps run, if modelled: its split-KV decode
/// ([`split_kv`]) on a GPU whose file gives the tile costs.
fn varlen(i: &CostInputs<'_>) -> Option<VarlenStep> {
    let split = split_kv(i)?;
    let tiles = i.hardware.varlen_tiles?;
    let fa = &i.model.full_attention;
    let element =
        fa.kv_bytes_per_token_per_layer() / (2 * fa.kv_heads.max(1) as u64 * fa.head_dim as u64);
    Some(VarlenStep {
        varlen: Varlen {
            sms: split.sms,
            kv_heads: split.kv_heads,
            q_per_kv: (fa.q_heads / fa.kv_heads.max(1)).max(1),
            head_dim: fa.head_dim,
            kv_bytes: element.max(1) as u32,
            tiles,
        },
        layers: fa.layers,
        graphs: i.graphs,
    })
}

/// One deployment's varlen attention for its mixed steps ([`crate::varlen`]): the call, the layers that
/// run it, and the engine's graph rule (vLLM passes `num_splits` 32 to steps its graphs replay, 0 to
/// the others).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VarlenStep {
    /// The call's schedule and costs.
    pub varlen: Varlen,
    /// Full-attention layers.
    pub layers: u32,
    /// Which steps replay graphs.
    pub graphs: Option<GraphRule>,
}

impl VarlenStep {
    /// [`BatchShape::varlen_excess_s`] of step `b`, whose decodes and prefill chunks are `decodes` and
    /// `chunks` in the batch's order.
    pub fn excess_s(&self, b: &BatchShape, decodes: &[Seq], chunks: &[Seq]) -> f64 {
        let split = match self.graphs {
            Some(rule) if rule.replays(b) => MAX_SPLITS,
            _ => 0,
        };
        self.layers as f64 * self.varlen.excess_s(decodes, chunks, split)
    }
}

/// Fraction of one layer group's KV that one GPU holds under tensor parallelism (heads split, never below one head).
pub fn kv_shard(layers: &AttentionLayers, tp: u32) -> f64 {
    if layers.latent_kv_bytes.is_some() {
        return 1.0; // a latent is not split by heads: every GPU holds it whole
    }
    let per_gpu_heads = layers.kv_heads.div_ceil(tp.max(1));
    per_gpu_heads as f64 / layers.kv_heads.max(1) as f64
}

/// Seconds of one token's linear layers on one of `tp` GPUs: twice the multiplied parameters at `peak`
/// (`gemm_efficiency` of the GPU's bf16 FLOPs), the routed experts' share at the profile's
/// `expert_gemm_efficiency` of `bf16_flops` when it gives one.
fn linear_s_per_token(m: &ModelSpec, p: &Profile, tp: f64, peak: f64, bf16_flops: f64) -> f64 {
    match (&m.experts, p.expert_gemm_efficiency) {
        (Some(e), Some(eff)) => {
            let experts = e.active_params();
            (2.0 * (m.matmul_params - experts) / peak + 2.0 * experts / (bf16_flops * eff)) / tp
        }
        _ => 2.0 * m.matmul_params / tp / peak,
    }
}

/// Seconds of one routed row (a token in one of its experts) through every routed layer's GEMMs on one
/// of `tp` GPUs, at the rate [`linear_s_per_token`] gives the experts; 0 for a dense model.
pub(crate) fn expert_s_per_row(
    m: &ModelSpec,
    p: &Profile,
    tp: f64,
    peak: f64,
    bf16_flops: f64,
) -> f64 {
    m.experts.as_ref().map_or(0.0, |e| {
        let rate = p
            .expert_gemm_efficiency
            .map_or(peak, |eff| bf16_flops * eff);
        2.0 * e.params_per_expert_all_layers() / rate / tp
    })
}

impl CostModel {
    /// Precomputes the per-feature costs.
    pub fn new(i: CostInputs<'_>) -> CostModel {
        let (m, hw, p) = (i.model, i.hardware, i.profile);
        let tp = i.tp.max(1) as f64;
        let bw = hw.memory_bandwidth * p.memory_efficiency;
        let kv_eff = p.kv_efficiency.unwrap_or(p.memory_efficiency);
        let kv_bw = hw.memory_bandwidth * kv_eff;
        let shared_bw = hw.memory_bandwidth * p.shared_kv_efficiency.unwrap_or(kv_eff);
        let peak = hw.bf16_flops * p.gemm_efficiency;
        let attn_peak = hw.bf16_flops * p.attention_efficiency;
        let compute_factor = match i.dtype {
            WeightDtype::Bf16 => 1.0,
            WeightDtype::Int4 => p.int4_compute_penalty,
            WeightDtype::Fp8 => 1.0 / p.fp8_compute_speedup,
        };
        let weight_bw = match i.dtype {
            WeightDtype::Int4 => bw * p.int4_bandwidth_efficiency,
            _ => bw,
        };
        let mut weight_bytes = streamed_weight_bytes(m, i.dtype, i.group_size) / tp;
        let single_row_bw = weight_bw
            * p.single_row_memory_efficiency
                .map_or(1.0, |e| e / p.memory_efficiency);
        // A mixture of experts streams its dense part every step and each expert a token chose; the
        // bytes per parameter are the model's average at this format. The profile may give the experts
        // their own streaming efficiency (the fused-MoE kernel), one for steps of any size.
        let experts = m.experts.as_ref().map(|e| {
            let per_param = weight_bytes / m.matmul_params;
            weight_bytes = (m.matmul_params - e.active_params()) * per_param;
            let gpus = if i.expert_parallel { tp } else { 1.0 };
            let expert_bytes = e.params_per_expert_all_layers() * per_param * gpus;
            let (bw, single_row_bw) = match p.expert_memory_efficiency {
                Some(eff) => {
                    let int4 = match i.dtype {
                        WeightDtype::Int4 => p.int4_bandwidth_efficiency,
                        _ => 1.0,
                    };
                    let bw = hw.memory_bandwidth * eff * int4;
                    (bw, bw)
                }
                None => (weight_bw, single_row_bw),
            };
            ExpertReads::new(
                e,
                i.routing_skew,
                gpus,
                expert_bytes / bw,
                expert_bytes / single_row_bw,
            )
        });
        // Each routed layer's fixed time (router, top-k, the fused-MoE kernels' latency), once per step.
        let moe_fixed_s = m
            .experts
            .as_ref()
            .map_or(0.0, |e| e.layers as f64 * p.moe_layer_s);
        let fa = &m.full_attention;
        let full_shard = kv_shard(fa, i.tp);
        let per_layer = fa.kv_bytes_per_token_per_layer() as f64;
        let (sliding_s_per_pair, sliding_read, sliding_write) = match &m.sliding_attention {
            Some(s) => {
                let shard = kv_shard(s, i.tp);
                let b = s.kv_bytes_per_token_per_layer() as f64 * shard;
                (
                    s.flops_per_pair() / tp / attn_peak,
                    s.layers as f64 * b / kv_bw,
                    s.kv_layers as f64 * b / kv_bw,
                )
            }
            None => (0.0, 0.0, 0.0),
        };
        let linear_attention_s_per_token = m.linear_attention.as_ref().map_or(0.0, |l| {
            l.layers as f64 * l.flops_per_token_per_layer / tp / attn_peak
        });
        let collective = if i.tp > 1 {
            (2 * m.layers + 1) as f64
        } else {
            0.0
        };
        let ring = 2.0 * (tp - 1.0) / tp;
        let full_s_per_pair = fa.flops_per_pair() / tp / attn_peak;
        let full_read_s_per_token = fa.layers as f64 * per_layer * full_shard / kv_bw;
        // Absorbed latent attention prices a decode pair at its own FLOPs; what they take beyond the
        // pair's read is the kernel-sum form's excess (0 for every other attention).
        let (decode_s_per_pair, decode_compute_excess_s_per_token) =
            match fa.decode_flops_per_pair() {
                Some(f) => {
                    let s = f / tp / attn_peak;
                    (s, (s - full_read_s_per_token).max(0.0))
                }
                None => (full_s_per_pair, 0.0),
            };
        CostModel {
            linear_s_per_token: linear_s_per_token(m, p, tp, peak, hw.bf16_flops) * compute_factor,
            expert_padding: m
                .experts
                .as_ref()
                .and_then(|e| ExpertPadding::new(e, &p.expert_tile_rows, i.routing_skew)),
            expert_s_per_row: expert_s_per_row(m, p, tp, peak, hw.bf16_flops) * compute_factor,
            gemm_half_tokens: p.gemm_half_tokens,
            full_s_per_pair,
            decode_s_per_pair,
            decode_compute_excess_s_per_token,
            sweep_s_per_token: p.attention_sweep_s_per_token,
            span_s_per_token: p.attention_span_s_per_token,
            tile_tokens: p.attention_tile_tokens as f64,
            parallel_tiles: p.attention_parallel_tiles,
            q_heads: fa.q_heads.div_ceil(i.tp.max(1)) as f64,
            sliding_s_per_pair,
            linear_attention_s_per_token,
            weights_s: weight_bytes / weight_bw,
            weights_single_row_s: weight_bytes / single_row_bw,
            experts,
            full_read_s_per_token,
            shared_read_s_per_token: fa.layers as f64 * per_layer * full_shard / shared_bw,
            sliding_read_s_per_token: sliding_read,
            kv_write_s_per_token: fa.kv_layers as f64 * per_layer * full_shard / kv_bw
                + sliding_write,
            state_s_per_seq: 2.0
                * m.linear_attention
                    .as_ref()
                    .map_or(0.0, |l| (l.layers as u64 * l.state_bytes_per_layer) as f64)
                / tp
                / kv_bw,
            allreduce_s: collective * hw.link_latency_s,
            allreduce_s_per_token: collective * m.hidden as f64 * 2.0 * ring
                / (hw.link_bandwidth * p.allreduce_efficiency),
            step_overhead_s: p.step_overhead_s + moe_fixed_s,
            per_sequence_overhead_s: p.per_sequence_overhead_s,
            draft_weights_s: 2.0 * i.draft_params / tp / bw,
            draft_s_per_token: 2.0 * i.draft_params / tp / peak,
            kernel_sum: p.step_time == StepTime::KernelSum,
            packed: p.attention_layout == AttentionLayout::Packed,
            request_latency_ns: (p.request_latency_s * 1e9).round() as u64,
            frontend_ns_per_token: p.frontend_s_per_token * 1e9,
            tokenize_ns_per_token: p.tokenize_s_per_token * 1e9,
            graphs: i.graphs.filter(|_| {
                p.eager_s_per_layer > 0.0
                    || p.eager_gap_s_per_layer > 0.0
                    || p.piecewise_gap_s_per_layer > 0.0
            }),
            eager_floor_s: m.layers as f64 * p.eager_s_per_layer,
            eager_gap_s: m.layers as f64 * p.eager_gap_s_per_layer,
            piecewise_gap_s: m.layers as f64 * p.piecewise_gap_s_per_layer,
            window: m.sliding_attention.as_ref().and_then(|s| s.window),
            split_kv: split_kv(&i),
            varlen: varlen(&i),
            moe_compiles: m.experts.as_ref().and_then(|e| {
                MoeCompiles::new(
                    &p.expert_tile_rows,
                    e.per_token,
                    i.graphs,
                    p.expert_compile_s,
                )
            }),
        }
    }

    /// The fused-MoE kernel variants the deployment's eager steps compile on first use, if modelled
    /// (a mixture of experts whose profile names its kernels and gives `expert_compile_s`, under an
    /// engine that says which steps replay graphs): the engine's replica keeps what it has compiled.
    pub fn moe_compiles(&self) -> Option<&MoeCompiles> {
        self.moe_compiles.as_ref()
    }

    /// The varlen attention of the deployment's steps that prefill and decode together, if modelled (a
    /// split-KV decode and a GPU file with `varlen_tiles`): callers set [`BatchShape::varlen_excess_s`].
    pub fn varlen(&self) -> Option<VarlenStep> {
        self.varlen
    }

    /// The split-KV schedule of the deployment's decode attention ([`CostInputs::split_kv_decode`]), if
    /// modelled: callers set [`BatchShape::decode_split_excess`] from it.
    pub fn split_kv(&self) -> Option<SplitKv> {
        self.split_kv
    }

    /// Time from a client's send to the engine seeing the request, ns (the profile's `request_latency_s`).
    pub fn request_latency_ns(&self) -> u64 {
        self.request_latency_ns
    }

    /// Front-end time of a request of `prompt_tokens` tokens, ns (the profile's `frontend_s_per_token`;
    /// requests take it one at a time).
    pub fn frontend_ns(&self, prompt_tokens: u32) -> u64 {
        (self.frontend_ns_per_token * prompt_tokens as f64).round() as u64
    }

    /// What a prompt of `prompt_tokens` tokens sent as chat messages adds to its front-end time, ns (the
    /// profile's `tokenize_s_per_token`).
    pub fn tokenize_ns(&self, prompt_tokens: u32) -> u64 {
        (self.tokenize_ns_per_token * prompt_tokens as f64).round() as u64
    }

    /// Whether a step's [`BatchShape::decode_shared`] changes its time (the profile gives shared re-reads
    /// their own efficiency); callers may skip counting them otherwise.
    pub fn prices_shared_reads(&self) -> bool {
        self.shared_read_s_per_token != self.full_read_s_per_token
    }

    /// Seconds one step takes; 0 for an empty batch.
    #[inline]
    pub fn step_seconds(&self, b: &BatchShape) -> f64 {
        self.clock(b).seconds(b.decode_context)
    }

    /// The step's time as a function of its decode context sum alone ([`StepClock`]): what a run of
    /// decode steps needs, whose shapes differ only in that sum.
    #[inline]
    pub fn clock(&self, b: &BatchShape) -> StepClock {
        let parts = self.parts_but_decode_context(b);
        let head = if self.kernel_sum {
            parts.weights_s.max(parts.gemm_s) + parts.attention_s
        } else {
            parts.gemm_s + self.linear_s_per_token * self.gemm_half_tokens + parts.attention_s
        };
        let packed_s_per_context = if self.packed {
            b.tokens() as f64 * self.full_s_per_pair
        } else {
            0.0
        };
        StepClock {
            empty: b.tokens() == 0,
            kernel_sum: self.kernel_sum,
            kv: self.kv_read(b),
            head,
            decode_seqs: b.decode_seqs as u64,
            decode_s_per_pair: self.decode_s_per_pair,
            decode_compute_excess_s_per_token: self.decode_compute_excess_s_per_token,
            packed_s_per_context,
            weights_s: parts.weights_s,
            eager_floor_s: self.eager_floor(b),
            host_gap_s: self.host_gap_s(b),
            fixed_s: parts.fixed_s,
            overhead_s: b.seqs() as f64 * self.per_sequence_overhead_s,
        }
    }

    /// The host's launch time if the step runs eagerly (no graph replays it), else 0.
    #[inline]
    fn eager_floor(&self, b: &BatchShape) -> f64 {
        match &self.graphs {
            Some(rule) if !rule.replays(b) => self.eager_floor_s,
            _ => 0.0,
        }
    }

    /// The idle time the host's launches leave inside a step that no whole graph replays: an eager
    /// step's, or a piecewise one's (a step with prefill that replays graphs); 0 for a decode step
    /// replayed whole, and without a rule. Seconds.
    #[inline]
    pub fn host_gap_s(&self, b: &BatchShape) -> f64 {
        match &self.graphs {
            Some(rule) if !rule.replays(b) => self.eager_gap_s,
            Some(_) if b.prefill_seqs > 0 => self.piecewise_gap_s,
            _ => 0.0,
        }
    }

    /// The KV read and write terms of a step ([`StepParts::kv_s`]).
    #[inline]
    fn kv_read(&self, b: &BatchShape) -> KvRead {
        let n = b.tokens() as f64;
        KvRead {
            prefill_context: b.prefill_context,
            decode_shared: b.decode_shared,
            split_excess: b.decode_split_excess,
            l2_saved: b.decode_l2_saved,
            full_read_s_per_token: self.full_read_s_per_token,
            rest: [
                b.decode_shared as f64 * self.shared_read_s_per_token,
                b.sliding_context as f64 * self.sliding_read_s_per_token,
                n * self.kv_write_s_per_token,
                b.seqs() as f64 * self.state_s_per_seq,
            ],
        }
    }

    /// The step's time split into the terms a profile's efficiencies scale (see [`StepParts`]).
    #[inline]
    pub fn parts(&self, b: &BatchShape) -> StepParts {
        let mut parts = self.parts_but_decode_context(b);
        if self.packed {
            parts.attention_s += b.tokens() as f64 * b.decode_context as f64 * self.full_s_per_pair;
        }
        parts
    }

    /// [`CostModel::parts`] without the packed attention's pairs of the decode contexts (which
    /// [`StepClock`] adds as a function of their sum); the same as `parts` for per-sequence attention.
    #[inline]
    fn parts_but_decode_context(&self, b: &BatchShape) -> StepParts {
        let n = b.tokens() as f64;
        let draft = if b.draft_passes > 0 {
            let per_pass = self
                .draft_weights_s
                .max(self.draft_s_per_token * b.decode_seqs as f64);
            b.draft_passes as f64 * (per_pass + self.allreduce_s)
        } else {
            0.0
        };
        StepParts {
            gemm_s: self.linear_s_per_token * n + self.expert_padding_s(n),
            weights_s: (if n == 1.0 {
                self.weights_single_row_s
            } else {
                self.weights_s
            }) + self.experts.as_ref().map_or(0.0, |e| e.seconds(n)),
            attention_s: b.varlen_excess_s
                + self.attention_pairs(b) * self.full_s_per_pair
                + self.prefill_waves(b) * b.prefill_span_max as f64 * self.sweep_s_per_token
                + b.first_round_span() * self.span_s_per_token
                + b.sliding_pairs * self.sliding_s_per_pair
                + n * self.linear_attention_s_per_token,
            kv_s: self.kv_read(b).seconds(b.decode_context),
            fixed_s: draft
                + self.allreduce_s
                + n * self.allreduce_s_per_token
                + self.step_overhead_s,
        }
    }

    /// What the fused-MoE kernel's tile padding adds to a step of `tokens` tokens' GEMMs (0 without a
    /// tile table).
    #[inline]
    fn expert_padding_s(&self, tokens: f64) -> f64 {
        self.expert_padding
            .as_ref()
            .map_or(0.0, |p| p.excess_rows(tokens) * self.expert_s_per_row)
    }

    /// The full-attention pairs a step computes but those of packed attention's decode contexts: the
    /// causal pairs of its prefill chunks and verify tokens, or, packed, every query of the step against
    /// the prefill chunks' cached prefixes and every query of the step (`Q × (prefill context + Q)`).
    #[inline]
    fn attention_pairs(&self, b: &BatchShape) -> f64 {
        if self.packed {
            let q = b.tokens() as f64;
            q * (b.prefill_context as f64 + q)
        } else {
            b.full_pairs
        }
    }

    /// Sequential rounds of prefill attention tiles. The kernel runs one block per (query tile, head), each
    /// sweeping its tile's keys; a round is `attention_parallel_tiles` blocks sweeping at most the longest
    /// span. The step's tile work is `q heads · pairs / tile` key-sweeps, so the rounds are
    /// `⌈q heads · pairs / (tile · parallel tiles · longest span)⌉`, at least 1 with prefill (a short chunk
    /// over a long prefix still sweeps it once), 0 without. 1 when the profile gives no tiling.
    #[inline]
    pub fn prefill_waves(&self, b: &BatchShape) -> f64 {
        if b.prefill_seqs == 0 {
            0.0
        } else if self.tile_tokens > 0.0 && self.parallel_tiles > 0.0 && b.prefill_span_max > 0 {
            let work = self.q_heads * b.full_pairs / self.tile_tokens;
            (work / (self.parallel_tiles * b.prefill_span_max as f64))
                .ceil()
                .max(1.0)
        } else {
            1.0
        }
    }

    /// Step time in integer nanoseconds (at least 1 for a non-empty batch).
    #[inline]
    pub fn step_ns(&self, b: &BatchShape) -> u64 {
        self.clock(b).ns(b.decode_context)
    }
}

/// A step's KV terms as a function of its decode context sum: the context's reads (less the shared
/// re-reads, plus the split-KV schedule's excess, less what the L2 saves) at the full rate, then the
/// shared re-reads, sliding-window reads, writes and recurrent state, added in that order.
#[derive(Clone, Copy, Debug, PartialEq)]
struct KvRead {
    prefill_context: u64,
    decode_shared: u64,
    split_excess: u64,
    l2_saved: u64,
    full_read_s_per_token: f64,
    rest: [f64; 4],
}

impl KvRead {
    #[inline]
    fn seconds(&self, decode_context: u64) -> f64 {
        let [shared, sliding, write, state] = self.rest;
        (self.prefill_context
            + decode_context.saturating_sub(self.decode_shared)
            + self.split_excess)
            .saturating_sub(self.l2_saved) as f64
            * self.full_read_s_per_token
            + shared
            + sliding
            + write
            + state
    }
}

/// One step's time with everything but the decode context sum fixed ([`CostModel::clock`]). A run of
/// decode steps changes only that sum, so the simulator evaluates each step of the run with a few
/// operations; [`CostModel::step_seconds`] is this clock at the shape's own sum, so both give the same
/// bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepClock {
    empty: bool,
    kernel_sum: bool,
    kv: KvRead,
    /// Kernel sum: `max(weights, gemm) + attention`; otherwise the compute terms before decode attention.
    head: f64,
    decode_seqs: u64,
    /// A decode query's compute per context token ([`CostModel`]'s).
    decode_s_per_pair: f64,
    /// Kernel sum, absorbed latent attention: a decode context token's compute beyond its read.
    decode_compute_excess_s_per_token: f64,
    /// Packed attention: seconds per decode context token (every query of the step attends to it); 0
    /// for per-sequence attention.
    packed_s_per_context: f64,
    weights_s: f64,
    /// An eager step's least device time: the host launching its kernels (0 for a graph replay).
    eager_floor_s: f64,
    /// The GPU's idle time between the host's launches in a step no whole graph replays.
    host_gap_s: f64,
    fixed_s: f64,
    overhead_s: f64,
}

impl StepClock {
    /// Seconds the step takes when its decode contexts sum to `decode_context`; 0 for an empty batch.
    #[inline]
    pub fn seconds(&self, decode_context: u64) -> f64 {
        if self.empty {
            return 0.0;
        }
        let kv = self.kv.seconds(decode_context);
        let packed = self.packed_s_per_context * decode_context as f64;
        let body = if self.kernel_sum {
            self.head + kv + packed + decode_context as f64 * self.decode_compute_excess_s_per_token
        } else {
            let attention = if self.packed_s_per_context > 0.0 {
                packed
            } else {
                (decode_context + self.decode_seqs) as f64 * self.decode_s_per_pair
            };
            (self.head + attention).max(self.weights_s + kv)
        };
        body.max(self.eager_floor_s) + self.host_gap_s + self.fixed_s + self.overhead_s
    }

    /// Sets the step's [`BatchShape::decode_split_excess`] and [`BatchShape::decode_l2_saved`] (a
    /// run's later steps: [`crate::SplitRun`]).
    #[inline]
    pub fn set_split(&mut self, cost: SplitCost) {
        self.kv.split_excess = cost.excess;
        self.kv.l2_saved = cost.l2_saved;
    }

    /// [`StepClock::seconds`] in whole nanoseconds (rounded half away from zero), at least 1 for a
    /// non-empty step.
    #[inline]
    pub fn ns(&self, decode_context: u64) -> u64 {
        let s = self.seconds(decode_context);
        if s <= 0.0 {
            0
        } else {
            round_ns(s * 1e9).max(1)
        }
    }
}

/// `x.round() as u64` for `x > 0`, without the library call `f64::round` costs on baseline x86-64: from
/// 0.5 to 2⁵², `x + 0.5` is exact or rounds only up to the next power of two, so truncating it rounds half
/// away from zero as `round` does (below 0.5 it can round up to 1: 0.49999999999999994 + 0.5 = 1); from
/// 2⁵² on, `x` is whole.
#[inline]
fn round_ns(x: f64) -> u64 {
    const WHOLE: f64 = 4_503_599_627_370_496.0; // 2^52
    if x < 0.5 {
        0
    } else if x < WHOLE {
        (x + 0.5) as u64
    } else {
        x.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mixed step's varlen call takes vLLM's `num_splits`: 32 where the graphs replay the step, 0 past
    /// them; every full-attention layer pays the call's excess.
    #[test]
    fn a_varlen_step_takes_the_graphs_split_count() {
        let tiles = crate::varlen::VarlenTiles {
            mma_block_s: 1.818e-6,
            sm_read_bandwidth: 114.2e9,
            memory_bandwidth: 4.426e12,
            tile_overhead_s: 1.95e-6,
            overlap: 0.045,
        };
        let varlen = Varlen {
            sms: 132,
            kv_heads: 8,
            q_per_kv: 4,
            head_dim: 128,
            kv_bytes: 2,
            tiles,
        };
        let step = VarlenStep {
            varlen,
            layers: 36,
            graphs: Some(GraphRule::mixed(512)),
        };
        let decodes = vec![
            Seq {
                queries: 1,
                keys: 24_576
            };
            8
        ];
        for (chunk, split) in [(64u32, MAX_SPLITS), (1_024, 0)] {
            let chunks = [Seq {
                queries: chunk,
                keys: 65_536 + chunk,
            }];
            let b = BatchShape {
                prefill_tokens: chunk as u64,
                prefill_seqs: 1,
                decode_seqs: 8,
                ..BatchShape::default()
            };
            let want = 36.0 * varlen.excess_s(&decodes, &chunks, split);
            assert_eq!(step.excess_s(&b, &decodes, &chunks), want);
            assert_ne!(want, 0.0);
        }
        // Without graphs every step runs eagerly: num_splits 0.
        let eager = VarlenStep {
            graphs: None,
            ..step
        };
        let chunks = [Seq {
            queries: 64,
            keys: 65_600,
        }];
        let b = BatchShape {
            prefill_tokens: 64,
            prefill_seqs: 1,
            decode_seqs: 8,
            ..BatchShape::default()
        };
        assert_eq!(
            eager.excess_s(&b, &decodes, &chunks),
            36.0 * varlen.excess_s(&decodes, &chunks, 0)
        );
    }
    use crate::profile::{AttentionLayout, StepTime};

    fn model(name: &str, hw: &str, profile: &str, tp: u32, dtype: WeightDtype) -> CostModel {
        let (m, h, p) = (
            ModelSpec::preset(name).unwrap(),
            HardwareSpec::preset(hw).unwrap(),
            Profile::preset(profile).unwrap(),
        );
        CostModel::new(CostInputs {
            model: &m,
            hardware: &h,
            profile: &p,
            dtype,
            group_size: 128,
            tp,
            draft_params: 0.0,
            graphs: None,
            expert_parallel: false,
            routing_skew: 0.0,
            split_kv_decode: false,
        })
    }

    /// Qwen3-30B-A3B (its config.json) on H200s with the vLLM profile fitted to the dense Qwen3-8B.
    fn qwen3_30b_a3b(tp: u32, expert_parallel: bool) -> CostModel {
        qwen3_30b_a3b_routed(tp, expert_parallel, 0.0)
    }

    /// The same with its routing skewed ([`CostInputs::routing_skew`]).
    fn qwen3_30b_a3b_routed(tp: u32, expert_parallel: bool, routing_skew: f64) -> CostModel {
        let text = include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json");
        let m = crate::hf::from_config("qwen3-30b-a3b", text).unwrap();
        let (h, p) = (
            HardwareSpec::preset("h200").unwrap(),
            Profile::preset("h200-qwen3-8b-vllm").unwrap(),
        );
        CostModel::new(CostInputs {
            tp,
            expert_parallel,
            routing_skew,
            ..one_gpu(&m, &h, &p)
        })
    }

    /// One GPU, bf16 weights, no CUDA graphs, no expert parallelism or skew, no split-KV schedule.
    fn one_gpu<'a>(m: &'a ModelSpec, h: &'a HardwareSpec, p: &'a Profile) -> CostInputs<'a> {
        CostInputs {
            model: m,
            hardware: h,
            profile: p,
            dtype: WeightDtype::Bf16,
            group_size: 128,
            tp: 1,
            draft_params: 0.0,
            graphs: None,
            expert_parallel: false,
            routing_skew: 0.0,
            split_kv_decode: false,
        }
    }

    /// The routed experts' GEMMs at their own efficiency: a fresh prefill's linear time splits into the
    /// dense part at `gemm_efficiency` and the experts' at `expert_gemm_efficiency`; a one-token decode,
    /// bandwidth-bound, is left alone, and a dense model is unchanged bit for bit.
    #[test]
    fn the_experts_gemms_take_their_own_efficiency() {
        let text = include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json");
        let m = crate::hf::from_config("qwen3-30b-a3b", text).unwrap();
        let h = HardwareSpec::preset("h200").unwrap();
        let base = Profile::preset("h200-qwen3-8b-vllm").unwrap();
        let slow = Profile {
            expert_gemm_efficiency: Some(base.gemm_efficiency / 2.0),
            ..base.clone()
        };
        let cost = |m: &ModelSpec, p: &Profile| CostModel::new(one_gpu(m, &h, p));
        let (a, b) = (cost(&m, &base), cost(&m, &slow));
        let experts = m.experts.as_ref().unwrap().active_params();
        let extra = 2.0 * experts / (h.bf16_flops * base.gemm_efficiency);
        assert!((b.linear_s_per_token - a.linear_s_per_token - extra).abs() < 1e-15);
        let mut p = BatchShape::default();
        p.add_prefill(8192, 0, None);
        assert!(b.step_seconds(&p) > a.step_seconds(&p) * 1.3);
        assert_eq!(
            b.step_seconds(&decode(1, 2048)),
            a.step_seconds(&decode(1, 2048))
        );
        let dense = ModelSpec::preset("qwen3-8b").unwrap();
        assert_eq!(
            cost(&dense, &slow).step_seconds(&p),
            cost(&dense, &base).step_seconds(&p)
        );
    }

    /// The fused-MoE kernel's tile padding: with the H200 table's 128-row tiles a fresh 1,024-token
    /// prefill multiplies twice its routed rows (each expert's ~64 rows fill one tile), so its expert
    /// GEMMs take exactly twice as long; a decode batch, bound by the experts' reads, is unchanged; and a
    /// dense model or an empty table leaves every step as it was.
    #[test]
    fn the_experts_gemms_multiply_padded_rows() {
        let text = include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json");
        let m = crate::hf::from_config("qwen3-30b-a3b", text).unwrap();
        let h = HardwareSpec::preset("h200").unwrap();
        let base = Profile::preset("h200-qwen3-8b-vllm").unwrap();
        let tiled = Profile {
            expert_tile_rows: [(1, 16), (256, 32), (512, 64), (1024, 128)]
                .into_iter()
                .map(|(tokens, rows)| crate::profile::ExpertTile {
                    tokens,
                    rows,
                    kernel: None,
                })
                .collect(),
            ..base.clone()
        };
        let cost = |m: &ModelSpec, p: &Profile| CostModel::new(one_gpu(m, &h, p));
        let (a, b) = (cost(&m, &base), cost(&m, &tiled));
        let mut p = BatchShape::default();
        p.add_prefill(1024, 0, None);
        let routed_gemm = 1024.0 * 8.0 * a.expert_s_per_row;
        let added = b.parts(&p).gemm_s - a.parts(&p).gemm_s;
        assert!(
            (added / routed_gemm - 1.0).abs() < 1e-3,
            "{added} vs {routed_gemm}"
        );
        assert_eq!(
            b.step_seconds(&decode(32, 2048)),
            a.step_seconds(&decode(32, 2048))
        );
        let dense = ModelSpec::preset("qwen3-8b").unwrap();
        assert_eq!(
            cost(&dense, &tiled).step_seconds(&p),
            cost(&dense, &base).step_seconds(&p)
        );
    }

    fn decode(batch: u32, ctx: u32) -> BatchShape {
        let mut b = BatchShape::default();
        for _ in 0..batch {
            b.add_decode(ctx, None);
        }
        b
    }

    #[test]
    fn qwen3_8b_decode_on_h200_is_bandwidth_bound() {
        let c = model("qwen3-8b", "h200", "h200-datasheet", 1, WeightDtype::Bf16);
        // (15.1 GB weights + 4096 × 144 KiB KV) / (4.8 TB/s × 0.9) ≈ 3.7 ms, plus overheads.
        let t = c.step_seconds(&decode(1, 4096));
        assert!((0.0045..0.0065).contains(&t), "batch-1 decode {t}");
        assert!(
            c.step_seconds(&decode(16, 32_768)) > 4.0 * t,
            "KV reads dominate at 16 × 32K"
        );
    }

    /// Expert parallelism over 8 GPUs holds 16 of Qwen3-30B-A3B's 128 experts whole on each: a token's
    /// 8 experts land unevenly, so a one-token step waits for the GPU with the most (1 + 1.4236 × 0.968
    /// = 2.38 experts, against one expert's worth, split eight ways, under tensor parallelism); once
    /// every expert is chosen the two read the same bytes.
    #[test]
    fn expert_parallelism_waits_for_the_busiest_gpu() {
        assert_eq!(expected_normal_max(1), 0.0);
        assert!((expected_normal_max(8) - 1.4236).abs() < 1e-12);
        let six = expected_normal_max(6);
        assert!(six > 1.0294 && six < 1.4236, "{six}");
        let (tp, ep) = (qwen3_30b_a3b(8, false), qwen3_30b_a3b(8, true));
        let (t, e) = (tp.experts.unwrap(), ep.experts.unwrap());
        let one = e.seconds(1.0) / t.seconds(1.0);
        let want = 1.0 + 1.4236 * (16.0f64 * (1.0 / 16.0) * (15.0 / 16.0)).sqrt();
        assert!((one - want).abs() < 1e-9, "{one} against {want}");
        assert!((e.seconds(4096.0) / t.seconds(4096.0) - 1.0).abs() < 1e-9);
        for n in [1.0, 4.0, 16.0, 64.0, 256.0] {
            assert!(e.seconds(n) >= t.seconds(n) - 1e-15, "{n}");
        }
    }

    fn qwen3_30b_a3b_experts() -> crate::model::Experts {
        let text = include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json");
        let m = crate::hf::from_config("qwen3-30b-a3b", text).unwrap();
        m.experts.unwrap()
    }

    /// Routing skew 0 is uniform routing: the general (per-expert) sums give the closed form's experts,
    /// with and without expert parallelism, and the inclusion probabilities are exactly `k ÷ E`.
    #[test]
    fn uniform_routing_is_skew_zero() {
        let e = qwen3_30b_a3b_experts();
        let q = e.inclusion_probabilities(0.0);
        assert_eq!(q.len(), 128);
        assert!(q.iter().all(|&q| q == 8.0 / 128.0));
        for (tp, ep) in [(1, false), (8, false), (8, true), (4, true)] {
            let closed = qwen3_30b_a3b(tp, ep).experts.unwrap();
            assert!(closed.skewed_keeps.is_none());
            let mut general = closed.clone();
            general.skewed_keeps = Some(skewed_keeps(&e, 0.0, general.gpus as usize));
            for n in [1.0, 2.0, 8.0, 16.0, 64.0, 256.0, 4096.0] {
                let (a, b) = (closed.experts(n), general.experts(n));
                assert!(
                    (a - b).abs() < 1e-12,
                    "tp {tp} ep {ep} n {n}: {a} against {b}"
                );
            }
            // And a deployment at skew 0 keeps the closed form (bit for bit today's step).
            assert_eq!(qwen3_30b_a3b_routed(tp, ep, 0.0), qwen3_30b_a3b(tp, ep));
        }
    }

    /// A skewed router's tokens share more experts: at a fixed step the distinct experts fall as the
    /// skew grows, and at a fixed skew they rise with the step's tokens toward all 128. One token
    /// still reads its 8 (the inclusion probabilities sum to `per_token`).
    #[test]
    fn skewed_routing_reads_fewer_distinct_experts() {
        let e = qwen3_30b_a3b_experts();
        for s in [0.5, 1.0, 2.0, 4.0] {
            let q = e.inclusion_probabilities(s);
            let sum: f64 = q.iter().sum();
            assert!((sum - 8.0).abs() < 1e-9, "skew {s}: {sum}");
            assert!(q.iter().all(|&q| (0.0..=1.0).contains(&q)));
            assert!(q.windows(2).all(|w| w[0] >= w[1]), "skew {s}");
        }
        let distinct = |s: f64, n: f64| {
            qwen3_30b_a3b_routed(1, false, s)
                .experts
                .unwrap()
                .experts(n)
        };
        for s in [0.0, 0.5, 1.0] {
            eprintln!(
                "skew {s}: distinct experts at 1, 8, 64, 256 tokens: {:.2} {:.2} {:.2} {:.2}",
                distinct(s, 1.0),
                distinct(s, 8.0),
                distinct(s, 64.0),
                distinct(s, 256.0)
            );
        }
        for n in [1.0, 8.0, 64.0, 256.0] {
            assert!((distinct(0.0, n) - e.distinct(n)).abs() < 1e-9);
        }
        for n in [8.0, 16.0, 64.0, 256.0] {
            let mut last = distinct(0.0, n);
            for s in [0.25, 0.5, 1.0, 2.0, 4.0] {
                let d = distinct(s, n);
                assert!(d < last, "n {n}: skew {s} reads {d}, not below {last}");
                last = d;
            }
        }
        for s in [0.5, 1.0, 2.0] {
            assert!((distinct(s, 1.0) - 8.0).abs() < 1e-9, "skew {s}");
            let mut last = 0.0;
            for n in [1.0, 2.0, 8.0, 64.0, 512.0, 65_536.0] {
                let d = distinct(s, n);
                assert!(d > last && d <= 128.0, "skew {s} n {n}: {d} after {last}");
                last = d;
            }
        }
        assert!(distinct(0.5, 65_536.0) > 127.9);
    }

    /// Under expert parallelism the experts are dealt round robin by index, which carries no
    /// popularity; with skew the GPU holding the most popular experts is chosen more. A one-token step
    /// waits longer for it than under uniform routing; from a few tokens on (4 at skew 0.5, 2 at 1) the
    /// skewed step's fewer distinct experts outweigh that, but its busiest GPU still reads a larger
    /// share of them
    /// (busiest × GPUs ÷ distinct), until every expert is read anyway.
    #[test]
    fn skewed_routing_makes_the_busiest_gpu_busier() {
        for s in [0.5, 1.0] {
            let (uniform, skewed) = (
                qwen3_30b_a3b(8, true).experts.unwrap(),
                qwen3_30b_a3b_routed(8, true, s).experts.unwrap(),
            );
            let (u_all, s_all) = (
                qwen3_30b_a3b(1, false).experts.unwrap(),
                qwen3_30b_a3b_routed(1, false, s).experts.unwrap(),
            );
            for n in [1.0, 2.0, 4.0, 8.0, 16.0, 64.0] {
                let (u, k) = (uniform.experts(n), skewed.experts(n));
                let (ui, ki) = (8.0 * u / u_all.experts(n), 8.0 * k / s_all.experts(n));
                eprintln!(
                    "skew {s}, {n} tokens: busiest GPU {k:.2} experts against {u:.2}; imbalance {ki:.3} against {ui:.3}"
                );
                assert!(ki > ui, "skew {s} n {n}: imbalance {ki} against {ui}");
                if n == 1.0 {
                    assert!(
                        skewed.seconds(n) > uniform.seconds(n),
                        "skew {s} n {n}: {k} against {u}"
                    );
                }
            }
            assert!((skewed.experts(1e6) - 16.0).abs() < 1e-6);
        }
    }

    /// Qwen3-30B-A3B's batch-8 decode on one H200: with skew 1 its tokens read fewer distinct experts
    /// than uniformly routed ones, so the step is faster; one token reads its 8 either way.
    #[test]
    fn a_skewed_mixture_of_experts_decodes_a_batch_faster() {
        let (uniform, skewed) = (qwen3_30b_a3b(1, false), qwen3_30b_a3b_routed(1, false, 1.0));
        let (u, k) = (
            uniform.step_seconds(&decode(8, 2048)),
            skewed.step_seconds(&decode(8, 2048)),
        );
        eprintln!(
            "batch 8: {:.3} ms uniform, {:.3} ms at skew 1",
            u * 1e3,
            k * 1e3
        );
        assert!(k < 0.95 * u, "{k} against {u}");
        let one = |c: &CostModel| c.step_seconds(&decode(1, 2048));
        assert!((one(&uniform) - one(&skewed)).abs() < 1e-12);
    }

    /// Qwen3-30B-A3B's decode on one H200 with the vLLM profile fitted to a dense model
    /// (`h200-qwen3-8b-vllm`), against vLLM 0.26.0 serving that shape (results/h200-vllm-moe, the
    /// median of two runs): the simulated step grows with the distinct experts its tokens read, from 8
    /// of 128 per layer at batch 1 to all of them, as the measured one does; each level's error is
    /// printed and bounded, the bound being what the dense profile gives, not a fit.
    #[test]
    fn a_mixture_of_experts_decode_grows_with_the_experts_its_batch_reads() {
        let c = qwen3_30b_a3b(1, false);
        // (batch, context, measured ms): the mean context of the 128 tokens decoded over the prompt.
        let measured = [
            (1, 2048, 4.17),
            (2, 2048, 5.03),
            (4, 2048, 6.64),
            (8, 2048, 9.43),
            (16, 2048, 13.09),
            (32, 2048, 17.17),
            (64, 2048, 20.36),
            (128, 2048, 23.91),
            (256, 2048, 31.56),
            (1, 16_384, 4.63),
            (16, 16_384, 18.22),
        ];
        let mut errors = Vec::new();
        for (batch, ctx, ms) in measured {
            let t = c.step_seconds(&decode(batch, ctx + 64)) * 1e3;
            errors.push((batch, ctx, t, ms, t / ms - 1.0));
        }
        for e in &errors {
            println!(
                "batch {:>3} over {:>6}: simulated {:6.2} ms, measured {:6.2} ms, {:+5.1} %",
                e.0,
                e.1,
                e.2,
                e.3,
                100.0 * e.4
            );
        }
        // From 4 sequences on, the weight and KV reads the model counts set the step: within 20 %.
        // Below, the measured step keeps a floor of about 3 ms (48 layers of small kernels: routing,
        // top-k, the fused MoE GEMMs) that no dense probe of the profile measured: half of it is missed.
        for &(batch, ctx, t, ms, err) in &errors {
            let bound = if batch >= 4 { 0.2 } else { 0.55 };
            assert!(
                err.abs() < bound,
                "batch {batch} over {ctx}: {t:.2} against {ms:.2} ms"
            );
        }
        // The weights a step reads rise with its distinct experts: 8 of 128 at one token, 126 at 64.
        let m = crate::hf::from_config(
            "qwen3-30b-a3b",
            include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json"),
        )
        .unwrap();
        let e = m.experts.as_ref().unwrap();
        assert!((e.distinct(1.0) - 8.0).abs() < 1e-9);
        assert!(
            (e.distinct(64.0) - 125.95).abs() < 0.01,
            "{}",
            e.distinct(64.0)
        );
        let (one, many) = (c.parts(&decode(1, 2048)), c.parts(&decode(64, 2048)));
        assert!(
            many.weights_s > 5.0 * one.weights_s,
            "{} against {}",
            many.weights_s,
            one.weights_s
        );
    }

    /// A step no graph replays takes at least the host's launch time, layers × `eager_s_per_layer`; a
    /// replayed one keeps its kernels' time. SGLang's rule (decode-only, up to 32 sequences) and vLLM's
    /// (mixed steps too, up to 512 tokens) part on a short prefill step.
    #[test]
    fn eager_steps_wait_for_the_host_to_launch_their_layers() {
        let (m, h) = (
            ModelSpec::preset("qwen3-8b").unwrap(),
            HardwareSpec::preset("h200").unwrap(),
        );
        let mut p = Profile::preset("h200-datasheet").unwrap();
        p.eager_s_per_layer = 1e-3;
        let with_profile = |p: &Profile, graphs| {
            CostModel::new(CostInputs {
                model: &m,
                hardware: &h,
                profile: p,
                dtype: WeightDtype::Bf16,
                group_size: 128,
                tp: 1,
                draft_params: 0.0,
                graphs,
                expert_parallel: false,
                routing_skew: 0.0,
                split_kv_decode: false,
            })
        };
        let with = |graphs| with_profile(&p, graphs);
        let hidden = with(None);
        let sglang = with(Some(GraphRule {
            max_tokens: 32,
            prefill_max_tokens: 0,
        }));
        let vllm = with(Some(GraphRule {
            max_tokens: 512,
            prefill_max_tokens: 512,
        }));
        let sglang_0519 = with(Some(GraphRule {
            max_tokens: 32,
            prefill_max_tokens: 4096,
        }));
        let floor = m.layers as f64 * 1e-3;
        for b in [decode(1, 4096), decode(32, 4096)] {
            assert_eq!(sglang.step_seconds(&b), hidden.step_seconds(&b), "replayed");
        }
        let big = decode(64, 4096);
        let fixed = hidden.parts(&big).fixed_s + 64.0 * p.per_sequence_overhead_s;
        assert!(
            hidden.step_seconds(&big) - fixed < floor,
            "the kernels alone are faster"
        );
        assert!((sglang.step_seconds(&big) - (floor + fixed)).abs() < 1e-12);
        assert_eq!(vllm.step_seconds(&big), hidden.step_seconds(&big));
        let mut prefill = decode(4, 4096);
        prefill.add_prefill(100, 0, None);
        assert!(sglang.step_seconds(&prefill) > hidden.step_seconds(&prefill));
        assert_eq!(vllm.step_seconds(&prefill), hidden.step_seconds(&prefill));
        // SGLang's piecewise extend graphs: a prefill step of 104 tokens replays, a decode of 64 does not.
        assert_eq!(
            sglang_0519.step_seconds(&prefill),
            hidden.step_seconds(&prefill)
        );
        assert!((sglang_0519.step_seconds(&big) - (floor + fixed)).abs() < 1e-12);
        // No eager cost in the profile: the rule changes nothing.
        let free = Profile {
            eager_s_per_layer: 0.0,
            ..p.clone()
        };
        let none = GraphRule {
            max_tokens: 0,
            prefill_max_tokens: 0,
        };
        assert_eq!(
            with_profile(&free, Some(none)).step_seconds(&big),
            hidden.step_seconds(&big)
        );
        // The gaps a step's launches leave add to its GPU work: an eager step's (a decode past the
        // graphs, or prefill past them), a piecewise one's (prefill within them); never a decode step
        // a whole graph replays.
        let gaps = Profile {
            piecewise_gap_s_per_layer: 2e-4,
            eager_gap_s_per_layer: 1e-4,
            ..free.clone()
        };
        let (pw, eager) = (m.layers as f64 * 2e-4, m.layers as f64 * 1e-4);
        let vllm = with_profile(&gaps, Some(GraphRule::mixed(512)));
        let mut long = decode(4, 4096);
        long.add_prefill(2048, 0, None);
        for (b, gap) in [
            (decode(8, 4096), 0.0),
            (big, 0.0),
            (prefill, pw),
            (long, eager),
            (decode(600, 100), eager),
        ] {
            let d = vllm.step_seconds(&b) - hidden.step_seconds(&b);
            assert!((d - gap).abs() < 1e-12, "{d} against {gap}");
        }
        assert_eq!(
            with_profile(&gaps, None).step_seconds(&long),
            hidden.step_seconds(&long)
        );
    }

    #[test]
    fn nanoseconds_round_as_f64_round_does() {
        let mut xs = vec![
            0.3,
            0.5,
            0.49999999999999994,
            1.5,
            2.5,
            1e7 + 0.5,
            4_503_599_627_370_495.5,
        ];
        for k in [
            1u64,
            2,
            3,
            1 << 20,
            (1 << 23) - 1,
            1 << 40,
            (1 << 52) - 1,
            1 << 52,
            1 << 53,
        ] {
            let half = k as f64 + 0.5;
            xs.extend([
                k as f64,
                half,
                half.next_down(),
                half.next_up(),
                (k as f64).next_down(),
            ]);
        }
        let mut z = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..100_000 {
            z = xorshift(z);
            xs.push((z >> 11) as f64 / (1u64 << 53) as f64 * 1e8); // up to 100 ms in ns
        }
        for x in xs.into_iter().filter(|&x| x > 0.0) {
            assert_eq!(round_ns(x), x.round() as u64, "{x:e}");
        }
    }

    fn xorshift(mut z: u64) -> u64 {
        z ^= z << 13;
        z ^= z >> 7;
        z ^ (z << 17)
    }

    #[test]
    fn a_step_clock_gives_the_step_time_at_every_context_sum() {
        // Decode runs time each step with the first step's clock at a larger context sum; that must be
        // bit for bit the time of the step's own shape, with either composition of the terms.
        for (name, hw, profile) in [
            ("qwen3.5-9b", "l40", "l40-datasheet"),
            ("qwen3-8b", "h200", "h200-qwen3-8b-cuda"),
            ("qwen3-8b", "h200", "h200-qwen3-8b-transformers"),
        ] {
            let c = model(name, hw, profile, 1, WeightDtype::Bf16);
            let mut first = decode(12, 9_000);
            first.decode_shared = 11 * 4_096;
            let clock = c.clock(&first);
            for grown in (0..5_000u64).step_by(7) {
                let mut b = first;
                b.decode_context += grown;
                assert_eq!(
                    clock.ns(b.decode_context),
                    c.step_ns(&b),
                    "{profile} +{grown}"
                );
                assert_eq!(clock.seconds(b.decode_context), c.step_seconds(&b));
            }
            assert_eq!(
                c.clock(&BatchShape::default()).ns(0),
                0,
                "an empty step takes no time"
            );
        }
    }

    #[test]
    fn packed_attention_pairs_every_query_of_the_step_with_every_key() {
        let (m, h) = (
            ModelSpec::preset("qwen3-8b").unwrap(),
            HardwareSpec::preset("h200").unwrap(),
        );
        let cost = |layout| {
            // Without the prefill sweep terms, attention is its pairs alone.
            let p = Profile {
                attention_layout: layout,
                attention_sweep_s_per_token: 0.0,
                attention_span_s_per_token: 0.0,
                ..Profile::preset("h200-qwen3-8b-transformers").unwrap()
            };
            CostModel::new(one_gpu(&m, &h, &p))
        };
        let (packed, per_seq) = (
            cost(AttentionLayout::Packed),
            cost(AttentionLayout::PerSequence),
        );
        let pair = m.full_attention.flops_per_pair() / (h.bf16_flops * 1.0);
        // Decode only: S queries against S × C cached keys and the S queries themselves.
        for (s, c) in [(4u32, 8192u32), (16, 8192), (1, 100)] {
            let want = (s as f64 * (s as f64 * c as f64 + s as f64)) * pair;
            let got = packed.parts(&decode(s, c)).attention_s;
            assert!(
                (got - want).abs() <= 1e-12 * want,
                "{s} × {c}: {got} vs {want}"
            );
        }
        // A prefill chunk mixed with decodes: the chunk's queries read the decodes' keys too.
        let mut mixed = decode(8, 30_000);
        mixed.add_prefill(8192, 0, None);
        let q = 8200.0;
        let want = q * (8.0 * 30_000.0 + q) * pair;
        let got = packed.parts(&mixed).attention_s;
        assert!((got - want).abs() <= 1e-9 * want, "{got} vs {want}");
        assert!(got > 50.0 * per_seq.parts(&mixed).attention_s);
        // And the step clock of a decode run prices the cross term at every context sum.
        let clock = packed.clock(&mixed);
        let mut grown = mixed;
        grown.decode_context += 1000;
        assert_eq!(
            clock.seconds(grown.decode_context),
            packed.step_seconds(&grown)
        );
        assert!(packed.step_seconds(&grown) > packed.step_seconds(&mixed));
    }

    #[test]
    fn shared_prefix_rereads_cost_what_the_profile_says() {
        // 16 decodes of 20K context, 15 of which re-read a shared 16K prefix.
        let mut shared = decode(16, 20_000);
        shared.decode_shared = 15 * 16_384;
        let fitted = model(
            "qwen3-8b",
            "h200",
            "h200-qwen3-8b-cuda",
            1,
            WeightDtype::Bf16,
        );
        let p = Profile::preset("h200-qwen3-8b-cuda").unwrap();
        let (kv, re) = (p.kv_efficiency.unwrap(), p.shared_kv_efficiency.unwrap());
        assert!(fitted.prices_shared_reads());
        // Exactly the re-read tokens move from the KV efficiency to the shared one.
        let (plain, with) = (fitted.parts(&decode(16, 20_000)), fitted.parts(&shared));
        let per_token = 36.0 * 2.0 * 8.0 * 128.0 * 2.0 / 4.8e12; // bytes of K and V per token / peak
        let moved = 15.0 * 16_384.0 * per_token * (1.0 / kv - 1.0 / re);
        assert!(((plain.kv_s - with.kv_s) / moved - 1.0).abs() < 1e-9);
        // A profile without the term prices every read alike, so callers need not count them.
        let sheet = model("qwen3-8b", "h200", "h200-datasheet", 1, WeightDtype::Bf16);
        assert!(!sheet.prices_shared_reads());
        assert_eq!(
            sheet.step_seconds(&shared),
            sheet.step_seconds(&decode(16, 20_000))
        );
    }

    #[test]
    fn prefill_is_compute_bound_and_grows_with_length() {
        let c = model("qwen3-8b", "h200", "h200-datasheet", 1, WeightDtype::Bf16);
        let mut b = BatchShape::default();
        b.add_prefill(2048, 0, None);
        let t = c.step_seconds(&b);
        // 2 × 7.57e9 × 2048 = 31 TFLOP at about 790 TFLOP/s ≈ 39 ms, plus attention.
        assert!((0.035..0.06).contains(&t), "2K prefill {t}");
        let mut long = BatchShape::default();
        long.add_prefill(2048, 32_768, None);
        assert!(
            c.step_seconds(&long) > t * 1.3,
            "a cached prefix adds attention work"
        );
    }

    #[test]
    fn tensor_parallelism_and_int4_cut_decode_time() {
        let one = model("qwen3.5-9b", "l40", "l40-datasheet", 1, WeightDtype::Bf16)
            .step_seconds(&decode(1, 30_000));
        let two = model("qwen3.5-9b", "l40", "l40-datasheet", 2, WeightDtype::Bf16)
            .step_seconds(&decode(1, 30_000));
        assert!(two < one * 0.7, "tp=2 {two} vs tp=1 {one}");
        let bf = model("qwen3.8-27b", "l40", "l40-datasheet", 2, WeightDtype::Bf16)
            .step_seconds(&decode(1, 1000));
        let q4 = model("qwen3.8-27b", "l40", "l40-datasheet", 2, WeightDtype::Int4)
            .step_seconds(&decode(1, 1000));
        assert!(q4 < bf / 2.0, "int4 {q4} vs bf16 {bf}");
    }

    #[test]
    fn verifying_four_drafts_costs_little_more_than_one_decode_at_batch_one() {
        let c = model("qwen3-8b", "h200", "h200-datasheet", 1, WeightDtype::Bf16);
        let mut v = BatchShape::default();
        v.add_verify(4096, 4, None);
        let (one, verify) = (c.step_seconds(&decode(1, 4096)), c.step_seconds(&v));
        assert!(
            verify > one && verify < one * 1.1,
            "verify {verify} vs decode {one}"
        );
    }

    #[test]
    fn fp8_and_sliding_windows_cut_decode_time() {
        let bf = model("qwen3-8b", "h200", "h200-datasheet", 1, WeightDtype::Bf16)
            .step_seconds(&decode(1, 1000));
        let f8 = model("qwen3-8b", "h200", "h200-datasheet", 1, WeightDtype::Fp8)
            .step_seconds(&decode(1, 1000));
        assert!(f8 < bf * 0.7, "fp8 {f8} vs bf16 {bf}");
        let g = model("gemma4-e4b", "l40", "l40-datasheet", 1, WeightDtype::Bf16);
        let mut windowed = BatchShape::default();
        let mut unbounded = BatchShape::default();
        for _ in 0..32 {
            windowed.add_decode(60_000, Some(512));
            unbounded.add_decode(60_000, None);
        }
        unbounded.sliding_context = 32 * 60_000;
        assert!(
            g.step_seconds(&windowed) < g.step_seconds(&unbounded),
            "the window caps the KV the sliding layers read"
        );
    }

    #[test]
    fn prefill_rounds_count_tiles_of_the_longest_span() {
        let m = ModelSpec::preset("qwen3-8b").unwrap();
        let h = HardwareSpec::preset("h200").unwrap();
        let p = Profile {
            attention_tile_tokens: 64,
            attention_parallel_tiles: 396.0,
            attention_sweep_s_per_token: 3.5e-6,
            step_time: StepTime::KernelSum,
            ..Profile::preset("h200-datasheet").unwrap()
        };
        let c = CostModel::new(CostInputs {
            model: &m,
            hardware: &h,
            profile: &p,
            dtype: WeightDtype::Bf16,
            group_size: 128,
            tp: 1,
            draft_params: 0.0,
            graphs: None,
            expert_parallel: false,
            routing_skew: 0.0,
            split_kv_decode: false,
        });
        let rounds = |chunks: &[(u32, u32)]| {
            let mut b = BatchShape::default();
            for &(len, prefix) in chunks {
                b.add_prefill(len, prefix, None);
            }
            c.prefill_waves(&b)
        };
        assert_eq!(rounds(&[]), 0.0);
        // 9 tokens over 31K: one tile per head, one round that sweeps the whole prefix.
        assert_eq!(rounds(&[(9, 31_248)]), 1.0);
        // 684 tokens = 11 tiles × 32 heads = 352 blocks fit in 396; 808 tokens = 13 tiles spill.
        assert_eq!(rounds(&[(684, 20_224)]), 1.0);
        assert_eq!(rounds(&[(808, 20_864)]), 2.0);
        // A fresh chunk beside a long one adds little work: its tiles sweep short spans.
        assert_eq!(
            rounds(&[(3715, 24_576), (4477, 0)]),
            rounds(&[(3715, 24_576)]) + 1.0
        );
        // The sweep is paid once per round, over the longest mean span (prefix + len / 2).
        let mut one = BatchShape::default();
        one.add_prefill(9, 31_248, None);
        let mut none = one;
        none.prefill_span_max = 0;
        let sweep = c.parts(&one).attention_s - c.parts(&none).attention_s;
        assert!((sweep - 31_252.0 * 3.5e-6).abs() < 1e-9, "{sweep}");
    }

    #[test]
    fn windowed_pairs_match_a_direct_sum() {
        for (p, l, w) in [
            (0u64, 10u64, 4u64),
            (3, 5, 512),
            (600, 100, 512),
            (500, 30, 512),
            (0, 1, 1),
        ] {
            let direct: u64 = (p..p + l).map(|i| (i + 1).min(w)).sum();
            assert_eq!(windowed_pairs(p, l, w), direct as f64, "p={p} l={l} w={w}");
        }
    }

    /// DeepSeek's latent attention decodes in its absorbed form, 2·H·(2·r + d_rope) FLOPs per pair and
    /// layer (3.4 × the decompressed heads' prefill cost). On a GPU that runs all 128 heads (one rank of
    /// data-parallel attention, or no tensor parallelism) that is 242 FLOPs per byte of latent read, past
    /// an H200's ridge: a long-context decode step is priced by the compute, in both step-time forms,
    /// where before only its reads priced it. Under tensor parallelism of 8 each GPU computes 16 heads
    /// over the whole latent and stays bound by the reads. A dense model has no decode-specific FLOPs.
    #[test]
    fn absorbed_latent_attention_prices_decode_by_its_compute() {
        let m = crate::hf::from_config(
            "deepseek-r1",
            include_str!("../../tests/fixtures/hf/deepseek-r1.json"),
        )
        .unwrap();
        let fa = &m.full_attention;
        let per_layer = 2.0 * 128.0 * (2.0 * 512.0 + 64.0);
        assert_eq!(fa.decode_flops_per_pair(), Some(per_layer * 61.0));
        assert!((fa.decode_flops_per_pair().unwrap() / fa.flops_per_pair() - 3.4).abs() < 0.01);
        let h = HardwareSpec::preset("h200").unwrap();
        let base = Profile::preset("h200-datasheet").unwrap();
        let decode = |b: u32, ctx: u32| {
            let mut s = BatchShape::default();
            for _ in 0..b {
                s.add_decode(ctx, None);
            }
            s
        };
        for step_time in [StepTime::KernelSum, StepTime::Roofline] {
            let p = Profile {
                step_time,
                ..base.clone()
            };
            let c = CostModel::new(CostInputs {
                dtype: WeightDtype::Fp8,
                ..one_gpu(&m, &h, &p)
            });
            let per_token =
                fa.decode_flops_per_pair().unwrap() / (h.bf16_flops * p.attention_efficiency);
            let read = fa.layers as f64 * fa.kv_bytes_per_token_per_layer() as f64
                / (h.memory_bandwidth * p.kv_efficiency.unwrap_or(p.memory_efficiency));
            assert!(
                per_token > 1.2 * read,
                "compute-bound: {per_token} against {read}"
            );
            // Growing the decode contexts grows the step by their compute, not by their reads (a
            // batch large enough that attention, not the weights, bounds the roofline's step).
            let (b, ctx) = (256u32, 32_768u32);
            let added = c.step_seconds(&decode(b, 2 * ctx)) - c.step_seconds(&decode(b, ctx));
            let want = (b as f64 * ctx as f64) * per_token;
            assert!(
                (added / want - 1.0).abs() < 0.02,
                "{step_time:?}: {added} against {want}"
            );
        }
        // A dense model's decode costs what it did: no latent, no decode-specific FLOPs.
        let q = ModelSpec::preset("qwen3-8b").unwrap();
        assert_eq!(q.full_attention.decode_flops_per_pair(), None);
    }
}
