//! The step time of data-parallel attention (SGLang's `--enable-dp-attention`, vLLM's DP+EP) for a
//! mixture of experts: each of the `tp` GPUs runs attention and the dense layers for its own requests
//! (an attention rank), the routed layers run over every rank's tokens with the experts spread over the
//! GPUs, and tokens move to and from the experts' GPUs by all-to-all dispatch and combine over the
//! GPUs' link. Pure arithmetic over step shapes; never schedules, never holds state between steps.

use crate::cost::{expert_s_per_row, BatchShape, CostInputs, CostModel, ExpertReads};
use crate::model::{streamed_weight_bytes, ModelSpec, WeightDtype};
use crate::padding::ExpertPadding;

/// What one lockstep step of the attention ranks costs.
#[derive(Clone, Debug, PartialEq)]
pub struct DpAttentionCost {
    /// One rank's attention and dense layers: the model without its routed experts on one GPU, every
    /// KV head of its own requests (attention is not split over GPUs).
    rank: CostModel,
    /// The routed experts' weight reads of a step of all ranks' tokens, per GPU (the busiest under
    /// expert parallelism).
    experts: ExpertReads,
    /// The routed experts' GEMMs, seconds per routed row (a token in one expert) of the whole step (each
    /// GPU computes `1 ÷ tp` of them).
    expert_s_per_row: f64,
    /// Experts per token.
    per_token: f64,
    /// The fused-MoE kernel's tile padding, where the profile gives its table.
    padding: Option<ExpertPadding>,
    /// `routed layers × moe_layer_s`.
    moe_fixed_s: f64,
    /// Seconds of one all-to-all exchange (dispatch or combine) of one routed layer before its bytes:
    /// the link's latency.
    a2a_latency_s: f64,
    /// Seconds per token of the busiest rank for one exchange of one routed layer: `hidden × 2 bytes ×
    /// destinations / (link bandwidth × allreduce_efficiency)`.
    a2a_s_per_token: f64,
    /// Routed layers: each does one dispatch and one combine.
    routed_layers: f64,
    /// Attention ranks (GPUs).
    ranks: u32,
}

/// The model's dense part: everything but its routed experts (attention, dense layers, embeddings,
/// the router); `None` for a model without routed experts.
pub fn dense_part(m: &ModelSpec) -> Option<ModelSpec> {
    let e = m.experts.as_ref()?;
    let all_experts = e.count as f64 * e.params_per_expert_all_layers();
    Some(ModelSpec {
        matmul_params: m.matmul_params - e.active_params(),
        total_params: m.total_params - all_experts,
        quantizable_params: (m.quantizable_params - all_experts).max(0.0),
        int4_weight_bytes: m
            .int4_weight_bytes
            .map(|b| b * (1.0 - all_experts / m.total_params)),
        experts: None,
        ..m.clone()
    })
}

/// Other GPUs one token's hidden state is sent to in a routed layer under expert parallelism
/// (`count ÷ gpus` experts whole on each GPU): the expected number of other GPUs holding at least one
/// of its `per_token` experts (drawn without replacement), `(gpus − 1) · (1 − C(count − count/gpus,
/// per_token) / C(count, per_token))`. With every expert split over the GPUs instead, a token goes to
/// every other GPU (an all-gather before the experts, a reduce-scatter after): `gpus − 1`.
pub fn expert_parallel_destinations(count: u32, per_token: u32, gpus: u32) -> f64 {
    let g = gpus.max(1) as f64;
    let (e, k, local) = (count as f64, per_token as f64, count as f64 / g);
    // C(e − local, k) / C(e, k) = Π_{i<k} (e − local − i) / (e − i)
    let mut none_there = 1.0;
    let mut i = 0.0;
    while i < k {
        none_there *= ((e - local - i) / (e - i)).max(0.0);
        i += 1.0;
    }
    (g - 1.0) * (1.0 - none_there)
}

impl DpAttentionCost {
    /// The cost of data-parallel attention over the inputs' `tp` GPUs; `None` for a model without
    /// routed experts or one GPU (nothing to spread).
    pub fn new(i: CostInputs<'_>) -> Option<DpAttentionCost> {
        let (m, hw, p) = (i.model, i.hardware, i.profile);
        let e = m.experts.as_ref()?;
        if i.tp < 2 {
            return None;
        }
        let dense = dense_part(m)?;
        let rank = CostModel::new(CostInputs {
            model: &dense,
            tp: 1,
            expert_parallel: false,
            routing_skew: 0.0,
            ..i
        });
        let gpus = i.tp as f64;
        let per_param = streamed_weight_bytes(m, i.dtype, i.group_size) / m.matmul_params;
        let int4 = match i.dtype {
            WeightDtype::Int4 => p.int4_bandwidth_efficiency,
            _ => 1.0,
        };
        let bw =
            hw.memory_bandwidth * p.expert_memory_efficiency.unwrap_or(p.memory_efficiency) * int4;
        // Each GPU reads a whole expert (expert parallelism) or its 1/tp share of each.
        let expert_bytes = e.params_per_expert_all_layers() * per_param
            / if i.expert_parallel { 1.0 } else { gpus };
        let ep_gpus = if i.expert_parallel { gpus } else { 1.0 };
        let experts = ExpertReads::new(
            e,
            i.routing_skew,
            ep_gpus,
            expert_bytes / bw,
            expert_bytes / bw,
        );
        let compute_factor = match i.dtype {
            WeightDtype::Bf16 => 1.0,
            WeightDtype::Int4 => p.int4_compute_penalty,
            WeightDtype::Fp8 => 1.0 / p.fp8_compute_speedup,
        };
        let destinations = if i.expert_parallel {
            expert_parallel_destinations(e.count, e.per_token, i.tp)
        } else {
            gpus - 1.0
        };
        Some(DpAttentionCost {
            rank,
            experts,
            expert_s_per_row: expert_s_per_row(
                m,
                p,
                gpus,
                hw.bf16_flops * p.gemm_efficiency,
                hw.bf16_flops,
            ) * compute_factor,
            per_token: e.per_token as f64,
            padding: ExpertPadding::new(e, &p.expert_tile_rows, i.routing_skew),
            moe_fixed_s: e.layers as f64 * p.moe_layer_s,
            a2a_latency_s: hw.link_latency_s,
            a2a_s_per_token: m.hidden as f64 * 2.0 * destinations
                / (hw.link_bandwidth * p.allreduce_efficiency),
            routed_layers: e.layers as f64,
            ranks: i.tp,
        })
    }

    /// Attention ranks (GPUs) that step together.
    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// One rank's cost model (its attention, dense layers and KV; no routed experts).
    pub fn rank(&self) -> &CostModel {
        &self.rank
    }

    /// Seconds of the all-to-all exchanges of a step whose busiest rank holds `tokens` tokens: per
    /// routed layer a dispatch and a combine, each `link_latency + tokens × hidden × 2 bytes ×
    /// destinations / (link_bandwidth × allreduce_efficiency)` ([`expert_parallel_destinations`] with
    /// expert parallelism, every other GPU without).
    pub fn all_to_all_s(&self, tokens: u64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        self.routed_layers * 2.0 * (self.a2a_latency_s + tokens as f64 * self.a2a_s_per_token)
    }

    /// Seconds of the routed layers over `tokens` tokens of all ranks: the larger of the distinct
    /// experts' weights this GPU reads (the busiest GPU under expert parallelism) and its share of the
    /// expert GEMMs (the fused-MoE kernel overlaps the two; its routed rows padded to the kernel's tiles
    /// where the profile gives them, at `expert_gemm_efficiency` as on one GPU), plus each routed
    /// layer's fixed time.
    pub fn experts_s(&self, tokens: u64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        let n = tokens as f64;
        let padding = self.padding.as_ref().map_or(0.0, |p| p.excess_rows(n));
        let rows = n * self.per_token + padding;
        let (reads, gemm) = (self.experts.seconds(n), rows * self.expert_s_per_row);
        reads.max(gemm) + self.moe_fixed_s
    }

    /// Seconds of one lockstep step whose ranks run `shapes` (an empty shape: a rank with nothing to
    /// run, which still joins the exchanges): the slowest rank's attention and dense layers, then the
    /// routed layers over every rank's tokens and the exchanges of the busiest rank's tokens. 0 when no
    /// rank has work.
    pub fn step_seconds(&self, shapes: &[BatchShape]) -> f64 {
        let (mut slowest, mut total, mut busiest) = (0.0f64, 0u64, 0u64);
        for b in shapes {
            slowest = slowest.max(self.rank.step_seconds(b));
            total += b.tokens();
            busiest = busiest.max(b.tokens());
        }
        if total == 0 {
            return 0.0;
        }
        slowest + self.experts_s(total) + self.all_to_all_s(busiest)
    }

    /// [`DpAttentionCost::step_seconds`] in whole nanoseconds, at least 1 for a step with work.
    pub fn step_ns(&self, shapes: &[BatchShape]) -> u64 {
        let s = self.step_seconds(shapes);
        if s <= 0.0 {
            0
        } else {
            ((s * 1e9).round() as u64).max(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::HardwareSpec;
    use crate::profile::Profile;

    fn deepseek() -> ModelSpec {
        crate::hf::from_config(
            "deepseek-r1",
            include_str!("../../tests/fixtures/hf/deepseek-r1.json"),
        )
        .unwrap()
    }

    fn cost(m: &ModelSpec, h: &HardwareSpec, tp: u32, ep: bool) -> DpAttentionCost {
        let p = Profile::preset("h200-datasheet").unwrap();
        DpAttentionCost::new(CostInputs {
            model: m,
            hardware: h,
            profile: &p,
            dtype: WeightDtype::Fp8,
            group_size: 128,
            tp,
            draft_params: 0.0,
            graphs: None,
            expert_parallel: ep,
            routing_skew: 0.0,
            split_kv_decode: false,
        })
        .unwrap()
    }

    fn c_ep_512(m: &ModelSpec, h: &HardwareSpec) -> f64 {
        cost(m, h, 8, true).all_to_all_s(512)
    }

    fn decode(batch: u32, ctx: u32) -> BatchShape {
        let mut b = BatchShape::default();
        for _ in 0..batch {
            b.add_decode(ctx, None);
        }
        b
    }

    /// The exchanges grow with the busiest rank's tokens and shrink with the link's bandwidth; each
    /// token of DeepSeek-V3 (8 of 256 experts) over 8 GPUs reaches 4.63 other GPUs on average (7 × (1 − C(224, 8) / C(256, 8))).
    #[test]
    fn all_to_all_grows_with_tokens_and_shrinks_with_link_bandwidth() {
        let m = deepseek();
        let h = HardwareSpec::preset("h200").unwrap();
        let d = expert_parallel_destinations(256, 8, 8);
        assert!((4.6..4.66).contains(&d), "{d}");
        assert_eq!(expert_parallel_destinations(256, 8, 1), 0.0);
        // Every expert on every GPU's share: each token to all 7 others, more bytes than EP's 4.63.
        let split = cost(&m, &h, 8, false);
        assert!(split.all_to_all_s(512) > c_ep_512(&m, &h));
        let c = cost(&m, &h, 8, true);
        assert_eq!(c.all_to_all_s(0), 0.0);
        let (few, many) = (c.all_to_all_s(8), c.all_to_all_s(512));
        assert!(many > few && few > 0.0);
        let slow = HardwareSpec {
            link_bandwidth: h.link_bandwidth / 10.0,
            ..h.clone()
        };
        let s = cost(&m, &slow, 8, true);
        assert!(s.all_to_all_s(512) > 5.0 * (many - c.all_to_all_s(1)));
        // The formula: 58 routed layers × 2 × (latency + tokens × 7168 × 2 B × destinations / (450 GB/s × 0.7)).
        let p = Profile::preset("h200-datasheet").unwrap();
        let want = 58.0
            * 2.0
            * (h.link_latency_s
                + 512.0 * 7168.0 * 2.0 * d / (h.link_bandwidth * p.allreduce_efficiency));
        assert!((many / want - 1.0).abs() < 1e-12, "{many} {want}");
    }

    /// The step waits for the slowest rank: a long-context rank beside an idle one costs what it
    /// costs alone plus the routed layers; a rank's own step holds no routed expert.
    #[test]
    fn the_step_waits_for_the_slowest_rank() {
        let m = deepseek();
        let h = HardwareSpec::preset("h200").unwrap();
        let c = cost(&m, &h, 8, true);
        let mut ranks = vec![BatchShape::default(); 8];
        assert_eq!(c.step_seconds(&ranks), 0.0);
        ranks[0] = decode(4, 1000);
        let light = c.step_seconds(&ranks);
        ranks[3] = decode(4, 60_000);
        let heavy = c.step_seconds(&ranks);
        assert!(heavy > light);
        let slowest = c.rank().step_seconds(&ranks[3]);
        let want = slowest + c.experts_s(8) + c.all_to_all_s(4);
        assert!((heavy - want).abs() < 1e-15);
        // The dense part keeps DeepSeek's attention and its 3 dense layers, not its 256 experts.
        let dense = dense_part(&m).unwrap();
        assert!(dense.experts.is_none() && dense.total_params < 0.1 * m.total_params);
        assert!(dense_part(&ModelSpec::preset("qwen3-8b").unwrap()).is_none());
    }
}
