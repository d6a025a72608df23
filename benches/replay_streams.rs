//! Client overhead under load: the real-time replay holding hundreds of concurrent streams against the
//! in-process emulated server on loopback. Reports dispatch drift (send time after the intended time)
//! and the most streams open at once. Not a criterion bench: one long run, wall-clock by nature.
//!
//! `cargo bench --bench replay_streams` (LANES, WINDOW_S and SERVER_SCALE override 512, 30 and 10).
//! The emulated engine runs SERVER_SCALE times faster than real time so that warming 512 long prompts
//! (15M prompt tokens) takes minutes, not an hour (≈ 8 minutes on a 2-core machine with the fitted H200
//! profile); the client runs in real time.

use serverbench_backends::{
    run_real, spawn_local, Api, ClientConfig, HttpClient, RealConfig, RecordSink, ServeConfig,
};
use serverbench_sim::{Deployment, Protocol, RunConfig};
use serverbench_workloads::tokens::Vocab;
use serverbench_workloads::{Generator, WorkloadSpec};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() {
    if std::env::args().any(|a| a == "--list" || a == "--test") {
        return; // nothing to list or smoke-test quickly
    }
    let lanes: u32 = std::env::var("LANES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let window: f64 = std::env::var("WINDOW_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30.0);
    let server_scale: f64 = std::env::var("SERVER_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10.0);
    let mut d = Deployment::preset("qwen3-8b-1xh200").expect("preset");
    d.engine.max_num_seqs = 1024;
    d.context_limit = 262_144;
    let mut run = RunConfig::new(lanes, 0, window);
    run.protocol = Protocol::Steady;
    let g = Generator::new(WorkloadSpec::default(), 0, d.context_limit).expect("spec");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let out = rt.block_on(async {
        let cfg = ServeConfig {
            deployment: d.clone(),
            cost: d.cost_model(),
            time_scale: server_scale,
            model_name: "m".into(),
            vocab: 151_936,
            cuda: None,
            limits: Default::default(),
            generation: Default::default(),
            words: None,
        };
        let url = spawn_local(cfg).await.expect("emulator");
        let client = Arc::new(
            HttpClient::new(ClientConfig::new(
                url,
                Api::CompletionsTokens,
                serverbench_backends::Server::Vllm,
                "m",
                Duration::from_secs(600),
            ))
            .expect("client"),
        );
        let real = RealConfig {
            run,
            time_scale: 1.0,
            vocab: Vocab::new(100, 151_936).expect("vocab"),
            stop: Default::default(),
        };
        run_real(
            &d,
            &g,
            client,
            &real,
            &mut RecordSink::new(None).expect("sink"),
            &|_| {},
        )
        .await
        .expect("replay")
    });
    let c = &out.client;
    println!("replay_streams: {lanes} lanes, {window} s window, {} warm-up requests, {:.1} s wall in all", c.warmup_requests, started.elapsed().as_secs_f64());
    println!(
        "  requests sent {} · completed {} · errors {:?}",
        out.summary.requests, out.summary.completed, c.errors_by_kind
    );
    println!("  most streams open at once: {}", c.max_in_flight);
    println!("  dispatch drift: p50 {:.3} ms · p90 {:.3} ms · p99 {:.3} ms · max {:.3} ms (target p99 < 5 ms)", c.dispatch_drift_ms.p50, c.dispatch_drift_ms.p90, c.dispatch_drift_ms.p99, c.dispatch_drift_ms.max);
}
