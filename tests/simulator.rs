//! The simulator end to end: determinism, invariants, scoring directions, bad configurations.

use proptest::prelude::*;
use serverbench_calibration::{CostInputs, CostModel, HardwareSpec, Profile};
use serverbench_sim::{simulate, Deployment, Outcome, RunConfig, RunOutput, StartMode};
use serverbench_workloads::{Generator, TreeSource, WorkloadSpec};
use std::collections::HashMap;

fn run(d: &Deployment, cfg: &RunConfig) -> RunOutput {
    let g = Generator::new(WorkloadSpec::default(), cfg.seed, d.context_limit).unwrap();
    simulate(d, &d.cost_model(None), &g, cfg).unwrap()
}

fn default_deployment() -> Deployment {
    Deployment::preset("qwen3.5-9b-2xl40").unwrap()
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
                    cfg.start,
                    StartMode::Steady,
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
    for (c, start) in [(32, StartMode::Steady), (8, StartMode::Cold)] {
        let mut cfg = RunConfig::new(c, 1, 400.0);
        cfg.start = start;
        cfg.audit = true;
        let g = Generator::new(WorkloadSpec::default(), 1, d.context_limit).unwrap();
        let out = simulate(&d, &d.cost_model(None), &g, &cfg).unwrap();
        check_invariants(&out, &cfg, &g);
        if c == 32 {
            assert!(out.summary.preemptions > 0, "the small pool should preempt");
            assert!(out.summary.kv_occupancy_max <= 1.0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]
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
    ) {
        let mut d = default_deployment();
        d.context_limit = 200_000;
        d.engine.gpu_memory_utilization = util;
        d.engine.block_size = block_size;
        d.engine.max_num_batched_tokens = budget;
        d.engine.max_num_seqs = max_seqs;
        d.engine.prefix_caching = caching;
        let mut cfg = RunConfig::new(c, seed, 150.0);
        cfg.audit = true;
        cfg.start = if cold { StartMode::Cold } else { StartMode::Steady };
        let g = Generator::new(WorkloadSpec::default(), seed, d.context_limit).unwrap();
        let out = simulate(&d, &d.cost_model(None), &g, &cfg).unwrap();
        check_invariants(&out, &cfg, &g);
    }
}

#[test]
fn more_memory_bandwidth_never_lowers_d() {
    let d = default_deployment();
    let g = Generator::new(WorkloadSpec::default(), 2, d.context_limit).unwrap();
    let (model, profile) = (d.model_spec(), Profile::preset(&d.profile).unwrap());
    let mut last = -1.0;
    for factor in [0.8, 1.0, 1.5, 2.5] {
        let mut hw = HardwareSpec::preset(&d.hardware).unwrap();
        hw.memory_bandwidth *= factor;
        let cost = CostModel::new(CostInputs {
            model: &model,
            hardware: &hw,
            profile: &profile,
            dtype: d.weights,
            group_size: d.quant_group_size,
            tp: d.tp,
            draft_params: 0.0,
        });
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
    let e = serverbench_sim::Replica::new(&d, 0)
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
    let msg = serverbench_sim::Replica::new(&d, 0).err().unwrap().to_string();
    assert!(msg.contains("weights"), "{msg}");
}

#[test]
fn imported_requests_over_the_context_limit_fail_as_overflow() {
    let mut d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
    d.context_limit = 30_000;
    let text = "{\"timestamp\": 0, \"input_length\": 40000, \"output_length\": 5, \"hash_ids\": []}\n{\"timestamp\": 0, \"input_length\": 4000, \"output_length\": 5, \"hash_ids\": []}\n";
    let trace = serverbench_workloads::parse_trace("m.jsonl", text, None).unwrap();
    let out = simulate(&d, &d.cost_model(None), &trace, &RunConfig::new(1, 0, 30.0)).unwrap();
    let s = &out.summary;
    assert!(s.context_overflow > 0 && s.completed > 0);
    assert!(out
        .records
        .iter()
        .filter(|r| r.input_tokens == 40_000)
        .all(|r| r.outcome == Outcome::ContextOverflow));
    assert!(!s.valid, "half the requests overflowed: the run is invalid");
}

#[test]
fn merged_decode_runs_give_the_same_records_as_step_by_step() {
    let d = default_deployment();
    for (c, seed) in [(1, 0), (6, 1), (24, 2)] {
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
    }
}
