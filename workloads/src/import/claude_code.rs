//! Claude Code's own session logs (`~/.claude/projects/<project>/<session>.jsonl`, with sub-agents in
//! `<session>/subagents/agent-<id>.jsonl` or `agent-<id>.jsonl` beside it) reduced to corpus sessions:
//! one call per API response (its lines share one `message.id`), its usage, its send time (the entry
//! it answers) and finish time (its last line), sub-agents joined to the call whose tool use spawned
//! them, compactions from `compact_boundary` entries. No text of the log is kept.

use super::{Importer, Reduced, Skip, SourceFile};
use crate::corpus::{Call, CallKind, Session};
use crate::error::InputError;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap, HashSet};

/// How long the provider keeps a prompt cached after its last use (Anthropic's default lifetime):
/// a call sent later than this after its agent's previous answer found that prefix expired, not
/// changed, when the provider had to write it again.
const PROVIDER_CACHE_TTL_S: f64 = 300.0;
/// How far a join may seem to precede the sub-agent's last answer (clocks of one machine, lines
/// written a little after the fact) before the sub-agent is taken to have run in the background.
const JOIN_SLACK_S: f64 = 1.0;
/// Characters per token assumed for a compaction summary whose token count the log does not give.
const CHARS_PER_TOKEN: usize = 4;
/// Characters of streamed content per output token above which a response that never recorded a
/// `stop_reason` is taken to have logged its usage before the answer finished. Some Claude Code
/// versions write every line of a response with the usage as of its first streamed block (`stop_reason`
/// null, one to a few dozen output tokens); finished responses carry at most 4.6 characters per
/// output token (p99 over 1,647 of them in 23,338 public log lines), so 16 leaves a wide margin.
const EARLY_USAGE_CHARS_PER_TOKEN: u64 = 16;

/// Claude Code session logs.
pub struct ClaudeCode;

impl Importer for ClaudeCode {
    fn name(&self) -> &'static str {
        "claude-code"
    }

    fn summary(&self) -> &'static str {
        "Claude Code's session logs (a session .jsonl, or a folder of them with their sub-agent files)"
    }

    fn detects(&self, head: &str) -> bool {
        super::has_key(head, "sessionId")
            && ["parentUuid", "isSidechain", "leafUuid", "messageId"]
                .iter()
                .any(|k| super::has_key(head, k))
    }

    fn reduce(&self, files: &[SourceFile], lenient: bool) -> Option<Result<Reduced, InputError>> {
        Some(reduce(files, lenient))
    }
}

/// One API response, gathered from its lines.
#[derive(Clone, Debug)]
struct RawCall {
    file: usize,
    line: usize,
    /// The entry the response answers (the first line's `parentUuid`).
    parent: Option<String>,
    /// Timestamp of the first and the last line.
    first_s: f64,
    last_s: f64,
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    /// Tool uses it made, by id, with whether they asked to run in the background.
    tool_uses: Vec<(String, bool)>,
    /// Whether any of its lines recorded a `stop_reason` (the answer's final usage).
    stopped: bool,
    /// Characters of its content over all its lines (text, thinking, tool inputs).
    chars: u64,
}

impl RawCall {
    /// Usage logged before the answer finished: no line says how the answer stopped, and its
    /// content is far longer than its output count could have produced.
    fn usage_is_early(&self) -> bool {
        !self.stopped && self.chars > EARLY_USAGE_CHARS_PER_TOKEN * self.output.max(1)
    }
}

/// A compaction boundary: the agent's history was summarised.
#[derive(Clone, Debug)]
struct RawCompaction {
    file: usize,
    line: usize,
    at_s: f64,
    pre_tokens: u64,
    post_tokens: Option<u64>,
    duration_s: Option<f64>,
    summary_chars: usize,
}

#[derive(Clone, Debug)]
enum Event {
    Call(RawCall),
    Compaction(RawCompaction),
}

impl Event {
    fn at(&self) -> f64 {
        match self {
            Event::Call(c) => c.first_s,
            Event::Compaction(c) => c.at_s,
        }
    }
}

/// Everything one session's lines say, before the calls are put in order.
#[derive(Default)]
struct RawSession {
    /// The first line of the session's main file (its own lines, not a sub-agent's).
    main: Option<(usize, usize)>,
    /// Per agent key ("" = root, else the agent id): its events in log order.
    agents: BTreeMap<String, Vec<Event>>,
    /// Where each agent's lines were first seen.
    agent_first_line: HashMap<String, (usize, usize)>,
    /// Entry timestamps by uuid (send times are the timestamp of the entry a response answers).
    entry_s: HashMap<String, f64>,
    /// Calls by `message.id` (agent key, index into its events).
    by_message: HashMap<String, (String, usize)>,
    /// Agent id → the tool use that spawned it (and whether its result says it was backgrounded).
    spawned_by: HashMap<String, (String, bool)>,
    seen_uuids: HashSet<String>,
    /// Sub-agent lines written inline without an agent id: the agent key of each entry, by uuid.
    inline_agent: HashMap<String, String>,
    /// The files its lines came from.
    files: std::collections::BTreeSet<usize>,
    /// The last compaction still waiting for its summary's length.
    pending_summary: Option<(String, usize)>,
}

fn reduce(files: &[SourceFile], lenient: bool) -> Result<Reduced, InputError> {
    let mut sessions: BTreeMap<String, RawSession> = BTreeMap::new();
    let mut skipped = Vec::new();
    // Sessions a lenient read found an unreadable line in, with the first error.
    let mut broken: HashMap<String, InputError> = HashMap::new();
    for (f, file) in files.iter().enumerate() {
        for (n, text) in super::lines(&file.text) {
            let read = serde_json::from_str::<Value>(text)
                .map_err(|e| InputError::new(&file.name, n, "", format!("malformed JSON: {e}")))
                .and_then(|v| read_entry(&mut sessions, &mut skipped, files, f, n, &v));
            match read {
                Ok(()) => {}
                Err(e) if lenient => {
                    // The session is the one the file's other lines name.
                    if let Some(id) = session_of_file(&file.text) {
                        broken.entry(id).or_insert(e);
                    } else {
                        skipped.push(Skip::unreadable(&e));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    let mut out = Reduced {
        skipped,
        ..Reduced::default()
    };
    for (id, raw) in sessions {
        if let Some(e) = broken.get(&id) {
            out.skipped.push(Skip::unreadable(e));
            continue;
        }
        let origin: Vec<String> = raw.files.iter().map(|&f| files[f].name.clone()).collect();
        match finish(files, &id, raw, &mut out.skipped) {
            Ok(Some(s)) => out.push(s, origin),
            Ok(None) => {}
            Err(e) if lenient => out.skipped.push(Skip::unreadable(&e)),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The first `sessionId` a file's lines name.
fn session_of_file(text: &str) -> Option<String> {
    super::lines(text).find_map(|(_, l)| {
        let v: Value = serde_json::from_str(l).ok()?;
        v.get("sessionId")?.as_str().map(str::to_string)
    })
}

fn str_field<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    o.get(k).and_then(Value::as_str)
}

/// The agent of a sub-agent line that an older log keeps inline without an agent id: each sidechain
/// starts at an entry with no parent (sub-agents run in parallel write theirs interleaved, or one
/// after the other once each has finished), and every later line belongs to its parent's sidechain;
/// a line whose parent was never seen falls back to one agent for the file.
fn inline_agent(s: &mut RawSession, o: &Map<String, Value>, f: usize, n: usize) -> String {
    let key = match o.get("parentUuid") {
        None | Some(Value::Null) => format!("inline:{f}:{n}"),
        Some(p) => p
            .as_str()
            .and_then(|p| s.inline_agent.get(p))
            .cloned()
            .unwrap_or_else(|| format!("inline:{f}")),
    };
    if let Some(uuid) = str_field(o, "uuid") {
        s.inline_agent
            .entry(uuid.to_string())
            .or_insert_with(|| key.clone());
    }
    key
}

/// Reads one line of a log into its session.
fn read_entry(
    sessions: &mut BTreeMap<String, RawSession>,
    skipped: &mut Vec<Skip>,
    files: &[SourceFile],
    f: usize,
    n: usize,
    v: &Value,
) -> Result<(), InputError> {
    let name = &files[f].name;
    let err = |field: &str, why: String| InputError::new(name, n, field, why);
    let Some(o) = v.as_object() else {
        return Err(err("", "expected a JSON object".into()));
    };
    let Some(session) = str_field(o, "sessionId") else {
        // Index and metadata lines (summaries, snapshots) belong to no call.
        return Ok(());
    };
    let kind = str_field(o, "type").unwrap_or("");
    let s = sessions.entry(session.to_string()).or_default();
    s.files.insert(f);
    let sidechain = o.get("isSidechain").and_then(Value::as_bool) == Some(true);
    let agent = match (sidechain, str_field(o, "agentId")) {
        (false, _) => String::new(),
        (true, Some(a)) => a.to_string(),
        (true, None) => inline_agent(s, o, f, n),
    };
    if !sidechain && s.main.is_none() {
        s.main = Some((f, n));
    }
    if let Some(uuid) = str_field(o, "uuid") {
        if !s.seen_uuids.insert(uuid.to_string()) {
            // The same entry again (a resumed session copies its history): counted once.
            return Ok(());
        }
        if let Some(t) = o.get("timestamp") {
            let at = timestamp(t)
                .ok_or_else(|| err("timestamp", format!("expected an ISO 8601 time, got {t}")))?;
            s.entry_s.insert(uuid.to_string(), at);
        }
    }
    if let Some(tur) = o.get("toolUseResult").and_then(Value::as_object) {
        if let Some(a) = str_field(tur, "agentId") {
            let bg = str_field(tur, "status") == Some("async_launched");
            if let Some(tool) = tool_result_id(o) {
                s.spawned_by.insert(a.to_string(), (tool, bg));
            }
        }
    }
    if kind == "progress" {
        let d = o.get("data").and_then(Value::as_object);
        if let (Some(a), Some(tool)) = (
            d.and_then(|d| str_field(d, "agentId")),
            str_field(o, "parentToolUseID"),
        ) {
            s.spawned_by
                .entry(a.to_string())
                .or_insert((tool.to_string(), false));
        }
        return Ok(());
    }
    s.agent_first_line.entry(agent.clone()).or_insert((f, n));
    match kind {
        "assistant" => read_call(s, skipped, files, f, n, o, agent),
        "system" if str_field(o, "subtype") == Some("compact_boundary") => {
            let at = time_of(o).ok_or_else(|| err("timestamp", "missing".into()))?;
            let meta = o.get("compactMetadata").and_then(Value::as_object);
            let num = |k: &str| meta.and_then(|m| m.get(k)).and_then(Value::as_u64);
            let Some(pre) = num("preTokens") else {
                skipped.push(Skip::new(
                    name,
                    n,
                    "a compaction without its size (compactMetadata.preTokens)",
                ));
                return Ok(());
            };
            let events = s.agents.entry(agent.clone()).or_default();
            events.push(Event::Compaction(RawCompaction {
                file: f,
                line: n,
                at_s: at,
                pre_tokens: pre,
                post_tokens: num("postTokens").filter(|&t| t > 0),
                duration_s: num("durationMs").map(|ms| ms as f64 / 1e3),
                summary_chars: 0,
            }));
            s.pending_summary = Some((agent, events.len() - 1));
            Ok(())
        }
        "user" if o.get("isCompactSummary").and_then(Value::as_bool) == Some(true) => {
            if let Some((a, i)) = s.pending_summary.take() {
                let chars = o
                    .get("message")
                    .and_then(|m| m.get("content"))
                    .map_or(0, text_chars);
                if let Some(Event::Compaction(c)) = s.agents.get_mut(&a).and_then(|e| e.get_mut(i))
                {
                    c.summary_chars = chars;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The `tool_use_id` a user entry answers.
fn tool_result_id(o: &Map<String, Value>) -> Option<String> {
    let content = o.get("message")?.get("content")?.as_array()?;
    content.iter().find_map(|c| {
        (c.get("type")?.as_str()? == "tool_result")
            .then(|| c.get("tool_use_id")?.as_str().map(str::to_string))?
    })
}

/// Characters of a response's content: its text, thinking and tool inputs (as JSON).
fn content_chars(v: Option<&Value>) -> u64 {
    let Some(Value::Array(parts)) = v else {
        return v.map_or(0, |t| text_chars(t) as u64);
    };
    parts
        .iter()
        .map(|p| {
            let text = |k: &str| {
                p.get(k)
                    .and_then(Value::as_str)
                    .map_or(0, |t| t.chars().count())
            };
            let input = p.get("input").map_or(0, |i| i.to_string().chars().count());
            (text("text") + text("thinking") + input) as u64
        })
        .sum()
}

/// Characters of a message's text (a string, or text parts).
fn text_chars(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(a) => a.iter().map(|p| p.get("text").map_or(0, text_chars)).sum(),
        _ => 0,
    }
}

fn time_of(o: &Map<String, Value>) -> Option<f64> {
    o.get("timestamp").and_then(timestamp)
}

/// One assistant line: a new call, or one more line of a call already seen.
fn read_call(
    s: &mut RawSession,
    skipped: &mut Vec<Skip>,
    files: &[SourceFile],
    f: usize,
    n: usize,
    o: &Map<String, Value>,
    agent: String,
) -> Result<(), InputError> {
    let name = &files[f].name;
    let err = |field: &str, why: &str| InputError::new(name, n, field, why);
    let msg = o
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| err("message", "missing"))?;
    if str_field(msg, "model") == Some("<synthetic>")
        || o.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true)
    {
        skipped.push(Skip::new(
            name,
            n,
            "a placeholder the client wrote, not a model call",
        ));
        return Ok(());
    }
    let usage = msg.get("usage").and_then(Value::as_object).ok_or_else(|| {
        err(
            "message.usage",
            "missing: the log does not say what the call cost",
        )
    })?;
    let count = |k: &str| -> Result<u64, InputError> {
        match usage.get(k) {
            None | Some(Value::Null) => Ok(0),
            // Each count bounded by the longest context, so that their sums cannot wrap.
            Some(v) => v
                .as_u64()
                .filter(|&c| c <= crate::spec::MAX_FIXED_TOKENS as u64)
                .ok_or_else(|| {
                    InputError::new(
                        name,
                        n,
                        format!("message.usage.{k}"),
                        format!(
                            "expected a token count from 0 to {} (the longest context), got {v}",
                            crate::spec::MAX_FIXED_TOKENS
                        ),
                    )
                }),
        }
    };
    let (input, read, write, output) = (
        count("input_tokens")?,
        count("cache_read_input_tokens")?,
        count("cache_creation_input_tokens")?,
        count("output_tokens")?,
    );
    let at = time_of(o).ok_or_else(|| err("timestamp", "missing"))?;
    let tool_uses: Vec<(String, bool)> = msg
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("tool_use"))
        .filter_map(|c| {
            let id = c.get("id")?.as_str()?.to_string();
            let bg =
                c.get("input").and_then(|i| i.get("run_in_background")) == Some(&Value::Bool(true));
            Some((id, bg))
        })
        .collect();
    let stopped = !matches!(msg.get("stop_reason"), None | Some(Value::Null));
    let chars = content_chars(msg.get("content"));
    let key = str_field(msg, "id")
        .or_else(|| str_field(o, "requestId"))
        .map(str::to_string)
        .unwrap_or_else(|| format!("{f}:{n}"));
    if let Some((a, i)) = s.by_message.get(&key) {
        if let Some(Event::Call(c)) = s.agents.get_mut(a).and_then(|e| e.get_mut(*i)) {
            // Streamed lines of one response: the last carries the final counts.
            c.last_s = c.last_s.max(at);
            if output >= c.output {
                (c.input, c.cache_read, c.cache_write, c.output) = (input, read, write, output);
            }
            c.tool_uses.extend(tool_uses);
            c.stopped |= stopped;
            c.chars += chars;
        }
        return Ok(());
    }
    let events = s.agents.entry(agent.clone()).or_default();
    events.push(Event::Call(RawCall {
        file: f,
        line: n,
        parent: str_field(o, "parentUuid").map(str::to_string),
        first_s: at,
        last_s: at,
        input,
        cache_read: read,
        cache_write: write,
        output,
        tool_uses,
        stopped,
        chars,
    }));
    s.by_message.insert(key, (agent, events.len() - 1));
    Ok(())
}

/// A call of the reduced session while it is being built.
struct Built {
    call: Call,
    sent: f64,
    done: f64,
    /// Tool uses it made (to find what a sub-agent was spawned by).
    tool_uses: Vec<(String, bool)>,
}

/// Orders one session's calls, links its agents and works out prefixes; `None` when the session made
/// no model call (counted in `skipped`).
fn finish(
    files: &[SourceFile],
    id: &str,
    mut raw: RawSession,
    skipped: &mut Vec<Skip>,
) -> Result<Option<Session>, InputError> {
    let Some((mf, ml)) = raw.main else {
        let (f, n) = raw
            .agent_first_line
            .values()
            .min()
            .copied()
            .unwrap_or((0, 0));
        return Err(InputError::new(
            &files[f].name,
            n,
            "sessionId",
            "sub-agent lines of a session whose own log is not among the inputs",
        ));
    };
    let root = raw.agents.remove("").unwrap_or_default();
    if !root.iter().any(|e| matches!(e, Event::Call(_))) {
        skipped.push(Skip::new(
            &files[mf].name,
            ml,
            "a session with no model call",
        ));
        return Ok(None);
    }
    let mut built: Vec<Built> = Vec::new();
    let mut agent_calls: Vec<Vec<usize>> = Vec::new();
    add_agent(
        &mut built,
        &mut agent_calls,
        &raw,
        root,
        0,
        None,
        files,
        skipped,
    );
    if agent_calls[0].is_empty() {
        // Every call of the main agent was cut off before it answered: nothing to replay.
        skipped.push(Skip::new(
            &files[mf].name,
            ml,
            "a session whose model calls all lack tokens",
        ));
        return Ok(None);
    }
    // Sub-agents in order of their first event, each linked to the tool use that spawned it.
    let mut subs: Vec<(String, Vec<Event>)> = std::mem::take(&mut raw.agents).into_iter().collect();
    subs.retain(|(_, e)| e.iter().any(|x| matches!(x, Event::Call(_))));
    subs.sort_by(|a, b| a.1[0].at().total_cmp(&b.1[0].at()));
    for (key, events) in subs {
        let first = events[0].at();
        let link = raw.spawned_by.get(&key).cloned();
        let spawner = link
            .as_ref()
            .and_then(|(tool, _)| {
                built
                    .iter()
                    .position(|b| b.tool_uses.iter().any(|(t, _)| t == tool))
            })
            // No link in the log (older versions): the root's latest call sent before it.
            .or_else(|| {
                agent_calls[0]
                    .iter()
                    .rev()
                    .find(|&&i| built[i].sent <= first)
                    .copied()
            })
            .unwrap_or(agent_calls[0][0]);
        let asked_bg = link.as_ref().is_some_and(|(tool, bg)| {
            *bg || built[spawner]
                .tool_uses
                .iter()
                .any(|(t, b)| t == tool && *b)
        });
        let agent = agent_calls.len() as u32;
        add_agent(
            &mut built,
            &mut agent_calls,
            &raw,
            events,
            agent,
            Some((spawner, asked_bg)),
            files,
            skipped,
        );
    }
    Ok(Some(order(id, built)))
}

/// Appends one agent's events as calls: turns, compactions, their prefixes and dependencies.
#[allow(clippy::too_many_arguments)]
fn add_agent(
    built: &mut Vec<Built>,
    agent_calls: &mut Vec<Vec<usize>>,
    raw: &RawSession,
    events: Vec<Event>,
    agent: u32,
    spawn: Option<(usize, bool)>,
    files: &[SourceFile],
    skipped: &mut Vec<Skip>,
) {
    let mut mine: Vec<usize> = Vec::new();
    // The agent's first call: its prompt starts with the application prefix a compacted context
    // starts from again.
    let mut first_call: Option<usize> = None;
    let mut after_compaction = false;
    let background = spawn.is_some_and(|(_, bg)| bg);
    for e in events {
        let prev = mine.last().copied();
        match e {
            Event::Call(c) => {
                let total = c.input + c.cache_read + c.cache_write;
                if total == 0 || c.output == 0 {
                    skipped.push(Skip::new(
                        &files[c.file].name,
                        c.line,
                        "a call without tokens (interrupted before it answered)",
                    ));
                    continue;
                }
                if c.usage_is_early() {
                    skipped.push(Skip::new(
                        &files[c.file].name,
                        c.line,
                        "usage recorded before the answer finished (no stop_reason, far more content than output tokens)",
                    ));
                    continue;
                }
                let sent = c
                    .parent
                    .as_ref()
                    .and_then(|p| raw.entry_s.get(p))
                    .copied()
                    .filter(|&t| t <= c.first_s)
                    .unwrap_or(c.first_s);
                let mut deps: Vec<u32> = Vec::new();
                let (prefix, app) = match (prev, first_call) {
                    (None, _) => {
                        // A sub-agent that began before its spawner's agent sent anything (Claude
                        // Code's warm-up calls at start-up; a resumed session's background agents)
                        // waits for nothing: it starts with the session.
                        if let Some(s) =
                            spawn.and_then(|(s, _)| spawner_sent_by(built, agent_calls, s, sent))
                        {
                            deps.push(s as u32);
                        }
                        (None, c.cache_read.min(total))
                    }
                    (Some(p), Some(first)) if after_compaction => {
                        deps.push(p as u32);
                        let root_app = built[first].call.app as u64;
                        let n = c.cache_read.min(root_app).min(total);
                        ((n > 0).then_some((first as u32, n as u32)), 0)
                    }
                    (Some(p), _) => {
                        deps.push(p as u32);
                        (Some((p as u32, shared_with(&built[p], &c, sent) as u32)), 0)
                    }
                };
                let prefix = prefix.filter(|&(_, n)| n > 0);
                let i = built.len();
                built.push(Built {
                    call: Call {
                        agent,
                        kind: CallKind::Turn,
                        deps,
                        background,
                        input: clamp_u32(total),
                        cached: Some(clamp_u32(c.cache_read.min(total))),
                        prefix,
                        app: clamp_u32(app),
                        output: clamp_u32(c.output),
                        ..Call::default()
                    },
                    sent,
                    done: c.last_s.max(sent),
                    tool_uses: c.tool_uses,
                });
                first_call = first_call.or(Some(i));
                after_compaction = false;
                mine.push(i);
            }
            Event::Compaction(k) => {
                let Some(p) = prev else {
                    skipped.push(Skip::new(
                        &files[k.file].name,
                        k.line,
                        "a compaction before the agent's first call",
                    ));
                    continue;
                };
                let output = k
                    .post_tokens
                    .unwrap_or((k.summary_chars / CHARS_PER_TOKEN) as u64)
                    .max(1);
                let input = k.pre_tokens.max(1);
                let done = k.at_s.max(built[p].done);
                let sent = k
                    .duration_s
                    .map_or(built[p].done, |d| (done - d).max(built[p].done));
                let shared = input.min(built[p].call.input as u64);
                let i = built.len();
                built.push(Built {
                    call: Call {
                        agent,
                        kind: CallKind::Compaction,
                        deps: vec![p as u32],
                        background,
                        input: clamp_u32(input),
                        prefix: (shared > 0).then_some((p as u32, shared as u32)),
                        output: clamp_u32(output),
                        ..Call::default()
                    },
                    sent,
                    done,
                    tool_uses: Vec::new(),
                });
                mine.push(i);
                after_compaction = true;
            }
        }
    }
    agent_calls.push(mine);
}

/// The call a sub-agent whose first call was sent at `sent` waits for: `spawner` (the call whose tool
/// use started it, or the one sent last before it) if that was sent by then, else the latest call of
/// the spawner's agent sent by then (a log's link can name a call sent after the sub-agent began);
/// `None` when its agent had sent nothing by then.
fn spawner_sent_by(
    built: &[Built],
    agent_calls: &[Vec<usize>],
    spawner: usize,
    sent: f64,
) -> Option<usize> {
    if built[spawner].sent <= sent {
        return Some(spawner);
    }
    let agent = built[spawner].call.agent as usize;
    agent_calls
        .get(agent)?
        .iter()
        .rev()
        .find(|&&i| built[i].sent <= sent)
        .copied()
}

/// The tokens call `c` shares with its agent's previous call `p`: what the provider read from its
/// cache, or — when the provider's cache had expired (sent more than its lifetime after `p` finished,
/// with the missed part written again) — `p`'s whole prompt: an agent's history only grows, so the
/// content was the same.
fn shared_with(p: &Built, c: &RawCall, sent: f64) -> u64 {
    let prev = p.call.input as u64;
    let read = c.cache_read;
    let expired =
        read < prev && sent - p.done > PROVIDER_CACHE_TTL_S && c.cache_write + read >= prev;
    if expired {
        prev
    } else {
        read.min(prev)
    }
}

fn clamp_u32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

/// Puts the calls in the order they were sent (dependencies first), joins foreground sub-agents to the
/// next call of the agent that spawned them, and sets times relative to the first send.
fn order(id: &str, mut built: Vec<Built>) -> Session {
    // Joins: a foreground sub-agent's last call gates its spawner's next call.
    let n = built.len();
    let mut last_of_agent: HashMap<u32, usize> = HashMap::new();
    let mut first_of_agent: HashMap<u32, usize> = HashMap::new();
    for (i, b) in built.iter().enumerate() {
        last_of_agent.insert(b.call.agent, i);
        first_of_agent.entry(b.call.agent).or_insert(i);
    }
    let mut joins: Vec<(usize, u32)> = Vec::new();
    for (&agent, &first) in &first_of_agent {
        if agent == 0 || built[first].call.background {
            continue;
        }
        let Some(&spawner) = built[first].call.deps.first() else {
            // Started with the session: nothing waited for it to end.
            for b in built.iter_mut().filter(|b| b.call.agent == agent) {
                b.call.background = true;
            }
            continue;
        };
        let spawner = spawner as usize;
        let parent = built[spawner].call.agent;
        let last = last_of_agent[&agent];
        let next = (spawner + 1..n).find(|&j| {
            built[j].call.agent == parent && built[j].call.deps.contains(&(spawner as u32))
        });
        match next {
            Some(j) if built[last].done <= built[j].sent + JOIN_SLACK_S => {
                joins.push((j, last as u32))
            }
            // The spawner went on before the sub-agent finished: it ran in the background.
            _ => {
                for b in built.iter_mut().filter(|b| b.call.agent == agent) {
                    b.call.background = true;
                }
            }
        }
    }
    for (j, last) in joins {
        built[j].call.deps.push(last);
    }
    // Order by send time, keeping dependencies first (a stable topological order); the root's first
    // call (built first) leads even where a sub-agent that waits for nothing began earlier.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        (a != 0)
            .cmp(&(b != 0))
            .then(built[a].sent.total_cmp(&built[b].sent))
            .then(a.cmp(&b))
    });
    let order = topological(&built, order);
    let mut position = vec![0u32; n];
    for (p, &i) in order.iter().enumerate() {
        position[i] = p as u32;
    }
    let origin = built.iter().map(|b| b.sent).fold(f64::INFINITY, f64::min);
    let mut calls: Vec<Call> = Vec::with_capacity(n);
    // Agents renumbered in order of their first call.
    let mut agent_ids: HashMap<u32, u32> = HashMap::new();
    for &i in &order {
        let b = &built[i];
        let next = agent_ids.len() as u32;
        let agent = *agent_ids.entry(b.call.agent).or_insert(next);
        let mut c = b.call.clone();
        c.agent = agent;
        c.deps = c.deps.iter().map(|&d| position[d as usize]).collect();
        c.deps.sort_unstable();
        c.deps.dedup();
        c.prefix = c.prefix.map(|(j, t)| (position[j as usize], t));
        let ready = b
            .call
            .deps
            .iter()
            .map(|&d| built[d as usize].done)
            .fold(0.0_f64, f64::max);
        c.sent_s = Some(round_ms(b.sent - origin));
        c.done_s = Some(round_ms(b.done - origin));
        c.think_s = Some(if b.call.deps.is_empty() {
            0.0
        } else {
            round_ms((b.sent - ready).max(0.0))
        });
        calls.push(c);
    }
    Session::new("claude-code", id, calls)
}

fn round_ms(s: f64) -> f64 {
    (s * 1e3).round() / 1e3
}

/// A stable topological order of the calls (dependencies and prefixes first), starting from `order`.
fn topological(built: &[Built], order: Vec<usize>) -> Vec<usize> {
    let n = built.len();
    let mut placed = vec![false; n];
    let mut out = Vec::with_capacity(n);
    let needs = |i: usize| {
        built[i]
            .call
            .deps
            .iter()
            .map(|&d| d as usize)
            .chain(built[i].call.prefix.map(|(j, _)| j as usize))
            .collect::<Vec<_>>()
    };
    fn place(
        i: usize,
        placed: &mut Vec<bool>,
        out: &mut Vec<usize>,
        needs: &dyn Fn(usize) -> Vec<usize>,
    ) {
        if placed[i] {
            return;
        }
        placed[i] = true;
        for d in needs(i) {
            place(d, placed, out, needs);
        }
        out.push(i);
    }
    for i in order {
        place(i, &mut placed, &mut out, &needs);
    }
    out
}

/// Seconds since the Unix epoch of an ISO 8601 / RFC 3339 time (`2026-03-25T19:42:17.613Z`, an
/// offset instead of `Z`), or of a number of seconds or milliseconds.
pub(crate) fn timestamp(v: &Value) -> Option<f64> {
    match v {
        Value::Number(x) => x.as_f64().map(|t| if t > 1e11 { t / 1e3 } else { t }),
        Value::String(s) => iso8601(s),
        _ => None,
    }
}

fn iso8601(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let digits = r.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        frac = format!("0.{}", &r[..digits]).parse().ok()?;
        rest = &r[digits..];
    }
    let offset = match rest {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let r = rest[1..].replace(':', "");
            if r.len() != 4 || !r.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            sign * (r[..2].parse::<i64>().ok()? * 3600 + r[2..].parse::<i64>().ok()? * 60)
        }
    };
    let days = days_from_civil(y, mo, d);
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset) as f64 + frac)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_iso_8601() {
        let t = |s: &str| iso8601(s);
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(t("2026-03-25T19:42:17.613Z"), Some(1_774_467_737.613));
        assert_eq!(
            t("2026-03-25T21:42:17.613+02:00"),
            t("2026-03-25T19:42:17.613Z")
        );
        assert_eq!(t("2000-03-01T00:00:00Z"), Some(951_868_800.0));
        for bad in [
            "",
            "2026-13-01T00:00:00Z",
            "2026-03-25",
            "2026-03-25T19:42:17.Z",
            "soon",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }
}
