//! The OpenAI-compatible wire format: request bodies a client sends and the stream chunks it reads.
//! Pure data: no IO.

use serde_json::{json, Value};

/// Which endpoint and prompt form a client uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/completions` with the prompt as token ids (exact prefix reuse; the default).
    CompletionsTokens,
    /// `/v1/completions` with the prompt as text.
    CompletionsText,
    /// `/v1/chat/completions` with one user message of text.
    Chat,
}

impl Api {
    /// The API a replay under an AgentX protocol (`agentx`) uses: chat completions with messages, as
    /// AgentX sends them, whatever was asked for; otherwise `self`.
    pub fn under_protocol(self, agentx: bool) -> Api {
        match agentx {
            true => Api::Chat,
            false => self,
        }
    }

    /// Parses `tokens`, `text` or `chat`.
    pub fn parse(s: &str) -> Option<Api> {
        match s {
            "tokens" => Some(Api::CompletionsTokens),
            "text" => Some(Api::CompletionsText),
            "chat" => Some(Api::Chat),
            _ => None,
        }
    }

    /// The endpoint path.
    pub fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            _ => "/v1/completions",
        }
    }
}

/// The server requests go to: it decides which fields ask for an exact output length, and which
/// prompt forms it takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Server {
    /// vLLM (and serverbench's own `serve`): `ignore_eos` and `min_tokens`.
    #[default]
    Vllm,
    /// SGLang: `ignore_eos` and `min_tokens`, as vLLM.
    Sglang,
    /// `transformers serve`: no extension fields (any field it does not know is refused with HTTP 422);
    /// a `generation_config` whose `eos_token_id` is -1 turns the end-of-sequence stop off. Text prompts
    /// only.
    Transformers,
    /// Any other OpenAI-compatible server: the standard fields only. Output lengths are then the
    /// server's choice; the replay's behaviour checks count the requests that differ.
    Openai,
}

impl Server {
    /// Every kind, in listing order.
    pub const ALL: [Server; 4] = [
        Server::Vllm,
        Server::Sglang,
        Server::Transformers,
        Server::Openai,
    ];

    /// Parses `vllm`, `sglang`, `transformers` or `openai`.
    pub fn parse(s: &str) -> Option<Server> {
        Server::ALL.into_iter().find(|k| k.name() == s)
    }

    /// The name `--server` takes.
    pub fn name(self) -> &'static str {
        match self {
            Server::Vllm => "vllm",
            Server::Sglang => "sglang",
            Server::Transformers => "transformers",
            Server::Openai => "openai",
        }
    }

    /// Every name, comma-separated (for error messages).
    pub fn names() -> String {
        Server::ALL.map(Server::name).join(", ")
    }

    /// Whether the server takes prompts in this form; the error says which forms it takes.
    pub fn accepts(self, api: Api) -> Result<(), String> {
        match (self, api) {
            (Server::Transformers, Api::CompletionsTokens) => {
                Err("transformers serve takes text prompts only: use --api text (or chat)".into())
            }
            _ => Ok(()),
        }
    }

    /// The request fields that ask for exactly `max_tokens` output tokens (none for `openai`).
    pub fn exact_length_fields(self, max_tokens: u32) -> Vec<(&'static str, Value)> {
        match self {
            Server::Vllm | Server::Sglang => vec![
                ("ignore_eos", json!(true)),
                ("min_tokens", json!(max_tokens)),
            ],
            Server::Transformers => {
                vec![("generation_config", json!(r#"{"eos_token_id": -1}"#))]
            }
            Server::Openai => vec![],
        }
    }
}

/// What every request body of one client shares: the endpoint and prompt form, the server kind and
/// the model name.
#[derive(Clone, Copy, Debug)]
pub struct BodyForm<'a> {
    /// Endpoint and prompt form.
    pub api: Api,
    /// The server kind (its exact-length fields).
    pub server: Server,
    /// The model name sent.
    pub model: &'a str,
    /// Words of a real tokenizer for text prompts (` wN` words without one).
    pub words: Option<&'a crate::Words>,
}

/// Renders token ids as text for the text endpoints: one short word per token.
pub fn tokens_as_text(tokens: &[u32]) -> String {
    let mut s = String::with_capacity(tokens.len() * 6);
    for t in tokens {
        s.push_str(&format!(" w{t}"));
    }
    s
}

/// Builds token-id request bodies, reusing the serialised prompt of the previous request of the same
/// agent: consecutive turns share a growing prefix, so only the new blocks are synthesised and written.
#[derive(Default)]
pub struct BodyCache {
    /// Last block id of the cached prefix, blocks and tokens it covers, and its ids as JSON text.
    entry: Option<(u64, usize, usize, String)>,
}

impl BodyCache {
    /// The body for a prompt whose full blocks are `blocks` (`block_size` tokens each) followed by
    /// `tail` tokens; `tokens(from_block)` synthesises the prompt from that block on.
    pub fn body(
        &mut self,
        form: BodyForm<'_>,
        blocks: &[u64],
        block_size: u32,
        max_tokens: u32,
        tokens: impl Fn(usize) -> Vec<u32>,
    ) -> Vec<u8> {
        let reuse = match &self.entry {
            Some((last, n, _, _)) if *n > 0 && *n <= blocks.len() && blocks[*n - 1] == *last => *n,
            _ => 0,
        };
        let mut json = match self.entry.take() {
            Some((_, n, _, text)) if n == reuse && reuse > 0 => text,
            _ => String::new(),
        };
        let fresh = tokens(reuse);
        let full = (blocks.len() - reuse) * block_size as usize;
        push_ids(&mut json, &fresh[..full.min(fresh.len())]);
        let mut all = json.clone();
        push_ids(&mut all, &fresh[full.min(fresh.len())..]);
        if !blocks.is_empty() {
            self.entry = Some((
                blocks[blocks.len() - 1],
                blocks.len(),
                blocks.len() * block_size as usize,
                json,
            ));
        }
        token_body(form, &all, max_tokens, true)
    }
}

/// Appends token ids to a JSON array's text (without its brackets).
fn push_ids(json: &mut String, ids: &[u32]) {
    let mut digits = itoa::Buffer::new();
    for t in ids {
        if !json.is_empty() {
            json.push(',');
        }
        json.push_str(digits.format(*t));
    }
}

/// A token-id body from the ids' JSON text, written in one pass (prompts can hold 100K token ids).
fn token_body(form: BodyForm<'_>, ids: &str, max_tokens: u32, exact: bool) -> Vec<u8> {
    let model = serde_json::to_string(form.model).expect("a string serialises");
    let mut extra = String::new();
    if exact {
        for (k, v) in form.server.exact_length_fields(max_tokens) {
            extra.push_str(&format!(",\"{k}\":{v}"));
        }
    }
    format!("{{\"model\":{model},\"prompt\":[{ids}],\"max_tokens\":{max_tokens},\"stream\":true,\"stream_options\":{{\"include_usage\":true}},\"temperature\":0{extra}}}").into_bytes()
}

/// The request body as JSON bytes (token-id prompts serialised in one pass).
pub fn request_bytes(form: BodyForm<'_>, prompt: &[u32], max_tokens: u32, exact: bool) -> Vec<u8> {
    match form.api {
        Api::CompletionsTokens => {
            let mut ids = String::with_capacity(prompt.len() * 7);
            push_ids(&mut ids, prompt);
            token_body(form, &ids, max_tokens, exact)
        }
        _ => serde_json::to_vec(&request_body(form, prompt, max_tokens, exact))
            .expect("request bodies serialise"),
    }
}

/// The streaming request body: greedy, no stop strings, usage at the end, and with `exact` the
/// server kind's fields for an output of exactly `max_tokens` tokens.
pub fn request_body(form: BodyForm<'_>, prompt: &[u32], max_tokens: u32, exact: bool) -> Value {
    let model = form.model;
    let text = |p: &[u32]| match form.words {
        Some(w) => w.text(p),
        None => tokens_as_text(p),
    };
    let mut body = match form.api {
        Api::CompletionsTokens => json!({ "model": model, "prompt": prompt }),
        Api::CompletionsText => json!({ "model": model, "prompt": text(prompt) }),
        Api::Chat => json!({
            "model": model,
            "messages": [{ "role": "user", "content": text(prompt) }],
            "max_completion_tokens": max_tokens,
        }),
    };
    let o = body.as_object_mut().expect("an object");
    o.insert("max_tokens".into(), json!(max_tokens));
    o.insert("stream".into(), json!(true));
    o.insert("stream_options".into(), json!({ "include_usage": true }));
    o.insert("temperature".into(), json!(0));
    if exact {
        for (k, v) in form.server.exact_length_fields(max_tokens) {
            o.insert(k.into(), v);
        }
    }
    body
}

/// The body AgentX sends: chat completions of `messages` (role, text), streaming with usage at the
/// end, `max_completion_tokens` and `ignore_eos` for an output of exactly `max_tokens` tokens.
pub fn agentx_body(model: &str, messages: &[(&str, String)], max_tokens: u32) -> Vec<u8> {
    let messages: Vec<Value> = messages
        .iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect();
    let body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "max_completion_tokens": max_tokens,
        "ignore_eos": true,
        "stream_options": { "include_usage": true },
    });
    serde_json::to_vec(&body).expect("request bodies serialise")
}

/// Token usage reported by the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from the server's prefix cache, when it says.
    pub cached_tokens: Option<u64>,
}

/// Delta fields that carry output tokens.
const OUTPUT_FIELDS: [&str; 4] = ["content", "reasoning", "reasoning_content", "tool_calls"];
/// Delta fields that carry none.
const NOT_OUTPUT_FIELDS: [&str; 3] = ["role", "refusal", "function_call"];

/// What one stream chunk carries.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chunk {
    /// True if it carries output (text, content, reasoning — vLLM's `reasoning` or the older
    /// `reasoning_content` — or tool calls).
    pub has_output: bool,
    /// A delta field with a value that is none of those (a server streaming output under a name this
    /// client does not count would measure no tokens): its name.
    pub unrecognised: Option<String>,
    /// The usage block (the last chunk).
    pub usage: Option<Usage>,
    /// `finish_reason`, when set.
    pub finish_reason: Option<String>,
    /// An error event's message.
    pub error: Option<String>,
    /// The output text it carries (`text`, or the delta's `content`, `reasoning` and
    /// `reasoning_content` strings, in that order; tool calls are not text), for a client that counts
    /// output by tokenizing it.
    pub text: String,
}

/// A `data:` payload that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum MalformedChunk {
    /// Not JSON.
    #[error("malformed JSON in stream: {0}")]
    Json(serde_json::Error),
    /// A usage count that is not a token count (negative, fractional, past 2³² − 1, not a number):
    /// read as 0 it would pass for a request that produced nothing.
    #[error("malformed usage: {field}: {value} is not a token count (0 to 4294967295)")]
    Usage {
        /// `prompt_tokens`, `completion_tokens` or `prompt_tokens_details.cached_tokens`.
        field: &'static str,
        /// What the server sent.
        value: String,
    },
}

impl MalformedChunk {
    /// The failure kind a request records (`malformed_json`, `malformed_usage`).
    pub fn kind(&self) -> &'static str {
        match self {
            MalformedChunk::Json(_) => "malformed_json",
            MalformedChunk::Usage { .. } => "malformed_usage",
        }
    }
}

/// A usage count: absent or null is `None`; anything but a whole number of tokens that fits a
/// request (at most 2³² − 1) is malformed.
fn usage_count(v: Option<&Value>, field: &'static str) -> Result<Option<u64>, MalformedChunk> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .filter(|&n| n <= u32::MAX as u64)
            .map(Some)
            .ok_or_else(|| MalformedChunk::Usage {
                field,
                value: x.to_string(),
            }),
    }
}

/// Parses one `data:` payload.
pub fn parse_chunk(payload: &str) -> Result<Chunk, MalformedChunk> {
    let v: Value = serde_json::from_str(payload).map_err(MalformedChunk::Json)?;
    let mut c = Chunk::default();
    if let Some(err) = v.get("error") {
        c.error = Some(
            err.get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_string),
        );
        return Ok(c);
    }
    if let Some(choice) = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        let nonempty = |x: Option<&Value>| {
            x.is_some_and(|t| match t {
                Value::String(s) => !s.is_empty(),
                Value::Array(a) => !a.is_empty(),
                Value::Null => false,
                _ => true,
            })
        };
        let delta = choice.get("delta");
        c.has_output = nonempty(choice.get("text"))
            || delta.is_some_and(|d| OUTPUT_FIELDS.iter().any(|f| nonempty(d.get(f))));
        let strings = std::iter::once(choice.get("text")).chain(
            OUTPUT_FIELDS[..3]
                .iter()
                .map(|f| delta.and_then(|d| d.get(*f))),
        );
        c.text = strings.flatten().filter_map(Value::as_str).collect();
        if !c.has_output {
            c.unrecognised = delta
                .and_then(Value::as_object)
                .and_then(|d| {
                    d.iter().find(|(k, v)| {
                        !NOT_OUTPUT_FIELDS.contains(&k.as_str()) && nonempty(Some(v))
                    })
                })
                .map(|(k, _)| k.clone());
        }
        c.finish_reason = choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        c.usage = Some(Usage {
            prompt_tokens: usage_count(u.get("prompt_tokens"), "prompt_tokens")?.unwrap_or(0),
            completion_tokens: usage_count(u.get("completion_tokens"), "completion_tokens")?
                .unwrap_or(0),
            cached_tokens: usage_count(
                u.get("prompt_tokens_details")
                    .and_then(|d| d.get("cached_tokens")),
                "prompt_tokens_details.cached_tokens",
            )?,
        });
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: BodyForm<'static> = BodyForm {
        api: Api::CompletionsTokens,
        server: Server::Vllm,
        model: "m",
        words: None,
    };

    #[test]
    fn agentx_replays_send_chat_completions() {
        assert_eq!(Api::CompletionsTokens.under_protocol(true), Api::Chat);
        assert_eq!(Api::CompletionsText.under_protocol(true), Api::Chat);
        assert_eq!(
            Api::CompletionsText.under_protocol(false),
            Api::CompletionsText
        );
    }

    #[test]
    fn bodies_ask_for_exact_lengths_and_usage() {
        let b = request_body(VLLM, &[1, 2, 3], 7, true);
        assert_eq!(b["prompt"], json!([1, 2, 3]));
        assert_eq!(
            (b["max_tokens"].as_u64(), b["min_tokens"].as_u64()),
            (Some(7), Some(7))
        );
        assert_eq!(b["ignore_eos"], json!(true));
        assert_eq!(b["stream_options"]["include_usage"], json!(true));
        assert!(b.get("stop").is_none());
        let chat = BodyForm {
            api: Api::Chat,
            ..VLLM
        };
        let c = request_body(chat, &[5], 3, false);
        assert_eq!(c["messages"][0]["content"], json!(" w5"));
        assert!(c.get("ignore_eos").is_none());
    }

    #[test]
    fn each_server_kind_gets_only_the_fields_it_accepts() {
        let text = |server| BodyForm {
            api: Api::CompletionsText,
            server,
            model: "m",
            words: None,
        };
        // transformers serve refuses unknown fields (HTTP 422): none of vLLM's extensions.
        let t = request_body(text(Server::Transformers), &[7, 8], 4, true);
        let keys: Vec<&str> = t.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "generation_config",
                "max_tokens",
                "model",
                "prompt",
                "stream",
                "stream_options",
                "temperature"
            ]
        );
        let config: Value = serde_json::from_str(t["generation_config"].as_str().unwrap()).unwrap();
        assert_eq!(config, json!({"eos_token_id": -1}));
        assert_eq!(t["prompt"], json!(" w7 w8"));
        let o = request_body(text(Server::Openai), &[7], 4, true);
        assert!(o.get("ignore_eos").is_none() && o.get("generation_config").is_none());
        let s = request_body(text(Server::Sglang), &[7], 4, true);
        assert_eq!(
            (s["ignore_eos"].clone(), s["min_tokens"].clone()),
            (json!(true), json!(4))
        );
        // Without `exact` (the natural-stop probe) no kind asks for a length.
        for k in Server::ALL {
            let b = request_body(text(k), &[7], 4, false);
            assert_eq!(b.as_object().unwrap().len(), 6, "{k:?}");
            assert_eq!(Server::parse(k.name()), Some(k));
        }
        assert!(Server::Transformers
            .accepts(Api::CompletionsTokens)
            .is_err());
        assert!(Server::Transformers.accepts(Api::CompletionsText).is_ok());
        assert_eq!(Server::parse("tgi"), None);
    }

    #[test]
    fn the_fast_body_is_the_same_json() {
        for server in Server::ALL {
            for exact in [true, false] {
                let form = BodyForm { server, ..VLLM };
                let fast: Value =
                    serde_json::from_slice(&request_bytes(form, &[4, 5], 9, exact)).unwrap();
                assert_eq!(fast, request_body(form, &[4, 5], 9, exact), "{server:?}");
            }
        }
    }

    #[test]
    fn cached_bodies_equal_fresh_ones() {
        fn tok(blocks: &[u64], tail: u32) -> impl Fn(usize) -> Vec<u32> + '_ {
            move |from: usize| {
                let mut v: Vec<u32> = blocks[from..]
                    .iter()
                    .flat_map(|&b| (0..4).map(move |j| (b * 10 + j) as u32))
                    .collect();
                v.extend((0..tail).map(|j| 7000 + j));
                v
            }
        }
        let mut cache = BodyCache::default();
        let turns: [(&[u64], u32); 4] = [
            (&[1, 2], 3),
            (&[1, 2, 3], 1),
            (&[1, 2, 3, 4, 5], 0),
            (&[9], 2),
        ];
        for (blocks, tail) in turns {
            let body = cache.body(VLLM, blocks, 4, 5, tok(blocks, tail));
            let want = request_bytes(VLLM, &tok(blocks, tail)(0), 5, true);
            let (a, b): (Value, Value) = (
                serde_json::from_slice(&body).unwrap(),
                serde_json::from_slice(&want).unwrap(),
            );
            assert_eq!(a, b, "blocks {blocks:?}");
        }
    }

    #[test]
    fn chunks_of_every_kind_parse() {
        let t =
            parse_chunk(r#"{"choices":[{"index":0,"text":" hi","finish_reason":null}]}"#).unwrap();
        assert!(t.has_output);
        let empty =
            parse_chunk(r#"{"choices":[{"index":0,"delta":{"role":"assistant"}}]}"#).unwrap();
        assert!(!empty.has_output, "a role-only delta carries no token");
        let r = parse_chunk(r#"{"choices":[{"delta":{"reasoning_content":"x"}}]}"#).unwrap();
        assert!(r.has_output);
        let r = parse_chunk(
            r#"{"choices":[{"delta":{"role":"assistant","content":null,"reasoning":"x"}}]}"#,
        )
        .unwrap();
        assert!(r.has_output, "vLLM's reasoning field is output");
        assert_eq!(r.unrecognised, None);
        let r =
            parse_chunk(r#"{"choices":[{"delta":{"role":"assistant","thinking":"x"}}]}"#).unwrap();
        assert!(!r.has_output);
        assert_eq!(
            r.unrecognised.as_deref(),
            Some("thinking"),
            "flagged, not silently dropped"
        );
        assert_eq!(empty.unrecognised, None, "a role-only delta is not flagged");
        let u = parse_chunk(r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":8}}}"#).unwrap();
        assert_eq!(
            u.usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 4,
                cached_tokens: Some(8)
            })
        );
        assert!(!u.has_output, "the usage chunk is not a token event");
        let e = parse_chunk(r#"{"error":{"message":"boom"}}"#).unwrap();
        assert_eq!(e.error.as_deref(), Some("boom"));
        assert!(parse_chunk("{not json").is_err());
    }

    /// A usage count that is no token count fails the chunk (it was read as 0 and the request passed
    /// its checks as one that produced nothing); an absent one is still 0.
    #[test]
    fn usage_counts_that_are_not_token_counts_are_malformed() {
        for (usage, field) in [
            (
                r#"{"prompt_tokens":-5,"completion_tokens":4}"#,
                "prompt_tokens",
            ),
            (
                r#"{"prompt_tokens":5,"completion_tokens":-4}"#,
                "completion_tokens",
            ),
            (
                r#"{"prompt_tokens":5,"completion_tokens":18446744073709551616}"#,
                "completion_tokens",
            ),
            (
                r#"{"prompt_tokens":5,"completion_tokens":4294967296}"#,
                "completion_tokens",
            ),
            (
                r#"{"prompt_tokens":5,"completion_tokens":4.5}"#,
                "completion_tokens",
            ),
            (
                r#"{"prompt_tokens":"5","completion_tokens":4}"#,
                "prompt_tokens",
            ),
            (
                r#"{"prompt_tokens":5,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":-1}}"#,
                "prompt_tokens_details.cached_tokens",
            ),
        ] {
            let e = parse_chunk(&format!(r#"{{"choices":[],"usage":{usage}}}"#)).unwrap_err();
            assert_eq!(e.kind(), "malformed_usage", "{usage}");
            assert!(
                e.to_string()
                    .starts_with(&format!("malformed usage: {field}: ")),
                "{e}"
            );
        }
        let u = parse_chunk(r#"{"choices":[],"usage":{"completion_tokens":4}}"#).unwrap();
        assert_eq!(u.usage.unwrap().prompt_tokens, 0);
        assert_eq!(parse_chunk("[").unwrap_err().kind(), "malformed_json");
    }
}
