//! The streaming HTTP client: sends one request, timestamps every chunk that carries output, reads usage
//! back, and classifies every failure by kind. Connection reuse comes from one shared `reqwest::Client`.

use crate::openai::{parse_chunk, request_bytes, Api, Usage};
use crate::sse::{SseEvent, SseParser};
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to reach the server.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Base URL, e.g. `http://127.0.0.1:8000`.
    pub base_url: String,
    /// Endpoint and prompt form.
    pub api: Api,
    /// Model name sent in requests.
    pub model: String,
    /// Per-request timeout (connect to last byte).
    pub timeout: Duration,
    /// Bearer token (from an environment variable).
    pub api_key: Option<String>,
    /// Header carrying the lane id for session affinity (e.g. `X-Session-ID`), if any.
    pub affinity_header: Option<String>,
    /// Extra headers sent with every request.
    pub headers: Vec<(String, String)>,
}

/// What happened to one request, with wall-clock instants.
#[derive(Clone, Debug)]
pub struct StreamResult {
    /// When the request was handed to the connection.
    pub sent: Instant,
    /// First byte of the response body.
    pub first_byte: Option<Instant>,
    /// First chunk carrying output (TTFT).
    pub first_token: Option<Instant>,
    /// Last chunk carrying output.
    pub last_token: Option<Instant>,
    /// Chunks that carried output.
    pub token_chunks: u32,
    /// Usage block, if the server sent one.
    pub usage: Option<Usage>,
    /// Last `finish_reason`.
    pub finish_reason: Option<String>,
    /// Failure kind (`http_500`, `connect`, `timeout`, `dropped`, `malformed_json`, `stream_error`), if it failed.
    pub error: Option<String>,
    /// When the request ended (last byte, or the failure).
    pub ended: Instant,
}

impl StreamResult {
    /// Output tokens received: the usage count when present, else the number of output chunks.
    pub fn tokens(&self) -> u32 {
        self.usage
            .map_or(self.token_chunks, |u| u.completion_tokens as u32)
    }
}

/// Why a client cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The HTTP stack could not be set up.
    #[error("cannot build the HTTP client: {0}")]
    Build(reqwest::Error),
}

/// A client shared by all lanes.
pub struct HttpClient {
    http: reqwest::Client,
    cfg: ClientConfig,
}

impl HttpClient {
    /// Builds the client (connection pool without an idle limit, so every lane keeps its connection).
    pub fn new(cfg: ClientConfig) -> Result<HttpClient, ClientError> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(usize::MAX)
            .tcp_nodelay(true)
            .build()
            .map_err(ClientError::Build)?;
        Ok(HttpClient { http, cfg })
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Sends one streaming request; `progress` counts output chunks as they arrive.
    pub async fn stream(
        &self,
        lane: u32,
        prompt: &[u32],
        max_tokens: u32,
        ignore_eos: bool,
        progress: Option<Arc<AtomicU32>>,
    ) -> StreamResult {
        let body = request_bytes(
            self.cfg.api,
            &self.cfg.model,
            prompt,
            max_tokens,
            ignore_eos,
        );
        self.stream_body(lane, body, progress).await
    }

    /// Sends one streaming request whose JSON body is already built.
    pub async fn stream_body(
        &self,
        lane: u32,
        body: Vec<u8>,
        progress: Option<Arc<AtomicU32>>,
    ) -> StreamResult {
        let now = Instant::now();
        let mut r = StreamResult {
            sent: now,
            first_byte: None,
            first_token: None,
            last_token: None,
            token_chunks: 0,
            usage: None,
            finish_reason: None,
            error: None,
            ended: now,
        };
        self.stream_into(&mut r, lane, body, progress).await;
        r.ended = Instant::now();
        r
    }

    async fn stream_into(
        &self,
        r: &mut StreamResult,
        lane: u32,
        body: Vec<u8>,
        progress: Option<Arc<AtomicU32>>,
    ) {
        let url = format!(
            "{}{}",
            self.cfg.base_url.trim_end_matches('/'),
            self.cfg.api.path()
        );
        let mut req = self
            .http
            .post(url)
            .timeout(self.cfg.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.cfg.api_key {
            req = req.bearer_auth(key);
        }
        if let Some(h) = &self.cfg.affinity_header {
            req = req.header(h.as_str(), format!("lane-{lane}"));
        }
        for (k, v) in &self.cfg.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        r.sent = Instant::now();
        let resp = match req.send().await {
            Ok(resp) => resp,
            Err(e) => {
                r.error = Some(classify(&e));
                return;
            }
        };
        if !resp.status().is_success() {
            r.error = Some(format!("http_{}", resp.status().as_u16()));
            return;
        }
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        let mut done = false;
        while let Some(item) = body.next().await {
            let bytes = match item {
                Ok(b) => b,
                Err(e) => {
                    r.error = Some(if e.is_timeout() {
                        "timeout".into()
                    } else {
                        "dropped".into()
                    });
                    return;
                }
            };
            let now = Instant::now();
            r.first_byte.get_or_insert(now);
            parser.feed(&bytes, &mut events);
            for ev in events.drain(..) {
                match ev {
                    SseEvent::Done => done = true,
                    SseEvent::Data(payload) => match parse_chunk(&payload) {
                        Err(_) => {
                            r.error = Some("malformed_json".into());
                            return;
                        }
                        Ok(c) => {
                            if c.error.is_some() {
                                r.error = Some("stream_error".into());
                                return;
                            }
                            if c.has_output {
                                r.first_token.get_or_insert(now);
                                r.last_token = Some(now);
                                r.token_chunks += 1;
                                if let Some(p) = &progress {
                                    p.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            if c.finish_reason.is_some() {
                                r.finish_reason = c.finish_reason;
                            }
                            if c.usage.is_some() {
                                r.usage = c.usage;
                            }
                        }
                    },
                }
            }
        }
        if !done {
            r.error = Some("dropped".into());
        }
    }
}

/// The kind of a failure before the response body: a timeout, a refused connection, a request the
/// client could not build, or a connection that broke during the exchange.
fn classify(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() {
        "connect".into()
    } else if e.is_builder() {
        "request".into()
    } else {
        "dropped".into()
    }
}
