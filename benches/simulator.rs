//! Simulator speed: one 1800 s replay of the default deployment at c = 16 and c = 64 (and at c = 16
//! under the cold and the AgentX protocols), a 120 s steady replay of the vLLM H200 deployment at c = 16
//! and 64 (split-KV decode and L2 reuse priced), the 128-seed
//! workload scan, generating + validating 10,000 session trees, open-loop replays of recorded arrivals,
//! the default sweep (11 levels × 8 seeds, on every core), and `workload fit` of the shipped corpus.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serverbench_sim::{scan, simulate, Arrivals, Deployment, Protocol, RunConfig};
use serverbench_workloads::{Generator, TreeSource, WorkloadSpec};
use std::hint::black_box;
use std::time::Duration;

fn replay(c: &mut Criterion) {
    let d = Deployment::preset("qwen3.5-9b-2xl40").expect("preset");
    let cost = d.cost_model();
    let g = Generator::new(WorkloadSpec::default(), 0, d.context_limit).expect("spec");
    let mut group = c.benchmark_group("simulate_1800s");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4));
    for conc in [16u32, 64] {
        group.bench_function(format!("qwen3.5-9b-2xl40_c{conc}"), |b| {
            b.iter(|| {
                black_box(
                    simulate(&d, &cost, &g, &RunConfig::new(conc, 0, 1800.0))
                        .expect("runs")
                        .summary
                        .score
                        .d,
                )
            })
        });
    }
    group.finish();
    // vLLM on the H200 (its split-KV decode schedule and the L2 on shared prefix blocks priced every
    // run of decode steps), steady, 120 s: the fidelity sets' shape.
    let vllm = Deployment::preset("qwen3-8b-1xh200-vllm").expect("preset");
    let vllm_cost = vllm.cost_model();
    let synthetic = WorkloadSpec::preset("synthetic-v1").expect("spec");
    let vg = Generator::new(synthetic, 0, vllm.context_limit).expect("spec");
    let mut group = c.benchmark_group("vllm_h200_steady_120s");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4));
    for conc in [16u32, 64] {
        let cfg = RunConfig {
            protocol: Protocol::Steady,
            ..RunConfig::new(conc, 0, 120.0)
        };
        group.bench_function(format!("c{conc}"), |b| {
            b.iter(|| {
                black_box(
                    simulate(&vllm, &vllm_cost, &vg, &cfg)
                        .expect("runs")
                        .summary
                        .score
                        .d,
                )
            })
        });
    }
    group.finish();
    // The protocols against each other on the same trees: a cold start and AgentX's (warm-up and all).
    let mut group = c.benchmark_group("protocol_c16_1800s");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(4));
    for protocol in [Protocol::Cold, Protocol::Agentx, Protocol::AgentxMvp] {
        let cfg = RunConfig {
            protocol,
            ..RunConfig::new(16, 0, 1800.0)
        };
        group.bench_function(protocol.name(), |b| {
            b.iter(|| black_box(simulate(&d, &cost, &g, &cfg).expect("runs").summary.score.d))
        });
    }
    group.finish();
}

fn workload(c: &mut Criterion) {
    let d = Deployment::preset("qwen3.5-9b-2xl40").expect("preset");
    let mut group = c.benchmark_group("workload");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("scan_128_seeds_c16_1800s_one_core", |b| {
        b.iter(|| {
            let mut total = 0.0;
            for seed in 0..128 {
                let g =
                    Generator::new(WorkloadSpec::default(), seed, d.context_limit).expect("spec");
                total += scan(&g, &d.prices, seed, 16, 1800.0, 10.0)
                    .expect("bounded")
                    .value;
            }
            black_box(total)
        })
    });
    group.bench_function("generate_validate_10000_trees", |b| {
        let g = Generator::new(WorkloadSpec::default(), 1, d.context_limit).expect("spec");
        b.iter(|| black_box((0..10_000u64).map(|k| g.generate(k).len()).sum::<usize>()))
    });
    group.finish();
}

/// The what-if knobs at c = 16: how much each costs the simulator, per run and per simulated request
/// (criterion's throughput, in requests per second). A knob that makes the simulated server faster
/// also makes the closed loop send more requests in the same window, so the per-request rate is the
/// fair comparison of the simulator's own speed; `default` is the baseline of both.
fn knobs(c: &mut Criterion) {
    let base = Deployment::preset("qwen3.5-9b-2xl40").expect("preset");
    let g = Generator::new(WorkloadSpec::default(), 0, base.context_limit).expect("spec");
    let variants = [
        ("default", ""),
        ("sglang", "engine: {policy: sglang}"),
        (
            "speculative_mtp_k3",
            "engine: {speculative: {method: mtp, k: 3, acceptance: 0.7}}",
        ),
        ("dp2_session_affinity", "dp: 2\nrouter: session_affinity"),
        ("dp2_round_robin", "dp: 2\nrouter: round_robin"),
        ("int4", "weights: int4"),
        ("swap", "engine: {preemption: swap}"),
    ];
    let mut group = c.benchmark_group("knobs_c16_1800s");
    group
        .sample_size(15)
        .measurement_time(Duration::from_secs(3));
    for (name, yaml) in variants {
        let d = if yaml.is_empty() {
            base.clone()
        } else {
            base.clone().with_overrides(name, yaml).expect("valid knob")
        };
        let cost = d.cost_model();
        let run = RunConfig::new(16, 0, 1800.0);
        let requests = simulate(&d, &cost, &g, &run)
            .expect("runs")
            .summary
            .requests;
        group.throughput(Throughput::Elements(requests as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(simulate(&d, &cost, &g, &run).expect("runs").summary.score.d))
        });
    }
    group.finish();
}

/// Open-loop replays of recorded arrivals: a 300-request `requests` trace, and 10,000 Mooncake requests
/// (the 200-line sample tiled 50 times, each copy 72 s after the last), each request at its timestamp.
fn open_loop(c: &mut Criterion) {
    let d = Deployment::preset("qwen3-8b-1xh200").expect("preset");
    let cost = d.cost_model();
    let requests: String = (0..300)
        .map(|i| {
            format!(
                "{{\"arrival_s\": {}, \"input_tokens\": {}, \"output_tokens\": {}, \"hash_ids\": [1, {}]}}\n",
                i as f64 * 0.2,
                1000 + (i % 9) * 400,
                50 + (i % 5) * 60,
                i + 2
            )
        })
        .collect();
    let short = serverbench_workloads::parse_trace("r.jsonl", &requests, None).expect("trace");
    let sample = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/mooncake/sample_200.jsonl"
    ))
    .expect("sample");
    let mut tiled = String::new();
    for copy in 0..50u64 {
        for line in sample.lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("json");
            let mut v = v.as_object().expect("object").clone();
            let t = v["timestamp"].as_f64().expect("timestamp") + copy as f64 * 72_000.0;
            v.insert("timestamp".into(), t.into());
            tiled.push_str(&serde_json::to_string(&v).expect("json"));
            tiled.push('\n');
        }
    }
    let long = serverbench_workloads::parse_trace("m.jsonl", &tiled, None).expect("trace");
    let open = |window_s| RunConfig {
        arrivals: Arrivals::Trace { speedup: 1.0 },
        concurrency: serverbench_sim::MAX_CONCURRENCY,
        ..RunConfig::new(1, 0, window_s)
    };
    let mut group = c.benchmark_group("open_loop");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    for (name, trace, window) in [
        ("requests_300", &short, 120.0),
        ("mooncake_10000", &long, 3700.0),
    ] {
        let run = open(window);
        let n = simulate(&d, &cost, trace, &run)
            .expect("runs")
            .records
            .len();
        assert_eq!(n as u64, trace.finite_len().unwrap(), "every request sent");
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    simulate(&d, &cost, trace, &run)
                        .expect("runs")
                        .summary
                        .score
                        .d,
                )
            })
        });
    }
    group.finish();
}

/// The main job and the fit: `sweep` on its defaults (every core) and `workload fit` of the whole shipped
/// corpus (reading it, fitting, drawing 2,000 sessions and measuring them).
fn main_job(c: &mut Criterion) {
    let d = Deployment::preset("qwen3.5-9b-2xl40").expect("preset");
    let study = serverbench_study::Study::new(
        d,
        serverbench_workloads::Workload::default(),
        RunConfig::new(1, 0, 1800.0),
    );
    let levels = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64];
    let seeds: Vec<u64> = (0..8).collect();
    let mut group = c.benchmark_group("main_job");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("default_sweep_11_levels_8_seeds", |b| {
        b.iter(|| {
            let r = serverbench_study::sweep(&study, &levels, &seeds, &[], &|| {}).expect("runs");
            black_box(r.best_mean)
        })
    });
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let dirs = ["claude-code", "mini-swe-agent", "swe-agent"].map(|d| root.join(d));
    group.bench_function("workload_fit_whole_corpus", |b| {
        b.iter(|| {
            let paths: Vec<&std::path::Path> = dirs.iter().map(|p| p.as_path()).collect();
            let i = serverbench_workloads::import(&paths, None).expect("the corpus reads");
            let (spec, report) = serverbench_workloads::fit::fit_and_report(
                &i.trees,
                &[],
                "bench",
                2000,
                1_048_576,
                Default::default(),
            )
            .expect("fits");
            black_box((spec.system_prefix_tokens, report.rows.len()))
        })
    });
    group.finish();
}

// criterion's macro defines an undocumented function (`benches`); nothing outside this file sees it.
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, replay, workload, knobs, open_loop, main_job);
}
use group::benches;
criterion_main!(benches);
