//! Engine presets (`--engine-config vllm|sglang`): the engine section each serving engine would run a
//! deployment with when started with its own defaults, derived from the deployment's GPU memory,
//! tensor parallelism and model as the engine's source derives them (docs/configuration.md cites every
//! rule). Pure: it reads a deployment and returns an engine section; it never reads files.

use super::Deployment;
use crate::engine::{CacheEntry, CacheEviction, EngineConfig, Policy, Preemption, WaitingOrder};

/// vLLM's default fraction of GPU memory: 0.92 in vLLM 0.26.0 (its `CacheConfig`; older versions' default
/// was 0.9).
const VLLM_MEMORY_UTILIZATION: f64 = 0.92;

/// The engine presets, by name: `vllm` (0.26.0) and `sglang` (0.5.9), and the versions the benchmark's
/// reference arms ran where they differ (`vllm-0.28.0`, `sglang-0.5.19`).
pub const ENGINE_PRESETS: [&str; 4] = ["vllm", "sglang", "vllm-0.28.0", "sglang-0.5.19"];

/// SGLang 0.5.19's largest extend (prefill) batch replayed as a piecewise CUDA graph, tokens
/// (`cuda_graph_config.py`: on by default from 0.5.10, up to the chunked-prefill size, 4096 on an L40).
const SGLANG_EXTEND_GRAPH_TOKENS: u32 = 4096;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// vLLM's and SGLang's attention kernels' block alignment, tokens.
const KERNEL_BLOCK_ALIGNMENT: u64 = 16;

/// The engine section engine `name` would use for `d`; `None` for an unknown name.
pub fn engine_preset(name: &str, d: &Deployment) -> Option<EngineConfig> {
    match name {
        "vllm" => Some(vllm(d)),
        "sglang" => Some(sglang(d)),
        "vllm-0.28.0" => Some(vllm_0_28(d)),
        "sglang-0.5.19" => Some(sglang_0_5_19(d)),
        _ => None,
    }
}

/// vLLM (V1 engine, OpenAI server). `EngineArgs.get_batch_defaults` (vllm/engine/arg_utils.py): on a
/// GPU of at least 70 GiB that is not an A100, 8192 batched tokens and 1024 sequences; otherwise 2048
/// and 256. Prefix caching on, a chunk's full blocks cached when it is scheduled (`allocate_slots`),
/// recompute preemption of the newest request, 92 % of GPU memory
/// (`CacheConfig.gpu_memory_utilization`'s default in vLLM 0.26.0, read in its start-up log on an H200). CUDA
/// graphs (`cudagraph_mode` FULL_AND_PIECEWISE) for steps of up to `max_cudagraph_capture_size` tokens,
/// mixed prefill steps included: `VllmConfig._set_cudagraph_sizes` (vllm/config/vllm.py) makes it
/// min(2 × max_num_seqs × (1 + speculative tokens), 512, max_num_batched_tokens). vLLM's asynchronous
/// scheduling (on by default in 0.26.0) is not turned on here: `engine.async_scheduling` models it, and
/// docs/simulator.md says why the presets leave it off until the front end is refitted.
fn vllm(d: &Deployment) -> EngineConfig {
    let gib = d.hardware.memory_bytes / GIB;
    let large = gib >= 70.0 && !d.hardware.name.to_ascii_lowercase().contains("a100");
    let (tokens, seqs) = if large { (8192, 1024) } else { (2048, 256) };
    let draft = d.engine.speculative.as_ref().map_or(0, |s| s.k);
    EngineConfig {
        policy: Policy::VLLM,
        block_size: vllm_block_size(d),
        max_num_batched_tokens: tokens,
        max_num_seqs: seqs,
        cuda_graph_max_tokens: Some((2 * seqs * (1 + draft)).min(512).min(tokens)),
        cuda_graph_mixed: true,
        split_kv_decode: true,
        gpu_memory_utilization: VLLM_MEMORY_UTILIZATION,
        preemption: Preemption::Recompute,
        prefix_caching: true,
        cache_eviction: CacheEviction::Lru,
        cache_entry: CacheEntry::Scheduled,
        waiting_order: None,
        state_pool_ratio: None,
        sliding_window_eviction_interval: None,
        ..d.engine.clone()
    }
}

/// vLLM 0.28.0: 0.26.0's rules ([`vllm`]), except that a GPU of 160 GiB or more (B200 and later) gets
/// 16,384 batched tokens (`get_batch_defaults`); the memory default (0.92), the CUDA-graph sizes,
/// prefix caching of hybrid models (`mamba_cache_mode: align`) and preemption are unchanged.
fn vllm_0_28(d: &Deployment) -> EngineConfig {
    let mut e = vllm(d);
    if d.hardware.memory_bytes / GIB >= 160.0 {
        e.max_num_batched_tokens = 16_384;
        let draft = d.engine.speculative.as_ref().map_or(0, |s| s.k);
        e.cuda_graph_max_tokens = Some((2 * e.max_num_seqs * (1 + draft)).min(512).min(16_384));
    }
    e
}

/// SGLang 0.5.19: 0.5.9's rules ([`sglang`]), except that extend (prefill) batches of up to the
/// chunked-prefill size (at most 4096 tokens) replay piecewise CUDA graphs for the hybrid Qwen3.5
/// family (the models with linear-attention layers here; `Qwen3_5ForConditionalGeneration` is on its
/// list) and not for Gemma 4 (multimodal, not listed). Unchanged and so not modelled apart: the
/// memory tiers, `schedule_policy` fcfs, the radix cache; the hybrid models' state checkpoints every
/// 64 prompt tokens (`extra_buffer`, the default from 0.5.14) fall on the workload's 64-token blocks, so
/// a hit is found where 0.5.9's exact matching found it.
fn sglang_0_5_19(d: &Deployment) -> EngineConfig {
    let mut e = sglang(d);
    if d.model_spec().linear_attention.is_some() {
        e.cuda_graph_prefill_max_tokens =
            Some(SGLANG_EXTEND_GRAPH_TOKENS.min(e.max_num_batched_tokens));
    }
    e
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
/// chunked-prefill size and the largest decode batch replayed as a CUDA graph (`cuda_graph_max_bs`) by
/// GPU memory: 2048 and 24 (80 at tp ≥ 4) under 35 GiB, 4096 and 32 (160) under 60 GiB ("A100 (40GB),
/// L40"), 8192 and 256 (512) under 90 and under 160 GiB, else 16384 and 512; only decode batches
/// replay graphs (extend batches run eagerly unless `--enable-piecewise-cuda-graph`). The memory fraction
/// follows from them ([`sglang_memory_fraction`]); the reserve it keeps back holds activations and CUDA
/// graphs, so none is kept inside it. Requests are accepted only as long as the KV pool holds
/// (`TpModelWorker`: `max_req_len = min(context_len − 1, max_total_num_tokens − 1)`). The default
/// `--schedule-policy` is `fcfs`; the radix cache is on, page size 1 (the simulator's blocks stay 16:
/// the workload's prompts are hashed in 16-token blocks, so a finer page finds no more hits);
/// `max_running_requests` is sized from the KV pool, far above the concurrencies studied, so the
/// policy's 1024 stays. A model with linear-attention layers keeps its recurrent states in a pool of
/// their own ([`SGLANG_MAMBA_FULL_MEMORY_RATIO`]).
fn sglang(d: &Deployment) -> EngineConfig {
    let (chunk, graph_bs) = sglang_tier(d);
    EngineConfig {
        policy: Policy::SGLANG,
        block_size: KERNEL_BLOCK_ALIGNMENT as u32,
        max_num_batched_tokens: chunk,
        max_num_seqs: 1024,
        gpu_memory_utilization: sglang_memory_fraction(d),
        activation_reserve_gib: 0.0,
        preemption: Preemption::Recompute,
        prefix_caching: true,
        cache_eviction: CacheEviction::Lru,
        cache_entry: CacheEntry::Prompt,
        waiting_order: Some(WaitingOrder::Fcfs),
        cap_requests_at_pool: true,
        cuda_graph_max_tokens: Some(graph_bs),
        cuda_graph_mixed: false,
        state_pool_ratio: d
            .model_spec()
            .linear_attention
            .map(|_| SGLANG_MAMBA_FULL_MEMORY_RATIO),
        sliding_window_eviction_interval: d
            .model_spec()
            .sliding_attention
            .and_then(|s| s.window)
            .map(|_| SGLANG_SWA_EVICTION_INTERVAL),
        ..d.engine.clone()
    }
}

/// SGLang's `--mamba-full-memory-ratio` default: with the radix cache on and no
/// `--max-mamba-cache-size`, `KVCacheConfigurator._handle_max_mamba_cache`
/// (python/sglang/srt/mem_cache/kv_cache_configurator.py, 0.5.19; the same rule in 0.5.9's
/// `model_runner.py`) gives the hybrid models' recurrent states ratio / (1 + ratio) of the memory left
/// after the weights (47 %) and the full-attention KV pool the rest; the pools are static
/// (`--enable-unified-memory` is off by default).
const SGLANG_MAMBA_FULL_MEMORY_RATIO: f64 = 0.9;

/// SGLang's `SGLANG_SWA_EVICTION_INTERVAL` default (0.5.19 `environ.py`): a decoding request of a
/// sliding-window model frees its sliding layers' KV more than a window behind it once that much more
/// has slid out (`ScheduleBatch.maybe_evict_swa`, `free_swa_out_of_window_slots`).
const SGLANG_SWA_EVICTION_INTERVAL: u32 = 128;

/// SGLang's chunked-prefill size and `cuda_graph_max_bs` for the deployment's GPU memory and tp.
fn sglang_tier(d: &Deployment) -> (u32, u32) {
    let gib = d.hardware.memory_bytes / GIB;
    let small_tp = d.tp < 4;
    if gib < 35.0 {
        (2048, if small_tp { 24 } else { 80 })
    } else if gib < 60.0 {
        (4096, if small_tp { 32 } else { 160 })
    } else if gib < 160.0 {
        (8192, if small_tp { 256 } else { 512 })
    } else {
        (16384, 512)
    }
}

/// SGLang's `mem_fraction_static` (`_handle_gpu_memory_settings`): the GPU memory less a reserve, in
/// MiB, of 512 + 1.5 × max(chunk, 2048) + 2 × `cuda_graph_max_bs` + 1024 × tp × pp ÷ 8 (at least
/// 10,240 on a GPU over 60 GiB), as a fraction rounded to three digits. Without the further cut
/// SGLang makes for a multimodal checkpoint (the benchmark serves text).
fn sglang_memory_fraction(d: &Deployment) -> f64 {
    let (chunk, graph_bs) = sglang_tier(d);
    let mib = d.hardware.memory_bytes / (1024.0 * 1024.0);
    let mut reserve =
        512.0 + 1.5 * chunk.max(2048) as f64 + 2.0 * graph_bs as f64 + 1024.0 * d.tp as f64 / 8.0;
    if mib > 60.0 * 1024.0 {
        reserve = reserve.max(10.0 * 1024.0);
    }
    ((mib - reserve) / mib * 1000.0).round() / 1000.0
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
        // Graphs up to min(2 × 256, 512, 2048) tokens, mixed steps too.
        assert_eq!(
            (l40.cuda_graph_max_tokens, l40.cuda_graph_mixed),
            (Some(512), true)
        );
        let h200 = preset("qwen3-8b-1xh200", "vllm");
        assert_eq!(
            (h200.max_num_batched_tokens, h200.max_num_seqs),
            (8192, 1024)
        );
        assert_eq!(h200.block_size, 16);
        assert!(engine_preset("tgi", &Deployment::preset("qwen3-8b-1xh200").unwrap()).is_none());
    }

    /// vLLM 0.26.0 on an H200 serving the Qwen3-8B shape with its defaults said "GPU KV cache size:
    /// 813,744 tokens" (50,859 blocks of 16, results/h200-vllm/startup.txt), after 15.35 GiB of weights,
    /// 1.29 GiB of peak activations and 0.23 GiB outside torch out of 0.92 × 139.8 GiB.
    #[test]
    fn vllm_sizes_the_h200_pool_as_vllm_did_within_two_percent() {
        let mut d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        d.engine = engine_preset("vllm", &d).unwrap();
        assert_eq!(d.engine.gpu_memory_utilization, 0.92);
        let plan = d.memory_plan();
        let tokens = plan.kv_pool_bytes / plan.kv_bytes_per_token;
        let measured = 813_744.0;
        assert!(
            (tokens / measured - 1.0).abs() < 0.02,
            "{tokens} tokens against vLLM's {measured}"
        );
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
    fn sglang_keeps_back_its_reserve_and_caps_requests_at_the_pool() {
        // L40 (46,080 MiB), chunk 4096, graphs to 32: 512 + 6144 + 64 + 256 at tp 2, + 128 at tp 1.
        let l40 = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
        assert_eq!(sglang_memory_fraction(&l40), 0.849);
        let gemma = Deployment::preset("gemma4-e4b-1xl40").unwrap();
        assert_eq!(sglang_memory_fraction(&gemma), 0.851);
        // H200 (143,770 MiB), chunk 8192, graphs to 256: 512 + 12288 + 512 + 128 = 13,440.
        let h200 = Deployment::preset("qwen3-8b-1xh200").unwrap();
        assert_eq!(sglang_memory_fraction(&h200), 0.907);
        let e = preset("qwen3.8-27b-int4-2xl40", "sglang");
        assert!(e.cap_requests_at_pool && e.activation_reserve_gib == 0.0);
        assert_eq!(
            (e.cuda_graph_max_tokens, e.cuda_graph_mixed),
            (Some(32), false)
        );
        let h200 = preset("qwen3-8b-1xh200", "sglang");
        assert_eq!(h200.cuda_graph_max_tokens, Some(256));
        // The 27B's pool (its recurrent states kept apart) holds about half a request at its
        // 1,048,576-token context limit: SGLang accepts requests up to what it holds.
        let mut d = Deployment::preset("qwen3.8-27b-int4-2xl40").unwrap();
        d.engine = e;
        d.check().unwrap();
        let limit = d.request_limit();
        assert!(limit < d.context_limit && limit > 500_000, "{limit}");
        d.engine.cap_requests_at_pool = false;
        assert!(
            d.check().is_err(),
            "without the cap the deployment cannot hold one request"
        );
        assert_eq!(d.request_limit(), d.context_limit);
    }

    /// SGLang keeps a hybrid model's recurrent states in a pool of their own, 0.9 / 1.9 of the memory
    /// after the weights (`_handle_max_mamba_cache`): the 27B's KV pool on two L40s at 0.90 is
    /// 1 / 1.9 of that memory, about 0.55 M tokens where one shared pool held about 1.04 M, and its
    /// running sequences' states no longer take KV blocks. vLLM's presets and dense or sliding-window
    /// models keep one pool.
    #[test]
    fn sglang_keeps_hybrid_states_in_a_pool_of_their_own() {
        let mut d = Deployment::preset("qwen3.8-27b-int4-2xl40").unwrap();
        d.engine = preset("qwen3.8-27b-int4-2xl40", "sglang-0.5.19");
        d.engine.gpu_memory_utilization = 0.9;
        assert_eq!(d.engine.state_pool_ratio, Some(0.9));
        let layout = d.kv_layout();
        let plan = layout.plan;
        let (blocks, state_blocks) = layout.pool(&d.engine).unwrap();
        assert_eq!(state_blocks, 0);
        let tokens = (blocks * d.engine.block_size as u64) as f64;
        let shared = plan.kv_pool_bytes / plan.kv_bytes_per_token;
        assert!(
            (tokens / (shared / 1.9) - 1.0).abs() < 1e-3,
            "{tokens} {shared}"
        );
        assert!(tokens > 500_000.0 && tokens < 600_000.0, "{tokens}");
        assert!((d.request_limit() as f64 - tokens).abs() < 32.0);
        // One shared pool without the setting: about 1.04 M tokens less the states.
        d.engine.state_pool_ratio = None;
        let (blocks, state_blocks) = d.kv_layout().pool(&d.engine).unwrap();
        assert!(state_blocks > 0 && blocks * 16 > 1_000_000, "{blocks}");
        assert_eq!(preset("qwen3.5-9b-2xl40", "vllm").state_pool_ratio, None);
        assert_eq!(preset("gemma4-e4b-1xl40", "sglang").state_pool_ratio, None);
        assert_eq!(
            preset("qwen3.5-9b-2xl40", "sglang").state_pool_ratio,
            Some(0.9)
        );
        // A sliding-window model's requests free their KV behind the window while decoding.
        let g = preset("gemma4-e4b-1xl40", "sglang-0.5.19");
        assert_eq!(g.sliding_window_eviction_interval, Some(128));
        assert_eq!(
            preset("qwen3.5-9b-2xl40", "sglang").sliding_window_eviction_interval,
            None
        );
        assert_eq!(
            preset("gemma4-e4b-1xl40", "vllm").sliding_window_eviction_interval,
            None
        );
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

    #[test]
    fn the_reference_arms_versions_differ_only_where_their_sources_say() {
        // SGLang 0.5.19: the hybrid Qwen models' prefill steps of up to 4096 tokens replay graphs.
        for d in ["qwen3.5-9b-2xl40", "qwen3.8-27b-int4-2xl40"] {
            let (old, new) = (preset(d, "sglang"), preset(d, "sglang-0.5.19"));
            assert_eq!(new.cuda_graph_prefill_max_tokens, Some(4096), "{d}");
            let rule = new.graph_rule().unwrap();
            assert_eq!((rule.max_tokens, rule.prefill_max_tokens), (32, 4096));
            assert_eq!(old.graph_rule().unwrap().prefill_max_tokens, 0);
            let same = EngineConfig {
                cuda_graph_prefill_max_tokens: None,
                ..new
            };
            assert_eq!(same, old, "{d}: nothing else differs");
        }
        // Not Gemma 4 (not on SGLang's list).
        assert_eq!(
            preset("gemma4-e4b-1xl40", "sglang-0.5.19"),
            preset("gemma4-e4b-1xl40", "sglang")
        );
        // vLLM 0.28.0 equals 0.26.0 on the L40 and the H200.
        for d in ["qwen3.5-9b-2xl40", "qwen3-8b-1xh200"] {
            assert_eq!(preset(d, "vllm-0.28.0"), preset(d, "vllm"), "{d}");
        }
        // ... and gives a GPU of 160 GiB or more 16,384 batched tokens.
        let mut d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        d.hardware.memory_bytes = 180.0 * GIB;
        let e = engine_preset("vllm-0.28.0", &d).unwrap();
        assert_eq!(e.max_num_batched_tokens, 16_384);
        assert_eq!(
            engine_preset("vllm", &d).unwrap().max_num_batched_tokens,
            8192
        );
    }

    /// Neither engine spreads a mixture of experts' experts whole or runs attention data-parallel
    /// unless started with the flags for it (`--enable-expert-parallel`, `--enable-dp-attention`,
    /// `--data-parallel-size`), DeepSeek-V3 included, so no engine preset turns either on, even for a
    /// DeepSeek-V3-shaped model over 8 GPUs.
    #[test]
    fn no_engine_preset_turns_on_expert_parallelism_or_data_parallel_attention() {
        let mut d = Deployment::preset("qwen3-8b-1xh200-vllm").unwrap();
        d.model = serverbench_calibration::hf::from_config(
            "deepseek-r1",
            include_str!("../../../tests/fixtures/hf/deepseek-r1.json"),
        )
        .unwrap();
        d.tp = 8;
        for name in ENGINE_PRESETS {
            let e = engine_preset(name, &d).unwrap();
            assert!(!e.expert_parallel && !e.data_parallel_attention, "{name}");
        }
    }
}
