//! The GPU memory plan: weights, activation reserve and the KV pool, per GPU, exactly as the engine sizes them.

use crate::cost::kv_shard;
use crate::model::{weight_bytes, HardwareSpec, ModelSpec, WeightDtype};

/// How one GPU's memory is divided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryPlan {
    /// Memory the engine may use: `memory × gpu_memory_utilization`.
    pub budget_bytes: f64,
    /// Weights held by one GPU.
    pub weights_bytes: f64,
    /// Reserved for activations.
    pub activation_bytes: f64,
    /// What is left for KV blocks and per-sequence state; negative when the model does not fit.
    pub kv_pool_bytes: f64,
    /// KV bytes one token of context occupies on one GPU.
    pub kv_bytes_per_token: f64,
    /// Constant bytes one running sequence occupies on one GPU (linear-attention state, sliding window).
    pub state_bytes_per_seq: f64,
    /// The linear-attention (Gated DeltaNet) part of `state_bytes_per_seq`: what an engine with a
    /// separate pool for recurrent states (SGLang's mamba pool) keeps outside the KV pool.
    pub linear_state_bytes_per_seq: f64,
}

/// Sizes the KV pool the way vLLM does: budget − weights − activation reserve.
pub fn memory_plan(
    model: &ModelSpec,
    hw: &HardwareSpec,
    dtype: WeightDtype,
    group_size: u32,
    tp: u32,
    utilization: f64,
    activation_bytes: f64,
) -> MemoryPlan {
    let tp_f = tp.max(1) as f64;
    let budget_bytes = hw.memory_bytes * utilization;
    let weights_bytes = weight_bytes(model, dtype, group_size) / tp_f;
    let fa = &model.full_attention;
    let mut kv_bytes_per_token = model.kv_bytes_per_token() as f64 * kv_shard(fa, tp);
    let sliding_shard = model
        .sliding_attention
        .as_ref()
        .map_or(1.0, |s| kv_shard(s, tp));
    let linear = model.linear_attention.as_ref().map_or(0.0, |l| {
        (l.layers as u64 * l.state_bytes_per_layer) as f64 / tp_f
    });
    let mut sliding = (model.state_bytes_per_seq() as f64 - linear * tp_f).max(0.0) * sliding_shard;
    if let (0, Some(s)) = (model.kv_bytes_per_token(), &model.sliding_attention) {
        // Every layer slides (Mistral 7B v0.1): the sliding layers' KV is the pool's per-token unit,
        // held for the whole context. The engines free blocks that leave the window, so past the
        // window this holds more than they do (capacity errs low, never a pool without a unit).
        kv_bytes_per_token =
            (s.kv_layers as u64 * s.kv_bytes_per_token_per_layer()) as f64 * sliding_shard;
        sliding = 0.0;
    }
    MemoryPlan {
        budget_bytes,
        weights_bytes,
        activation_bytes,
        kv_pool_bytes: budget_bytes - weights_bytes - activation_bytes,
        kv_bytes_per_token,
        state_bytes_per_seq: linear + sliding,
        linear_state_bytes_per_seq: linear,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GIB;

    #[test]
    fn default_deployment_holds_a_million_tokens_per_pair_of_l40s() {
        let m = ModelSpec::preset("qwen3.5-9b").unwrap();
        let h = HardwareSpec::preset("l40").unwrap();
        let p = memory_plan(&m, &h, WeightDtype::Bf16, 128, 2, 0.9, 1.0 * GIB);
        assert_eq!(p.kv_bytes_per_token, 16.0 * 1024.0);
        let tokens = p.kv_pool_bytes / p.kv_bytes_per_token;
        assert!(tokens > 1_048_576.0, "{tokens} tokens");
    }

    /// A model whose every layer slides keeps its sliding KV per token (the pool needs a unit), with
    /// no window state on top: 32 layers × 8 KV heads × 128 × 2 × 2 bytes for Mistral 7B v0.1.
    #[test]
    fn every_layer_sliding_keeps_kv_per_token() {
        let text = include_str!("../../tests/fixtures/hf/mistral-7b-v0.1.json");
        let m = crate::hf::from_config("mistral", text).unwrap();
        let h = HardwareSpec::preset("h200").unwrap();
        let p = memory_plan(&m, &h, WeightDtype::Bf16, 128, 1, 0.9, 1.0 * GIB);
        assert_eq!(p.kv_bytes_per_token, 32.0 * 8.0 * 128.0 * 4.0);
        assert_eq!(p.state_bytes_per_seq, 0.0);
    }
}
