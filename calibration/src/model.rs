//! Model and hardware specifications: the shapes and datasheet figures the cost model derives bytes and FLOPs from.

use serde::{Deserialize, Serialize};
use serverbench_config::FieldError;
use std::sync::OnceLock;

/// A group of attention layers that share a shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionLayers {
    /// Layers that compute attention of this kind (including ones that reuse another layer's KV).
    pub layers: u32,
    /// Layers that store their own KV (the rest read a donor layer's KV).
    pub kv_layers: u32,
    /// Query heads.
    pub q_heads: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Sliding window in tokens; `None` for full attention.
    #[serde(default)]
    pub window: Option<u32>,
    /// Multi-head latent attention (DeepSeek): the KV bytes one token occupies in one layer (its
    /// compressed latent and rotary key), replacing `2 · kv_heads · head_dim · 2`; every GPU of a
    /// tensor-parallel group holds it whole. `head_dim` is then the mean of the query-key and value
    /// head sizes, so that the FLOPs per pair are a prefill's over the decompressed heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent_kv_bytes: Option<u64>,
    /// Multi-head latent attention decoded in its absorbed form (the key and value up-projections
    /// folded into the query and the output): FLOPs per (query, key) pair in one layer, `2·H·(2·r + d_rope)`
    /// for `H` heads over the latent of `r` and the rotary key of `d_rope`. A decode query's pairs cost
    /// these FLOPs against the latent it reads, so at DeepSeek's shapes decode attention is bound by
    /// compute, not by its reads. `None`: decode attention costs its reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latent_decode_flops_per_pair: Option<f64>,
}

impl AttentionLayers {
    /// Checks the shape; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        if self.kv_layers > self.layers {
            return Err(FieldError::new("kv_layers", "cannot exceed layers"));
        }
        if self.layers > 0 && (self.q_heads == 0 || self.kv_heads == 0 || self.head_dim == 0) {
            return Err(FieldError::new(
                "q_heads",
                "heads and head_dim must be positive",
            ));
        }
        Ok(())
    }

    /// KV bytes one token occupies in one layer (keys and values, bf16; a latent attention's latent).
    pub fn kv_bytes_per_token_per_layer(&self) -> u64 {
        self.latent_kv_bytes
            .unwrap_or(2 * self.kv_heads as u64 * self.head_dim as u64 * 2)
    }

    /// Attention FLOPs per (query token × context token) pair, summed over the layers of this group.
    pub fn flops_per_pair(&self) -> f64 {
        4.0 * self.q_heads as f64 * self.head_dim as f64 * self.layers as f64
    }

    /// A decode query's attention FLOPs per context token, summed over the layers, where decode is
    /// priced by its compute (absorbed latent attention); `None` where its reads price it.
    pub fn decode_flops_per_pair(&self) -> Option<f64> {
        self.latent_decode_flops_per_pair
            .map(|f| f * self.layers as f64)
    }
}

/// Linear-attention (Gated DeltaNet) layers: a constant-size state per sequence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinearLayers {
    /// Number of such layers.
    pub layers: u32,
    /// Recurrent + convolution state of one sequence in one layer, bytes, at bf16.
    pub state_bytes_per_layer: u64,
    /// FLOPs per token per layer for the state update (beyond the projections counted as matmuls).
    pub flops_per_token_per_layer: f64,
}

/// Routed experts of a mixture-of-experts model: each token of a step goes to `per_token` of `count`
/// experts in each of `layers` layers, and a step reads the weights of every expert one of its tokens
/// chose. Routing is uniform by default (each token's experts drawn evenly, tokens independent), so a
/// step of `n` tokens reads `count × (1 − (1 − per_token / count)ⁿ)` distinct experts per layer on
/// average; a deployment may skew it ([`Experts::inclusion_probabilities`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experts {
    /// Layers whose feed-forward part is routed experts.
    pub layers: u32,
    /// Routed experts per layer.
    pub count: u32,
    /// Experts each token is routed to.
    pub per_token: u32,
    /// Parameters of one routed expert in one layer (gate, up and down projections).
    pub params_per_expert: f64,
}

impl Experts {
    /// Checks the counts; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        if self.layers == 0 || self.count == 0 || self.per_token == 0 {
            return Err(FieldError::new(
                "layers",
                "layers, count and per_token must be positive",
            ));
        }
        if self.per_token > self.count {
            return Err(FieldError::new(
                "per_token",
                format!(
                    "{} experts per token, more than the {} experts",
                    self.per_token, self.count
                ),
            ));
        }
        if !(self.params_per_expert > 0.0 && self.params_per_expert.is_finite()) {
            return Err(FieldError::new(
                "params_per_expert",
                "must be a positive number",
            ));
        }
        Ok(())
    }

    /// Expected distinct experts per layer that a step of `tokens` tokens reads (uniform routing).
    pub fn distinct(&self, tokens: f64) -> f64 {
        let (e, k) = (self.count as f64, self.per_token as f64);
        e * (1.0 - (1.0 - k / e).powf(tokens))
    }

    /// The chance that one token's router picks each expert, most popular first, when expert popularity
    /// follows a Zipf law of exponent `skew` (the expert of rank `r` weighs `r^−skew`; 0: uniform
    /// routing, every expert `per_token ÷ count`). A token picks `per_token` distinct experts, so the
    /// chances are inclusion probabilities summing to `per_token`: `q_r = min(1, c · r^−skew)`, `c`
    /// chosen so that they do (an expert the weights would give more than certainty is capped at 1 and
    /// the rest share what it leaves). Approximation: top-k routing without replacement is taken as
    /// independent inclusions at these probabilities.
    pub fn inclusion_probabilities(&self, skew: f64) -> Vec<f64> {
        let (count, k) = (self.count as usize, self.per_token as f64);
        let w: Vec<f64> = (1..=count).map(|r| (r as f64).powf(-skew)).collect();
        // Cap the most popular experts one at a time until the rest fit under 1.
        let mut capped = 0;
        let mut c = k / w.iter().sum::<f64>();
        while capped < count && c * w[capped] > 1.0 {
            capped += 1;
            let rest: f64 = w[capped..].iter().sum();
            c = if rest > 0.0 {
                (k - capped as f64).max(0.0) / rest
            } else {
                0.0
            };
        }
        w.iter()
            .enumerate()
            .map(|(i, w)| if i < capped { 1.0 } else { c * w })
            .collect()
    }

    /// Parameters of the routed experts one token multiplies, all layers.
    pub fn active_params(&self) -> f64 {
        self.layers as f64 * self.per_token as f64 * self.params_per_expert
    }

    /// Parameters of one expert in every routed layer.
    pub fn params_per_expert_all_layers(&self) -> f64 {
        self.layers as f64 * self.params_per_expert
    }
}

/// Longest context a model spec may claim, tokens (the longest a deployment may have).
pub const MAX_MODEL_CONTEXT: u32 = 16_777_216;

/// A decoder-only model, as far as serving cost is concerned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Preset name.
    pub name: String,
    /// Hidden size.
    pub hidden: u32,
    /// Transformer layers (all kinds).
    pub layers: u32,
    /// Full-attention layers.
    pub full_attention: AttentionLayers,
    /// Sliding-window attention layers, if any.
    #[serde(default)]
    pub sliding_attention: Option<AttentionLayers>,
    /// Linear-attention layers, if any.
    #[serde(default)]
    pub linear_attention: Option<LinearLayers>,
    /// Parameters in matrix multiplies per token (projections, MLP, lm_head): `2 ×` this is the linear FLOPs per token,
    /// and at bf16 `2 ×` this is the weight bytes streamed per step.
    pub matmul_params: f64,
    /// All parameters held in GPU memory (adds embedding tables that are gathered, not streamed).
    pub total_params: f64,
    /// Parameters that weight-only quantisation (int4, fp8) applies to.
    pub quantizable_params: f64,
    /// Total weight bytes at int4 where a published figure overrides the derivation.
    #[serde(default)]
    pub int4_weight_bytes: Option<f64>,
    /// Vocabulary size.
    pub vocab: u32,
    /// Native context length.
    pub native_context: u32,
    /// Routed experts (a mixture of experts): `matmul_params` then counts the `per_token` experts a
    /// token multiplies, `total_params` all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experts: Option<Experts>,
}

impl ModelSpec {
    /// The built-in models (`presets/models/`).
    pub fn presets() -> Vec<ModelSpec> {
        static PARSED: OnceLock<Vec<ModelSpec>> = OnceLock::new();
        PARSED
            .get_or_init(|| {
                serverbench_config::parse_presets("models", ModelSpec::check, |m| &m.name)
            })
            .clone()
    }

    /// A built-in model by name (only its file is parsed).
    pub fn preset(name: &str) -> Option<ModelSpec> {
        serverbench_config::parse_preset("models", name, ModelSpec::check, |m| &m.name)
    }

    /// Names of the built-in models, comma-separated (for error messages).
    pub fn preset_names() -> String {
        serverbench_config::preset_names("models")
    }

    /// KV bytes stored per token of context, all layers, one full copy (before tensor parallelism).
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.full_attention.kv_layers as u64 * self.full_attention.kv_bytes_per_token_per_layer()
    }

    /// KV bytes read per token of context per step (shared layers re-read their donor's KV).
    pub fn kv_read_bytes_per_token(&self) -> u64 {
        self.full_attention.layers as u64 * self.full_attention.kv_bytes_per_token_per_layer()
    }

    /// Constant bytes per sequence: linear-attention state plus sliding-window KV filled to the window.
    pub fn state_bytes_per_seq(&self) -> u64 {
        let linear = self
            .linear_attention
            .as_ref()
            .map_or(0, |l| l.layers as u64 * l.state_bytes_per_layer);
        let sliding = self.sliding_attention.as_ref().map_or(0, |s| {
            s.kv_layers as u64 * s.kv_bytes_per_token_per_layer() * s.window.unwrap_or(0) as u64
        });
        linear + sliding
    }

    /// Checks the shape; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        let bad = |field: &str, reason: &str| Err(FieldError::new(field, reason));
        let fa = &self.full_attention;
        if self.hidden == 0 {
            return bad("hidden", "must be positive");
        }
        if self.layers == 0 {
            return bad("layers", "must be positive");
        }
        fa.check().map_err(|e| e.under("full_attention"))?;
        if let Some(s) = &self.sliding_attention {
            s.check().map_err(|e| e.under("sliding_attention"))?;
            if s.window.is_none() {
                return bad("sliding_attention.window", "missing");
            }
        }
        if !(self.matmul_params > 0.0
            && self.matmul_params.is_finite()
            && self.total_params >= self.matmul_params * 0.5)
        {
            return bad(
                "matmul_params",
                "must be positive and consistent with total_params",
            );
        }
        if !(self.quantizable_params >= 0.0 && self.quantizable_params <= self.total_params) {
            return bad("quantizable_params", "must be between 0 and total_params");
        }
        if self.vocab == 0 {
            return bad("vocab", "must be positive");
        }
        if let Some(e) = &self.experts {
            e.check().map_err(|err| err.under("experts"))?;
            if e.active_params() >= self.matmul_params {
                return bad(
                    "experts",
                    "the experts a token multiplies are more than matmul_params, which counts them",
                );
            }
        }
        Ok(())
    }
}

/// A GPU, as the datasheet describes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareSpec {
    /// Preset name.
    pub name: String,
    /// Usable device memory, bytes.
    pub memory_bytes: f64,
    /// Peak memory bandwidth, bytes/s.
    pub memory_bandwidth: f64,
    /// Dense bf16 tensor throughput, FLOP/s.
    pub bf16_flops: f64,
    /// Dense fp8 tensor throughput, FLOP/s.
    pub fp8_flops: f64,
    /// Bandwidth of the link between GPUs used by all-reduce, bytes/s per direction.
    pub link_bandwidth: f64,
    /// Latency of one all-reduce, seconds.
    pub link_latency_s: f64,
    /// Host link bandwidth (PCIe), bytes/s, used when KV is swapped to host memory.
    pub host_bandwidth: f64,
    /// Price of one GPU-hour in dollars, when a deployment does not set its own.
    pub dollars_per_hour: f64,
    /// Streaming multiprocessors, where the split-KV decode schedule of FlashAttention 3 is modelled
    /// (Hopper GPUs: [`crate::splitkv`]); unset elsewhere, where it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u32>,
    /// The most one SM's decode-attention block reads from memory, bytes/s (with `sm_count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_read_bandwidth: Option<f64>,
    /// How the L2 serves a split-KV decode batch's re-reads of shared prefix blocks (with `sm_count`;
    /// [`crate::splitkv`]); unset where not measured, where no saving is modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_reuse: Option<crate::splitkv::L2Reuse>,
    /// FlashAttention 3's varlen tile costs (with `sm_count`; [`crate::varlen`]): what a step that
    /// prefills and decodes in one attention call takes beyond the two alone; unset where not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub varlen_tiles: Option<crate::varlen::VarlenTiles>,
}

/// `v` lies in (0, `most`] (`most_text` as the error writes it).
fn above_zero(name: &str, v: f64, most: f64, most_text: &str) -> Result<(), FieldError> {
    if v > 0.0 && v <= most {
        return Ok(());
    }
    Err(FieldError::new(
        name,
        format!("must be above 0 and at most {most_text}, got {v}"),
    ))
}

/// `v` is a share, 0 to 1.
fn share(name: &str, v: f64) -> Result<(), FieldError> {
    if (0.0..=1.0).contains(&v) {
        return Ok(());
    }
    Err(FieldError::new(name, format!("must be 0 to 1, got {v}")))
}

impl HardwareSpec {
    /// The built-in GPUs (`presets/hardware/`).
    pub fn presets() -> Vec<HardwareSpec> {
        static PARSED: OnceLock<Vec<HardwareSpec>> = OnceLock::new();
        PARSED
            .get_or_init(|| {
                serverbench_config::parse_presets("hardware", HardwareSpec::check, |h| &h.name)
            })
            .clone()
    }

    /// A built-in GPU by name (only its file is parsed).
    pub fn preset(name: &str) -> Option<HardwareSpec> {
        serverbench_config::parse_preset("hardware", name, HardwareSpec::check, |h| &h.name)
    }

    /// Names of the built-in GPUs, comma-separated (for error messages).
    pub fn preset_names() -> String {
        serverbench_config::preset_names("hardware")
    }

    /// Checks the figures; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        let positive = [
            ("memory_bytes", self.memory_bytes),
            ("memory_bandwidth", self.memory_bandwidth),
            ("bf16_flops", self.bf16_flops),
            ("fp8_flops", self.fp8_flops),
            ("link_bandwidth", self.link_bandwidth),
            ("host_bandwidth", self.host_bandwidth),
        ];
        for (name, v) in positive {
            if !(v > 0.0 && v.is_finite()) {
                return Err(FieldError::new(
                    name,
                    format!("must be a positive number, got {v}"),
                ));
            }
        }
        for (name, v) in [
            ("link_latency_s", self.link_latency_s),
            ("dollars_per_hour", self.dollars_per_hour),
        ] {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(FieldError::new(
                    name,
                    format!("must be a non-negative number, got {v}"),
                ));
            }
        }
        self.check_sms()?;
        self.check_l2()?;
        self.check_varlen()
    }

    /// `varlen_tiles` needs the SMs, positive times and rates, and an overlap share in [0, 1].
    fn check_varlen(&self) -> Result<(), FieldError> {
        let Some(t) = self.varlen_tiles else {
            return Ok(());
        };
        self.needs_sms("varlen_tiles")?;
        above_zero("varlen_tiles.mma_block_s", t.mma_block_s, 1.0, "1")?;
        above_zero(
            "varlen_tiles.sm_read_bandwidth",
            t.sm_read_bandwidth,
            1e15,
            "1e15",
        )?;
        above_zero(
            "varlen_tiles.memory_bandwidth",
            t.memory_bandwidth,
            1e15,
            "1e15",
        )?;
        above_zero("varlen_tiles.tile_overhead_s", t.tile_overhead_s, 1.0, "1")?;
        share("varlen_tiles.overlap", t.overlap)
    }

    /// `l2_reuse` needs the SMs and figures in range.
    fn check_l2(&self) -> Result<(), FieldError> {
        let Some(l2) = self.l2_reuse else {
            return Ok(());
        };
        self.needs_sms("l2_reuse")?;
        above_zero("l2_reuse.window_blocks", l2.window_blocks, 1e6, "1e6")?;
        share("l2_reuse.hit_cost", l2.hit_cost)
    }

    /// `field` is modelled per SM: it needs `sm_count`.
    fn needs_sms(&self, field: &str) -> Result<(), FieldError> {
        match self.sm_count {
            Some(_) => Ok(()),
            None => Err(FieldError::new(field, "must be given with sm_count")),
        }
    }

    /// `sm_count` and `sm_read_bandwidth` come together, within reason.
    fn check_sms(&self) -> Result<(), FieldError> {
        match (self.sm_count, self.sm_read_bandwidth) {
            (None, None) => Ok(()),
            (Some(n), Some(bw)) => {
                if !(1..=100_000).contains(&n) {
                    return Err(FieldError::new(
                        "sm_count",
                        format!("must be 1 to 100000, got {n}"),
                    ));
                }
                if !(bw > 0.0 && bw <= self.memory_bandwidth) {
                    return Err(FieldError::new(
                        "sm_read_bandwidth",
                        format!("must be positive and at most memory_bandwidth, got {bw}"),
                    ));
                }
                Ok(())
            }
            (Some(_), None) => Err(FieldError::new(
                "sm_read_bandwidth",
                "must be given with sm_count",
            )),
            (None, Some(_)) => Err(FieldError::new(
                "sm_count",
                "must be given with sm_read_bandwidth",
            )),
        }
    }

    /// Thread blocks that read at the full memory bandwidth together (`memory_bandwidth /
    /// sm_read_bandwidth`, at least 1), with the SM count; `None` where they are not given.
    pub fn split_kv_sms(&self) -> Option<(u32, u32)> {
        let (n, bw) = (self.sm_count?, self.sm_read_bandwidth?);
        Some((n, ((self.memory_bandwidth / bw).round() as u32).clamp(1, n)))
    }
}

/// One gibibyte.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// One mebibyte.
pub const MIB: f64 = 1024.0 * 1024.0;

/// How weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightDtype {
    /// bfloat16.
    Bf16,
    /// 4-bit weight-only (W4A16) with a bf16 scale per group.
    Int4,
    /// 8-bit floating point weights.
    Fp8,
}

impl WeightDtype {
    /// Bytes per quantised parameter, scales included.
    pub fn bytes_per_param(self, group_size: u32) -> f64 {
        match self {
            WeightDtype::Bf16 => 2.0,
            WeightDtype::Int4 => 0.5 + 2.0 / group_size.max(1) as f64,
            WeightDtype::Fp8 => 1.0,
        }
    }
}

/// Precision of the recurrent state of linear-attention (Gated DeltaNet) layers, like vLLM's
/// `mamba_ssm_cache_dtype`. [`LinearLayers::state_bytes_per_layer`] is the state at bf16.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateDtype {
    /// bfloat16 (the model's own precision).
    #[default]
    Bf16,
    /// float32: twice the bytes to hold, read and write per sequence.
    Fp32,
}

impl StateDtype {
    /// Bytes per state value.
    pub fn bytes(self) -> u64 {
        match self {
            StateDtype::Bf16 => 2,
            StateDtype::Fp32 => 4,
        }
    }
}

impl ModelSpec {
    /// The model with its linear-attention state held at `dtype` (the whole per-layer state, recurrent
    /// and convolution, is scaled; the convolution part is a few percent of it).
    pub fn with_state_dtype(mut self, dtype: StateDtype) -> ModelSpec {
        if let Some(l) = &mut self.linear_attention {
            l.state_bytes_per_layer = l.state_bytes_per_layer * dtype.bytes() / 2;
        }
        self
    }
}

/// Weight bytes held in memory, all GPUs together.
pub fn weight_bytes(model: &ModelSpec, dtype: WeightDtype, group_size: u32) -> f64 {
    if let (WeightDtype::Int4, Some(b)) = (dtype, model.int4_weight_bytes) {
        return b;
    }
    let q = model.quantizable_params;
    q * dtype.bytes_per_param(group_size) + (model.total_params - q) * 2.0
}

/// Weight bytes streamed per step, all GPUs together (matmul weights only; gathered tables are not streamed).
pub fn streamed_weight_bytes(model: &ModelSpec, dtype: WeightDtype, group_size: u32) -> f64 {
    let q = model.quantizable_params.min(model.matmul_params);
    q * dtype.bytes_per_param(group_size) + (model.matmul_params - q) * 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU file's `l2_reuse` is checked: it needs the SMs, a positive window and a cost in [0, 1];
    /// each error names the field.
    #[test]
    fn l2_reuse_is_checked_by_field() {
        let h200 = HardwareSpec::preset("h200").unwrap();
        assert!(h200.check().is_ok() && h200.l2_reuse.is_some());
        let l2 = h200.l2_reuse.unwrap();
        let cases = [
            (
                HardwareSpec {
                    sm_count: None,
                    sm_read_bandwidth: None,
                    ..h200.clone()
                },
                "l2_reuse",
            ),
            (
                HardwareSpec {
                    l2_reuse: Some(crate::splitkv::L2Reuse {
                        window_blocks: 0.0,
                        ..l2
                    }),
                    ..h200.clone()
                },
                "l2_reuse.window_blocks",
            ),
            (
                HardwareSpec {
                    l2_reuse: Some(crate::splitkv::L2Reuse {
                        hit_cost: 1.5,
                        ..l2
                    }),
                    ..h200.clone()
                },
                "l2_reuse.hit_cost",
            ),
        ];
        for (h, field) in cases {
            let e = h.check().unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn kv_sizes_match_the_reference() {
        let kib = 1024;
        assert_eq!(
            ModelSpec::preset("qwen3.5-9b")
                .unwrap()
                .kv_bytes_per_token(),
            32 * kib
        );
        assert_eq!(
            ModelSpec::preset("qwen3.8-27b")
                .unwrap()
                .kv_bytes_per_token(),
            64 * kib
        );
        assert_eq!(
            ModelSpec::preset("gemma4-e4b")
                .unwrap()
                .kv_bytes_per_token(),
            16 * kib
        );
        assert_eq!(
            ModelSpec::preset("qwen3-8b").unwrap().kv_bytes_per_token(),
            144 * kib
        );
        let gemma_sliding = ModelSpec::preset("gemma4-e4b")
            .unwrap()
            .state_bytes_per_seq();
        assert_eq!(gemma_sliding, 20 * 1024 * 1024);
        let q35 = ModelSpec::preset("qwen3.5-9b")
            .unwrap()
            .state_bytes_per_seq() as f64
            / MIB;
        assert!(
            (24.0..26.0).contains(&q35),
            "about 25 MiB of recurrent state, got {q35}"
        );
        for m in ModelSpec::presets() {
            m.check().unwrap();
        }
    }

    #[test]
    fn weight_bytes_match_the_reference() {
        let q35 = ModelSpec::preset("qwen3.5-9b").unwrap();
        assert!((weight_bytes(&q35, WeightDtype::Bf16, 128) / 1e9 - 17.9).abs() < 0.1);
        let q8 = ModelSpec::preset("qwen3-8b").unwrap();
        assert!((weight_bytes(&q8, WeightDtype::Bf16, 128) / 1e9 - 16.4).abs() < 0.1);
        let q27 = ModelSpec::preset("qwen3.8-27b").unwrap();
        assert_eq!(weight_bytes(&q27, WeightDtype::Int4, 128), 15.0e9);
        assert!(
            streamed_weight_bytes(&q27, WeightDtype::Int4, 128)
                < streamed_weight_bytes(&q27, WeightDtype::Bf16, 128) / 3.0
        );
    }
}
