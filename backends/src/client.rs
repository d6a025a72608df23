//! The streaming HTTP client: sends one request, timestamps every chunk that carries output, reads usage
//! back, and classifies every failure by kind. Connection reuse comes from one shared `reqwest::Client`.

use crate::openai::{parse_chunk, request_bytes, Api, BodyForm, Server, Usage};
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
    /// The server kind: which fields ask for an exact output length.
    pub server: Server,
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
    /// Send the API key over plain HTTP to a host that is not this machine (off: the key goes only over
    /// HTTPS or to loopback).
    pub key_over_plain_http: bool,
    /// Text prompts of a real tokenizer's one-token words (`--tokenizer`), instead of ` wN` words.
    pub words: Option<Arc<crate::Words>>,
    /// The served model's tokenizer, counting each stream's output text (`--output-tokenizer`).
    pub output_counter: Option<Arc<crate::OutputCounter>>,
}

impl ClientConfig {
    /// A client of `server` at `base_url` sending `model` in `api`'s form, each request given up after
    /// `timeout`; no API key, affinity header, extra headers or tokenizers (set those fields after).
    pub fn new(
        base_url: impl Into<String>,
        api: Api,
        server: Server,
        model: impl Into<String>,
        timeout: Duration,
    ) -> ClientConfig {
        ClientConfig {
            base_url: base_url.into(),
            api,
            server,
            model: model.into(),
            timeout,
            api_key: None,
            affinity_header: None,
            headers: vec![],
            key_over_plain_http: false,
            words: None,
            output_counter: None,
        }
    }
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
    /// Bytes of output text those chunks carried: a token decodes to at least one byte, so a usage count
    /// above them is not believed ([`StreamResult::tokens`]).
    pub text_bytes: u64,
    /// The first delta field that carried a value but no output this client counts, if any chunk had one.
    pub unrecognised_field: Option<String>,
    /// Usage block, if the server sent one.
    pub usage: Option<Usage>,
    /// Last `finish_reason`.
    pub finish_reason: Option<String>,
    /// Failure kind (`http_500`, `connect`, `tls`, `timeout`, `dropped`, `malformed_json`,
    /// `malformed_usage`, `stream_error`, `event_too_large`, `not_a_stream`, `length_exceeded`,
    /// `usage_beyond_request`), if it failed.
    pub error: Option<String>,
    /// What the server or the connection said about the failure (the start of an error body, an error
    /// event's message, the connection error).
    pub error_message: Option<String>,
    /// When the request ended (last byte, or the failure).
    pub ended: Instant,
    /// When each output chunk arrived, if the caller asked for them ([`HttpClient::stream_timed`]).
    pub chunk_times: Option<Vec<Instant>>,
    /// Tokens of the streamed output text, with an output tokenizer ([`ClientConfig::output_counter`]);
    /// `None` without one, or when the text was longer than any output of `max_tokens` tokens.
    pub text_tokens: Option<u32>,
}

impl StreamResult {
    /// Output tokens received. The chunks that carried output, unless the server's `usage` counts more
    /// (never more than `max_tokens`: that is the request's error, [`usage_beyond_request`]): a server
    /// may put several tokens in one chunk (vLLM merges the deltas a client has not read yet), and each
    /// chunk carries at least one. A usage below the chunks is not believed, nor one above the bytes of
    /// text streamed (each token decodes to at least one byte): a server that streams one short chunk
    /// and claims many tokens is counted by what it sent.
    pub fn tokens(&self) -> u32 {
        match self.usage {
            Some(u) if self.error.is_none() && self.coalesced() => {
                let backed = self.text_bytes.max(self.token_chunks as u64);
                u.completion_tokens.min(backed).min(u32::MAX as u64) as u32
            }
            _ => self.token_chunks,
        }
    }

    /// Whether the usage count is missing from a completed stream, counts fewer tokens than the chunks
    /// that carried output (each chunk carries at least one), or counts tokens when none streamed: the
    /// stream and usage disagree.
    pub fn usage_differs(&self) -> bool {
        self.usage.map_or(true, |u| {
            let chunks = self.token_chunks as u64;
            u.completion_tokens < chunks || (chunks == 0 && u.completion_tokens > 0)
        })
    }

    /// Whether the usage count is more than the chunks that carried output (at least one did): several
    /// tokens came in one chunk, and the usage is what is counted.
    pub fn coalesced(&self) -> bool {
        self.token_chunks > 0
            && self
                .usage
                .is_some_and(|u| u.completion_tokens > self.token_chunks as u64)
    }

    /// Whether several tokens came in one chunk and the streamed text, tokenized, does not back the
    /// usage count ([`crate::count::backs`]; never without an output tokenizer).
    pub fn coalesced_unconfirmed(&self) -> bool {
        self.coalesced()
            && !matches!((self.text_tokens, self.usage), (Some(t), Some(u)) if crate::count::backs(t, u.completion_tokens))
    }
}

/// A completed stream whose `usage` claims more output than was asked for is that request's server
/// error (`usage_beyond_request`): no server can have generated it.
fn usage_beyond_request(r: &mut StreamResult, max_tokens: u32) {
    let Some(u) = r.usage.filter(|_| r.error.is_none()) else {
        return;
    };
    if u.completion_tokens > max_tokens as u64 {
        r.error = Some("usage_beyond_request".into());
        r.error_message = Some(format!(
            "usage.completion_tokens is {} for a request of max_tokens {max_tokens} ({} output chunks streamed)",
            u.completion_tokens, r.token_chunks
        ));
    }
}

/// Why `/v1/models` gave no list of models: each says what happened, so that a server that answers
/// wrongly is not taken for one that cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    /// No connection (refused, DNS, TLS).
    #[error("cannot reach the server: {0}")]
    Unreachable(String),
    /// The timeout expired before the answer came.
    #[error("no answer within the timeout ({0:?}): {1}")]
    Timeout(Duration, String),
    /// An error status (the server may have no `/v1/models`).
    #[error("HTTP {0}")]
    Status(u16, String),
    /// A success status whose body is not JSON (an HTML page: a proxy, a login page, a wrong port).
    #[error("the answer is not JSON: content-type {content_type}, it starts {start:?}")]
    NotJson {
        /// The `Content-Type` header (`none` when absent).
        content_type: String,
        /// Its first bytes, as text.
        start: String,
    },
    /// The answer is longer than any list of models a client needs to read.
    #[error("the answer is longer than {0} bytes (no list of models is): not read further")]
    TooLarge(usize),
}

/// Why a client cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The HTTP stack could not be set up.
    #[error("cannot build the HTTP client: {0}")]
    Build(reqwest::Error),
    /// The base URL is not an `http://` or `https://` URL.
    #[error("--url {url:?}: {reason}")]
    Url {
        /// What was given.
        url: String,
        /// Why it is refused.
        reason: String,
    },
    /// A header name or value that HTTP does not allow.
    #[error("--header {0:?}: not a valid HTTP header name and value")]
    Header(String),
    /// A prompt form the server kind does not take.
    #[error("--api with --server {server}: {reason}")]
    Form {
        /// The server kind.
        server: &'static str,
        /// Why.
        reason: String,
    },
}

/// The base URL a user gave, normalised: an `http` or `https` URL with a host, without a trailing `/`
/// or `/v1` (the client adds `/v1/...` itself).
pub fn base_url(given: &str) -> Result<reqwest::Url, ClientError> {
    let bad = |reason: &str| ClientError::Url {
        url: given.to_string(),
        reason: reason.to_string(),
    };
    let mut url = reqwest::Url::parse(given).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("expected an http:// or https:// URL"));
    }
    if matches!(url.host_str(), None | Some("")) {
        return Err(bad("the URL names no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("a base URL has no query or fragment"));
    }
    let path = url.path().trim_end_matches('/');
    let path = path.strip_suffix("/v1").unwrap_or(path).to_string();
    url.set_path(&path);
    Ok(url)
}

/// Whether a URL's host is this machine (`localhost`, `127.0.0.0/8`, `::1`).
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A client shared by all lanes.
pub struct HttpClient {
    http: reqwest::Client,
    cfg: ClientConfig,
    /// The API key, when it may be sent to this URL.
    key: Option<String>,
    headers: reqwest::header::HeaderMap,
}

/// Most bytes of an error response body kept in a record.
const ERROR_TEXT_BYTES: usize = 500;

impl HttpClient {
    /// Builds the client (connection pool without an idle limit, so every lane keeps its connection).
    /// The base URL is normalised ([`base_url`]); the API key is kept only where it may go: over
    /// HTTPS, to loopback, or where `key_over_plain_http` allows it ([`HttpClient::key_withheld`]).
    pub fn new(mut cfg: ClientConfig) -> Result<HttpClient, ClientError> {
        let url = base_url(&cfg.base_url)?;
        cfg.server
            .accepts(cfg.api)
            .map_err(|reason| ClientError::Form {
                server: cfg.server.name(),
                reason,
            })?;
        cfg.base_url = url.as_str().trim_end_matches('/').to_string();
        let key_allowed = url.scheme() == "https" || is_loopback(&url) || cfg.key_over_plain_http;
        let key = cfg.api_key.clone().filter(|_| key_allowed);
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &cfg.headers {
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| ClientError::Header(format!("{k}:{v}")))?;
            let value = reqwest::header::HeaderValue::from_str(v)
                .map_err(|_| ClientError::Header(format!("{k}:{v}")))?;
            headers.append(name, value);
        }
        if let Some(h) = &cfg.affinity_header {
            reqwest::header::HeaderName::from_bytes(h.as_bytes())
                .map_err(|_| ClientError::Header(h.clone()))?;
        }
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(usize::MAX)
            .tcp_nodelay(true)
            .build()
            .map_err(ClientError::Build)?;
        Ok(HttpClient {
            http,
            cfg,
            key,
            headers,
        })
    }

    /// True when an API key was given but is not sent (plain HTTP to another host, and not allowed).
    pub fn key_withheld(&self) -> bool {
        self.cfg.api_key.is_some() && self.key.is_none()
    }

    /// The model names the server's `/v1/models` lists.
    pub async fn models(&self) -> Result<Vec<String>, ModelsError> {
        let timeout = self.cfg.timeout.min(Duration::from_secs(30));
        let failed = |e: reqwest::Error| match e.is_timeout() {
            true => ModelsError::Timeout(timeout, describe(&e)),
            false => ModelsError::Unreachable(describe(&e)),
        };
        let mut req = self
            .http
            .get(format!("{}/v1/models", self.cfg.base_url))
            .timeout(timeout)
            .headers(self.headers.clone());
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(failed)?;
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            return Err(ModelsError::Status(status, error_text(resp).await));
        }
        let content_type = content_type(&resp);
        let bytes = match capped_body(resp, MODELS_BYTES).await {
            Ok(bytes) => bytes,
            Err(Capped::Over) => return Err(ModelsError::TooLarge(MODELS_BYTES)),
            Err(Capped::Failed(e)) => return Err(failed(e)),
        };
        let v: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|_| ModelsError::NotJson {
                content_type,
                start: first_bytes(&bytes),
            })?;
        Ok(v.get("data")
            .and_then(|d| d.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|m| m.get("id").and_then(|i| i.as_str()).map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Posts a JSON body to `path` (e.g. `/v1/completions`) and returns the JSON answer: an error
    /// status, a broken connection or a body that is not JSON is an error that says which.
    pub async fn post_json(
        &self,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.cfg.base_url))
            .timeout(self.cfg.timeout)
            .headers(self.headers.clone())
            .json(body);
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.map_err(|e| describe(&e))?;
        if !resp.status().is_success() {
            let status = resp.status().as_u16();
            return Err(format!("HTTP {status}: {}", error_text(resp).await));
        }
        let bytes = match capped_body(resp, ANSWER_BYTES).await {
            Ok(bytes) => bytes,
            Err(Capped::Over) => {
                return Err(format!(
                    "the answer is longer than {ANSWER_BYTES} bytes: not read further"
                ))
            }
            Err(Capped::Failed(e)) => return Err(describe(&e)),
        };
        serde_json::from_slice(&bytes).map_err(|e| format!("the answer is not JSON: {e}"))
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// What every request body of this client shares.
    pub fn form(&self) -> BodyForm<'_> {
        BodyForm {
            api: self.cfg.api,
            server: self.cfg.server,
            model: &self.cfg.model,
            words: self.cfg.words.as_deref(),
        }
    }

    /// Sends one streaming request; `exact` asks for exactly `max_tokens` output tokens (the server
    /// kind's fields); `progress` counts output chunks as they arrive.
    pub async fn stream(
        &self,
        lane: u32,
        prompt: &[u32],
        max_tokens: u32,
        exact: bool,
        progress: Option<Arc<AtomicU32>>,
    ) -> StreamResult {
        let body = request_bytes(self.form(), prompt, max_tokens, exact);
        self.stream_body(lane, body, max_tokens, progress).await
    }

    /// [`HttpClient::stream`] of an exact-length request, keeping the arrival time of every output chunk.
    pub async fn stream_timed(&self, lane: u32, prompt: &[u32], max_tokens: u32) -> StreamResult {
        let body = request_bytes(self.form(), prompt, max_tokens, true);
        self.send(lane, body, max_tokens, None, Some(Vec::new()))
            .await
    }

    /// Sends one streaming request whose JSON body, asking for `max_tokens`, is already built, keeping
    /// the arrival time of every output chunk (for the inter-token latencies).
    pub async fn stream_body(
        &self,
        lane: u32,
        body: Vec<u8>,
        max_tokens: u32,
        progress: Option<Arc<AtomicU32>>,
    ) -> StreamResult {
        self.send(lane, body, max_tokens, progress, Some(Vec::new()))
            .await
    }

    async fn send(
        &self,
        lane: u32,
        body: Vec<u8>,
        max_tokens: u32,
        progress: Option<Arc<AtomicU32>>,
        chunk_times: Option<Vec<Instant>>,
    ) -> StreamResult {
        let now = Instant::now();
        let mut r = StreamResult {
            sent: now,
            first_byte: None,
            first_token: None,
            last_token: None,
            token_chunks: 0,
            text_bytes: 0,
            unrecognised_field: None,
            usage: None,
            finish_reason: None,
            error: None,
            error_message: None,
            ended: now,
            chunk_times,
            text_tokens: None,
        };
        let counter = self.cfg.output_counter.as_deref();
        let mut text = counter.map(|_| String::new());
        self.stream_into(&mut r, lane, body, max_tokens, progress, &mut text)
            .await;
        r.ended = Instant::now();
        r.text_tokens = counter.zip(text).and_then(|(c, t)| c.count(&t));
        usage_beyond_request(&mut r, max_tokens);
        r
    }

    async fn stream_into(
        &self,
        r: &mut StreamResult,
        lane: u32,
        body: Vec<u8>,
        max_tokens: u32,
        progress: Option<Arc<AtomicU32>>,
        text: &mut Option<String>,
    ) {
        let text_cap = max_tokens as usize * crate::count::TEXT_BYTES_PER_TOKEN;
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
            .headers(self.headers.clone())
            .body(body);
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        if let Some(h) = &self.cfg.affinity_header {
            req = req.header(h.as_str(), format!("lane-{lane}"));
        }
        r.sent = Instant::now();
        let resp = match req.send().await {
            Ok(resp) => resp,
            Err(e) => {
                r.error = Some(classify(&e));
                r.error_message = Some(describe(&e));
                return;
            }
        };
        if !resp.status().is_success() {
            r.error = Some(format!("http_{}", resp.status().as_u16()));
            r.error_message = Some(error_text(resp).await);
            return;
        }
        let content_type = content_type(&resp);
        // No event-stream server answers with a page: report what came instead of waiting for events.
        if content_type.starts_with("text/html") {
            r.error = Some("not_a_stream".into());
            r.error_message = Some(not_a_stream(&content_type, &error_body(resp).await));
            return;
        }
        // The request asked for no encoding: a compressed stream is the server's fault, not a broken one.
        if let Some(encoding) = resp
            .headers()
            .get(reqwest::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .filter(|e| !e.eq_ignore_ascii_case("identity"))
        {
            r.error = Some("not_a_stream".into());
            r.error_message = Some(format!(
                "the server compressed its answer (content-encoding: {encoding}) although the request accepted no encoding: serve the stream uncompressed"
            ));
            return;
        }
        let mut body = resp.bytes_stream();
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        // The body's first bytes, to say what came when no event did.
        let mut start: Vec<u8> = Vec::new();
        let mut saw_event = false;
        while let Some(item) = body.next().await {
            let bytes = match item {
                Ok(b) => b,
                Err(e) => {
                    r.error = Some(if e.is_timeout() {
                        "timeout".into()
                    } else {
                        "dropped".into()
                    });
                    r.error_message = Some(describe(&e));
                    return;
                }
            };
            let now = Instant::now();
            r.first_byte.get_or_insert(now);
            if start.len() < START_BYTES {
                start.extend_from_slice(&bytes[..bytes.len().min(START_BYTES - start.len())]);
            }
            if let Err(e) = parser.feed(&bytes, &mut events) {
                r.error = Some("event_too_large".into());
                r.error_message = Some(e.to_string());
                return;
            }
            saw_event |= !events.is_empty();
            for ev in events.drain(..) {
                match ev {
                    // The stream is over even if the server keeps the connection open.
                    SseEvent::Done => return,
                    SseEvent::Data(payload) => match parse_chunk(&payload) {
                        Err(e) => {
                            r.error = Some(e.kind().into());
                            r.error_message = Some(clip(&e.to_string()));
                            return;
                        }
                        Ok(c) => {
                            if let Some(message) = c.error {
                                r.error = Some("stream_error".into());
                                r.error_message = Some(clip(&message));
                                return;
                            }
                            if c.has_output && r.token_chunks >= max_tokens {
                                // A server that streams past what was asked, without end, would
                                // fill memory and inflate the output count: stop reading here.
                                r.token_chunks += 1;
                                r.error = Some("length_exceeded".into());
                                r.error_message = Some(format!(
                                    "the server streamed more than the {max_tokens} tokens asked for (max_tokens); the request was ended there"
                                ));
                                return;
                            }
                            if let Some(t) = text.as_mut() {
                                if t.len() + c.text.len() <= text_cap {
                                    t.push_str(&c.text);
                                } else {
                                    // Longer than any output of max_tokens tokens: not counted.
                                    *text = None;
                                }
                            }
                            if c.has_output {
                                r.first_token.get_or_insert(now);
                                r.last_token = Some(now);
                                r.token_chunks += 1;
                                r.text_bytes += c.text.len() as u64;
                                if let Some(times) = &mut r.chunk_times {
                                    times.push(now);
                                }
                                if let Some(p) = &progress {
                                    p.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            if r.unrecognised_field.is_none() {
                                r.unrecognised_field = c.unrecognised;
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
        // A server may close the stream after its last chunk without `data: [DONE]` (transformers
        // serve does): the stream is complete when that chunk said why it finished or gave the usage.
        if r.finish_reason.is_none() && r.usage.is_none() {
            if !saw_event && !content_type.contains("event-stream") {
                r.error = Some("not_a_stream".into());
                r.error_message = Some(not_a_stream(&content_type, &start));
                return;
            }
            r.error = Some("dropped".into());
            r.error_message =
                Some("the stream ended without a finish_reason, usage or data: [DONE]".into());
        }
    }
}

/// The longest `/v1/models` answer read (a list of a few thousand models is well under it).
const MODELS_BYTES: usize = 8 << 20;

/// The longest non-streamed answer [`HttpClient::post_json`] reads.
const ANSWER_BYTES: usize = 64 << 20;

/// Why a body was not read whole.
enum Capped {
    /// It is longer than the cap.
    Over,
    /// The connection failed.
    Failed(reqwest::Error),
}

/// A response's whole body, if it is at most `cap` bytes: a longer one is refused as soon as the cap is
/// passed, so a server's endless answer costs `cap` bytes of memory, not all of it.
async fn capped_body(resp: reqwest::Response, cap: usize) -> Result<Vec<u8>, Capped> {
    if resp.content_length().is_some_and(|n| n > cap as u64) {
        return Err(Capped::Over);
    }
    let mut body = resp.bytes_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(Capped::Failed)?;
        if bytes.len() + chunk.len() > cap {
            return Err(Capped::Over);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Bytes of an answer that is not an event stream quoted in its error.
const START_BYTES: usize = 200;

/// A response's `Content-Type` (`none` when it has none), lower-case.
fn content_type(resp: &reqwest::Response) -> String {
    resp.headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map_or_else(|| "none".to_string(), str::to_ascii_lowercase)
}

/// The first [`START_BYTES`] of `bytes` as text on one line.
fn first_bytes(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(START_BYTES)]);
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if bytes.len() > START_BYTES {
        format!("{line}…")
    } else {
        line
    }
}

/// What a success status carrying something other than an event stream is reported as.
fn not_a_stream(content_type: &str, start: &[u8]) -> String {
    format!(
        "HTTP 200 but not an event stream: content-type {content_type}, the body starts {:?}",
        first_bytes(start)
    )
}

/// The first 64 KiB of a response's body, or what arrived of them within 5 s.
async fn error_body(resp: reqwest::Response) -> Vec<u8> {
    let mut body = resp.bytes_stream();
    let mut bytes = Vec::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(5), body.next()).await
    {
        bytes.extend_from_slice(&chunk);
        if bytes.len() > 64 << 10 {
            break;
        }
    }
    bytes
}

/// The start of an error response's body (its `error.message` when it is an OpenAI-style error).
async fn error_text(resp: reqwest::Response) -> String {
    let bytes = error_body(resp).await;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            Some(
                e.get("message")
                    .and_then(|m| m.as_str())
                    .map_or_else(|| e.to_string(), str::to_string),
            )
        })
        .or_else(|| v_detail(&text))
        .unwrap_or(text);
    clip(&message)
}

/// FastAPI-style errors (`{"detail": …}`), as `transformers serve` sends them.
fn v_detail(text: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    v.get("detail").map(|d| match d.as_str() {
        Some(s) => s.to_string(),
        None => d.to_string(),
    })
}

/// At most [`ERROR_TEXT_BYTES`] of `s`, on a character boundary.
fn clip(s: &str) -> String {
    let s = s.trim();
    if s.len() <= ERROR_TEXT_BYTES {
        return s.to_string();
    }
    let mut end = ERROR_TEXT_BYTES;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A connection error with its causes (where TLS and DNS failures say what they are).
fn describe(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    clip(&text)
}

/// The kind of a failure before the response body: a timeout, a refused connection, a TLS handshake
/// that failed, a request the client could not build, or a connection that broke during the exchange.
fn classify(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        "timeout".into()
    } else if e.is_connect() && describe(e).to_ascii_lowercase().contains("certificate")
        || describe(e).contains("tls")
        || describe(e).contains("TLS")
    {
        "tls".into()
    } else if e.is_connect() {
        "connect".into()
    } else if e.is_builder() {
        "request".into()
    } else {
        "dropped".into()
    }
}

/// Asks the server which models it serves: a server that cannot be reached, does not answer within
/// the timeout, or answers something other than JSON (an HTML page) stops the replay at once, saying
/// which; one that does not serve `model` says which it does. A server without `/v1/models` (an error
/// status) is let be, with a warning handed to `warn`.
pub async fn check_model(
    client: &HttpClient,
    server: &ServerFlags<'_>,
    model: &str,
    timeout_s: f64,
    warn: &(dyn Fn(String) + Sync),
) -> anyhow::Result<()> {
    let (url, url_flag, model_flag) = (server.url, server.url_flag, server.model_flag);
    match client.models().await {
        Ok(models) if !models.is_empty() && !models.iter().any(|m| m == model) => anyhow::bail!(
            "{model_flag} {model:?}: the server at {url} serves {}",
            listed(&models)
        ),
        Ok(_) => Ok(()),
        Err(ModelsError::Status(status, text)) => {
            warn(format!("warning: {url}/v1/models answered HTTP {status} ({text}); the model name is not checked"));
            Ok(())
        }
        Err(ModelsError::Unreachable(e)) => anyhow::bail!("cannot reach the server at {url} ({url_flag}): {e}"),
        Err(ModelsError::Timeout(waited, e)) => anyhow::bail!(
            "the server at {url} did not answer /v1/models within {} s (--timeout {timeout_s} s, at most 30 s for this check): {e}",
            waited.as_secs_f64()
        ),
        Err(e @ ModelsError::NotJson { .. }) => anyhow::bail!(
            "the server at {url} answered /v1/models with something other than the OpenAI API's JSON — is {url_flag} the API's address? {e}"
        ),
        Err(e @ ModelsError::TooLarge(_)) => anyhow::bail!("the server at {url}: /v1/models: {e}"),
    }
}

/// The server a command talks to, and the flags that named it and its model (for the errors).
pub struct ServerFlags<'a> {
    /// The server's URL.
    pub url: &'a str,
    /// The flag that gave it (`--url`, `--endpoint`).
    pub url_flag: &'a str,
    /// The flag that named the model.
    pub model_flag: &'a str,
}

/// At most [`LISTED`] model names, and how many more the server lists.
fn listed(models: &[String]) -> String {
    let shown = models
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    match models.len().saturating_sub(LISTED) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Model names an error lists before it counts the rest.
const LISTED: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str, allow: bool) -> HttpClient {
        let at = Duration::from_secs(1);
        HttpClient::new(ClientConfig {
            api_key: Some("secret".into()),
            key_over_plain_http: allow,
            ..ClientConfig::new(url, Api::CompletionsTokens, Server::Vllm, "m", at)
        })
        .unwrap()
    }

    /// A server that cannot be reached stops the command, naming the flag that gave its address; a long
    /// list of models is cut short.
    #[test]
    fn the_model_check_names_the_flag_and_lists_a_few_models() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let flags = ServerFlags {
            url: "http://127.0.0.1:1",
            url_flag: "--endpoint",
            model_flag: "--model",
        };
        let c = client(flags.url, false);
        let e = rt
            .block_on(check_model(&c, &flags, "m", 1.0, &|_| {}))
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot reach the server at http://127.0.0.1:1 (--endpoint): "),
            "{e}"
        );
        let names: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
        assert_eq!(listed(&names[..2]), "m0, m1");
        assert_eq!(listed(&names), "m0, m1, m2, m3, m4, m5, m6, m7 and 2 more");
    }

    /// A stream of three tokens in two chunks: the usage counts them; the streamed text backs that
    /// count only when the output tokenizer finds three tokens in it.
    #[test]
    fn an_output_tokenizer_confirms_several_tokens_in_a_chunk() {
        let path = crate::words::tokenizer_fixture("byte-level-bpe-3k.json");
        let words = crate::Words::from_file(&path).unwrap();
        let stream = |text: &[String]| {
            let mut body = String::new();
            for t in text {
                let chunk = serde_json::json!({"choices": [{"text": t, "finish_reason": null}]});
                body.push_str(&format!("data: {chunk}\n\n"));
            }
            let end = serde_json::json!({"choices": [{"text": "", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 4, "completion_tokens": 3}});
            body.push_str(&format!("data: {end}\n\ndata: [DONE]\n\n"));
            body
        };
        let full = stream(&[words.text(&[5, 6]), words.text(&[7])]);
        let short = stream(&[words.text(&[5]), words.text(&[7])]);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for (body, counted, backed) in [(full, Some(3), true), (short, Some(2), false)] {
            let r = rt.block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let url = format!("http://{}", listener.local_addr().unwrap());
                let app = axum::Router::new().route(
                    "/v1/completions",
                    axum::routing::post(move || async move {
                        (
                            [(axum::http::header::CONTENT_TYPE, "text/event-stream")],
                            body,
                        )
                    }),
                );
                tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
                let mut cfg = client(&url, false).config().clone();
                cfg.output_counter =
                    Some(Arc::new(crate::OutputCounter::from_file(&path).unwrap()));
                HttpClient::new(cfg)
                    .unwrap()
                    .stream(0, &[101, 102, 103, 104], 3, true, None)
                    .await
            });
            assert_eq!(
                (r.error.as_deref(), r.token_chunks, r.tokens()),
                (None, 2, 3)
            );
            assert!(r.coalesced());
            assert_eq!(r.text_tokens, counted);
            assert_eq!(r.coalesced_unconfirmed(), !backed);
        }
    }

    /// Several tokens in a chunk are counted from the usage only as far as the streamed text backs
    /// them, a byte a token at least: one short chunk claiming sixteen tokens counts what it sent.
    #[test]
    fn a_usage_above_the_streamed_bytes_is_not_believed() {
        let now = Instant::now();
        let r = |chunks: u32, bytes: u64, usage: u64| StreamResult {
            sent: now,
            first_byte: Some(now),
            first_token: Some(now),
            last_token: Some(now),
            token_chunks: chunks,
            text_bytes: bytes,
            unrecognised_field: None,
            usage: Some(Usage {
                prompt_tokens: 4,
                completion_tokens: usage,
                cached_tokens: None,
            }),
            finish_reason: Some("length".into()),
            error: None,
            error_message: None,
            ended: now,
            chunk_times: None,
            text_tokens: None,
        };
        assert_eq!(r(1, 1, 16).tokens(), 1);
        assert_eq!(r(2, 5, 16).tokens(), 5);
        assert_eq!(r(1, 40, 16).tokens(), 16);
        assert_eq!(r(16, 16, 16).tokens(), 16);
        assert_eq!(r(3, 0, 16).tokens(), 3);
    }

    #[test]
    fn the_api_key_goes_only_over_https_to_loopback_or_when_allowed() {
        for (url, withheld) in [
            ("http://10.1.2.3:8000", true),
            ("http://api.example.com", true),
            ("https://api.example.com", false),
            ("http://127.0.0.1:8000", false),
            ("http://localhost:8000", false),
            ("http://[::1]:8000", false),
        ] {
            assert_eq!(client(url, false).key_withheld(), withheld, "{url}");
        }
        assert!(!client("http://10.1.2.3:8000", true).key_withheld());
    }

    #[test]
    fn a_server_kind_refuses_a_prompt_form_it_does_not_take() {
        let cfg = |server, api| {
            ClientConfig::new(
                "http://127.0.0.1:1",
                api,
                server,
                "m",
                Duration::from_secs(1),
            )
        };
        let e = HttpClient::new(cfg(Server::Transformers, Api::CompletionsTokens))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("--api text"), "{e}");
        assert!(HttpClient::new(cfg(Server::Transformers, Api::CompletionsText)).is_ok());
        assert!(HttpClient::new(cfg(Server::Openai, Api::CompletionsTokens)).is_ok());
    }

    #[test]
    fn base_urls_are_normalised_or_refused() {
        assert_eq!(base_url("http://h:1/v1/").unwrap().as_str(), "http://h:1/");
        assert_eq!(
            base_url("http://h:1/api/v1").unwrap().as_str(),
            "http://h:1/api"
        );
        assert!(base_url("h:1").is_err());
        assert!(base_url("ftp://h").is_err());
        assert!(base_url("http://h/?x=1").is_err());
        assert_eq!(
            client("http://h:1/v1", false).config().base_url,
            "http://h:1"
        );
    }
}
