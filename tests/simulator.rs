//! The simulator end to end: determinism, invariants, scoring directions, bad configurations.

use proptest::prelude::*;
use serverbench_sim::{
    simulate, Deployment, Outcome, Policy, Preemption, Protocol, Router, RunConfig, RunOutput,
    SpecMethod, Speculative,
};
use serverbench_workloads::{Generator, TreeSource, WorkloadSpec};
use std::collections::HashMap;

fn run(d: &Deployment, cfg: &RunConfig) -> RunOutput {
    let g = Generator::new(WorkloadSpec::synthetic_v1(), cfg.seed, d.context_limit).unwrap();
    simulate(d, &d.cost_model(), &g, cfg).unwrap()
}

fn default_deployment() -> Deployment {
    Deployment::preset("qwen3.5-9b-2xl40").unwrap()
}

/// Speculative decoding with `k` drafts accepted with probability `acceptance` each.
fn speculative(method: SpecMethod, k: u32, acceptance: f64) -> Option<Speculative> {
    Some(Speculative {
        method,
        k,
        acceptance,
        acceptance_by_kind: Default::default(),
        draft_params: None,
    })
}

#[test]
fn same_seed_gives_byte_identical_records() {
    let d = default_deployment();
    let cfg = RunConfig::new(12, 3, 600.0);
    let bytes = |o: &RunOutput| serde_json::to_vec(&o.records).unwrap();
    let (a, b) = (run(&d, &cfg), run(&d, &cfg));
    assert!(a.records.len() > 100);
    assert_eq!(bytes(&a), bytes(&b));
    assert_eq!(
        serde_json::to_vec(&a.summary).unwrap(),
        serde_json::to_vec(&b.summary).unwrap()
    );
    let c = run(&d, &RunConfig::new(12, 4, 600.0));
    assert_ne!(bytes(&a), bytes(&c));
}

/// Checks the invariants every run must keep.
fn check_invariants(out: &RunOutput, cfg: &RunConfig, source: &dyn TreeSource) {
    let window_ns = (cfg.window_s * 1e9) as u64;
    let finish: HashMap<(u64, u32), Option<u64>> = out
        .records
        .iter()
        .map(|r| ((r.tree, r.request), r.finish_ns))
        .collect();
    for r in &out.records {
        assert!(r.send_ns < window_ns, "sent inside the window");
        let tree = source.tree(r.tree);
        let req = &tree.requests()[r.request as usize];
        for &dep in &req.deps {
            match finish.get(&(r.tree, dep)) {
                Some(Some(f)) => assert!(
                    r.send_ns >= *f,
                    "request {} of tree {} sent before dependency {dep} finished",
                    r.request,
                    r.tree
                ),
                Some(None) => panic!(
                    "request {} sent while dependency {dep} was still running",
                    r.request
                ),
                None => assert_eq!(
                    cfg.protocol,
                    Protocol::Steady,
                    "only a steady start skips dependencies"
                ),
            }
        }
        match r.outcome {
            Outcome::Completed => {
                assert_eq!(r.output_tokens, r.output_requested, "tokens conserved");
                let (f, l, e) = (
                    r.first_token_ns.unwrap(),
                    r.last_token_ns.unwrap(),
                    r.finish_ns.unwrap(),
                );
                assert!(
                    r.send_ns <= f && f <= l && l == e && e <= window_ns,
                    "TTFT ≤ end-to-end, inside the window"
                );
                assert!(r.cached_tokens < r.input_tokens);
            }
            Outcome::Cancelled => {
                assert!(
                    r.output_tokens < r.output_requested,
                    "a cancelled request did not finish"
                );
                assert_eq!(r.finish_ns, None, "nothing runs after cancellation");
            }
            Outcome::ContextOverflow => assert_eq!(r.output_tokens, 0),
            Outcome::Error(_) => panic!("the simulator has no backend errors"),
        }
    }
}

#[test]
fn invariants_hold_under_overload_with_audited_kv() {
    let mut d = default_deployment();
    // A small KV pool forces eviction and preemption (with a context limit it can hold).
    d.context_limit = 200_000;
    d.engine.gpu_memory_utilization = 0.33;
    for (c, start) in [(32, Protocol::Steady), (8, Protocol::Cold)] {
        let mut cfg = RunConfig::new(c, 1, 400.0);
        cfg.protocol = start;
        cfg.audit = true;
        let g = Generator::new(WorkloadSpec::synthetic_v1(), 1, d.context_limit).unwrap();
        let out = simulate(&d, &d.cost_model(), &g, &cfg).unwrap();
        check_invariants(&out, &cfg, &g);
        if c == 32 {
            assert!(out.summary.preemptions > 0, "the small pool should preempt");
            assert!(out.summary.kv_occupancy_max <= 1.0);
        }
    }
}

proptest! {
    #![proptest_config(crate::property_config(24))]
    #[test]
    fn invariants_hold_for_random_engines(
        seed in 0u64..1000,
        c in 1u32..24,
        util in 0.3f64..0.9,
        block_size in prop::sample::select(vec![8u32, 16, 32, 64]),
        budget in 512u32..16384,
        max_seqs in 1u32..64,
        caching in any::<bool>(),
        cold in any::<bool>(),
        sglang in any::<bool>(),
        swap in any::<bool>(),
        spec in any::<bool>(),
        dp in 1u32..3,
    ) {
        let mut d = default_deployment();
        d.context_limit = 200_000;
        d.engine.gpu_memory_utilization = util;
        d.engine.block_size = block_size;
        d.engine.max_num_batched_tokens = budget;
        d.engine.max_num_seqs = max_seqs;
        d.engine.prefix_caching = caching;
        d.engine.policy = if sglang { Policy::SGLANG } else { Policy::VLLM };
        d.engine.preemption = if swap { Preemption::Swap } else { Preemption::Recompute };
        d.engine.swap_space_gib = 2.0;
        if spec {
            d.engine.speculative = speculative(SpecMethod::Mtp, 3, 0.7);
        }
        d.dp = dp;
        d.router = if seed % 2 == 0 { Router::PrefixAware } else { Router::LeastLoaded };
        let mut cfg = RunConfig::new(c, seed, 150.0);
        cfg.audit = true;
        cfg.protocol = if cold { Protocol::Cold } else { Protocol::Steady };
        let g = Generator::new(WorkloadSpec::synthetic_v1(), seed, d.context_limit).unwrap();
        let out = simulate(&d, &d.cost_model(), &g, &cfg).unwrap();
        check_invariants(&out, &cfg, &g);
    }
}

#[test]
fn more_memory_bandwidth_never_lowers_d() {
    let d = default_deployment();
    let g = Generator::new(WorkloadSpec::synthetic_v1(), 2, d.context_limit).unwrap();
    let mut last = -1.0;
    for factor in [0.8, 1.0, 1.5, 2.5] {
        let mut faster = d.clone();
        faster.hardware.memory_bandwidth *= factor;
        let cost = faster.cost_model();
        let out = simulate(&d, &cost, &g, &RunConfig::new(6, 2, 600.0)).unwrap();
        assert!(
            out.summary.score.d >= last,
            "bandwidth ×{factor}: D {} fell below {last}",
            out.summary.score.d
        );
        last = out.summary.score.d;
    }
}

#[test]
fn heavy_load_raises_ttft() {
    let d = default_deployment();
    let low = run(&d, &RunConfig::new(1, 0, 600.0)).summary;
    let high = run(&d, &RunConfig::new(64, 0, 600.0)).summary;
    assert!(
        high.ttft_s.p90 > low.ttft_s.p90,
        "p90 TTFT at c=64 {} vs c=1 {}",
        high.ttft_s.p90,
        low.ttft_s.p90
    );
    assert!(high.tpot_s.p90 > low.tpot_s.p90);
}

#[test]
fn the_summary_agrees_with_the_records() {
    let d = default_deployment();
    let out = run(&d, &RunConfig::new(8, 5, 600.0));
    let s = &out.summary;
    let qualified: f64 = out
        .records
        .iter()
        .filter(|r| r.qualifies(&d.slo))
        .map(|r| r.value(&d.prices))
        .sum();
    let gross: f64 = out.records.iter().map(|r| r.value(&d.prices)).sum();
    let cost = 2.0 * 0.82 * 600.0 / 3600.0;
    approx::assert_relative_eq!(s.score.d, qualified / cost, max_relative = 1e-12);
    approx::assert_relative_eq!(s.score.g, gross / cost, max_relative = 1e-12);
    assert_eq!(s.requests, out.records.len());
    assert!(
        s.prefix_hit_rate > 0.8,
        "agentic sessions reuse their prefixes: {}",
        s.prefix_hit_rate
    );
}

#[test]
fn an_engine_too_small_for_one_request_fails_at_start_with_the_numbers() {
    let mut d = default_deployment();
    d.engine.gpu_memory_utilization = 0.3;
    let e = d
        .replica(serverbench_sim::ReplicaOptions::default())
        .err()
        .expect("a 1M-token context does not fit in 30 % of an L40");
    let msg = e.to_string();
    assert!(
        msg.contains("1048576 tokens")
            && msg.contains("GiB")
            && msg.contains("bytes of KV per token"),
        "{msg}"
    );
    d.engine.gpu_memory_utilization = 0.15;
    let msg = d
        .replica(serverbench_sim::ReplicaOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("weights"), "{msg}");
}

#[test]
fn imported_requests_over_the_context_limit_fail_as_overflow() {
    let mut d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
    d.context_limit = 30_000;
    let text = "{\"timestamp\": 0, \"input_length\": 40000, \"output_length\": 5, \"hash_ids\": []}\n{\"timestamp\": 0, \"input_length\": 4000, \"output_length\": 5, \"hash_ids\": []}\n";
    let trace = serverbench_workloads::parse_trace("m.jsonl", text, None).unwrap();
    let out = simulate(&d, &d.cost_model(), &trace, &RunConfig::new(1, 0, 30.0)).unwrap();
    let s = &out.summary;
    assert!(s.context_overflow > 0 && s.completed > 0);
    assert!(out
        .records
        .iter()
        .filter(|r| r.input_tokens == 40_000)
        .all(|r| r.outcome == Outcome::ContextOverflow));
    assert!(!s.valid, "half the requests overflowed: the run is invalid");
}

/// An engine that caps requests at its KV pool (SGLang's preset) accepts a deployment whose pool is
/// smaller than one context-limit request, and fails the requests longer than the pool holds as SGLang
/// does — an error (its scheduler's "exceeds the maximum allowed length"), not a context overflow, so
/// the session goes on — while those under the cap run.
#[test]
fn requests_past_an_engines_pool_cap_fail_as_errors() {
    let base = Deployment::preset("gemma4-e4b-1xl40").unwrap();
    let mut d = base.clone();
    d.engine = serverbench_sim::engine_preset("sglang", &base).unwrap();
    // A pool of a few thousand 16-token blocks: far less than the 131,072-token context limit.
    d.engine.gpu_memory_utilization = 0.34;
    d.check().unwrap();
    let limit = d.request_limit();
    assert!(limit > 10_000 && limit < d.context_limit, "{limit}");
    let over = limit - 4;
    let text = format!(
        "{{\"timestamp\": 0, \"input_length\": {over}, \"output_length\": 5, \"hash_ids\": []}}\n{{\"timestamp\": 0, \"input_length\": {}, \"output_length\": 5, \"hash_ids\": []}}\n",
        limit - 5
    );
    let trace = serverbench_workloads::parse_trace("m.jsonl", &text, None).unwrap();
    let out = simulate(&d, &d.cost_model(), &trace, &RunConfig::new(1, 0, 120.0)).unwrap();
    let by_len = |n: u32| out.records.iter().filter(move |r| r.input_tokens == n);
    let pool_exceeded = Outcome::Error(serverbench_sim::Refusal::POOL_EXCEEDED.into());
    assert!(by_len(over).count() > 0 && by_len(over).all(|r| r.outcome == pool_exceeded));
    assert_eq!(out.summary.context_overflow, 0);
    assert!(by_len(limit - 5).any(|r| r.outcome == Outcome::Completed));
    d.engine.cap_requests_at_pool = false;
    assert!(d.check().unwrap_err().to_string().contains("context limit"));
}

#[test]
fn merged_decode_runs_give_the_same_records_as_step_by_step() {
    let mut variants = vec![
        (default_deployment(), 1, 0),
        (default_deployment(), 6, 1),
        (default_deployment(), 24, 2),
    ];
    for (router, c) in [
        (Router::RoundRobin, 12),
        (Router::SessionAffinity, 16),
        (Router::PrefixAware, 8),
        (Router::LeastLoaded, 8),
    ] {
        let mut d = default_deployment();
        d.dp = 2;
        d.router = router;
        variants.push((d, c, 3));
    }
    let mut small = default_deployment();
    small.dp = 2;
    small.context_limit = 200_000;
    small.engine.gpu_memory_utilization = 0.33; // a full cache: runs that evict
    variants.push((small, 24, 4));
    let mut spec = default_deployment();
    spec.engine.speculative = speculative(SpecMethod::Mtp, 3, 0.7);
    variants.push((spec.clone(), 12, 5));
    spec.dp = 2;
    spec.router = Router::PrefixAware;
    variants.push((spec, 16, 6));
    let mut capped = default_deployment();
    capped.engine.max_num_seqs = 4;
    variants.push((capped, 12, 7));
    let mut sglang = default_deployment();
    sglang.engine.policy = Policy::SGLANG;
    variants.push((sglang, 12, 8));
    // The fitted H200 profile: requests reach the engine after its front-end latency, and decode steps
    // count their shared prefix re-reads.
    let fitted = Deployment::preset("qwen3-8b-1xh200").unwrap();
    let cost = fitted.cost_model();
    assert!(cost.request_latency_ns() > 0 && cost.prices_shared_reads());
    variants.push((fitted.clone(), 8, 9));
    let mut fitted_spec = fitted.clone();
    fitted_spec.engine.speculative = speculative(SpecMethod::Draft, 4, 0.8);
    variants.push((fitted_spec, 8, 11));
    // vLLM on the H200: FlashAttention 3's split-KV excess follows each context's blocks through a run.
    let vllm = Deployment::preset("qwen3-8b-1xh200-vllm").unwrap();
    assert!(vllm.cost_model().split_kv().is_some());
    variants.push((vllm.clone(), 16, 14));
    // Asynchronous scheduling: requests held for the step already picked cut the runs around them.
    let mut vllm_async = vllm.clone();
    vllm_async.engine.async_scheduling = true;
    variants.push((vllm_async, 16, 16));
    let mut vllm_dp = vllm;
    vllm_dp.dp = 2;
    vllm_dp.router = Router::SessionAffinity;
    variants.push((vllm_dp, 24, 15));
    let gemma = Deployment::preset("gemma4-e4b-1xl40").unwrap();
    variants.push((gemma.clone(), 8, 12));
    // Decode batches past 4 sequences, and every prefill step, run eagerly at 1 ms per layer.
    let mut eager = gemma;
    eager.engine.cuda_graph_max_tokens = Some(4);
    eager.profile.eager_s_per_layer = 1e-3;
    variants.push((eager, 8, 13));
    let mut fitted_dp = fitted;
    fitted_dp.dp = 2;
    fitted_dp.router = Router::RoundRobin;
    variants.push((fitted_dp, 16, 10));
    for (d, c, seed) in variants {
        let mut cfg = RunConfig::new(c, seed, 500.0);
        let merged = run(&d, &cfg);
        cfg.step_by_step = true;
        let single = run(&d, &cfg);
        assert_eq!(
            serde_json::to_string(&merged.records).unwrap(),
            serde_json::to_string(&single.records).unwrap(),
            "c = {c}"
        );
        assert_eq!(merged.summary.steps, single.summary.steps);
        assert_eq!(merged.summary.score, single.summary.score);
        assert_eq!(merged.summary.itl_s, single.summary.itl_s, "c = {c}");
        assert_eq!(
            merged.summary.spec_tokens_per_verify,
            single.summary.spec_tokens_per_verify
        );
    }
}

/// The inter-token latencies agree with the records: one gap per output token after a request's first
/// (no speculation: one token per chunk), the largest gap of any request is the distribution's
/// maximum, no request's largest gap is below its mean gap (TPOT), and the gaps of the requests that
/// completed add up to their first-to-last-token times.
#[test]
fn inter_token_latencies_agree_with_the_records() {
    let d = default_deployment();
    let out = run(&d, &RunConfig::new(24, 3, 900.0));
    let itl = out.summary.itl_s;
    let gaps: u64 = out
        .records
        .iter()
        .map(|r| r.output_tokens.saturating_sub(1) as u64)
        .sum();
    assert_eq!(itl.count as u64, gaps);
    let max = out
        .records
        .iter()
        .filter_map(|r| r.itl_max_ns)
        .max()
        .unwrap();
    assert_eq!((max as f64 / 1e9 - itl.max).abs(), 0.0);
    let mut spans = 0u64;
    for r in &out.records {
        assert_eq!(r.itl_max_ns.is_some(), r.output_tokens > 1, "{r:?}");
        if let (Some(m), Some(tpot)) = (r.itl_max_ns, r.tpot_s()) {
            assert!(m as f64 / 1e9 >= tpot - 1e-9, "{r:?}");
        }
        if r.outcome == serverbench_sim::Outcome::Completed {
            spans += r.last_token_ns.unwrap() - r.first_token_ns.unwrap();
        }
    }
    // Every gap of a completed request lies between its first and last token; cancelled requests'
    // gaps come on top.
    assert!(
        itl.mean * itl.count as f64 >= spans as f64 / 1e9 * (1.0 - 1e-9),
        "{} {} {spans}",
        itl.mean,
        itl.count
    );
    assert!(itl.p50 <= itl.p90 && itl.p90 <= itl.p99 && itl.p99 <= itl.max);
}

/// Mean over a few seeds of a summary figure, for direction-of-effect checks.
fn mean_over_seeds(d: &Deployment, c: u32, f: impl Fn(&serverbench_sim::Summary) -> f64) -> f64 {
    let seeds = [0u64, 1, 2];
    seeds
        .iter()
        .map(|&s| f(&run(d, &RunConfig::new(c, s, 600.0)).summary))
        .sum::<f64>()
        / seeds.len() as f64
}

#[test]
fn speculative_decoding_lowers_tpot_at_batch_one() {
    let base = default_deployment();
    let mut spec = base.clone();
    spec.engine.speculative = speculative(SpecMethod::Draft, 4, 0.9);
    let (t0, t1) = (
        mean_over_seeds(&base, 1, |s| s.tpot_s.p50),
        mean_over_seeds(&spec, 1, |s| s.tpot_s.p50),
    );
    assert!(t1 < t0 * 0.6, "TPOT with α = 0.9, k = 4: {t1} vs {t0}");
    let out = run(&spec, &RunConfig::new(1, 0, 600.0)).summary;
    let expected = Speculative::expected_tokens(0.9, 4);
    assert!(
        (out.spec_tokens_per_verify - expected).abs() < 0.15,
        "mean accepted {} vs (1 − α^(k+1)) / (1 − α) = {expected}",
        out.spec_tokens_per_verify
    );
    // A per-kind override applies: α = 0 for every kind leaves one token per verify step.
    spec.engine.speculative.as_mut().unwrap().acceptance_by_kind =
        serverbench_sim::KindAcceptance {
            root_turn: Some(0.0),
            subagent_turn: Some(0.0),
            compaction: Some(0.0),
        };
    assert_eq!(
        run(&spec, &RunConfig::new(1, 0, 300.0))
            .summary
            .spec_tokens_per_verify,
        1.0
    );
}

#[test]
fn session_affinity_beats_round_robin_on_prefix_hits() {
    let mut d = default_deployment();
    d.dp = 2;
    d.router = Router::RoundRobin;
    let rr = mean_over_seeds(&d, 8, |s| s.prefix_hit_rate);
    d.router = Router::SessionAffinity;
    let aff = mean_over_seeds(&d, 8, |s| s.prefix_hit_rate);
    d.router = Router::PrefixAware;
    let pa = mean_over_seeds(&d, 8, |s| s.prefix_hit_rate);
    assert!(
        aff > rr + 0.01 && pa > rr + 0.01,
        "hit rates: affinity {aff}, prefix-aware {pa}, round robin {rr}"
    );
    assert_eq!(d.gpus(), 4, "dp × tp GPUs are paid for");
}

#[test]
fn swap_beats_recompute_with_a_fast_host_link_and_long_contexts() {
    let mut d = default_deployment();
    d.context_limit = 200_000;
    d.engine.gpu_memory_utilization = 0.3;
    let recompute = mean_over_seeds(&d, 32, |s| s.output_tokens_per_s);
    d.engine.preemption = Preemption::Swap;
    let out = run(&d, &RunConfig::new(32, 0, 600.0)).summary;
    assert!(out.swaps > 0, "preemptions swapped");
    let swap = mean_over_seeds(&d, 32, |s| s.output_tokens_per_s);
    assert!(
        swap > recompute,
        "output tok/s: swap {swap} vs recompute {recompute}"
    );
}

#[test]
fn sglang_policy_trades_decode_smoothness_for_prefill_priority() {
    // Under the roofline profile, where a decode step that carries a prefill chunk overlaps the two
    // (under the fitted kernel-sum profile they add up, and vLLM's mixed steps are as long as SGLang's
    // prefill-only ones: the p99 TPOTs come within 2 %).
    let mut vllm = default_deployment();
    vllm.profile = serverbench_calibration::Profile::preset("l40-datasheet").unwrap();
    let mut sglang = vllm.clone();
    sglang.engine.policy = Policy::SGLANG;
    let s = run(&sglang, &RunConfig::new(8, 0, 600.0)).summary;
    let v = run(&vllm, &RunConfig::new(8, 0, 600.0)).summary;
    assert!(s.requests > 100 && s.prefix_hit_rate > 0.9);
    // Prefill batches run ahead of decode batches: decodes stall behind them, so the TPOT tail grows.
    assert!(
        s.tpot_s.p99 > v.tpot_s.p99,
        "p99 TPOT sglang {} vs vllm {}",
        s.tpot_s.p99,
        v.tpot_s.p99
    );
    let d = Deployment::from_yaml("s.yaml", "engine:\n  policy: sglang\n").unwrap();
    assert_eq!(
        (d.engine.max_num_batched_tokens, d.engine.max_num_seqs),
        (4096, 1024),
        "sglang's own default budgets"
    );
}

#[test]
fn int4_and_fp8_weights_raise_d_where_decode_is_bandwidth_bound() {
    let base = default_deployment();
    let d0 = mean_over_seeds(&base, 4, |s| s.score.d);
    for w in [
        serverbench_calibration::WeightDtype::Int4,
        serverbench_calibration::WeightDtype::Fp8,
    ] {
        let mut q = base.clone();
        q.weights = w;
        let d1 = mean_over_seeds(&q, 4, |s| s.score.d);
        assert!(d1 > d0, "{w:?}: D {d1} vs bf16 {d0}");
    }
}

/// A server's front end takes requests one at a time (the profile's `frontend_s_per_token`): four lanes
/// that send at the same instant reach the engine one front-end time after another, so the k-th
/// request's first token comes no sooner than the front-end times of the first k together; without the
/// front end the same requests are faster.
#[test]
fn the_front_end_takes_requests_one_at_a_time() {
    let per_token = 1e-5;
    let mut d = Deployment::preset("qwen3-8b-1xh200").unwrap();
    d.profile.request_latency_s = 0.0;
    d.profile.frontend_s_per_token = per_token;
    let mut cfg = RunConfig::new(4, 0, 60.0);
    cfg.protocol = Protocol::Cold;
    let with = run(&d, &cfg);
    d.profile.frontend_s_per_token = 0.0;
    let without = run(&d, &cfg);
    let first: Vec<_> = with.records.iter().filter(|r| r.send_ns == 0).collect();
    assert_eq!(first.len(), 4, "every lane sends at t = 0");
    let mut taken_in = 0u64;
    for r in &first {
        taken_in += (r.input_tokens as f64 * per_token * 1e9).round() as u64;
        let ttft = r.first_token_ns.unwrap();
        assert!(
            ttft > taken_in,
            "{ttft} ns before the front end let it in at {taken_in} ns"
        );
    }
    let same = |a: &serverbench_sim::Record, b: &serverbench_sim::Record| {
        (a.tree, a.request) == (b.tree, b.request)
    };
    let r0 = &without.records[first.len() - 1];
    let r1 = first[first.len() - 1];
    assert!(same(r0, r1));
    assert!(r0.first_token_ns.unwrap() + 1_000_000 < r1.first_token_ns.unwrap());
}

/// Data-parallel attention (`engine.data_parallel_attention`) on a DeepSeek-V3-shaped mixture of
/// experts (DeepSeek-R1's config: 61 layers, 58 of them routed over 256 experts, 8 per token; latent
/// attention) over 8 H200s with expert parallelism: the requests are dealt round robin to the 8
/// attention ranks, whose steps start together and last alike (the slowest rank and the routed
/// layers over all their tokens), the KV bookkeeping holds, every run keeps the invariants, and the
/// same seed gives the same records. Off, the run is the tensor-parallel one.
#[test]
fn data_parallel_attention_steps_its_ranks_in_lockstep() {
    let mut d = Deployment::preset("qwen3-8b-1xh200-vllm").unwrap();
    d.model = serverbench_calibration::hf::from_config(
        "deepseek-r1",
        include_str!("fixtures/hf/deepseek-r1.json"),
    )
    .unwrap();
    d.weights = serverbench_calibration::WeightDtype::Fp8;
    d.tp = 8;
    d.engine.expert_parallel = true;
    d.engine.data_parallel_attention = true;
    d.check().unwrap();
    let mut cfg = RunConfig::new(16, 1, 200.0);
    cfg.timeline = true;
    cfg.audit = true;
    let g = Generator::new(WorkloadSpec::synthetic_v1(), cfg.seed, d.context_limit).unwrap();
    let out = simulate(&d, &d.cost_model(), &g, &cfg).unwrap();
    check_invariants(&out, &cfg, &g);
    assert!(out.summary.completed > 20, "{}", out.summary.completed);
    let ranks: std::collections::BTreeSet<u32> = out.records.iter().map(|r| r.replica).collect();
    assert_eq!(ranks.len(), 8, "{ranks:?}");
    let timeline = out.timeline.as_ref().unwrap();
    let mut by_start: HashMap<u64, Vec<u64>> = HashMap::new();
    for s in timeline {
        by_start.entry(s.start_ns).or_default().push(s.step_ns);
    }
    assert!(
        by_start.values().any(|v| v.len() > 1),
        "ranks step together"
    );
    for steps in by_start.values() {
        assert!(steps.iter().all(|&t| t == steps[0]), "{steps:?}");
    }
    let again = simulate(&d, &d.cost_model(), &g, &cfg).unwrap();
    assert_eq!(
        serde_json::to_string(&out.records).unwrap(),
        serde_json::to_string(&again.records).unwrap()
    );
    d.engine.data_parallel_attention = false;
    let tp = simulate(&d, &d.cost_model(), &g, &cfg).unwrap();
    assert!(tp.records.iter().all(|r| r.replica == 0));
}

/// vLLM's asynchronous scheduling (`engine.async_scheduling`): a request that reaches a busy engine
/// waits for the step in progress and the one already picked, so short requests sent beside a long
/// decode get their first token about one decode step later than with the scheduler seeing them at the
/// next step end; a request that finds the engine idle is scheduled at once, so one lane alone gives
/// the same records either way.
#[test]
fn asynchronous_scheduling_holds_a_request_for_the_step_already_picked() {
    let off = Deployment::preset("qwen3-8b-1xh200-vllm").unwrap();
    assert!(!off.engine.async_scheduling);
    let mut on = off.clone();
    on.engine.async_scheduling = true;
    // One long decode, then short requests: two lanes run the long one beside the short ones.
    let row = |input: u32, output: u32| {
        format!("{{\"timestamp\": 0, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": []}}\n")
    };
    let text = row(4000, 3000) + &row(2000, 2).repeat(60);
    let trace = serverbench_workloads::parse_trace("m.jsonl", &text, None).unwrap();
    let go = |d: &Deployment, c: u32| {
        simulate(d, &d.cost_model(), &trace, &RunConfig::new(c, 0, 20.0)).unwrap()
    };
    let bytes = |o: &RunOutput| serde_json::to_vec(&o.records).unwrap();
    assert_eq!(bytes(&go(&on, 1)), bytes(&go(&off, 1)));
    // Two lanes: the short requests arrive while the long one decodes.
    let short_ttft = |o: &RunOutput| {
        let t: Vec<f64> = o
            .records
            .iter()
            .filter(|r| r.input_tokens == 2000 && r.outcome == Outcome::Completed)
            .map(|r| (r.first_token_ns.unwrap() - r.send_ns) as f64 / 1e9)
            .collect();
        assert!(t.len() > 20, "{} short requests", t.len());
        t.iter().sum::<f64>() / t.len() as f64
    };
    let (a, b) = (go(&on, 2), go(&off, 2));
    let step = a.summary.tpot_s.p50;
    let extra = short_ttft(&a) - short_ttft(&b);
    assert!(
        extra > 0.5 * step && extra < 1.5 * step,
        "held {extra} s longer with decode steps of {step} s"
    );
}
