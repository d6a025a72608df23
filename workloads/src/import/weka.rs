//! Weka / Claude-Code agent traces (the agentic-coding corpus format): one JSON object per trace with
//! its requests in order and sub-agents nested as `type: "subagent"` entries; a sub-agent starts from a
//! fresh context and its parent waits for it unless it was launched in the background.

use super::{has_key, prompt_chain, Ids, Importer};
use crate::error::InputError;
use crate::tree::{Request, RequestKind, SessionTree};
use serde_json::{Map, Value};

/// Top-level JSON values of a file (one object, or JSONL) with the line each starts on.
fn json_values<'a>(
    file: &'a str,
    text: &'a str,
) -> impl Iterator<Item = Result<(usize, Value), InputError>> + 'a {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    // Lines are counted as the stream advances (each byte once), not from the start per value.
    let (mut offset, mut line) = (0usize, 1usize);
    std::iter::from_fn(move || {
        let skipped = text[offset..].len() - text[offset..].trim_start().len();
        line += text[offset..offset + skipped].matches('\n').count();
        let start = offset + skipped;
        let item = stream.next()?;
        let at = line;
        // After an error the stream's offset can stand before the value's start.
        offset = stream.byte_offset().max(start);
        line += text[start..offset].matches('\n').count();
        Some(
            item.map(|v| (at, v))
                .map_err(|e| InputError::new(file, e.line(), "", format!("malformed JSON: {e}"))),
        )
    })
}

/// Weka / Claude-Code agent traces.
pub struct Weka;

impl Importer for Weka {
    fn name(&self) -> &'static str {
        "weka"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["claude-code"]
    }

    fn summary(&self) -> &'static str {
        "Weka / Claude-Code agent traces: one JSON object per trace, sub-agents nested (a file or JSONL)"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "requests")
    }

    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
        weka(file, text)
    }
}

fn weka(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    let mut trees = Vec::new();
    for item in json_values(file, text) {
        let (line, v) = item?;
        let index = trees.len() as u64;
        let mut w = Walker {
            file,
            line,
            requests: Vec::new(),
            next_agent: 1,
            salt: 0,
            block_size: 64,
            root_turns: 0,
        };
        trees.push(w.trace(&v, index)?);
    }
    Ok(trees)
}

/// Walks one Weka trace object into a session tree.
struct Walker<'a> {
    file: &'a str,
    line: usize,
    requests: Vec<Request>,
    next_agent: u32,
    salt: u64,
    block_size: u64,
    root_turns: u32,
}

impl Walker<'_> {
    fn err(&self, field: &str, reason: impl Into<String>) -> InputError {
        InputError::new(self.file, self.line, field, reason)
    }

    fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Map<String, Value>, InputError> {
        v.as_object()
            .ok_or_else(|| self.err(path, "expected a JSON object"))
    }

    fn count(&self, o: &Map<String, Value>, path: &str, name: &str) -> Result<u64, InputError> {
        let field = join(path, name);
        match o.get(name) {
            None | Some(Value::Null) => Err(self.err(&field, "missing")),
            Some(v) => v.as_u64().ok_or_else(|| {
                self.err(&field, format!("expected a non-negative integer, got {v}"))
            }),
        }
    }

    fn seconds(
        &self,
        o: &Map<String, Value>,
        path: &str,
        name: &str,
    ) -> Result<Option<f64>, InputError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if x >= 0.0 && x.is_finite() => Ok(Some(x)),
                _ => Err(self.err(
                    &join(path, name),
                    format!("expected a non-negative number of seconds, got {v}"),
                )),
            },
        }
    }

    fn trace(&mut self, v: &Value, index: u64) -> Result<SessionTree, InputError> {
        let o = self.object(v, "")?;
        self.block_size = match o.get("block_size") {
            None | Some(Value::Null) => 64,
            Some(_) => self.count(o, "", "block_size")?,
        };
        if self.block_size == 0 || self.block_size > u32::MAX as u64 {
            return Err(self.err("block_size", "must be a positive integer"));
        }
        self.salt = match o.get("hash_id_scope").and_then(Value::as_str) {
            Some("local") => index + 1,
            _ => 0,
        };
        let list = o
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| self.err("requests", "missing or not a list"))?;
        self.agent(list, "requests", 0, false, &[])?;
        let requests = std::mem::take(&mut self.requests);
        SessionTree::new(index, self.block_size as u32, requests)
            .map_err(|e| self.err("requests", e.to_string()))
    }

    /// Adds one agent's requests; returns its last request (None if it has none).
    fn agent(
        &mut self,
        list: &[Value],
        path: &str,
        agent: u32,
        background: bool,
        entry: &[u32],
    ) -> Result<Option<u32>, InputError> {
        let mut prev: Option<u32> = None;
        let mut joins: Vec<u32> = Vec::new();
        let mut prev_end: Option<f64> = None;
        let mut turn = self.root_turns.saturating_sub(1);
        for (i, item) in list.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let o = self.object(item, &p)?;
            let spawner: Vec<u32> = prev.map_or_else(|| entry.to_vec(), |r| vec![r]);
            if o.get("type").and_then(Value::as_str) == Some("subagent") {
                let bg =
                    background || o.get("status").and_then(Value::as_str) == Some("async_launched");
                let sub = o
                    .get("requests")
                    .and_then(Value::as_array)
                    .ok_or_else(|| self.err(&join(&p, "requests"), "missing or not a list"))?;
                let id = self.next_agent;
                self.next_agent += 1;
                if let Some(last) = self.agent(sub, &join(&p, "requests"), id, bg, &spawner)? {
                    if !bg {
                        joins.push(last);
                    }
                }
                continue;
            }
            let input = self.count(o, &p, "in")?;
            let output = self.count(o, &p, "out")?;
            if input == 0 || input > u32::MAX as u64 {
                return Err(self.err(&join(&p, "in"), "must be a positive token count"));
            }
            if output == 0 || output > u32::MAX as u64 {
                return Err(self.err(&join(&p, "out"), "must be at least 1"));
            }
            let ids = self.hash_ids(o, &p)?;
            let blocks = prompt_chain(&ids, input, self.block_size, self.salt, Ids::FullBlocks)
                .map_err(|e| self.err(&join(&p, "hash_ids"), e))?;
            let t = self.seconds(o, &p, "t")?;
            let think_s = match (self.seconds(o, &p, "think_time")?, t, prev_end) {
                (Some(x), _, _) => x,
                (None, Some(t), Some(end)) => (t - end).max(0.0),
                _ => 0.0,
            };
            let api_time = self.seconds(o, &p, "api_time")?.unwrap_or(0.0);
            prev_end = t.map(|t| t + api_time);
            let mut deps = spawner;
            deps.append(&mut joins);
            if agent == 0 {
                turn = self.root_turns;
                self.root_turns += 1;
            }
            let id = self.requests.len() as u32;
            let kind = if agent == 0 {
                RequestKind::RootTurn
            } else {
                RequestKind::SubagentTurn
            };
            self.requests.push(Request {
                id,
                agent,
                kind,
                deps,
                think_ns: (think_s * 1e9) as u64,
                blocks,
                input_tokens: input as u32,
                output_tokens: output as u32,
                background,
                turn,
            });
            prev = Some(id);
        }
        Ok(prev.or_else(|| joins.last().copied()))
    }

    fn hash_ids(&self, o: &Map<String, Value>, path: &str) -> Result<Vec<u64>, InputError> {
        let field = join(path, "hash_ids");
        match o.get("hash_ids") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .enumerate()
                .map(|(j, x)| {
                    x.as_u64().ok_or_else(|| {
                        self.err(
                            &format!("{field}[{j}]"),
                            format!("expected a non-negative integer id, got {x}"),
                        )
                    })
                })
                .collect(),
            Some(v) => Err(self.err(&field, format!("expected a list of ids, got {v}"))),
        }
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}
