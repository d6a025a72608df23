//! Model and hardware specifications: the shapes and datasheet figures the cost model derives bytes and FLOPs from.

use serde::{Deserialize, Serialize};

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
}

impl AttentionLayers {
    /// KV bytes one token occupies in one layer (keys and values, bf16).
    pub fn kv_bytes_per_token_per_layer(&self) -> u64 {
        2 * self.kv_heads as u64 * self.head_dim as u64 * 2
    }

    /// Attention FLOPs per (query token × context token) pair, summed over the layers of this group.
    pub fn flops_per_pair(&self) -> f64 {
        4.0 * self.q_heads as f64 * self.head_dim as f64 * self.layers as f64
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
}

impl ModelSpec {
    /// The built-in models.
    pub fn presets() -> Vec<ModelSpec> {
        vec![qwen35_9b(), qwen38_27b(), gemma4_e4b(), qwen3_8b()]
    }

    /// A built-in model by name.
    pub fn preset(name: &str) -> Option<ModelSpec> {
        Self::presets().into_iter().find(|m| m.name == name)
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
    pub fn check(&self) -> Result<(), String> {
        let fa = &self.full_attention;
        if self.hidden == 0 || self.layers == 0 {
            return Err("hidden/layers: must be positive".into());
        }
        if fa.kv_layers > fa.layers {
            return Err("full_attention.kv_layers: cannot exceed full_attention.layers".into());
        }
        if !(self.matmul_params > 0.0 && self.total_params >= self.matmul_params * 0.5) {
            return Err("matmul_params: must be positive and consistent with total_params".into());
        }
        if self.quantizable_params > self.total_params {
            return Err("quantizable_params: cannot exceed total_params".into());
        }
        if let Some(s) = &self.sliding_attention {
            if s.window.is_none() {
                return Err("sliding_attention.window: missing".into());
            }
        }
        Ok(())
    }
}

fn qwen35_9b() -> ModelSpec {
    ModelSpec {
        name: "qwen3.5-9b".into(),
        hidden: 4096,
        layers: 32,
        full_attention: AttentionLayers {
            layers: 8,
            kv_layers: 8,
            q_heads: 16,
            kv_heads: 4,
            head_dim: 256,
            window: None,
        },
        sliding_attention: None,
        // 32 value heads × 128 × 128 state (bf16) plus the short convolution's state.
        linear_attention: Some(LinearLayers {
            layers: 24,
            state_bytes_per_layer: 1_098_000,
            flops_per_token_per_layer: 4.0 * 32.0 * 128.0 * 128.0,
        }),
        matmul_params: 7.95e9,
        total_params: 8.95e9,
        quantizable_params: 6.9e9,
        int4_weight_bytes: None,
        vocab: 248_320,
        native_context: 262_144,
    }
}

fn qwen38_27b() -> ModelSpec {
    ModelSpec {
        name: "qwen3.8-27b".into(),
        hidden: 5120,
        layers: 64,
        full_attention: AttentionLayers {
            layers: 16,
            kv_layers: 16,
            q_heads: 24,
            kv_heads: 4,
            head_dim: 256,
            window: None,
        },
        sliding_attention: None,
        linear_attention: Some(LinearLayers {
            layers: 48,
            state_bytes_per_layer: 1_638_000,
            flops_per_token_per_layer: 4.0 * 48.0 * 128.0 * 128.0,
        }),
        matmul_params: 25.5e9,
        total_params: 26.9e9,
        quantizable_params: 24.2e9,
        // The reference quotes about 15 GB in all for W4A16 (group 128); used as given.
        int4_weight_bytes: Some(15.0e9),
        vocab: 248_320,
        native_context: 262_144,
    }
}

fn gemma4_e4b() -> ModelSpec {
    ModelSpec {
        name: "gemma4-e4b".into(),
        hidden: 2560,
        layers: 42,
        full_attention: AttentionLayers {
            layers: 7,
            kv_layers: 4,
            q_heads: 8,
            kv_heads: 2,
            head_dim: 512,
            window: None,
        },
        sliding_attention: Some(AttentionLayers {
            layers: 35,
            kv_layers: 20,
            q_heads: 8,
            kv_heads: 2,
            head_dim: 256,
            window: Some(512),
        }),
        linear_attention: None,
        // 3.97 B in layer matmuls + 0.67 B lm_head (tied with the embedding).
        matmul_params: 4.64e9,
        // + the 262,144 × 10,752 per-layer embedding table (gathered, not streamed).
        total_params: 7.46e9,
        quantizable_params: 3.97e9,
        int4_weight_bytes: None,
        vocab: 262_144,
        native_context: 131_072,
    }
}

fn qwen3_8b() -> ModelSpec {
    ModelSpec {
        name: "qwen3-8b".into(),
        hidden: 4096,
        layers: 36,
        full_attention: AttentionLayers {
            layers: 36,
            kv_layers: 36,
            q_heads: 32,
            kv_heads: 8,
            head_dim: 128,
            window: None,
        },
        sliding_attention: None,
        linear_attention: None,
        // 36 × (q, k, v, o, gate, up, down) + lm_head 151,936 × 4096.
        matmul_params: 7.57e9,
        total_params: 8.19e9,
        quantizable_params: 6.95e9,
        int4_weight_bytes: None,
        vocab: 151_936,
        native_context: 40_960,
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
}

impl HardwareSpec {
    /// The built-in GPUs.
    pub fn presets() -> Vec<HardwareSpec> {
        vec![
            HardwareSpec {
                name: "l40".into(),
                memory_bytes: 45.0 * GIB,
                memory_bandwidth: 864e9,
                bf16_flops: 181e12,
                fp8_flops: 362e12,
                link_bandwidth: 22e9,
                link_latency_s: 15e-6,
                host_bandwidth: 25e9,
                dollars_per_hour: 0.82,
            },
            HardwareSpec {
                name: "h200".into(),
                memory_bytes: 143_771.0 * MIB,
                memory_bandwidth: 4.8e12,
                bf16_flops: 989e12,
                fp8_flops: 1_979e12,
                link_bandwidth: 450e9,
                link_latency_s: 5e-6,
                host_bandwidth: 55e9,
                dollars_per_hour: 3.50,
            },
        ]
    }

    /// A built-in GPU by name.
    pub fn preset(name: &str) -> Option<HardwareSpec> {
        Self::presets().into_iter().find(|h| h.name == name)
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
