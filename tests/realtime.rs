//! Real-time tests on loopback: the replay against the emulated server agrees with the simulator, and
//! the client survives a deliberately faulty server. They run one at a time (a lock), since they
//! measure wall-clock time on a small machine.

use axum::body::Body;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serverbench_backends::{
    run_real, spawn_local, Api, ClientConfig, HttpClient, RealConfig, RealOutput, RecordSink,
    ServeConfig,
};
use serverbench_sim::{simulate, Deployment, Outcome, Protocol, Record, RunConfig};
use serverbench_workloads::tokens::Vocab;
use serverbench_workloads::{Generator, TreeSource, WorkloadSpec};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "abuse.rs"]
mod abuse;
#[path = "replay_faults.rs"]
mod replay_faults;

static SERIAL: Mutex<()> = Mutex::new(());

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client(url: &str, timeout: Duration) -> Arc<HttpClient> {
    client_of(url, timeout, Api::CompletionsTokens)
}

fn client_of(url: &str, timeout: Duration, api: Api) -> Arc<HttpClient> {
    Arc::new(
        HttpClient::new(ClientConfig {
            affinity_header: Some("X-Session-ID".into()),
            ..ClientConfig::new(url, api, serverbench_backends::Server::Vllm, "m", timeout)
        })
        .unwrap(),
    )
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

/// The AgentX protocol on the wall clock: four WEKA traces with sub-agents, replayed as AgentX does
/// (chat messages, warm-up, recorded clock) against the emulator, agree with the simulator's replay of
/// the same protocol; the warm-up is never recorded and the records are the window's.
#[test]
fn the_agentx_protocol_replays_on_the_wall_clock_as_in_the_simulator() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
    let names = ["trace_0274", "trace_0277", "trace_0282", "trace_0291"];
    let paths: Vec<std::path::PathBuf> = names
        .iter()
        .map(|n| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(format!("tests/fixtures/weka-kvt/traces/{n}.json.gz"))
        })
        .collect();
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let trees = serverbench_workloads::import(&refs, None).unwrap().trees;
    let trace = serverbench_workloads::Trace::new(trees).unwrap();
    let run = RunConfig {
        protocol: Protocol::Agentx,
        ..RunConfig::new(3, 42, 240.0)
    };
    let sim = simulate(&d, &d.cost_model(), &trace, &run).unwrap().summary;
    let speed = 10.0;
    let real = runtime().block_on(async {
        let cfg = ServeConfig {
            deployment: d.clone(),
            cost: d.cost_model(),
            time_scale: speed,
            model_name: "m".into(),
            vocab: 248_320,
            cuda: None,
            limits: Default::default(),
            generation: Default::default(),
            words: None,
        };
        let url = spawn_local(cfg).await.unwrap();
        let real_cfg = RealConfig {
            run,
            time_scale: speed,
            vocab: Vocab::new(100, 248_320).unwrap(),
            stop: Default::default(),
        };
        // The token API is refused: AgentX sends chat completions.
        let refused = run_real(
            &d,
            &trace,
            client(&url, Duration::from_secs(30)),
            &real_cfg,
            &mut RecordSink::new(None).unwrap(),
            &|_| {},
        )
        .await;
        assert!(refused.is_err());
        run_real(
            &d,
            &trace,
            client_of(&url, Duration::from_secs(30), Api::Chat),
            &real_cfg,
            &mut RecordSink::new(None).unwrap(),
            &|_| {},
        )
        .await
        .unwrap()
    });
    let (r, a) = (&real.summary, real.summary.agentx.as_ref().unwrap());
    let s = sim.agentx.as_ref().unwrap();
    assert_eq!(
        real.client.errors_by_kind.len(),
        0,
        "{:?}",
        real.client.errors_by_kind
    );
    assert_eq!(real.client.length_mismatches, 0);
    assert_eq!(a.lanes, 3);
    assert_eq!(a.primers, s.primers, "the same primers");
    assert!(
        real.client.warmup_requests >= 30,
        "{}",
        real.client.warmup_requests
    );
    assert_eq!(a.warmup_requests, real.client.warmup_requests);
    assert!(real.records.iter().all(|x| x.send_ns < 240_000_000_000));
    assert!(real
        .records
        .iter()
        .all(|x| x.finish_ns.unwrap() <= 270_000_000_000));
    // The same protocol on both sides: as many requests within a fifth (the chat prompts' tokens, as
    // the emulator counts them, differ from the trace's by the marker and message boundaries).
    let ratio = r.requests as f64 / sim.requests as f64;
    eprintln!(
        "agentx on the wall clock: requests real {} sim {}, D real {:.3} sim {:.3}, warm-up {} / {}",
        r.requests, sim.requests, r.score.d, sim.score.d, a.warmup_requests, s.warmup_requests
    );
    assert!(
        (0.8..=1.25).contains(&ratio),
        "requests real {} sim {}",
        r.requests,
        sim.requests
    );
}

/// Replays `source` for `run` against `serve` of deployment `d` on loopback at `speed` × real time.
async fn replay_against_the_emulator(
    d: &Deployment,
    source: &dyn TreeSource,
    run: RunConfig,
    vocab: u32,
    speed: f64,
) -> RealOutput {
    let cfg = ServeConfig {
        deployment: d.clone(),
        cost: d.cost_model(),
        time_scale: speed,
        model_name: "m".into(),
        vocab,
        cuda: None,
        limits: Default::default(),
        generation: Default::default(),
        words: None,
    };
    let url = spawn_local(cfg).await.unwrap();
    let real_cfg = RealConfig {
        run,
        time_scale: speed,
        vocab: Vocab::new(100, vocab).unwrap(),
        stop: Default::default(),
    };
    run_real(
        d,
        source,
        // 300 s of engine time: the longest requests of these windows take under that.
        client(&url, Duration::from_secs_f64(300.0 / speed)),
        &real_cfg,
        &mut RecordSink::new(None).unwrap(),
        &|_| {},
    )
    .await
    .unwrap()
}

#[test]
fn replay_against_the_emulator_agrees_with_the_simulator() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
    let run = RunConfig::new(4, 0, 480.0);
    let g = Generator::new(WorkloadSpec::synthetic_v1(), 0, d.context_limit).unwrap();
    let sim = simulate(&d, &d.cost_model(), &g, &run).unwrap().summary;
    let rt = runtime();
    // 10 × real time, not 20 ×: at 20 × a step lasts ~1.2 ms of wall time and on a loaded 2-core machine
    // the per-step work of client, server and engine no longer fits (p90 TTFT read 18–33 % high). p90
    // TTFT reads 4–8 % high at 10 × on an idle machine and 6–11 % at 5 × (so not from the speed-up: a
    // real replay's per-request path adds to every first token), 11–28 % under a loaded CI run. On
    // 2026-12-03 the same machine kind read 15.0–17.0 % idle, at this commit and at the one before the
    // day's changes alike (48bae07): about 75 ms of engine time at p90, 7.5 ms of wall time per long
    // request — the client writing and the server reading prompts of tens of thousands of token ids,
    // which the simulator does not time. p90 TTFT is held to 30 %, D and p90 TPOT (0.0–4.7 %) to 10 %.
    // Wall-clock measurements on a shared 2-core machine can be disturbed by anything else running, and
    // p90 TTFT sits on a handful of long prefills whose queueing shifts with dispatch timing (at 240 s it
    // read 8.7-11.5 % low in three runs in a row): 480 s, up to three attempts, every report printed.
    let mut reports = Vec::new();
    for _attempt in 0..3 {
        let real = rt.block_on(replay_against_the_emulator(&d, &g, run, 248_320, 10.0));
        assert_eq!(
            real.client.errors_by_kind.len(),
            0,
            "{:?}",
            real.client.errors_by_kind
        );
        assert_eq!(real.client.length_mismatches, 0);
        let r = &real.summary;
        // One inter-token gap per output chunk after a request's first (the emulator streams one token
        // per chunk), measured on the client's clock; its median is the step time the simulator's is.
        let gaps: u64 = real
            .records
            .iter()
            .filter(|x| x.itl_max_ns.is_some())
            .map(|x| x.output_tokens as u64 - 1)
            .sum();
        assert_eq!(r.itl_s.count as u64, gaps);
        assert!(
            rel(r.itl_s.p50, sim.itl_s.p50) <= 0.25,
            "p50 ITL sim {} real {}",
            sim.itl_s.p50,
            r.itl_s.p50
        );
        let errors = [
            rel(r.score.d, sim.score.d),
            rel(r.ttft_s.p90, sim.ttft_s.p90),
            rel(r.tpot_s.p90, sim.tpot_s.p90),
        ];
        let report = format!(
            "D sim {:.3} real {:.3} ({:.1} %); p90 TTFT sim {:.3} real {:.3} ({:.1} %); p90 TPOT sim {:.2} ms real {:.2} ms ({:.1} %)",
            sim.score.d, r.score.d, 100.0 * errors[0], sim.ttft_s.p90, r.ttft_s.p90, 100.0 * errors[1], sim.tpot_s.p90 * 1e3, r.tpot_s.p90 * 1e3, 100.0 * errors[2]
        );
        eprintln!("{report}");
        reports.push(report);
        if errors[0] <= 0.10 && errors[1] <= 0.30 && errors[2] <= 0.10 {
            return;
        }
    }
    panic!(
        "the replay against the emulator disagrees with the simulator (D, p90 TPOT by more than 10 %, p90 TTFT by more than 30 %):\n{}",
        reports.join("\n")
    );
}

/// A request over the context limit is not sent to a real server either: it fails as
/// `context_overflow` at once, as in the simulator (a server would answer it with an HTTP 400, which
/// the replay counted as an error until a 56K-token request of the H200 fidelity runs showed it).
#[test]
fn requests_over_the_context_limit_fail_as_overflow_against_a_server_too() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
    d.context_limit = 30_000;
    let text = "{\"timestamp\": 0, \"input_length\": 40000, \"output_length\": 5, \"hash_ids\": []}\n\
                {\"timestamp\": 0, \"input_length\": 4000, \"output_length\": 5, \"hash_ids\": []}\n";
    let trace = serverbench_workloads::parse_trace("m.jsonl", text, None).unwrap();
    let run = RunConfig::new(1, 0, 20.0);
    let sim = simulate(&d, &d.cost_model(), &trace, &run).unwrap();
    let real = runtime().block_on(replay_against_the_emulator(&d, &trace, run, 262_144, 10.0));
    assert!(
        real.client.errors_by_kind.is_empty(),
        "{:?}",
        real.client.errors_by_kind
    );
    let long: Vec<&Record> = real
        .records
        .iter()
        .filter(|r| r.input_tokens == 40_000)
        .collect();
    assert!(!long.is_empty());
    assert!(long
        .iter()
        .all(|r| r.outcome == Outcome::ContextOverflow && r.first_token_ns.is_none()));
    assert!(real.summary.completed > 0);
    assert_eq!(real.summary.context_overflow, long.len());
    assert!(sim.summary.context_overflow > 0);
}

/// An open-loop replay on the wall clock sends each request at its recorded time, late by no more than
/// the dispatch drift the client measured (records are in server time: the drift times the scale).
#[test]
fn a_trace_replayed_open_loop_on_the_wall_clock_keeps_its_timestamps() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
    let text: String = (0..60)
        .map(|i| {
            let t = 2.0 + i as f64 * 0.37 + if i % 3 == 0 { 0.0 } else { 0.05 };
            format!(
                "{{\"arrival_s\": {t}, \"input_tokens\": {}, \"output_tokens\": 12}}\n",
                300 + 40 * i
            )
        })
        .collect();
    let trace = serverbench_workloads::parse_trace("r.jsonl", &text, None).unwrap();
    let run = RunConfig {
        arrivals: serverbench_sim::Arrivals::Trace { speedup: 1.0 },
        concurrency: serverbench_sim::MAX_CONCURRENCY,
        ..RunConfig::new(1, 0, 60.0)
    };
    let started = std::time::Instant::now();
    let real = runtime().block_on(replay_against_the_emulator(&d, &trace, run, 262_144, 10.0));
    // The trace ends 24 s (2.4 s of wall clock) in: the replay stops once it has drained, not at 60 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(real.records.len(), 60);
    assert!(real.records.iter().all(|r| r.outcome == Outcome::Completed));
    let drift_ns = real.client.dispatch_drift_ms.max * 1e6 * 10.0;
    let mut lateness = Vec::new();
    for r in &real.records {
        let i = r.tree as f64;
        let recorded = (i * 0.37 + if r.tree % 3 == 0 { 0.0 } else { 0.05 }) * 1e9;
        let late = r.send_ns as f64 - recorded;
        assert!(late >= -1e6, "request {} sent {late} ns early", r.tree);
        assert!(
            late <= drift_ns + 1e6,
            "request {} sent {late} ns late; the drift was {drift_ns} ns at most",
            r.tree
        );
        lateness.push(late);
    }
    lateness.sort_by(f64::total_cmp);
    eprintln!(
        "open-loop dispatch: median {:.2} ms, max {:.2} ms late (server time)",
        lateness[30] / 1e6,
        lateness[59] / 1e6
    );
    assert!(lateness[30] < 50e6, "median {} ns late", lateness[30]);
}

/// A server that fails on purpose, one way per request in turn.
fn faulty_router(counter: Arc<AtomicU64>) -> Router {
    Router::new().route(
        "/v1/completions",
        post(move |body: axum::Json<serde_json::Value>| {
            let n = counter.fetch_add(1, Ordering::Relaxed);
            let max = body.get("max_tokens").and_then(|v| v.as_u64()).unwrap_or(1);
            async move { fault(n % 7, max).await }
        }),
    )
}

fn chunk(text: &str) -> String {
    format!(
        "data: {{\"choices\":[{{\"index\":0,\"text\":\"{text}\",\"finish_reason\":null}}]}}\n\n"
    )
}

fn usage(completion: u64) -> String {
    format!("data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{completion}}}}}\n\n")
}

async fn fault(kind: u64, max: u64) -> Response {
    let sse = |body: String| {
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from(body))
            .unwrap()
    };
    match kind {
        // A healthy stream (tokens in pieces, a keep-alive, usage, [DONE]).
        0 => sse(format!(
            ": ping\n\n{}{}data: [DONE]\n\n",
            (0..max).map(|_| chunk(" x")).collect::<String>(),
            usage(max)
        )),
        1 => Response::builder()
            .status(500)
            .body(Body::from("internal error"))
            .unwrap(),
        // The connection drops mid-stream: two tokens, then the body ends without [DONE].
        2 => {
            let s = futures_util::stream::iter(vec![
                Ok::<_, std::io::Error>(bytes::Bytes::from(chunk(" a"))),
                Ok(bytes::Bytes::from(chunk(" b"))),
                Err(std::io::Error::other("dropped")),
            ]);
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(s))
                .unwrap()
        }
        3 => sse(format!("{}data: {{not json\n\n", chunk(" y"))),
        // Slower than the client's timeout.
        4 => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            sse("data: [DONE]\n\n".into())
        }
        // A usage below the chunks: two tokens fewer than streamed, one fewer than asked for.
        5 => sse(format!(
            "{}{}data: [DONE]\n\n",
            (0..max.saturating_sub(1))
                .map(|_| chunk(" w"))
                .collect::<String>(),
            usage(max.saturating_sub(2))
        )),
        // Several tokens in one chunk: one chunk fewer than asked for, and usage counts them all.
        _ => sse(format!(
            "{}{}data: [DONE]\n\n",
            (0..max.saturating_sub(1))
                .map(|_| chunk(" z"))
                .collect::<String>(),
            usage(max)
        )),
    }
}

#[test]
fn the_replay_survives_a_faulty_server_and_counts_every_failure() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
    let mut run = RunConfig::new(6, 1, 600.0);
    run.protocol = Protocol::Cold;
    let g = Generator::new(WorkloadSpec::synthetic_v1(), 1, d.context_limit).unwrap();
    let dir = std::env::temp_dir().join(format!("serverbench-faulty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("records.jsonl");
    let rt = runtime();
    let out = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let router = faulty_router(Arc::new(AtomicU64::new(0)));
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        let cfg = RealConfig {
            run,
            time_scale: 100.0,
            vocab: Vocab::new(100, 1000).unwrap(),
            stop: Default::default(),
        };
        let mut sink = RecordSink::new(Some(&path)).unwrap();
        run_real(
            &d,
            &g,
            client(&url, Duration::from_millis(500)),
            &cfg,
            &mut sink,
            &|_| {},
        )
        .await
        .unwrap()
    });
    let kinds = &out.client.errors_by_kind;
    for k in ["http_500", "dropped", "malformed_json", "timeout"] {
        assert!(
            kinds.get(k).copied().unwrap_or(0) > 0,
            "no {k} among {kinds:?}"
        );
    }
    // A usage above the chunks (up to max_tokens) is several tokens in a chunk: counted, and kept in
    // the behaviour checks; a usage below them is not believed (a length mismatch and a stream/usage
    // mismatch).
    assert!(
        out.client.coalesced_streams > 0
            && out.client.length_mismatches > 0
            && out.client.chunk_usage_mismatches > 0,
        "wrong token counts are counted: {:?}",
        out.client
    );
    let completed = out
        .records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .count();
    assert!(completed > 0, "the healthy requests complete");
    assert!(
        out.summary.score.f < 1.0 && out.summary.score.g > 0.0,
        "failures count in G, never in D"
    );
    // Every request appears in records.jsonl, finished ones as they ended.
    let written: Vec<Record> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(written.len(), out.records.len());
    for r in out
        .records
        .iter()
        .filter(|r| r.outcome != Outcome::Cancelled)
    {
        assert!(
            written.contains(r),
            "finished record missing from records.jsonl: {r:?}"
        );
    }
    let errors: usize = kinds.values().sum();
    assert_eq!(errors, out.summary.errors);
}

#[test]
fn serve_and_replay_work_from_the_command_line() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bin = env!("CARGO_BIN_EXE_serverbench");
    let mut server = std::process::Command::new(bin)
        .args(["serve", "--port", &port.to_string(), "--time-scale", "50"])
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let rt = runtime();
    let ready = rt.block_on(async {
        for _ in 0..100 {
            if reqwest_get(&format!("{url}/health")).await.is_some() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    });
    assert!(ready, "the server came up");
    let dir = std::env::temp_dir().join(format!("serverbench-cli-replay-{}", std::process::id()));
    let out = std::process::Command::new(bin)
        .args([
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            &url,
            "-c",
            "2",
            "-w",
            "120",
            "--time-scale",
            "50",
            "--out",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let metrics = rt
        .block_on(reqwest_get(&format!("{url}/metrics")))
        .unwrap_or_default();
    server.kill().ok();
    server.wait().ok();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{}",
        text,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("natural stop          ok"), "{text}");
    assert!(text.contains("errors by kind        none"), "{text}");
    // A client sees no KV cache and no engine steps: the table says so instead of printing zeros.
    assert!(
        text.contains("KV cache     not measured by a client"),
        "{text}"
    );
    assert!(!text.contains("engine steps"), "{text}");
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    assert!(
        records
            .lines()
            .all(|l| serde_json::from_str::<Record>(l).is_ok())
            && records.lines().count() > 5
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["natural_stop_probe"]["finish_reason"], "stop");
    assert!(
        metrics.contains("vllm:num_requests_running")
            && metrics.contains("vllm:prefix_cache_hits_total"),
        "{metrics}"
    );
    // Server-side latency histograms: every finished request observed, the inter-token latency near
    // what the client measured as TPOT (server time both).
    let value = |series: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
    };
    let finished = value("vllm:request_success_total");
    assert!(finished > 0.0);
    assert!(value("vllm:time_to_first_token_seconds_count") >= finished);
    assert_eq!(value("vllm:e2e_request_latency_seconds_count"), finished);
    // Every request that reached a step waited in the queue first; the wait ends before its first token.
    let queued = value("vllm:request_queue_time_seconds_count");
    assert!(
        queued >= finished,
        "{queued} queue times for {finished} finished requests"
    );
    let mean = |series: &str| value(&format!("{series}_sum")) / value(&format!("{series}_count"));
    assert!(
        mean("vllm:request_queue_time_seconds") <= mean("vllm:time_to_first_token_seconds"),
        "{metrics}"
    );
    assert!(
        metrics.contains("vllm:time_to_first_token_seconds_bucket{"),
        "{metrics}"
    );
    let itl = value("vllm:inter_token_latency_seconds_sum")
        / value("vllm:inter_token_latency_seconds_count");
    let tpot = summary["summary"]["tpot_s"]["p50"].as_f64().unwrap();
    assert!(
        (itl / tpot - 1.0).abs() < 0.5,
        "server-side mean inter-token latency {itl} s against the client's p50 TPOT {tpot} s"
    );
}

/// GET over a plain TCP connection (enough for /health and /metrics).
async fn reqwest_get(url: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://")?;
    let (host, path) = rest.split_once('/').map(|(h, p)| (h, format!("/{p}")))?;
    let mut s = tokio::net::TcpStream::connect(host).await.ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.ok()?;
    buf.starts_with("HTTP/1.1 200").then_some(buf)
}

#[test]
fn endpoint_probes_of_the_emulator_recover_its_step_times() {
    use serverbench_calibration::{
        fit_profile, BatchShape, CostInputs, CostModel, FitRecord, FitSetup, HardwareSpec,
        ModelSpec, Profile, StepSample, WeightDtype,
    };
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
    let truth = d.cost_model();
    let rt = runtime();
    let steps = rt.block_on(async {
        let cfg = ServeConfig {
            deployment: d.clone(),
            cost: truth.clone(),
            time_scale: 1.0,
            model_name: "m".into(),
            vocab: 151_936,
            cuda: None,
            limits: Default::default(),
            generation: Default::default(),
            words: None,
        };
        let url = spawn_local(cfg).await.unwrap();
        let mut plan =
            serverbench_backends::ProbePlan::standard(Vocab::new(100, 151_936).unwrap(), 0);
        plan.cached_prefixes = vec![2048, 8192];
        plan.mixed = vec![serverbench_backends::MixedProbe {
            streams: 8,
            context: 2048,
            new: 512,
            cached: 8192,
        }];
        plan.ragged = vec![serverbench_backends::RaggedProbe {
            streams: 4,
            short: 512,
            long: 3584,
        }];
        plan.shared = vec![serverbench_backends::SharedProbe {
            streams: 4,
            shared: 2048,
            own: 512,
        }];
        serverbench_backends::probe(&client(&url, Duration::from_secs(30)), &plan)
            .await
            .unwrap()
    });
    // A probe's time is the emulator's time of the step it stands for.
    let timed_as_its_step = |p: &serverbench_backends::ProbeStep| {
        let want = truth.step_seconds(&p.step.shape(None));
        assert!(
            rel(p.step.seconds, want) < 0.25,
            "{}: probed {}, emulator {want}",
            p.what,
            p.step.seconds
        );
    };
    // The mixed probe times the step that held the prefill and the eight decodes.
    let mixed = steps
        .iter()
        .find(|s| s.what.starts_with("Mixed step"))
        .unwrap();
    assert_eq!(mixed.step.prefill, vec![(512, 8192)]);
    assert_eq!(mixed.step.decode.len(), 8);
    timed_as_its_step(mixed);
    // The ragged probe: four streams over 512, 1536, 2560 and 3584 tokens, each grown by the same
    // output position, timed as the emulator's step of those four decodes.
    let ragged = steps
        .iter()
        .find(|s| s.what == "TPOT, 4 concurrent streams over 512 to 3584")
        .unwrap();
    let grown = ragged.step.decode[0] - 512;
    assert_eq!(
        ragged.step.decode,
        vec![512 + grown, 1536 + grown, 2560 + grown, 3584 + grown]
    );
    timed_as_its_step(ragged);
    // The shared-prefix probe: four streams over one 2,048-token prefix and 512 tokens each, the prefix
    // counted once among the KV tokens the step reads.
    let shared = steps
        .iter()
        .find(|s| s.what == "TPOT, 4 concurrent streams over 2048 shared and 512 own")
        .unwrap();
    let own = shared.step.decode[0] - 2048;
    assert!(own >= 512, "{own}");
    assert_eq!(shared.step.decode, vec![2048 + own; 4]);
    assert_eq!(shared.step.decode_kv_distinct, Some(2048 + 4 * own as u64));
    assert_eq!(shared.step.shape(None).decode_shared, 3 * 2048);
    timed_as_its_step(shared);
    assert_eq!(
        steps
            .iter()
            .filter(|s| s.what.contains("over 2048 cached"))
            .count(),
        9,
        "three suffixes, three times, over each cached prefix"
    );
    let samples: Vec<StepSample> = steps.into_iter().map(|s| s.step).collect();
    let (m, h, base) = (
        ModelSpec::preset("qwen3-8b").unwrap(),
        HardwareSpec::preset("h200").unwrap(),
        Profile::preset("h200-datasheet").unwrap(),
    );
    let setup = FitSetup {
        model: &m,
        hardware: &h,
        base: &base,
        name: "probed".into(),
        attention_tile: 64,
        memory_efficiency: None,
        single_row_memory_efficiency: None,
        front_end: false,
        graphs: None,
        record: FitRecord {
            method: "endpoint probes".into(),
            inputs: vec![],
            model: "qwen3-8b".into(),
            measured_on: "loopback emulator".into(),
            ..Default::default()
        },
    };
    let fitted = fit_profile(&samples, &setup).unwrap().profile;
    let probed = CostModel::new(CostInputs {
        model: &m,
        hardware: &h,
        profile: &fitted,
        dtype: WeightDtype::Bf16,
        group_size: 128,
        tp: 1,
        draft_params: 0.0,
        graphs: None,
        expert_parallel: false,
        routing_skew: 0.0,
        split_kv_decode: false,
    });
    let mut cases = Vec::new();
    for (len, cached) in [(1024, 0), (256, 8192)] {
        let mut b = BatchShape::default();
        b.add_prefill(len, cached, None);
        cases.push((format!("prefill {len} over {cached}"), b));
    }
    for n in [1, 8, 32] {
        let mut b = BatchShape::default();
        for _ in 0..n {
            b.add_decode(300, None);
        }
        cases.push((format!("decode {n} × 300"), b));
    }
    for (name, b) in cases {
        let (want, got) = (truth.step_seconds(&b), probed.step_seconds(&b));
        // The probes add HTTP and pacing time to every step they time; a wall-clock test on a shared
        // machine gets a wide margin.
        assert!(
            rel(got, want) < 0.25,
            "{name}: probed profile {got}, emulator {want}"
        );
    }
}

/// `compare --url` end to end: replays as child processes against an emulator on loopback, the simulator in
/// process, and the table, JSON and SVG written. The emulator runs the simulator's own engine, so the two
/// sides must agree closely.
#[test]
fn compare_against_a_server_runs_both_sides_and_agrees_with_the_emulator() {
    let _guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
    let rt = runtime();
    let url = rt.block_on(async {
        spawn_local(ServeConfig {
            deployment: d.clone(),
            cost: d.cost_model(),
            time_scale: 1.0,
            model_name: "qwen3-8b".into(),
            vocab: 151_936,
            cuda: None,
            limits: Default::default(),
            generation: Default::default(),
            words: None,
        })
        .await
        .unwrap()
    });
    let dir = std::env::temp_dir().join(format!("sb-compare-url-{}", std::process::id()));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "compare",
            "--workload",
            "synthetic-v1",
            "-d",
            "qwen3-8b-1xh200",
            "-c",
            "2",
            "-s",
            "0",
            "-w",
            "20",
        ])
        .args(["--url", &url, "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "compare.md",
        "compare.json",
        "compare.svg",
        "real/c2_s0/summary.json",
        "real/c2_s0/records.jsonl",
    ] {
        assert!(dir.join(f).exists(), "{f} missing");
    }
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("compare.json")).unwrap()).unwrap();
    let row = &v["rows"][0];
    let (sim_done, real_done) = (
        row["completed"][0].as_u64().unwrap(),
        row["completed"][1].as_u64().unwrap(),
    );
    assert!(
        real_done > 0 && sim_done.abs_diff(real_done) <= 1,
        "{stdout}"
    );
    let g = &row["metrics"][1];
    assert_eq!(g["metric"], "G");
    assert!(g["rel_error"].as_f64().unwrap().abs() < 0.15, "{stdout}");
    std::fs::remove_dir_all(&dir).ok();
}
