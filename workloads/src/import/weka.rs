//! Weka / Claude-Code agent traces (the agentic-coding corpus format): one JSON object per trace with
//! its requests in order and sub-agents nested as `type: "subagent"` entries; a sub-agent starts from a
//! fresh context and its parent waits for it unless it was launched in the background.

use super::{has_key, prompt_chain, Ids, Importer, Reduced, Skip, SourceFile};
use crate::corpus::Session;
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
        Some(item.map(|v| (at, v)).map_err(|e| json_error(file, &e)))
    })
}

/// Most levels of sub-agents a trace can nest: serde_json reads at most 128 nested arrays and
/// objects, and each sub-agent takes two (its entry and its `requests` list) below the trace's own
/// object, its `requests` and the request objects (61 levels parse, 62 do not).
pub const MAX_SUBAGENT_DEPTH: usize = 61;

/// A JSON error as the user's problem: nesting past serde_json's limit is named as such.
fn json_error(file: &str, e: &serde_json::Error) -> InputError {
    let message = e.to_string();
    if message.starts_with("recursion limit exceeded") {
        return InputError::new(
            file,
            e.line(),
            "requests",
            format!("nesting too deep: sub-agents nested more than {MAX_SUBAGENT_DEPTH} levels (column {}; JSON is read to 128 nested values)", e.column()),
        );
    }
    InputError::new(file, e.line(), "", format!("malformed JSON: {e}"))
}

/// Weka / Claude-Code agent traces.
pub struct Weka;

impl Importer for Weka {
    fn name(&self) -> &'static str {
        "weka"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &[]
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

    /// Each trace as a corpus session: prefixes from its hash ids, times from `t` and `api_time`.
    fn reduce(&self, files: &[SourceFile], lenient: bool) -> Option<Result<Reduced, InputError>> {
        let mut out = Reduced::default();
        let mut own = Vec::new();
        for f in files {
            let traces = match weka_timed(&f.name, &f.text, nth_of(files, f)) {
                Ok(t) => t,
                Err(e) if lenient => {
                    out.skipped.push(Skip::unreadable(&e));
                    continue;
                }
                Err(e) => return Some(Err(e)),
            };
            for (i, (tree, times, no_output)) in traces.into_iter().enumerate() {
                out.skipped.extend(no_output.into_iter().map(|line| {
                    Skip::new(
                        &f.name,
                        line,
                        "a request recorded with no output (asks for 1 token)",
                    )
                }));
                let mut s = Session::from_tree(&tree, "weka");
                s.id =
                    crate::corpus::opaque_id("weka", &format!("{}#{i}", super::base_name(&f.name)));
                let origin = times
                    .iter()
                    .filter_map(|t| t.0)
                    .fold(f64::INFINITY, f64::min);
                for (c, (t, api)) in s.calls.iter_mut().zip(times) {
                    if let Some(t) = t {
                        c.sent_s = Some(t - origin);
                        c.done_s = api.map(|a| t - origin + a);
                    }
                }
                out.push(s, vec![f.name.clone()]);
                own.push(tree);
            }
        }
        out.own_trees = Some(own);
        Some(Ok(out))
    }
}

/// The position of `f` among `files`.
fn nth_of(files: &[SourceFile], f: &SourceFile) -> usize {
    files.iter().position(|x| std::ptr::eq(x, f)).unwrap_or(0)
}

fn weka(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    Ok(weka_timed(file, text, 0)?
        .into_iter()
        .map(|(t, ..)| t)
        .collect())
}

/// Each trace's tree with each request's recorded start `t` and `api_time`, by request id.
/// and the lines of requests recorded with no output.
type Timed = (SessionTree, Vec<(Option<f64>, Option<f64>)>, Vec<usize>);

/// `nth` is the file's position among the inputs: the local ids of traces in different files are
/// separate id spaces, as those of different lines of one file are.
fn weka_timed(file: &str, text: &str, nth: usize) -> Result<Vec<Timed>, InputError> {
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
            app_prefix: Vec::new(),
            times: Vec::new(),
            no_output: Vec::new(),
            nth,
        };
        let tree = w.trace(&v, index)?;
        trees.push((tree, std::mem::take(&mut w.times), w.no_output));
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
    /// Block ids of each agent's declared system + tools prefix (`system_tokens` + `tool_tokens`).
    app_prefix: Vec<u64>,
    /// Each request's recorded `t` and `api_time`, by id.
    times: Vec<(Option<f64>, Option<f64>)>,
    /// Lines of requests recorded with `out: 0` (each replayed asking for one token).
    no_output: Vec<usize>,
    /// The file's position among the inputs (salts local ids).
    nth: usize,
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

    /// An optional count (absent or null is 0).
    fn optional_count(
        &self,
        o: &Map<String, Value>,
        path: &str,
        name: &str,
    ) -> Result<u64, InputError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(0),
            _ => self.count(o, path, name),
        }
    }

    /// The system + tools tokens an agent object declares: the prefix every session of the
    /// application starts that agent with.
    fn declared_prefix(&self, o: &Map<String, Value>, path: &str) -> Result<u64, InputError> {
        Ok(self
            .optional_count(o, path, "system_tokens")?
            .saturating_add(self.optional_count(o, path, "tool_tokens")?))
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
            Some("local") => ((self.nth as u64) << 32) | (index + 1),
            _ => 0,
        };
        let list = o
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| self.err("requests", "missing or not a list"))?;
        let declared = self.declared_prefix(o, "")?;
        self.agent(list, "requests", 0, false, &[], declared)?;
        let requests = std::mem::take(&mut self.requests);
        let tree = SessionTree::new(index, self.block_size as u32, requests)
            .map_err(|e| self.err("requests", e.to_string()))?;
        Ok(tree.with_app_prefix(std::mem::take(&mut self.app_prefix)))
    }

    /// Adds one agent's requests; returns its last request (None if it has none). The first
    /// `declared` tokens of its first request are the application's prefix.
    fn agent(
        &mut self,
        list: &[Value],
        path: &str,
        agent: u32,
        background: bool,
        entry: &[u32],
        declared: u64,
    ) -> Result<Option<u32>, InputError> {
        let mut prev: Option<u32> = None;
        let mut joins: Vec<u32> = Vec::new();
        let mut prev_end: Option<f64> = None;
        let mut turn = self.root_turns.saturating_sub(1);
        let mut first = true;
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
                let declared = self.declared_prefix(o, &p)?;
                let sub_path = join(&p, "requests");
                if let Some(last) = self.agent(sub, &sub_path, id, bg, &spawner, declared)? {
                    if !bg {
                        joins.push(last);
                    }
                }
                continue;
            }
            let input = self.count(o, &p, "in")?;
            let mut output = self.count(o, &p, "out")?;
            if input == 0 || input > u32::MAX as u64 {
                return Err(self.err(&join(&p, "in"), "must be a positive token count"));
            }
            if output > u32::MAX as u64 {
                return Err(self.err(&join(&p, "out"), "too large"));
            }
            if output == 0 {
                // A recorded response with no output (cut off): replayed asking for one token.
                output = 1;
                self.no_output.push(self.line);
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
            let api = self.seconds(o, &p, "api_time")?;
            let api_time = api.unwrap_or(0.0);
            prev_end = t.map(|t| t + api_time);
            self.times.push((t, api));
            if first {
                let n = (declared / self.block_size).min(blocks.len() as u64) as usize;
                self.app_prefix.extend_from_slice(&blocks.as_slice()[..n]);
                first = false;
            }
            let mut deps = spawner;
            deps.append(&mut joins);
            if agent == 0 {
                turn = self.root_turns;
                self.root_turns += 1;
            }
            let id = self.requests.len() as u32;
            let kind = RequestKind::turn_of(agent);
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

/// Why a tree cannot be written as a Weka trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("tree {tree}: request {request}: {reason}")]
pub struct WekaExportError {
    /// Position of the tree in what was written.
    pub tree: usize,
    /// The request at fault.
    pub request: u32,
    /// What the format cannot say.
    pub reason: String,
}

/// Writes trees as Weka / Claude-Code traces (JSONL, one trace per line), the format GuideLLM replays
/// with `--data kind=weka,…` and this tool imports back: each agent's requests in order, each sub-agent
/// as a `type: "subagent"` entry right after the request that spawned it (`status: "async_launched"`
/// when it runs in the background), `hash_ids` numbered 1, 2, 3… in order of first use across the file
/// (`hash_id_scope: "global"`), `think_time` the request's think time (s) and `t` its start were every
/// response instant. A tree whose dependencies the format cannot express (a request that waits for
/// something other than its agent's previous request, its spawner and its sub-agents' ends) is an
/// error naming the tree and request; nothing of that tree is written.
pub fn write_weka<W: std::io::Write>(
    trees: impl IntoIterator<Item = std::sync::Arc<SessionTree>>,
    mut w: W,
) -> Result<(), std::io::Error> {
    let mut ids: std::collections::HashMap<u64, u64> = Default::default();
    for (k, t) in trees.into_iter().enumerate() {
        let v = weka_trace(&t, k, &mut ids)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        serde_json::to_writer(&mut w, &v)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// One tree as a Weka trace object, checked: read back, it has the same requests and dependencies.
fn weka_trace(
    t: &SessionTree,
    k: usize,
    ids: &mut std::collections::HashMap<u64, u64>,
) -> Result<Value, WekaExportError> {
    let reqs = t.requests();
    let fail = |request: u32, reason: String| WekaExportError {
        tree: k,
        request,
        reason,
    };
    // Start times were every response instant: the latest dependency's start plus the think time.
    let mut start = vec![0f64; reqs.len()];
    for r in reqs {
        let after = r
            .deps
            .iter()
            .map(|&d| start[d as usize])
            .fold(0.0, f64::max);
        start[r.id as usize] = after + r.think_ns as f64 / 1e9;
    }
    let mut order = Vec::with_capacity(reqs.len());
    let list = weka_agent(t, 0, &start, ids, &mut order);
    if order.len() != reqs.len() {
        let missing = (0..reqs.len() as u32)
            .find(|i| !order.contains(i))
            .unwrap_or(0);
        return Err(fail(
            missing,
            "its agent is not reached from the root agent through spawns".into(),
        ));
    }
    let v = serde_json::json!({
        "id": format!("tree-{k}-{}", t.session_id),
        "block_size": t.block_size,
        "hash_id_scope": "global",
        "requests": list,
    });
    // Read it back: the importer must see the same dependencies (ids renumbered in write order).
    let back = weka("export", &v.to_string()).map_err(|e| fail(0, e.to_string()))?;
    let mut position = vec![0u32; reqs.len()];
    for (i, &id) in order.iter().enumerate() {
        position[id as usize] = i as u32;
    }
    for (i, &id) in order.iter().enumerate() {
        let ours = &reqs[id as usize];
        let theirs = &back[0].requests()[i];
        let mut want: Vec<u32> = ours.deps.iter().map(|&d| position[d as usize]).collect();
        let mut got = theirs.deps.clone();
        want.sort_unstable();
        got.sort_unstable();
        if want != got || ours.background != theirs.background {
            return Err(fail(
                id,
                format!("waits for requests {:?}, which a Weka trace cannot say (it would wait for {:?})", ours.deps, got.iter().map(|&p| order[p as usize]).collect::<Vec<_>>()),
            ));
        }
    }
    Ok(v)
}

/// The `requests` list of `agent`: its requests in order, each followed by the sub-agents it spawned.
fn weka_agent(
    t: &SessionTree,
    agent: u32,
    start: &[f64],
    ids: &mut std::collections::HashMap<u64, u64>,
    order: &mut Vec<u32>,
) -> Vec<Value> {
    let reqs = t.requests();
    let mut out = Vec::new();
    for r in reqs.iter().filter(|r| r.agent == agent) {
        order.push(r.id);
        let hash_ids: Vec<u64> = r
            .blocks
            .as_slice()
            .iter()
            .map(|b| {
                let next = ids.len() as u64 + 1;
                *ids.entry(*b).or_insert(next)
            })
            .collect();
        out.push(serde_json::json!({
            "t": (start[r.id as usize] * 1e3).round() / 1e3,
            "type": "n",
            "in": r.input_tokens,
            "out": r.output_tokens,
            "hash_ids": hash_ids,
            "think_time": r.think_ns as f64 / 1e9,
        }));
        // Sub-agents whose first request this one spawned, in agent order.
        let mut spawned: Vec<u32> = Vec::new();
        for s in reqs {
            let first_of_agent =
                reqs.iter().find(|x| x.agent == s.agent).map(|x| x.id) == Some(s.id);
            if s.agent != agent
                && first_of_agent
                && s.deps.first() == Some(&r.id)
                && !spawned.contains(&s.agent)
            {
                spawned.push(s.agent);
            }
        }
        for a in spawned {
            let first = reqs
                .iter()
                .find(|x| x.agent == a)
                .expect("the agent has a request");
            out.push(serde_json::json!({
                "type": "subagent",
                "t": (start[first.id as usize] * 1e3).round() / 1e3,
                "agent_id": format!("agent-{a}"),
                "status": if first.background { "async_launched" } else { "completed" },
                "requests": weka_agent(t, a, start, ids, order),
            }));
        }
    }
    out
}
