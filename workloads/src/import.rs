//! Trace importers (Weka/Claude-Code, Mooncake, Qwen-Bailian) and the native JSONL format.
//! Importers accept unknown fields and meaningful nulls, and reject what makes a trace meaningless,
//! naming the file, line and field. They never panic on input.

use crate::error::InputError;
use crate::generator::TreeSource;
use crate::hash::chain_ids;
use crate::tree::{Blocks, Request, RequestKind, SessionTree};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

/// A trace file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Weka / Claude-Code agent traces: one JSON object per trace (a file or JSONL).
    Weka,
    /// Mooncake JSONL: one request per line, 512-token blocks.
    Mooncake,
    /// Qwen-Bailian JSONL: one request per line, trees by `parent_chat_id`, 16-token blocks.
    Bailian,
    /// This tool's own export: one session tree per line.
    Native,
}

impl TraceFormat {
    /// Parses a format name as written on the command line.
    pub fn parse(name: &str) -> Option<TraceFormat> {
        match name {
            "weka" | "claude-code" => Some(TraceFormat::Weka),
            "mooncake" => Some(TraceFormat::Mooncake),
            "bailian" | "qwen-bailian" => Some(TraceFormat::Bailian),
            "native" => Some(TraceFormat::Native),
            _ => None,
        }
    }

    /// Guesses the format from the keys of the first record.
    pub fn detect(text: &str) -> Option<TraceFormat> {
        let head: String = text.chars().take(4096).collect();
        let has = |k: &str| head.contains(&format!("\"{k}\""));
        if has("session_id") {
            Some(TraceFormat::Native)
        } else if has("chat_id") {
            Some(TraceFormat::Bailian)
        } else if has("input_length") {
            Some(TraceFormat::Mooncake)
        } else if has("requests") {
            Some(TraceFormat::Weka)
        } else {
            None
        }
    }
}

/// Session trees read from a file; as a stream it cycles through them.
#[derive(Clone, Debug)]
pub struct Trace {
    trees: Vec<Arc<SessionTree>>,
}

impl Trace {
    /// Wraps trees (at least one).
    pub fn new(trees: Vec<SessionTree>) -> Option<Trace> {
        (!trees.is_empty()).then(|| Trace {
            trees: trees.into_iter().map(Arc::new).collect(),
        })
    }

    /// The trees in file order.
    pub fn trees(&self) -> &[Arc<SessionTree>] {
        &self.trees
    }
}

impl TreeSource for Trace {
    fn tree(&self, k: u64) -> Arc<SessionTree> {
        self.trees[(k % self.trees.len() as u64) as usize].clone()
    }
}

/// Reads a trace file; `format` `None` detects it from the content.
pub fn read_trace(
    path: &std::path::Path,
    format: Option<TraceFormat>,
) -> Result<Trace, InputError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError::new(&file, 0, "", format!("cannot read: {e}")))?;
    parse_trace(&file, &text, format)
}

/// Parses trace text; `file` only names the source in errors.
pub fn parse_trace(
    file: &str,
    text: &str,
    format: Option<TraceFormat>,
) -> Result<Trace, InputError> {
    let format =
        match format.or_else(|| TraceFormat::detect(text)) {
            Some(f) => f,
            None => return Err(InputError::new(
                file,
                1,
                "",
                "unknown trace format (expected Weka, Mooncake, Bailian or native JSON records)",
            )),
        };
    let trees = match format {
        TraceFormat::Weka => weka(file, text)?,
        TraceFormat::Mooncake => mooncake(file, text)?,
        TraceFormat::Bailian => bailian(file, text)?,
        TraceFormat::Native => native(file, text)?,
    };
    Trace::new(trees).ok_or_else(|| InputError::new(file, 0, "", "the file holds no request"))
}

/// Writes trees in the native format: one JSON tree per line.
pub fn write_native<W: Write>(
    trees: impl IntoIterator<Item = Arc<SessionTree>>,
    mut w: W,
) -> std::io::Result<()> {
    for t in trees {
        serde_json::to_writer(&mut w, &*t)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Non-empty lines with their 1-based numbers.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
}

/// Deserialises one JSON line, naming the field at fault.
fn typed_line<T: for<'de> Deserialize<'de>>(
    file: &str,
    line: usize,
    text: &str,
) -> Result<T, InputError> {
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." || field == "?" {
            String::new()
        } else {
            field
        };
        InputError::new(file, line, field, e.into_inner().to_string())
    })
}

fn native(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    lines(text).map(|(n, l)| typed_line(file, n, l)).collect()
}

/// Whether a format gives an id to a trailing partial block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ids {
    /// Only full blocks have ids (Weka, Bailian).
    FullBlocks,
    /// The last, partial block has an id too (Mooncake: `ceil(input / 512)` ids).
    WithPartial,
}

/// A chain of `ids` for a prompt of `input` tokens in blocks of `block_size`; a trailing id for a
/// partial block is dropped where the format has one (it cannot be cached), a longer chain is an error.
fn prompt_chain(
    ids: &[u64],
    input: u64,
    block_size: u64,
    salt: u64,
    kind: Ids,
) -> Result<Blocks, String> {
    let full = (input / block_size) as usize;
    let keep = if ids.len() <= full {
        ids.len()
    } else if kind == Ids::WithPartial && ids.len() == full + 1 && input % block_size != 0 {
        full
    } else {
        return Err(format!(
            "{} blocks of {block_size} tokens exceed the input of {input} tokens",
            ids.len()
        ));
    };
    Ok(Blocks::from_vec(chain_ids(&ids[..keep], salt)))
}

fn at_least_one(file: &str, line: usize, field: &str, v: u64) -> Result<u32, InputError> {
    match v {
        0 => Err(InputError::new(file, line, field, "must be at least 1")),
        v if v > u32::MAX as u64 => Err(InputError::new(file, line, field, "too large")),
        v => Ok(v as u32),
    }
}

#[derive(Deserialize)]
struct MooncakeLine {
    #[allow(dead_code)]
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
}

fn mooncake(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    let mut trees = Vec::new();
    for (n, l) in lines(text) {
        let m: MooncakeLine = typed_line(file, n, l)?;
        let input = at_least_one(file, n, "input_length", m.input_length)?;
        let output = at_least_one(file, n, "output_length", m.output_length)?;
        let blocks = prompt_chain(&m.hash_ids, m.input_length, 512, 0, Ids::WithPartial)
            .map_err(|e| InputError::new(file, n, "hash_ids", e))?;
        let r = Request {
            id: 0,
            agent: 0,
            kind: RequestKind::RootTurn,
            deps: vec![],
            think_ns: 0,
            blocks,
            input_tokens: input,
            output_tokens: output,
            background: false,
            turn: 0,
        };
        let tree = SessionTree::new(trees.len() as u64, 512, vec![r])
            .map_err(|e| InputError::new(file, n, "", e.to_string()))?;
        trees.push(tree);
    }
    Ok(trees)
}

#[derive(Deserialize)]
struct BailianLine {
    chat_id: i64,
    parent_chat_id: i64,
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    #[allow(dead_code)]
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    turn: Option<u64>,
    hash_ids: Vec<u64>,
}

fn bailian(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    // chat_id -> (tree index, request index, timestamp)
    let mut where_is: HashMap<i64, (usize, u32, f64)> = HashMap::new();
    let mut trees: Vec<(Vec<Request>, usize)> = Vec::new();
    for (n, l) in lines(text) {
        let b: BailianLine = typed_line(file, n, l)?;
        if !(b.timestamp >= 0.0 && b.timestamp.is_finite()) {
            return Err(InputError::new(
                file,
                n,
                "timestamp",
                "must be a non-negative number of seconds",
            ));
        }
        let input = at_least_one(file, n, "input_length", b.input_length)?;
        let output = at_least_one(file, n, "output_length", b.output_length)?;
        let blocks = prompt_chain(&b.hash_ids, b.input_length, 16, 0, Ids::FullBlocks)
            .map_err(|e| InputError::new(file, n, "hash_ids", e))?;
        let (tree, deps, think_s) = if b.parent_chat_id < 0 {
            trees.push((Vec::new(), n));
            (trees.len() - 1, vec![], 0.0)
        } else {
            let &(t, r, ts) = where_is.get(&b.parent_chat_id).ok_or_else(|| {
                InputError::new(
                    file,
                    n,
                    "parent_chat_id",
                    format!(
                        "chat {} does not appear on an earlier line",
                        b.parent_chat_id
                    ),
                )
            })?;
            (t, vec![r], (b.timestamp - ts).max(0.0))
        };
        let requests = &mut trees[tree].0;
        let id = requests.len() as u32;
        let turn = b.turn.map_or(id, |t| t.min(u32::MAX as u64) as u32);
        requests.push(Request {
            id,
            agent: 0,
            kind: RequestKind::RootTurn,
            deps,
            think_ns: (think_s * 1e9) as u64,
            blocks,
            input_tokens: input,
            output_tokens: output,
            background: false,
            turn,
        });
        if where_is
            .insert(b.chat_id, (tree, id, b.timestamp))
            .is_some()
        {
            return Err(InputError::new(
                file,
                n,
                "chat_id",
                format!("chat {} appears twice", b.chat_id),
            ));
        }
    }
    trees
        .into_iter()
        .enumerate()
        .map(|(i, (reqs, line))| {
            SessionTree::new(i as u64, 16, reqs)
                .map_err(|e| InputError::new(file, line, "", e.to_string()))
        })
        .collect()
}

/// Top-level JSON values of a file (one object, or JSONL) with the line each starts on.
fn json_values<'a>(
    file: &'a str,
    text: &'a str,
) -> impl Iterator<Item = Result<(usize, Value), InputError>> + 'a {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut offset = 0usize;
    std::iter::from_fn(move || {
        let skipped = text[offset..].len() - text[offset..].trim_start().len();
        let line = 1 + text[..offset + skipped].matches('\n').count();
        let item = stream.next()?;
        offset = stream.byte_offset();
        Some(
            item.map(|v| (line, v))
                .map_err(|e| InputError::new(file, e.line(), "", format!("malformed JSON: {e}"))),
        )
    })
}

fn weka(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    let mut trees = Vec::new();
    for item in json_values(file, text) {
        let (line, v) = item?;
        let index = trees.len() as u64;
        let mut w = Weka {
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
struct Weka<'a> {
    file: &'a str,
    line: usize,
    requests: Vec<Request>,
    next_agent: u32,
    salt: u64,
    block_size: u64,
    root_turns: u32,
}

impl Weka<'_> {
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
            prev_end = t.map(|t| {
                t + self
                    .seconds(o, &p, "api_time")
                    .ok()
                    .flatten()
                    .unwrap_or(0.0)
            });
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
