//! Engine presets (`--engine-config vllm|sglang`): the engine section each serving engine would run a
//! deployment with when started with its own defaults, derived from the deployment's GPU memory,
//! tensor parallelism and model as the engine's source derives them (docs/configuration.md cites every
//! rule). Pure: it reads a deployment and returns an engine section; it never reads files.

use super::Deployment;
use crate::engine::{CacheEviction, EngineConfig, Policy, Preemption, WaitingOrder};

/// The engine presets, by name.
pub const ENGINE_PRESETS: [&str; 2] = ["vllm", "sglang"];

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// vLLM's and SGLang's attention kernels' block alignment, tokens.
const KERNEL_BLOCK_ALIGNMENT: u64 = 16;

/// The engine section engine `name` would use for `d`; `None` for an unknown name.
pub fn engine_preset(name: &str, d: &Deployment) -> Option<EngineConfig> {
    match name {
        "vllm" => Some(vllm(d)),
        "sglang" => Some(sglang(d)),
        _ => None,
    }
}

/// vLLM (V1 engine, OpenAI server). `EngineArgs.get_batch_defaults` (vllm/engine/arg_utils.py): on a
/// GPU of at least 70 GiB that is not an A100, 8192 batched tokens and 1024 sequences; otherwise 2048
/// and 256. Prefix caching on, recompute preemption of the newest request, 90 % of GPU memory.
fn vllm(d: &Deployment) -> EngineConfig {
    let gib = d.hardware.memory_bytes / GIB;
    let large = gib >= 70.0 && !d.hardware.name.to_ascii_lowercase().contains("a100");
    EngineConfig {
        policy: Policy::VLLM,
        block_size: vllm_block_size(d),
        max_num_batched_tokens: if large { 8192 } else { 2048 },
        max_num_seqs: if large { 1024 } else { 256 },
        gpu_memory_utilization: 0.9,
        preemption: Preemption::Recompute,
        prefix_caching: true,
        cache_eviction: CacheEviction::Lru,
        waiting_order: None,
        ..d.engine.clone()
    }
}

/// vLLM's block size: 16, except for a model with linear-attention (Gated DeltaNet) layers, whose
/// attention block grows until one block of one layer holds a layer's recurrent state
/// (`_align_hybrid_block_size`: 16 × ⌈state ÷ (16 × KV bytes per token)⌉, per GPU). With prefix caching
/// (`mamba_cache_mode: align`) states are kept only at block boundaries, so a cache hit is a whole
/// number of these blocks.
pub fn vllm_block_size(d: &Deployment) -> u32 {
    let m = d.model_spec();
    let Some(linear) = &m.linear_attention else {
        return KERNEL_BLOCK_ALIGNMENT as u32;
    };
    let tp = d.tp.max(1) as u64;
    let a = &m.full_attention;
    let kv_heads = (a.kv_heads as u64).div_ceil(tp).max(1);
    let per_token = 2 * kv_heads * a.head_dim as u64 * 2;
    let state = linear.state_bytes_per_layer.div_ceil(tp);
    let step = KERNEL_BLOCK_ALIGNMENT * per_token;
    (KERNEL_BLOCK_ALIGNMENT * state.div_ceil(step).max(1)) as u32
}

/// SGLang. `ServerArgs._handle_gpu_memory_settings` (python/sglang/srt/server_args.py) sets the
/// chunked-prefill size by GPU memory: 2048 under 35 GiB, 4096 under 60 GiB ("A100 (40GB), L40"),
/// 8192 under 160 GiB. The memory fraction stays the deployment's: SGLang's own
/// (`_handle_mem_fraction_static`: (9.5 + TP × PP / 2) GiB of a 35–90 GiB GPU kept for activations
/// and CUDA graphs) would leave the 27B's pool too small for one request at its context limit, which
/// a deployment must hold. The default `--schedule-policy` is `fcfs`; the radix cache is on, page
/// size 1 (the simulator's blocks stay 16: the workload's prompts are hashed in 16-token blocks, so a
/// finer page finds no more hits); `max_running_requests` is sized from the KV pool, far above the
/// concurrencies studied, so the policy's 1024 stays.
fn sglang(d: &Deployment) -> EngineConfig {
    let gib = d.hardware.memory_bytes / GIB;
    let chunk = if gib < 35.0 {
        2048
    } else if gib < 60.0 {
        4096
    } else if gib < 160.0 {
        8192
    } else {
        16384
    };
    EngineConfig {
        policy: Policy::SGLANG,
        block_size: KERNEL_BLOCK_ALIGNMENT as u32,
        max_num_batched_tokens: chunk,
        max_num_seqs: 1024,
        preemption: Preemption::Recompute,
        prefix_caching: true,
        cache_eviction: CacheEviction::Lru,
        waiting_order: Some(WaitingOrder::Fcfs),
        ..d.engine.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preset(d: &str, e: &str) -> EngineConfig {
        engine_preset(e, &Deployment::preset(d).unwrap()).unwrap()
    }

    #[test]
    fn vllm_follows_its_batch_defaults_by_gpu_memory() {
        let l40 = preset("qwen3.5-9b-2xl40", "vllm");
        assert_eq!((l40.max_num_batched_tokens, l40.max_num_seqs), (2048, 256));
        let h200 = preset("qwen3-8b-1xh200", "vllm");
        assert_eq!(
            (h200.max_num_batched_tokens, h200.max_num_seqs),
            (8192, 1024)
        );
        assert_eq!(h200.block_size, 16);
        assert!(engine_preset("tgi", &Deployment::preset("qwen3-8b-1xh200").unwrap()).is_none());
    }

    #[test]
    fn vllm_blocks_of_a_hybrid_model_hold_a_layers_recurrent_state() {
        // Qwen3.5 9B at tp = 2: 549,000 state bytes per layer per GPU, 2 KV heads × 256 × 2 (K, V) × 2
        // bytes = 2,048 bytes per token per layer: 16 × ⌈549,000 / 32,768⌉ = 16 × 17.
        assert_eq!(preset("qwen3.5-9b-2xl40", "vllm").block_size, 272);
        let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
        let m = d.model_spec();
        let bytes = 272 * 2 * 2 * 256 * 2;
        assert!(bytes >= m.linear_attention.unwrap().state_bytes_per_layer / 2);
        // Dense and sliding-window models keep 16-token blocks.
        assert_eq!(preset("gemma4-e4b-1xl40", "vllm").block_size, 16);
        // Qwen3.8 27B: 819,000 bytes per layer per GPU: 16 × ⌈24.99⌉.
        assert_eq!(preset("qwen3.8-27b-int4-2xl40", "vllm").block_size, 400);
    }

    #[test]
    fn sglang_follows_its_memory_tiers() {
        let l40 = preset("qwen3.5-9b-2xl40", "sglang");
        assert_eq!(l40.max_num_batched_tokens, 4096);
        assert_eq!(l40.waiting_order, Some(WaitingOrder::Fcfs));
        assert_eq!(l40.block_size, 16);
        let h200 = preset("qwen3-8b-1xh200", "sglang");
        assert_eq!(h200.max_num_batched_tokens, 8192);
        for name in ENGINE_PRESETS {
            for mut d in Deployment::presets() {
                d.engine = engine_preset(name, &d).unwrap();
                d.check().unwrap();
            }
        }
    }
}
