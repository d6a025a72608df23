//! `serve` under abuse, on loopback: clients that vanish mid-stream, never finish their headers or
//! bodies, cut their bodies short, sit idle, open too many connections, send oversized, huge or
//! malformed requests — and shutdowns (a drain, SIGTERM) with streams open.

use serverbench_backends::{spawn_local_server, LocalServer, ServeConfig, ServeLimits};
use serverbench_sim::Deployment;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn limits() -> ServeLimits {
    ServeLimits {
        max_connections: 8,
        header_timeout: Duration::from_millis(500),
        body_timeout: Duration::from_millis(500),
        drain_timeout: Duration::from_secs(5),
    }
}

async fn server(preset: &str, time_scale: f64) -> LocalServer {
    let d = Deployment::preset(preset).unwrap();
    let vocab = d.model.vocab;
    spawn_local_server(ServeConfig {
        cost: d.cost_model(),
        deployment: d,
        time_scale,
        model_name: "m".into(),
        vocab,
        cuda: None,
        limits: limits(),
        generation: Default::default(),
        words: None,
    })
    .await
    .unwrap()
}

fn host(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// Sends `request` raw and returns what the server answers (until it closes, or 3 s). A server may
/// answer and close before a large request is written whole: the write's error is not this test's.
async fn raw(url: &str, request: &str) -> String {
    let mut s = TcpStream::connect(host(url)).await.unwrap();
    let _ = s.write_all(request.as_bytes()).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

fn post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A metric's value from `/metrics`.
async fn metric(url: &str, name: &str) -> f64 {
    let text = raw(
        url,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    text.lines()
        .find(|l| l.starts_with(name) && l.contains('{'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Whether the server closes a connection it was sent `bytes` on within `within`.
async fn closed_within(url: &str, bytes: &[u8], within: Duration) -> bool {
    let mut s = TcpStream::connect(host(url)).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline.into(), s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

#[test]
fn serve_cancels_requests_whose_client_has_gone() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    crate::runtime().block_on(async {
        let srv = server("qwen3.5-9b-2xl40", 10.0).await;
        let body = r#"{"prompt": [101, 102, 103, 104], "max_tokens": 200000, "ignore_eos": true, "stream": true}"#;
        for _ in 0..10 {
            let mut s = TcpStream::connect(host(&srv.url)).await.unwrap();
            s.write_all(post("/v1/completions", body).as_bytes()).await.unwrap();
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).await.unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
            drop(s); // the client goes away after its first bytes
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let cancelled = metric(&srv.url, "serverbench:requests_cancelled_total").await;
            let running = metric(&srv.url, "vllm:num_requests_running").await;
            let kv = metric(&srv.url, "vllm:kv_cache_usage_perc").await;
            if cancelled == 10.0 && running == 0.0 {
                assert_eq!(metric(&srv.url, "vllm:request_success_total").await, 0.0);
                assert!(kv < 0.01, "their blocks are freed: {kv}");
                break;
            }
            assert!(Instant::now() < deadline, "cancelled {cancelled}, running {running}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        srv.stop().await;
    });
}

#[test]
fn serve_closes_slow_idle_and_surplus_connections() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    crate::runtime().block_on(async {
        let srv = server("qwen3-8b-1xh200", 10.0).await;
        let window = Duration::from_secs(3);
        // Partial headers, and a connection that sends nothing: closed after the header timeout.
        assert!(closed_within(&srv.url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n", window).await);
        assert!(closed_within(&srv.url, b"", window).await);
        // A body that never finishes: 408 after the body timeout.
        let head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n{\"prompt\"";
        let answer = raw(&srv.url, head).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        // The cap: 8 connections held open, the ninth is closed at once.
        let mut held = Vec::new();
        for _ in 0..8 {
            let s = TcpStream::connect(host(&srv.url)).await.unwrap();
            held.push(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(closed_within(&srv.url, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", Duration::from_millis(300)).await);
        drop(held);
        // Once they are gone (idle ones time out too), a request is served again.
        tokio::time::sleep(Duration::from_millis(800)).await;
        let ok = raw(&srv.url, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        srv.stop().await;
    });
}

#[test]
fn serve_refuses_bad_requests_with_a_reason() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    crate::runtime().block_on(async {
        let srv = server("qwen3-8b-1xh200", 100.0).await;
        for (body, status, why) in [
            (r#"{"prompt": [1, 2], "max_tokens": -5}"#, 400, "max_tokens"),
            (r#"{"prompt": [1, 2], "max_tokens": "5"}"#, 400, "max_tokens"),
            (r#"{"prompt": [1, 2], "max_tokens": 5.5}"#, 400, "max_tokens"),
            (r#"{"prompt": [1, 2], "max_tokens": 4, "min_tokens": 9}"#, 400, "min_tokens"),
            (r#"{"prompt": [1, 999999999]}"#, 400, "vocabulary"),
            (r#"{"prompt": [1, 2], "n": 3}"#, 400, "n:"),
            ("not json", 400, "not JSON"),
        ] {
            let answer = raw(&srv.url, &post("/v1/completions", body)).await;
            assert!(answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(why), "{body}: {answer}");
        }
        // Larger than a prompt of the whole context (40,960 tokens) can be: 413, before reading it.
        let huge = format!("{{\"prompt\": [{}]}}", vec!["1"; 1_200_000].join(","));
        let answer = raw(&srv.url, &post("/v1/completions", &huge)).await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{}", &answer[..answer.len().min(200)]);
        // GuideLLM's chat form: content as a list of text parts.
        let chat = r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}], "max_tokens": 3}"#;
        let answer = raw(&srv.url, &post("/v1/chat/completions", chat)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        srv.stop().await;
    });
}

#[test]
fn serve_takes_a_prompt_of_280k_tokens_within_a_million_token_context() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    crate::runtime().block_on(async {
        let srv = server("qwen3.5-9b-2xl40", 100.0).await;
        // Six-digit ids separated by ", " (as Python's json.dumps writes them): 8 bytes a token.
        let ids: Vec<String> = (0..280_000)
            .map(|i| (100_000 + i % 100_000).to_string())
            .collect();
        let body = format!("{{\"prompt\": [{}], \"max_tokens\": 1}}", ids.join(", "));
        assert!(body.len() > 2 << 20, "larger than the old fixed 2 MB limit");
        let mut s = TcpStream::connect(host(&srv.url)).await.unwrap();
        s.write_all(post("/v1/completions", &body).as_bytes())
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(Duration::from_secs(20), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        let head = String::from_utf8_lossy(&buf[..n]);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        srv.stop().await;
    });
}

#[test]
fn serve_drains_open_streams_when_it_stops() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    crate::runtime().block_on(async {
        let srv = server("qwen3-8b-1xh200", 10.0).await;
        let body =
            r#"{"prompt": [101, 102, 103], "max_tokens": 40, "ignore_eos": true, "stream": true}"#;
        let mut s = TcpStream::connect(host(&srv.url)).await.unwrap();
        s.write_all(post("/v1/completions", body).as_bytes())
            .await
            .unwrap();
        let mut first = [0u8; 16];
        let _ = s.read(&mut first).await.unwrap();
        let reader = tokio::spawn(async move {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
            String::from_utf8_lossy(&rest).into_owned()
        });
        srv.stop().await; // stops accepting; the open stream may finish
        let rest = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .unwrap()
            .unwrap();
        assert!(
            rest.contains("data: [DONE]"),
            "the stream ran to its end: {rest}"
        );
    });
}

/// Sends `head` and `body` and closes the writing half, so the server sees the body end early.
async fn cut_short(url: &str, head: &str, body: &str) -> String {
    let mut s = TcpStream::connect(host(url)).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(3), s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

#[test]
fn serve_says_a_body_cut_short_was_cut_short_not_too_large() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    crate::runtime().block_on(async {
        let srv = server("qwen3-8b-1xh200", 100.0).await;
        let head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n";
        let answer = cut_short(&srv.url, head, r#"{"prompt": [1, 2"#).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("cut off after 16 bytes of the 100"), "{answer}");
        srv.stop().await;
    });
}

/// A free port on loopback.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `serve` of `preset` as a child process on `port`, once it answers.
fn serve_child(preset: &str, port: u16, extra: &[&str]) -> std::process::Child {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args(["serve", "-d", preset, "--port", &port.to_string()])
        .args(extra)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

#[test]
fn sigterm_to_serve_refuses_new_connections_and_ends_open_streams_with_done() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = free_port();
    let mut child = serve_child("qwen3-8b-1xh200", port, &["--drain-timeout", "2"]);
    let url = format!("http://127.0.0.1:{port}");
    crate::runtime().block_on(async {
        // A stream far longer than the drain: 30,000 tokens at real time.
        let body = r#"{"prompt": [101, 102, 103], "max_tokens": 30000, "ignore_eos": true, "stream": true}"#;
        let mut s = TcpStream::connect(host(&url)).await.unwrap();
        s.write_all(post("/v1/completions", body).as_bytes()).await.unwrap();
        let mut first = [0u8; 64];
        let _ = s.read(&mut first).await.unwrap();
        let reader = tokio::spawn(async move {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
            String::from_utf8_lossy(&rest).into_owned()
        });
        std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // During the drain a new connection is refused at once (it used to wait in the backlog).
        let refused = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(host(&url))).await;
        assert!(matches!(refused, Ok(Err(_))), "a new connection during the drain: {refused:?}");
        // The open stream ends as a stream ends, saying why, once the drain timeout passes.
        let rest = tokio::time::timeout(Duration::from_secs(5), reader).await.unwrap().unwrap();
        let tail = &rest[rest.len().saturating_sub(600)..];
        let (why, done) = (tail.find("shutting down"), tail.find("data: [DONE]"));
        assert!(matches!((why, done), (Some(w), Some(d)) if w < d), "{tail}");
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "serve did not exit");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
}

/// The most memory the process `pid` has held, bytes (Linux's `VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn serve_reads_huge_bodies_in_bounded_memory_without_stalling_other_clients() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = free_port();
    let mut child = serve_child("qwen3.5-9b-2xl40", port, &["--time-scale", "10"]);
    let url = format!("http://127.0.0.1:{port}");
    // 8.5 M token ids in 17 MB: under the body limit of a 1M-token context, over its prompt limit.
    let mut body = String::from(r#"{"prompt": ["#);
    body.push_str(&"1,".repeat(8_500_000));
    body.push_str(r#"1], "max_tokens": 1}"#);
    let request = std::sync::Arc::new(post("/v1/completions", &body));
    drop(body);
    let (answers, slowest_health) = crate::runtime().block_on(async {
        let big: Vec<_> = (0..4)
            .map(|_| {
                let (url, request) = (url.clone(), request.clone());
                tokio::spawn(async move { raw(&url, &request).await })
            })
            .collect();
        let mut slowest = Duration::ZERO;
        for _ in 0..20 {
            let asked = Instant::now();
            let ok = raw(
                &url,
                "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
            .await;
            assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
            slowest = slowest.max(asked.elapsed());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut answers = Vec::new();
        for b in big {
            answers.push(b.await.unwrap());
        }
        (answers, slowest)
    });
    let peak = peak_rss(child.id());
    child.kill().unwrap();
    child.wait().unwrap();
    for a in &answers {
        assert!(
            a.starts_with("HTTP/1.1 400") && a.contains("context limit"),
            "{}",
            &a[..a.len().min(300)]
        );
    }
    // Before: one such body peaked at 327 MB, eight at 753 MB, and /health waited up to 3.3 s.
    assert!(peak < 150 << 20, "peak {} MB", peak >> 20);
    assert!(
        slowest_health < Duration::from_millis(500),
        "/health took {slowest_health:?}"
    );
}

/// Sends `request` and returns how long after `start` the answer's status line arrived, and that line.
async fn answered_at(url: String, request: String, start: Instant) -> (Duration, String) {
    let mut s = TcpStream::connect(host(&url)).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).await.unwrap();
    let line = String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string();
    (start.elapsed(), line)
}

/// The front end takes one request at a time, in arrival order, as the simulated one does: a short chat
/// prompt that arrives while a long one is being tokenized waits for it, where side by side on two cores
/// it would be answered first.
#[test]
fn serve_tokenizes_one_request_at_a_time_in_arrival_order() {
    let _guard = crate::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    crate::runtime().block_on(async {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/tokenizers/byte-level-bpe-3k.json");
        let words = std::sync::Arc::new(serverbench_backends::Words::from_file(&path).unwrap());
        let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
        let srv = spawn_local_server(ServeConfig {
            cost: d.cost_model(),
            deployment: d,
            time_scale: 10.0,
            model_name: "m".into(),
            vocab: words.vocab_size(),
            cuda: None,
            limits: ServeLimits {
                body_timeout: Duration::from_secs(30),
                ..limits()
            },
            generation: Default::default(),
            words: Some(words),
        })
        .await
        .unwrap();
        let chat = |text: &str| {
            let body = serde_json::json!({
                "messages": [{"role": "user", "content": text}],
                "max_completion_tokens": 1, "stream": true
            });
            post("/v1/chat/completions", &body.to_string())
        };
        // About 700K tokens of varied words: the tokenizer takes a large part of a second on it.
        let long: String = (0..300_000).map(|i| format!("w{} ", i % 977)).collect();
        let start = Instant::now();
        let first = tokio::spawn(answered_at(srv.url.clone(), chat(&long), start));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (short_at, short_line) =
            answered_at(srv.url.clone(), chat("a short question"), start).await;
        let (long_at, long_line) = first.await.unwrap();
        assert!(long_line.starts_with("HTTP/1.1 200"), "{long_line}");
        assert!(short_line.starts_with("HTTP/1.1 200"), "{short_line}");
        assert!(
            long_at > Duration::from_millis(300) && short_at >= long_at,
            "the long prompt answered after {long_at:?}, the short one (sent at 300 ms) after {short_at:?}"
        );
    });
}
