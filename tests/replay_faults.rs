//! `replay` from the command line against servers that misbehave in one way each: every request
//! refused, a URL given with `/v1`, a model the server does not serve, a stream that never closes after
//! `[DONE]`, one that never ends past `max_tokens`, pages instead of JSON, Ctrl-C before the window
//! opens, SIGTERM during it, a records file that cannot be written, and a cold start that must find an
//! empty cache.

use axum::body::Body;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

/// A mock server: `/v1/models` lists `models`; `/v1/completions` answers with `behaviour`.
fn mock(models: &'static [&'static str], behaviour: fn(u64) -> Response) -> Router {
    Router::new()
        .route(
            "/v1/models",
            get(move || async move {
                let data: Vec<_> = models
                    .iter()
                    .map(|m| serde_json::json!({"id": m}))
                    .collect();
                axum::Json(serde_json::json!({"object": "list", "data": data}))
            }),
        )
        .route(
            "/v1/completions",
            post(move |body: axum::Json<serde_json::Value>| async move {
                let max = body.get("max_tokens").and_then(|v| v.as_u64()).unwrap_or(1);
                behaviour(max)
            }),
        )
}

fn refuse_all(_max: u64) -> Response {
    Response::builder()
        .status(422)
        .header("content-type", "application/json")
        .body(Body::from(
            r#"{"detail": "Extra inputs are not permitted: ignore_eos"}"#,
        ))
        .unwrap()
}

/// A healthy stream that never closes after `data: [DONE]`.
fn done_but_open(max: u64) -> Response {
    let mut text = String::new();
    for _ in 0..max {
        text.push_str(
            "data: {\"choices\":[{\"index\":0,\"text\":\" x\",\"finish_reason\":null}]}\n\n",
        );
    }
    text.push_str(&format!("data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{max}}}}}\n\ndata: [DONE]\n\n"));
    let s = futures_util::stream::once(
        async move { Ok::<_, std::io::Error>(bytes::Bytes::from(text)) },
    )
    .chain(futures_util::stream::pending());
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(s))
        .unwrap()
}

/// A response that never comes.
fn hang(_max: u64) -> Response {
    let s = futures_util::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
    Response::builder().body(Body::from_stream(s)).unwrap()
}

use futures_util::StreamExt;

/// Starts `router` on a free port in a thread of its own; returns its base URL.
fn start(router: Router) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let rt = crate::runtime();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(l, router).await.unwrap();
        });
    });
    url
}

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sb-replay-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn replay(url: &str, extra: &[&str], out: &PathBuf) -> Output {
    Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            url,
            "-d",
            "qwen3-8b-1xh200",
            "--model",
            "m",
            "-c",
            "2",
        ])
        .args(["-w", "20", "--time-scale", "10", "--timeout", "5", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn a_run_where_every_request_fails_is_invalid_and_says_why() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], refuse_all));
    let dir = out_dir("all-fail");
    let o = replay(&url, &["--no-probe", "--start", "cold"], &dir);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stderr.contains("the run is invalid"), "{stderr}");
    assert!(
        stdout.contains("first error           http_422: Extra inputs are not permitted"),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["summary"]["valid"], false);
    let first = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert_eq!(
        first["error_message"],
        "Extra inputs are not permitted: ignore_eos"
    );
}

#[test]
fn a_url_ending_in_v1_a_wrong_model_and_a_stream_left_open_after_done() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], done_but_open));
    // `/v1` at the end of the URL is the API's prefix, not a path to add it to.
    let dir = out_dir("v1");
    let o = replay(
        &format!("{url}/v1/"),
        &["--no-probe", "--start", "cold"],
        &dir,
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // `[DONE]` ends a request even though the server keeps the stream open.
    assert!(stdout.contains("errors by kind        none"), "{stdout}");
    // A model the server does not serve stops the replay before it starts.
    let o = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            &url,
            "--model",
            "other",
            "-w",
            "20",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--model \"other\": the server at") && stderr.contains("serves m"),
        "{stderr}"
    );
    // A server that is not there stops it too, once, instead of failing every request.
    let o = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            "http://127.0.0.1:1",
            "-w",
            "20",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot reach the server"), "{stderr}");
    // Malformed URLs and headers are refused up front.
    for (args, why) in [
        (vec!["--url", "127.0.0.1:8000"], "--url"),
        (vec!["--url", "ftp://x"], "http:// or https://"),
        (vec!["--url", &url, "--header", "bad header:x"], "--header"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_serverbench"))
            .arg("replay")
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.code() == Some(2) && stderr.contains(why),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_real_replay_of_requests_that_only_overflow_stops_with_an_error() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], done_but_open));
    let dir = out_dir("overflow");
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("o.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\":0,\"input_length\":2000000,\"output_length\":10,\"hash_ids\":[]}\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "replay",
            "--url",
            &url,
            "--model",
            "m",
            "-c",
            "1",
            "-w",
            "60",
            "--no-probe",
        ])
        .arg("--trace")
        .arg(&trace)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no progress"), "{stderr}");
}

#[test]
fn ctrl_c_before_the_window_still_writes_a_summary() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], hang));
    let dir = out_dir("interrupt");
    let child = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            &url,
            "--model",
            "m",
            "-w",
            "20",
            "--out",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The probe hangs; interrupt it.
    std::thread::sleep(Duration::from_millis(1500));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["client"]["interrupted"], true);
    assert_eq!(summary["summary"]["requests"], 0);
    assert_eq!(summary["summary"]["valid"], false);
    assert_eq!(summary["summary"]["ended_early"], "interrupted by SIGINT");
}

#[test]
fn the_natural_stop_probe_leaves_a_cold_cache_cold() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut server = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "serve",
            "-d",
            "qwen3-8b-1xh200",
            "--port",
            &port.to_string(),
            "--time-scale",
            "10",
        ])
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    std::thread::sleep(Duration::from_millis(500));
    let dir = out_dir("cold");
    let o = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            &url,
            "-d",
            "qwen3-8b-1xh200",
            "-c",
            "1",
            "-w",
            "30",
        ])
        .args(["--time-scale", "10", "--start", "cold", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    server.kill().ok();
    server.wait().ok();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(records.lines().next().unwrap()).unwrap();
    assert_eq!(first["request"], 0);
    assert_eq!(
        first["cached_tokens"], 0,
        "the probe warmed nothing of the workload"
    );
}

/// A server that behaves as `transformers serve` does: any field it does not know is HTTP 422, prompts
/// are text only, the stream closes after its usage chunk without `[DONE]`; and its tokenizer counts
/// every word twice (a prompt the server did not take as sent).
fn like_transformers() -> Router {
    Router::new()
        .route(
            "/v1/models",
            get(|| async { axum::Json(serde_json::json!({"object": "list", "data": []})) }),
        )
        .route(
            "/v1/completions",
            post(|body: axum::Json<serde_json::Value>| async move {
                let known = [
                    "model",
                    "prompt",
                    "max_tokens",
                    "stream",
                    "stream_options",
                    "temperature",
                    "generation_config",
                ];
                let o = body.as_object().unwrap();
                if let Some(k) = o.keys().find(|k| !known.contains(&k.as_str())) {
                    return Response::builder()
                        .status(422)
                        .body(Body::from(format!(
                            r#"{{"detail": "Unexpected fields in the request: {{'{k}'}}"}}"#
                        )))
                        .unwrap();
                }
                let Some(prompt) = o["prompt"].as_str() else {
                    return Response::builder()
                        .status(400)
                        .body(Body::from(r#"{"detail": "prompt must be a string."}"#))
                        .unwrap();
                };
                let words = prompt.split_whitespace().count();
                let max = o["max_tokens"].as_u64().unwrap_or(1);
                let mut text = String::new();
                for _ in 0..max {
                    text.push_str("data: {\"choices\":[{\"index\":0,\"text\":\" w7\"}]}\n\n");
                }
                text.push_str(&format!("data: {{\"choices\":[{{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}}],\"usage\":{{\"prompt_tokens\":{},\"completion_tokens\":{max}}}}}\n\n", 2 * words));
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from(text))
                    .unwrap()
            }),
        )
}

#[test]
fn a_server_kind_sends_only_the_fields_its_server_takes_and_the_full_prompt_is_checked() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(like_transformers());
    let dir = out_dir("transformers");
    let o = replay(
        &url,
        &[
            "--no-probe",
            "--start",
            "cold",
            "--api",
            "text",
            "--server",
            "transformers",
        ],
        &dir,
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // No 422, and a stream that closes after its finish chunk is complete.
    assert!(stdout.contains("errors by kind        none"), "{stdout}");
    assert!(stdout.contains("exact output length   0 of"), "{stdout}");
    // Every prompt was counted twice: the full-prompt check says so, with the first example.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let completed = summary["summary"]["completed"].as_u64().unwrap();
    assert!(completed > 0, "{stdout}");
    assert_eq!(
        summary["client"]["prompt_mismatches"].as_u64(),
        Some(completed)
    );
    let (sent, counted) = (
        summary["client"]["first_prompt_mismatch"][0]
            .as_u64()
            .unwrap(),
        summary["client"]["first_prompt_mismatch"][1]
            .as_u64()
            .unwrap(),
    );
    assert_eq!(counted, 2 * sent);
    assert!(stdout.contains("the server counted"), "{stdout}");
    let record: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(dir.join("records.jsonl"))
            .unwrap()
            .lines()
            .find(|l| l.contains("\"completed\""))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        record["server_prompt_tokens"].as_u64(),
        Some(2 * record["input_tokens"].as_u64().unwrap())
    );
    // vLLM's fields are refused, so the same server under the default kind fails every request.
    let o = replay(
        &url,
        &["--no-probe", "--start", "cold", "--api", "text"],
        &out_dir("tf-vllm"),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("Unexpected fields in the request"),
        "{stdout}"
    );
    // Token-id prompts are refused up front for this kind.
    let o = replay(
        &url,
        &["--no-probe", "--server", "transformers"],
        &out_dir("tf-tokens"),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--api text"), "{stderr}");
}

/// A stream of `max` chunks whose delta carries its token in `field`, then usage and `[DONE]`.
fn delta_stream(field: &str, max: u64) -> Response {
    let mut text = String::new();
    for _ in 0..max {
        text.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"{field}\":\" x\"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    text.push_str(&format!("data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{max}}}}}\n\ndata: [DONE]\n\n"));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

fn reasoning(max: u64) -> Response {
    delta_stream("reasoning", max)
}

fn thinking(max: u64) -> Response {
    delta_stream("thinking", max)
}

/// A reasoning model's tokens (vLLM's `delta.reasoning`) are output: TTFT and TPOT come from them. A
/// field no client counts is flagged, with the number of requests, instead of measuring nothing.
#[test]
fn reasoning_tokens_count_as_output_and_an_unknown_output_field_is_flagged() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (behaviour, flagged) in [(reasoning as fn(u64) -> Response, false), (thinking, true)] {
        let url = start(mock(&["m"], behaviour));
        let dir = out_dir(if flagged { "thinking" } else { "reasoning" });
        let o = replay(&url, &["--no-probe"], &dir);
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap())
                .unwrap();
        let client = &summary["client"];
        let n = client["unrecognised_output_streams"].as_u64().unwrap();
        if flagged {
            assert!(
                n > 0 && client["first_unrecognised_field"] == "thinking",
                "{client}"
            );
            assert!(
                stdout.contains("WARNING") && stdout.contains("`thinking`"),
                "{stdout}"
            );
        } else {
            assert_eq!(n, 0, "{client}");
            assert!(
                stdout.contains("every chunk's output was in a field counted as tokens"),
                "{stdout}"
            );
            let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
            let first: serverbench_sim::Record =
                serde_json::from_str(records.lines().next().unwrap()).unwrap();
            assert!(
                first.first_token_ns.is_some(),
                "TTFT from the first reasoning chunk"
            );
        }
    }
}

/// A stream whose usage block says −5 completion tokens (a server's bug, or a proxy's).
fn negative_usage(max: u64) -> Response {
    let mut text = String::new();
    for _ in 0..max {
        text.push_str(
            "data: {\"choices\":[{\"index\":0,\"text\":\" x\",\"finish_reason\":null}]}\n\n",
        );
    }
    text.push_str("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":-5}}\n\ndata: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

/// A usage count that is no token count fails its request as `malformed_usage`, with what the server
/// sent (it was read as 0 and the run was valid, each request a completed one of no output).
#[test]
fn a_negative_usage_count_fails_its_request_and_says_so() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], negative_usage));
    let dir = out_dir("negative-usage");
    let o = replay(&url, &["--no-probe", "--start", "cold"], &dir);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        stdout.contains(
            "malformed_usage: malformed usage: completion_tokens: -5 is not a token count"
        ),
        "{stdout}"
    );
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let first: serde_json::Value = serde_json::from_str(records.lines().next().unwrap()).unwrap();
    assert_eq!(first["outcome"]["error"], "malformed_usage", "{first}");
}

fn serverbench_cmd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args(args)
        .output()
        .unwrap()
}

/// An emulated server of the gemma deployment at 20× (checkpoint `model_seed`, served with `fault`).
fn emulator(
    rt: &tokio::runtime::Runtime,
    model_seed: u64,
    fault: serverbench_backends::Fault,
) -> String {
    emulator_of(rt, "gemma4-e4b-1xl40", model_seed, fault)
}

/// An emulator of deployment preset `preset` (its model's vocabulary), as [`emulator`].
fn emulator_of(
    rt: &tokio::runtime::Runtime,
    preset: &str,
    model_seed: u64,
    fault: serverbench_backends::Fault,
) -> String {
    let d = serverbench_sim::Deployment::preset(preset).unwrap();
    let cfg = serverbench_backends::ServeConfig {
        cost: d.cost_model(),
        vocab: d.model_spec().vocab,
        deployment: d,
        time_scale: 20.0,
        model_name: "m".into(),
        cuda: None,
        limits: Default::default(),
        generation: serverbench_backends::Generation { model_seed, fault },
        words: None,
    };
    rt.block_on(serverbench_backends::spawn_local(cfg)).unwrap()
}

/// `serverbench freeze` of the gemma deployment at c = 2, 60 s, two held-out seeds, with `extra` flags;
/// the deployment replays the generic `agentic-coding` spec from a cold start, so that a 20 s window
/// completes requests on every lane (its own spec resumes sessions of 100K tokens and more, and under
/// AgentX's chat messages a prompt near its 131,072-token context carries the template's tokens past
/// it, docs/definitions.md).
fn freeze(url: &str, path: &std::path::Path, extra: &[&str]) {
    let deployment = path.with_extension("deployment.yaml");
    std::fs::write(
        &deployment,
        "base: gemma4-e4b-1xl40\nname: gemma4-e4b-1xl40\nworkload: agentic-coding\nprotocol: cold\n",
    )
    .unwrap();
    let deployment = deployment.to_str().unwrap().to_string();
    let mut args = vec![
        "freeze",
        "-d",
        &deployment,
        "-c",
        "2",
        "-w",
        "60",
        "--held-out",
        "2",
        "--dev-seeds",
        "0..4",
        "--url",
        url,
        "--model",
        "m",
        "-o",
        path.to_str().unwrap(),
    ];
    let (key, _) = keys();
    args.extend_from_slice(&["--key", key]);
    args.extend_from_slice(extra);
    let o = serverbench_cmd(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The evaluator's key pair of this test process (`serverbench keygen`, once): (private, public) paths.
fn keys() -> &'static (String, String) {
    static KEYS: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = out_dir("keys");
        std::fs::create_dir_all(&dir).unwrap();
        let name = dir.join("evaluator");
        let o = serverbench_cmd(&["keygen", "--out", name.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let path = |ext: &str| format!("{}.{ext}", name.display());
        (path("key"), path("pub"))
    })
}

/// `serverbench verify FROZEN --time-scale 20 --out OUT` with `extra` flags: (exit code, stdout).
fn verify(
    frozen: &std::path::Path,
    out: &std::path::Path,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let mut args = vec![
        "verify",
        frozen.to_str().unwrap(),
        "--time-scale",
        "20",
        "--out",
        out.to_str().unwrap(),
    ];
    if !extra.contains(&"--unsigned") {
        args.extend_from_slice(&["--public-key", &keys().1]);
    }
    args.extend_from_slice(extra);
    let o = serverbench_cmd(&args);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// The line of one gate in `verify`'s table (after the replays' own output).
fn gate_line<'a>(stdout: &'a str, gate: &str) -> &'a str {
    let table = &stdout[stdout.find("serverbench verify —").unwrap_or(0)..];
    table
        .lines()
        .find(|l| l.trim_start().starts_with(gate))
        .unwrap_or_else(|| panic!("no `{gate}` gate in\n{stdout}"))
}

/// A client of `/v1/completions` with text prompts and model `m`, for requests a test sends by hand.
fn text_client(url: &str) -> serverbench_backends::HttpClient {
    serverbench_backends::HttpClient::new(serverbench_backends::ClientConfig::new(
        url,
        serverbench_backends::Api::CompletionsText,
        serverbench_backends::Server::Vllm,
        "m",
        std::time::Duration::from_secs(30),
    ))
    .unwrap()
}

/// Two emulators of `preset` (the candidate and a reference of the same checkpoint) and `freeze` of
/// it against the candidate at c = 2 with `flags` (window, held-out seeds, …), signed with the
/// evaluator's key, into `name`'s folder: (reference URL, the frozen file). The emulators run on `rt`.
fn frozen_preset(
    rt: &tokio::runtime::Runtime,
    preset: &str,
    name: &str,
    flags: &[&str],
) -> (String, std::path::PathBuf) {
    let (candidate, reference) = (
        emulator_of(rt, preset, 0, Default::default()),
        emulator_of(rt, preset, 0, Default::default()),
    );
    let dir = out_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    let frozen = dir.join("frozen.json");
    let mut args = vec!["freeze", "-d", preset, "-c", "2"];
    args.extend_from_slice(flags);
    let key = &keys().0;
    args.extend_from_slice(&[
        "--url",
        &candidate,
        "--model",
        "m",
        "-o",
        frozen.to_str().unwrap(),
        "--key",
        key,
    ]);
    let o = serverbench_cmd(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (reference, frozen)
}

/// `verify`'s fidelity prompts come from the deployment's own workload, as its replays do: a deployment
/// that names `synthetic-v1` for a 40,960-token context is checked with its sessions (the default
/// workload's cannot fit that context, and `verify` used to stop there with a workload error).
#[test]
fn verify_takes_its_fidelity_prompts_from_the_deployments_workload() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = crate::runtime();
    let (reference, frozen) = frozen_preset(
        &rt,
        "qwen3-8b-1xh200-vllm",
        "verify-workload",
        &["-w", "20", "--held-out", "1"],
    );
    let dir = frozen.parent().unwrap();
    let (_, stdout, stderr) = verify(&frozen, &dir.join("run"), &["--reference", &reference]);
    assert!(!stderr.contains("error:"), "{stderr}");
    assert!(
        gate_line(&stdout, "greedy agreement").contains("16 of 16 continuations identical"),
        "{stdout}\n{stderr}"
    );
}

/// `freeze`, then `verify`, under the AgentX protocol (the default deployment's own): a healthy server
/// passes every gate. Its requests are chat completions, so the full prompt is not checked; in a 60 s
/// window lane 0 of both held-out seeds completes nothing — its first request outlasts the window on
/// the simulated server too — and is not held against the server.
#[test]
fn verify_under_the_agentx_protocol_passes_a_healthy_server() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = crate::runtime();
    let (reference, frozen) = frozen_preset(
        &rt,
        "qwen3.5-9b-2xl40",
        "verify-agentx",
        &["-w", "60", "--held-out", "2", "--dev-seeds", "0..4"],
    );
    let dir = frozen.parent().unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&frozen).unwrap()).unwrap();
    assert_eq!(file["frozen"]["protocol"], "agentx");
    let out = dir.join("run");
    let (code, stdout, stderr) = verify(&frozen, &out, &["--reference", &reference]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("VERIFIED"), "{stdout}");
    assert!(
        gate_line(&stdout, "full prompt").contains("not checked for chat completions"),
        "{stdout}"
    );
    // In each held-out run a lane completed nothing, as on the simulated server (which lane depends
    // on the seed's start points).
    let lanes = file["frozen"]["concurrency"].as_u64().unwrap();
    for seed in file["frozen"]["held_out_seeds"].as_array().unwrap() {
        let records =
            std::fs::read_to_string(out.join(format!("seed_{seed}")).join("records.jsonl"))
                .unwrap();
        assert!(!records.is_empty());
        let busy: std::collections::BTreeSet<u64> = records
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["lane"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert!(
            (busy.len() as u64) < lanes,
            "every lane of seed {seed} has a record ({busy:?} of {lanes}): the case no longer covers the rule"
        );
    }
}

/// `freeze`, then `verify`: against a healthy emulated server checked against a reference of the same
/// checkpoint every gate passes and the score counts; an edited frozen file is refused; a server that
/// miscounts prompts fails the full-prompt gate; without a reference the score does not count.
#[test]
fn verify_scores_a_healthy_server_and_fails_a_broken_one_for_the_right_reason() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = crate::runtime();
    let healthy = emulator(&rt, 0, Default::default());
    let reference = emulator(&rt, 0, Default::default());
    let dir = out_dir("verify");
    std::fs::create_dir_all(&dir).unwrap();
    let frozen = dir.join("frozen.json");
    freeze(&healthy, &frozen, &[]);
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&frozen).unwrap()).unwrap();
    let held: Vec<u64> = file["frozen"]["held_out_seeds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_u64().unwrap())
        .collect();
    assert_eq!(held.len(), 2);
    assert!(
        held.iter().all(|s| *s >= 1_000_000),
        "disjoint from the development seeds 0..4"
    );
    assert_eq!(file["frozen"]["gates"]["fidelity"]["max_regret"], 4.0);
    let (code, stdout, stderr) = verify(&frozen, &dir.join("ok"), &["--reference", &reference]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("VERIFIED. Final score over the held-out seeds"),
        "{stdout}"
    );
    assert!(gate_line(&stdout, "greedy agreement").contains("16 of 16 continuations identical"));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("ok/verify.json")).unwrap())
            .unwrap();
    assert_eq!(report["verified"], true);
    assert!(report["score"]["d"].as_f64().unwrap() > 0.0);
    assert_eq!(report["runs"].as_array().unwrap().len(), 2);
    assert_eq!(report["fidelity"]["prompts"].as_array().unwrap().len(), 16);
    // `--unsigned` rehearses the same file: every gate passes, and still no verification.
    let (code, stdout, _) = verify(
        &frozen,
        &dir.join("rehearsal"),
        &["--unsigned", "--reference", &reference],
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("REHEARSED") && !stdout.contains("VERIFIED"),
        "{stdout}"
    );
    let rehearsal: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("rehearsal/verify.json")).unwrap())
            .unwrap();
    assert_eq!(rehearsal["verified"], false);
    assert!(rehearsal["score"].is_null());
    // Without a reference the same server's score does not count.
    let (code, stdout, _) = verify(&frozen, &dir.join("no-reference"), &[]);
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("FAILED: generation fidelity"), "{stdout}");
    assert!(gate_line(&stdout, "generation fidelity").contains("no --reference given"));
    refuses_edits_and_rehearses_unsigned(&frozen, &dir);
    // A server that reports one prompt token for every prompt (it truncated them, or counts wrong).
    let broken = start(mock(&["m"], done_but_open));
    let frozen_broken = dir.join("broken.json");
    freeze(&broken, &frozen_broken, &["--no-fidelity"]);
    let (code, stdout, _) = verify(&frozen_broken, &dir.join("broken"), &[]);
    assert_eq!(code, Some(3), "{stdout}");
    assert!(stdout.contains("FAILED: full prompt"), "{stdout}");
    assert!(
        gate_line(&stdout, "full prompt").contains("FAIL"),
        "{stdout}"
    );
    assert!(gate_line(&stdout, "generation fidelity").contains("not required"));
    drop(rt);
}

/// Whatever is edited in a signed frozen file, `verify` with the public key refuses it (the SHA-256 is
/// recomputed by the forger: only the signature stands in the way), and an unsigned file is refused.
fn refuses_edits_and_rehearses_unsigned(frozen: &std::path::Path, dir: &std::path::Path) {
    use sha2::Digest;
    let text = std::fs::read_to_string(frozen).unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let resealed = |edit: &dyn Fn(&mut serde_json::Value), name: &str| {
        let mut f = file.clone();
        edit(&mut f["frozen"]);
        let sha = sha2::Sha256::digest(serde_json::to_vec(&f["frozen"]).unwrap());
        f["frozen_sha256"] = sha
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into();
        let path = dir.join(name);
        std::fs::write(&path, serde_json::to_string_pretty(&f).unwrap()).unwrap();
        path
    };
    type Edit<'a> = (&'a str, &'a dyn Fn(&mut serde_json::Value));
    let edits: [Edit; 4] = [
        ("concurrency", &|f| f["concurrency"] = 3.into()),
        ("held-out", &|f| f["held_out_seeds"] = serde_json::json!([])),
        ("dev-seed", &|f| {
            f["held_out_seeds"] = serde_json::json!([0])
        }),
        ("gates", &|f| f["gates"]["max_error_rate"] = 1.0.into()),
    ];
    for (name, edit) in edits {
        let path = resealed(edit, &format!("{name}.json"));
        let (code, stdout, stderr) = verify(&path, &dir.join(name), &[]);
        assert_eq!(code, Some(2), "{name}: {stdout}{stderr}");
        assert!(
            stderr.contains("signature does not match"),
            "{name}: {stderr}"
        );
        assert!(!stdout.contains("VERIFIED"), "{name}");
    }
    let mut unsigned = file.clone();
    unsigned.as_object_mut().unwrap().remove("signature");
    let path = dir.join("unsigned.json");
    std::fs::write(&path, unsigned.to_string()).unwrap();
    let (code, _, stderr) = verify(&path, &dir.join("unsigned"), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("unsigned"), "{stderr}");
}

/// Generation fidelity against a reference of the same checkpoint: another checkpoint fails
/// teacher-forced regret and the answer tests, a server that silently truncates prompts to 64 tokens
/// fails teacher-forced regret (the questions are shorter than that), though every behaviour gate
/// passes; a faithful server whose kernels pick the runner-up token at 25 % of
/// positions passes regret and the answer rule (9 of 10 against 10) but fails a strict
/// greedy-agreement threshold.
#[test]
fn verify_checks_generation_against_a_reference() {
    use serverbench_backends::Fault;
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = crate::runtime();
    let reference = emulator(&rt, 0, Fault::None);
    let dir = out_dir("verify-fidelity");
    std::fs::create_dir_all(&dir).unwrap();
    // A question set whose answers are the reference's own (its first answer word).
    let client = text_client(&reference);
    let mut questions = String::new();
    for q in 0..10 {
        let prompt = format!("question {q}: what comes next?");
        let text = rt
            .block_on(serverbench_backends::fidelity::answer(&client, &prompt, 8))
            .unwrap();
        let word = text.split_whitespace().next().unwrap().to_string();
        questions.push_str(&serde_json::json!({"prompt": prompt, "answer": word}).to_string());
        questions.push('\n');
    }
    let answers = dir.join("answers.jsonl");
    std::fs::write(&answers, questions).unwrap();
    let answers = answers.to_str().unwrap().to_string();
    /// Name, checkpoint, fault, extra `freeze` flags, the gates that must fail.
    type Case<'a> = (&'a str, u64, Fault, &'a [&'a str], Option<&'a str>);
    let cases: [Case; 4] = [
        ("same", 0, Fault::None, &[], None),
        (
            "other-checkpoint",
            1,
            Fault::None,
            &[],
            Some("teacher-forced regret, answer tests"),
        ),
        (
            "truncating",
            0,
            Fault::TruncatePrompt(64),
            &[],
            Some("teacher-forced regret"),
        ),
        (
            "runner-up",
            0,
            Fault::RunnerUp(250_000),
            &["--min-greedy-agreement", "0.9"],
            Some("greedy agreement"),
        ),
    ];
    for (name, seed, fault, flags, fails) in cases {
        let url = emulator(&rt, seed, fault);
        let frozen = dir.join(format!("{name}.json"));
        freeze(&url, &frozen, flags);
        let (code, stdout, stderr) = verify(
            &frozen,
            &dir.join(name),
            &["--reference", &reference, "--answers", &answers],
        );
        match fails {
            None => {
                assert_eq!(code, Some(0), "{name}: {stdout}\n{stderr}");
                assert!(
                    gate_line(&stdout, "answer tests").contains("candidate 10 of 10, reference 10"),
                    "{stdout}"
                );
            }
            Some(reasons) => {
                assert_eq!(code, Some(3), "{name}: {stdout}\n{stderr}");
                assert!(
                    stdout.contains(&format!("FAILED: {reasons} (")),
                    "{name}: {stdout}"
                );
                for behaviour in ["full prompt", "exact output length", "natural stop"] {
                    assert!(
                        gate_line(&stdout, behaviour).contains("pass"),
                        "{name}: {stdout}"
                    );
                }
            }
        }
        if name == "runner-up" {
            let report: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(name).join("verify.json")).unwrap(),
            )
            .unwrap();
            let worst = report["fidelity"]["prompts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["mean_regret"].as_f64().unwrap())
                .fold(0.0, f64::max);
            // Each runner-up token costs ln(0.6 / 0.08) = 2.01 nats; a quarter of them, about 0.5.
            assert!(worst > 0.0 && worst < 1.5, "{worst}");
            let distinct: std::collections::BTreeSet<String> = report["fidelity"]["prompts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["mean_regret"].to_string())
                .collect();
            assert!(distinct.len() > 4, "the prompts differ: {distinct:?}");
        }
    }
    // A malformed question set is refused before anything runs, naming the file and line.
    let bad = dir.join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"prompt\": \"q\", \"answer\": \"a\"}\n{\"prompt\": 3}\n",
    )
    .unwrap();
    let (code, _, stderr) = verify(
        &dir.join("same.json"),
        &dir.join("bad"),
        &[
            "--reference",
            &reference,
            "--answers",
            bad.to_str().unwrap(),
        ],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("bad.jsonl:2"), "{stderr}");
    drop(rt);
}

/// `--tokenizer`: against a server counting text with the same tokenizer (`serve --tokenizer`), every
/// text prompt `replay --api text --tokenizer` sends is counted as exactly the workload's tokens (plus
/// the tokenizer's beginning-of-sequence token), for a byte-level and a SentencePiece-style tokenizer;
/// without it, ` wN` words are counted several tokens each. The server's output text is one word of the
/// tokenizer per token, so a client counting the text agrees with usage.
#[test]
fn tokenizer_prompts_are_counted_exactly_by_a_server_with_that_tokenizer() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = crate::runtime();
    let dir = out_dir("tokenizer");
    for (name, special) in [
        ("byte-level-bpe-3k.json", 0u32),
        ("metaspace-bpe-3k.json", 1),
    ] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tokenizers")
            .join(name);
        let words = std::sync::Arc::new(serverbench_backends::Words::from_file(&path).unwrap());
        let d = serverbench_sim::Deployment::preset("gemma4-e4b-1xl40").unwrap();
        let cfg = serverbench_backends::ServeConfig {
            cost: d.cost_model(),
            deployment: d,
            time_scale: 20.0,
            model_name: "m".into(),
            vocab: words.vocab_size(),
            cuda: None,
            limits: Default::default(),
            generation: Default::default(),
            words: Some(words.clone()),
        };
        let url = rt.block_on(serverbench_backends::spawn_local(cfg)).unwrap();
        let replay = |out: &str, tokenizer: bool| {
            let out = dir.join(format!("{name}-{out}"));
            let mut args = vec![
                "replay",
                "--workload",
                "synthetic-v1",
                "--url",
                &url,
                "--model",
                "m",
                "-d",
                "gemma4-e4b-1xl40",
                "--api",
                "text",
                // Prompts as sent (AgentX's chat messages add a template's tokens).
                "--protocol",
                "cold",
                "-c",
                "2",
                "-w",
                "40",
                "--time-scale",
                "20",
                "--no-probe",
            ];
            let p = path.to_str().unwrap().to_string();
            if tokenizer {
                args.extend(["--tokenizer", &p]);
            }
            let o_s = out.to_str().unwrap().to_string();
            args.extend(["--out", &o_s]);
            let o = serverbench_cmd(&args);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                    .unwrap();
            let records: Vec<serverbench_sim::Record> =
                std::fs::read_to_string(out.join("records.jsonl"))
                    .unwrap()
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            (v, records)
        };
        let (v, records) = replay("with", true);
        let counted: Vec<_> = records
            .iter()
            .filter_map(|r| r.server_prompt_tokens.map(|s| (r.input_tokens, s)))
            .collect();
        assert!(counted.len() >= 2, "{name}: {} completed", counted.len());
        for (sent, server) in &counted {
            assert_eq!(*server, sent + special, "{name}");
        }
        assert_eq!(v["client"]["prompt_mismatches"], 0, "{name}");
        let (v, records) = replay("without", false);
        assert!(
            v["client"]["prompt_mismatches"].as_u64().unwrap() > 0,
            "{name}"
        );
        let inflated = records
            .iter()
            .filter_map(|r| {
                r.server_prompt_tokens
                    .map(|s| s as f64 / r.input_tokens as f64)
            })
            .fold(f64::MAX, f64::min);
        assert!(
            inflated > 1.5,
            "{name}: ` wN` words count {inflated:.2} tokens each at least"
        );
        // The output text, counted by the client with the same tokenizer, is as long as usage says.
        let client = text_client(&url);
        let answer = rt
            .block_on(client.post_json(
                "/v1/completions",
                &serde_json::json!({"model": "m", "prompt": " the replay", "max_tokens": 64, "ignore_eos": true}),
            ))
            .unwrap();
        let text = answer["choices"][0]["text"].as_str().unwrap();
        assert_eq!(answer["usage"]["completion_tokens"], 64);
        assert_eq!(words.tokens(text).unwrap().len(), 64, "{name}: {text}");
        assert_eq!(
            answer["usage"]["prompt_tokens"],
            2 + special,
            "{name}: ' the replay' is two tokens and the special ones"
        );
    }
    drop(rt);
}

/// Valid output chunks for ever, never `[DONE]`: a server that ignores `max_tokens`.
fn runaway(_max: u64) -> Response {
    let chunk = "data: {\"choices\":[{\"index\":0,\"text\":\" x\",\"finish_reason\":null}]}\n\n";
    let s = futures_util::stream::repeat_with(move || {
        Ok::<_, std::io::Error>(bytes::Bytes::from(chunk.repeat(64)))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(s))
        .unwrap()
}

/// A healthy stream of `max` tokens, one every 10 ms, then usage and `[DONE]`.
fn healthy(max: u64) -> Response {
    let s = futures_util::stream::iter(0..=max).then(move |i| async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let text = if i < max {
            "data: {\"choices\":[{\"index\":0,\"text\":\" x\",\"finish_reason\":null}]}\n\n".to_string()
        } else {
            format!("data: {{\"choices\":[{{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}}],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{max}}}}}\n\ndata: [DONE]\n\n")
        };
        Ok::<_, std::io::Error>(bytes::Bytes::from(text))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(s))
        .unwrap()
}

/// What a misconfigured proxy or a login page answers: a page, with status 200.
fn html(_max: u64) -> Response {
    Response::builder()
        .header("content-type", "text/html; charset=utf-8")
        .body(Body::from(
            "<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>…</body></html>",
        ))
        .unwrap()
}

fn summary_of(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every line of records.jsonl, each a whole record.
fn records_of(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "a cut last line");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a whole record"))
        .collect()
}

#[test]
fn a_stream_past_max_tokens_is_ended_there_as_a_length_violation() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], runaway));
    let dir = out_dir("runaway");
    let started = std::time::Instant::now();
    let o = replay(&url, &["--no-probe", "--start", "cold"], &dir);
    let stdout = String::from_utf8_lossy(&o.stdout);
    // Before, each request read for ever (memory growing with every chunk) until the window closed.
    assert_eq!(o.status.code(), Some(3), "{stdout}");
    assert!(
        stdout.contains("errors by kind        length_exceeded"),
        "{stdout}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    let records = records_of(&dir);
    assert!(records.len() > 2, "the lanes went on: {}", records.len());
    for r in &records {
        assert_eq!(r["outcome"]["error"], "length_exceeded", "{r}");
        assert_eq!(
            r["output_tokens"].as_u64().unwrap(),
            r["output_requested"].as_u64().unwrap() + 1,
            "the output count stops one past the request: {r}"
        );
    }
}

#[test]
fn an_html_answer_and_a_tiny_timeout_say_what_happened() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // /v1/models answering a page is not "cannot reach the server".
    let page = start(Router::new().route("/v1/models", get(|| async { html(0) })));
    let o = serverbench_cmd(&[
        "replay",
        "--workload",
        "synthetic-v1",
        "--url",
        &page,
        "-w",
        "20",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        !stderr.contains("cannot reach")
            && stderr.contains("text/html")
            && stderr.contains("<!DOCTYPE html>"),
        "{stderr}"
    );
    // A timeout that expires is said to be one: /v1/models answers after 10 s, the timeout is 0.2 s.
    // (A timeout below tokio's 1 ms timer tick tests nothing: an optimised build's loopback answer
    // can come before the tick.)
    let url = start(Router::new().route(
        "/v1/models",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            "{}"
        }),
    ));
    let o = serverbench_cmd(&[
        "replay",
        "--workload",
        "synthetic-v1",
        "--url",
        &url,
        "--model",
        "m",
        "-w",
        "20",
        "--timeout",
        "0.2",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        !stderr.contains("cannot reach") && stderr.contains("did not answer /v1/models within"),
        "{stderr}"
    );
    // A completion answered with a page: the record says what came (content type, first bytes).
    let url = start(mock(&["m"], html));
    let dir = out_dir("html");
    let o = replay(&url, &["--no-probe", "--start", "cold"], &dir);
    assert_eq!(o.status.code(), Some(3));
    let first = &records_of(&dir)[0];
    assert_eq!(first["outcome"]["error"], "not_a_stream");
    let message = first["error_message"].as_str().unwrap();
    assert!(
        message.contains("content-type text/html") && message.contains("<!DOCTYPE html>"),
        "{message}"
    );
}

/// Sends `signal` (`TERM`, `INT`) to a child process.
fn kill(child: &std::process::Child, signal: &str) {
    Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
}

#[test]
fn sigterm_during_a_replay_writes_a_summary_marked_interrupted_and_not_valid() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], healthy));
    let dir = out_dir("sigterm");
    let child = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args([
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            &url,
            "-d",
            "qwen3-8b-1xh200",
        ])
        .args([
            "--model",
            "m",
            "-c",
            "4",
            "-w",
            "600",
            "--no-probe",
            "--out",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    kill(&child, "TERM");
    let signalled = std::time::Instant::now();
    let o = child.wait_with_output().unwrap();
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "it stopped promptly"
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("SIGTERM"), "{stderr}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("interrupted by SIGTERM"),
        "the table says so"
    );
    let summary = summary_of(&dir);
    assert_eq!(summary["client"]["interrupted"], true);
    assert_eq!(
        summary["summary"]["valid"], false,
        "an interrupted run is not a valid run"
    );
    assert_eq!(summary["summary"]["ended_early"], "interrupted by SIGTERM");
    let records = records_of(&dir);
    assert_eq!(
        records.len() as u64,
        summary["summary"]["requests"].as_u64().unwrap()
    );
}

#[test]
fn a_records_file_that_cannot_be_written_is_named_and_keeps_whole_records() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], done_but_open));
    // A full disk: every write to records.jsonl fails with "No space left on device".
    let dir = out_dir("full");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink("/dev/full", dir.join("records.jsonl")).unwrap();
    let o = replay(&url, &["--no-probe", "--start", "cold"], &dir);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("records.jsonl: cannot write record 1")
            && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert!(
        stdout.contains("score") && stdout.contains("INVALID"),
        "the table: {stdout}"
    );
    let summary = summary_of(&dir);
    assert!(summary["client"]["write_error"]
        .as_str()
        .unwrap()
        .contains("No space left"));
    assert_eq!(summary["summary"]["valid"], false);
    // A file that stops growing part-way (here at 8 KiB, through the file-size limit): it ends with
    // the last whole record.
    let dir = out_dir("limit");
    std::fs::create_dir_all(&dir).unwrap();
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 8; exec {} \"$@\"",
            env!("CARGO_BIN_EXE_serverbench")
        ))
        .args([
            "serverbench",
            "replay",
            "--workload",
            "synthetic-v1",
            "--url",
            &url,
        ])
        .args([
            "-d",
            "qwen3-8b-1xh200",
            "--model",
            "m",
            "-c",
            "8",
            "-w",
            "600",
        ])
        .args(["--time-scale", "100", "--no-probe", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("records.jsonl: cannot write record"),
        "{stderr}"
    );
    let records = records_of(&dir);
    assert!(!records.is_empty());
    assert!(std::fs::metadata(dir.join("records.jsonl")).unwrap().len() <= 8192);
    assert_eq!(summary_of(&dir)["summary"]["valid"], false);
}

/// A stream of `max` output chunks, all at once, whose usage claims 4,294,967,295 output tokens.
fn inflated(max: u64) -> Response {
    let mut text = String::new();
    for _ in 0..max {
        text.push_str(
            "data: {\"choices\":[{\"index\":0,\"text\":\" x\",\"finish_reason\":null}]}\n\n",
        );
    }
    text.push_str("data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":4294967295}}\n\ndata: [DONE]\n\n");
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

/// A stream compressed although nothing asked for it.
fn gzipped(_max: u64) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("content-encoding", "gzip")
        .body(Body::from(vec![
            0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3,
        ]))
        .unwrap()
}

/// The client counts the output (issue 41, item 4): a server claiming 4,294,967,295 tokens in `usage`
/// for a request of a few gets that request counted as its error, and G counts no claimed token; a
/// compressed stream is named as such, not as a broken one.
#[test]
fn usage_beyond_the_request_is_the_servers_error_and_a_compressed_stream_is_named() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["m"], inflated));
    let dir = out_dir("inflated");
    let o = replay(&url, &["--no-probe", "--start", "cold"], &dir);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("usage_beyond_request"), "{stdout}");
    let summary = summary_of(&dir);
    assert_eq!(summary["summary"]["valid"], false);
    // Before, G was 349,779 $/$ from the claimed counts; now the output is what streamed.
    let records = records_of(&dir);
    let requested: u64 = records
        .iter()
        .map(|r| r["output_requested"].as_u64().unwrap())
        .sum();
    let output = summary["summary"]["output_tokens"].as_u64().unwrap();
    assert!(
        output <= requested,
        "{output} output tokens for {requested} asked"
    );
    assert!(
        summary["summary"]["score"]["g"].as_f64().unwrap() < 100.0,
        "{summary}"
    );
    for r in &records {
        assert_eq!(r["outcome"]["error"], "usage_beyond_request", "{r}");
        assert!(r["output_tokens"].as_u64().unwrap() <= r["output_requested"].as_u64().unwrap());
    }
    let url = start(mock(&["m"], gzipped));
    let dir = out_dir("gzipped");
    let o = replay(&url, &["--no-probe", "--start", "cold"], &dir);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("content-encoding: gzip"), "{stdout}");
}

/// `/v1/models` answers that no list of models needs: an endless one is cut at its cap, and 200,000
/// models are counted in the error rather than listed (issue 41, items 2 and 6).
#[test]
fn an_endless_or_huge_model_list_is_cut_short() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let endless = start(Router::new().route(
        "/v1/models",
        get(|| async {
            let s = futures_util::stream::repeat_with(|| {
                Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 65536]))
            });
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from_stream(s))
                .unwrap()
        }),
    ));
    let started = std::time::Instant::now();
    let o = serverbench_cmd(&[
        "replay",
        "--workload",
        "synthetic-v1",
        "--url",
        &endless,
        "-w",
        "20",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("longer than 8388608 bytes"), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let many = start(Router::new().route(
        "/v1/models",
        get(|| async {
            let data: Vec<_> = (0..200_000)
                .map(|i| serde_json::json!({"id": format!("model-{i}")}))
                .collect();
            axum::Json(serde_json::json!({"object": "list", "data": data}))
        }),
    ));
    let o = serverbench_cmd(&[
        "replay",
        "--workload",
        "synthetic-v1",
        "--url",
        &many,
        "--model",
        "m",
        "-w",
        "20",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("model-7 and 199992 more"), "{stderr}");
    assert!(stderr.len() < 1000, "{} bytes of error", stderr.len());
}

/// A stream of `max` chunks at once with usage; the mixed probe's decode streams (160 tokens) end
/// after three.
fn short_decodes(max: u64) -> Response {
    let n = if max == 160 { 3 } else { max };
    let mut text = String::new();
    for _ in 0..n {
        text.push_str(
            "data: {\"choices\":[{\"index\":0,\"text\":\" x\",\"finish_reason\":null}]}\n\n",
        );
    }
    text.push_str(&format!("data: {{\"choices\":[{{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{n}}}}}\n\ndata: [DONE]\n\n"));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap()
}

/// `calibrate --endpoint` stops on SIGTERM with exit 130 and its probe log kept, and a mixed probe
/// whose streams end before the prefill is due says so at once instead of waiting 120 s (issue 41,
/// item 1d).
#[test]
fn calibrate_stops_on_sigterm_and_a_mixed_probe_does_not_wait_for_ended_streams() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let url = start(mock(&["qwen3-8b"], hang));
    let dir = out_dir("calibrate-term");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("probes.jsonl");
    let child = Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args(["calibrate", "--endpoint", &url, "--probe-log"])
        .arg(&log)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let signalled = std::time::Instant::now();
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{stderr}");
    assert!(signalled.elapsed() < Duration::from_secs(5));
    assert!(
        stderr.contains("SIGTERM: stopped after 0 probes"),
        "{stderr}"
    );
    assert!(log.exists(), "the probe log stays");
    let url = start(mock(&["qwen3-8b"], short_decodes));
    let started = std::time::Instant::now();
    let o = serverbench_cmd(&[
        "calibrate",
        "--endpoint",
        &url,
        "--probe-mixed",
        "2:64:64:0",
        "--timeout",
        "20",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("ended before the prefill was sent") && stderr.contains("after 3 chunks"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // A server that never answers a completion: each probe gives up at --timeout (it waited a fixed
    // 300 s), and the command fails naming the timeout.
    let url = start(mock(&["qwen3-8b"], hang));
    let started = std::time::Instant::now();
    let o = serverbench_cmd(&[
        "calibrate",
        "--endpoint",
        &url,
        "--probe-prompts",
        "64",
        "--timeout",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the server answered timeout"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "{:?}",
        started.elapsed()
    );
}
