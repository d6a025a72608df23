//! Weka / Claude-Code agent traces (the agentic-coding corpus format): one JSON object per trace with
//! its requests in order and sub-agents nested as `type: "subagent"` entries; a sub-agent starts from a
//! fresh context and its parent waits for it unless it was launched in the background.

mod build;
mod chains;
mod schema;

use super::{has_key, Importer, Reduced, Skip, SourceFile};
use crate::corpus::Session;
use crate::error::InputError;
use crate::tree::SessionTree;
use build::Built;
use serde_json::Value;

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
        "Weka / Claude-Code agent traces: one JSON object per trace, sub-agents nested (a file, JSONL or Parquet rows)"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "requests")
    }

    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
        weka(file, text)
    }

    /// Each trace as a corpus session: prefixes from its hash ids, times from `t` and `api_time`; the
    /// trees are AgentX's reconstruction (`build`), with their recorded clocks.
    fn reduce(&self, files: &[SourceFile], lenient: bool) -> Option<Result<Reduced, InputError>> {
        let mut out = Reduced::default();
        let mut own = Vec::new();
        for (nth, f) in files.iter().enumerate() {
            let traces =
                match weka_built(&f.name, &f.text, nth) {
                    Ok((t, empty)) => {
                        out.skipped.extend(empty.into_iter().map(|line| {
                            Skip::new(&f.name, line, "a trace with no main-agent call")
                        }));
                        t
                    }
                    Err(e) if lenient => {
                        out.skipped.push(Skip::unreadable(&e));
                        continue;
                    }
                    Err(e) => return Some(Err(e)),
                };
            for (i, (line, built)) in traces.into_iter().enumerate() {
                out.skipped.extend(
                    built
                        .skipped
                        .iter()
                        .map(|why| Skip::new(&f.name, line, why.clone())),
                );
                let tree = built.tree;
                let mut s = Session::from_tree(&tree, "weka");
                s.id =
                    crate::corpus::opaque_id("weka", &format!("{}#{i}", super::base_name(&f.name)));
                if let Some(rec) = tree.recorded() {
                    let origin = rec.span_ns().0;
                    for (c, r) in s.calls.iter_mut().zip(0u32..) {
                        let sent = (rec.start_ns[r as usize] - origin) as f64 / 1e9;
                        c.sent_s = Some(sent);
                        c.done_s = rec.api_ns[r as usize].map(|a| sent + a as f64 / 1e9);
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

fn weka(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    Ok(weka_built(file, text, 0)?
        .0
        .into_iter()
        .map(|(_, b)| b.tree)
        .collect())
}

/// Every trace of a file (one JSON object, or JSONL), built, with the line each starts on. `nth` is
/// the file's position among the inputs: the local ids of traces in different files are separate id
/// spaces, as those of different lines of one file are. A trace with no call at all is left out and
/// said so (its line is in the second list).
#[allow(clippy::type_complexity)]
fn weka_built(
    file: &str,
    text: &str,
    nth: usize,
) -> Result<(Vec<(usize, Built)>, Vec<usize>), InputError> {
    let mut out: Vec<(usize, Built)> = Vec::new();
    let mut empty = Vec::new();
    let mut ids: std::collections::HashMap<String, usize> = Default::default();
    let name = super::base_name(file)
        .trim_end_matches(".gz")
        .trim_end_matches(".json")
        .to_string();
    for item in json_values(file, text) {
        let (line, v) = item?;
        let raw = schema::trace(file, line, &name, &v)?;
        if let Some(first) = ids.insert(raw.id.clone(), line) {
            return Err(InputError::new(
                file,
                line,
                "id",
                format!("duplicate trace id {:?} (also on line {first})", raw.id),
            ));
        }
        let index = out.len() as u64;
        match build::build(file, &raw, index, nth)? {
            Some(b) => out.push((line, b)),
            None => empty.push(line),
        }
    }
    Ok((out, empty))
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
    let joined = joined_agents(t);
    let list = weka_agent(t, 0, &start, ids, &mut order, &joined);
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
    let joined = joined_agents(t);
    for (i, &id) in order.iter().enumerate() {
        let ours = &reqs[id as usize];
        let theirs = &back[0].requests()[i];
        let mut want: Vec<u32> = ours.deps.iter().map(|&d| position[d as usize]).collect();
        let mut got = theirs.deps.clone();
        want.sort_unstable();
        got.sort_unstable();
        let background = ours.background || (ours.agent > 0 && !joined.contains(&ours.agent));
        if want != got || background != theirs.background {
            return Err(fail(
                id,
                format!("waits for requests {:?}, which a Weka trace cannot say (it would wait for {:?})", ours.deps, got.iter().map(|&p| order[p as usize]).collect::<Vec<_>>()),
            ));
        }
    }
    Ok(v)
}

/// The agents some request of another agent waits for (a join: an agent's first request only follows
/// its spawner). A sub-agent nothing waits for gates nothing: as a reader sees it, it runs in the
/// background.
fn joined_agents(t: &SessionTree) -> std::collections::HashSet<u32> {
    let reqs = t.requests();
    let first_of: std::collections::HashSet<u32> = (0..t.agents() as u32)
        .filter_map(|a| reqs.iter().find(|r| r.agent == a).map(|r| r.id))
        .collect();
    reqs.iter()
        .filter(|r| !first_of.contains(&r.id))
        .flat_map(|r| r.deps.iter().map(move |&d| (r.agent, d)))
        .filter(|&(a, d)| reqs[d as usize].agent != a)
        .map(|(_, d)| reqs[d as usize].agent)
        .collect()
}

/// The `requests` list of `agent`: its requests in order, each followed by the sub-agents it spawned.
fn weka_agent(
    t: &SessionTree,
    agent: u32,
    start: &[f64],
    ids: &mut std::collections::HashMap<u64, u64>,
    order: &mut Vec<u32>,
    joined: &std::collections::HashSet<u32>,
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
            "t": start[r.id as usize],
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
            let t0 = start[first.id as usize];
            // Readers join a sub-agent to the first parent request starting after it ended: a
            // background one ends after the whole tree, the others when their last request starts.
            let end = if first.background || !joined.contains(&a) {
                start.iter().copied().fold(0.0, f64::max) + 1.0
            } else {
                reqs.iter()
                    .filter(|x| x.agent == a)
                    .map(|x| start[x.id as usize])
                    .fold(0.0, f64::max)
            };
            out.push(serde_json::json!({
                "type": "subagent",
                "t": t0,
                "agent_id": format!("agent-{a}"),
                "status": if first.background { "async_launched" } else { "completed" },
                "duration_ms": ((end - t0).max(0.0) * 1e3).floor(),
                "requests": weka_agent(t, a, start, ids, order, joined),
            }));
        }
    }
    out
}
