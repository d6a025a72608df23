//! Real sessions reduced to numbers: per model call its prompt and output lengths, which earlier call's
//! prompt it extends, the application prefix it starts with, its times and its dependencies — and
//! nothing a person wrote. The corpus format (JSONL, one session per line) is what the importers of
//! agents' own logs reduce to, what `workload fit` reads, and what the repository ships under `corpus/`.
//! Pure; no IO.

use crate::error::InputError;
use crate::hash::{mix2, mix64};
use crate::tree::{Blocks, Request, RequestKind, SessionTree};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// Tokens per block of the trees a corpus session becomes (the Weka traces' block size).
pub const CORPUS_BLOCK_SIZE: u32 = 64;
/// The `format` every corpus line carries.
pub const CORPUS_FORMAT: &str = "serverbench-corpus";
/// The version of the corpus format this build reads and writes.
pub const CORPUS_VERSION: u32 = 1;

/// Salt of application-prefix block ids (shared by every session of one application).
const APP_SALT: u64 = 0xA11C_0DE5_0000_0001;
/// Salt of a session's own block ids.
const OWN_SALT: u64 = 0x5E55_1011_0000_0002;

/// What one call is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// An ordinary turn of its agent.
    #[default]
    Turn,
    /// A summarising call that replaces the agent's history (context compaction).
    Compaction,
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// One model call of a session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Call {
    /// The agent making it: 0 is the root, sub-agents count up from 1 in order of their first call.
    pub agent: u32,
    /// Turn or compaction.
    #[serde(default, skip_serializing_if = "is_default")]
    pub kind: CallKind,
    /// Calls (by position in the session, all earlier) that must complete before this one is sent:
    /// the agent's previous call, the call that spawned a sub-agent, the last calls of joined
    /// sub-agents.
    #[serde(default)]
    pub deps: Vec<u32>,
    /// Part of a sub-agent launched in the background (it gates nothing).
    #[serde(default, skip_serializing_if = "is_default")]
    pub background: bool,
    /// When it was sent, seconds after the session's first call was sent (absent when the log did
    /// not record it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_s: Option<f64>,
    /// When its answer finished, on the same clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_s: Option<f64>,
    /// Client time between its last dependency's completion and its send (tool execution, a person
    /// typing), seconds, uncapped; absent when the log did not record it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub think_s: Option<f64>,
    /// Prompt tokens (cached or not).
    pub input: u32,
    /// Prompt tokens the provider reported as read from its cache, where the log says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<u32>,
    /// `[call, tokens]`: the first `tokens` tokens of this prompt are the first `tokens` tokens of
    /// that earlier call's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<(u32, u32)>,
    /// The first `app` tokens are the application's own prefix (its system prompt and tools): the
    /// same in every session of the source whose agent starts with a prefix of this length.
    #[serde(default, skip_serializing_if = "is_default")]
    pub app: u32,
    /// Output tokens.
    pub output: u32,
}

/// One real session: a root agent's calls and its sub-agents', in the order they were sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Session {
    /// Always [`CORPUS_FORMAT`].
    pub format: String,
    /// Format version ([`CORPUS_VERSION`]).
    pub version: u32,
    /// An opaque id (a hash of the log's own session id): it names the session in reports and
    /// decides the held-out split of `workload fit`.
    pub id: String,
    /// Which agent wrote the log (`claude-code`, `codex-cli`, `mini-swe-agent`, …).
    pub source: String,
    /// The calls, in the order sent (dependencies point backwards).
    pub calls: Vec<Call>,
}

impl Session {
    /// A session of `source` named by a hash of `original_id`.
    pub fn new(source: &str, original_id: &str, calls: Vec<Call>) -> Session {
        Session {
            format: CORPUS_FORMAT.into(),
            version: CORPUS_VERSION,
            id: opaque_id(source, original_id),
            source: source.into(),
            calls,
        }
    }

    /// Checks that the calls make a replayable session; the error names the field.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |i: usize, field: &str, why: String| Err((format!("calls[{i}].{field}"), why));
        if self.format != CORPUS_FORMAT {
            return Err((
                "format".into(),
                format!("expected {CORPUS_FORMAT:?}, got {:?}", self.format),
            ));
        }
        if self.version != CORPUS_VERSION {
            return Err((
                "version".into(),
                format!(
                    "this build reads version {CORPUS_VERSION}, got {}",
                    self.version
                ),
            ));
        }
        if self.calls.is_empty() {
            return Err(("calls".into(), "a session has at least one call".into()));
        }
        let mut agents_seen = 0u32;
        for (i, c) in self.calls.iter().enumerate() {
            if c.input == 0 {
                return bad(i, "input", "must be at least 1".into());
            }
            if c.output == 0 {
                return bad(i, "output", "must be at least 1".into());
            }
            // A replay holds a call's prompt as blocks: memory follows the counts, so they are bounded
            // by the longest context a deployment may have.
            if c.input as u64 + c.output as u64 > crate::spec::MAX_FIXED_TOKENS as u64 {
                return bad(
                    i,
                    "input",
                    format!(
                        "{} prompt and {} output tokens exceed the longest context a deployment may have ({})",
                        c.input,
                        c.output,
                        crate::spec::MAX_FIXED_TOKENS
                    ),
                );
            }
            if let (Some(sent), Some(done)) = (c.sent_s, c.done_s) {
                if done < sent {
                    return bad(
                        i,
                        "done_s",
                        format!("{done} s is before its send time, {sent} s"),
                    );
                }
            }
            if c.agent > agents_seen {
                return bad(
                    i,
                    "agent",
                    format!("agent {} appears before agent {agents_seen}", c.agent),
                );
            }
            if c.agent == agents_seen {
                agents_seen += 1;
            }
            if let Some(&d) = c.deps.iter().find(|&&d| d as usize >= i) {
                return bad(i, "deps", format!("{d} is not an earlier call"));
            }
            // A call may be sent while a call it waits for is still in flight (logs record such
            // overlaps; the replay sends it once that call ends), never before that call was sent.
            if let Some(sent) = c.sent_s {
                let later = c.deps.iter().find_map(|&d| {
                    let ds = self.calls[d as usize].sent_s?;
                    (ds > sent).then_some((d, ds))
                });
                if let Some((d, ds)) = later {
                    return bad(
                        i,
                        "deps",
                        format!(
                            "waits for call {d}, sent at {ds} s, after this call ({sent} s): a call cannot wait for one sent after it"
                        ),
                    );
                }
            }
            if c.app > c.input {
                return bad(
                    i,
                    "app",
                    format!("{} tokens exceed the input of {}", c.app, c.input),
                );
            }
            if let Some(x) = c.cached {
                if x > c.input {
                    return bad(
                        i,
                        "cached",
                        format!("{x} tokens exceed the input of {}", c.input),
                    );
                }
            }
            if let Some((j, n)) = c.prefix {
                let Some(p) = self.calls.get(j as usize).filter(|_| (j as usize) < i) else {
                    return bad(i, "prefix", format!("{j} is not an earlier call"));
                };
                if n > c.input || n > p.input {
                    return bad(
                        i,
                        "prefix",
                        format!(
                            "{n} shared tokens exceed this prompt ({}) or call {j}'s ({})",
                            c.input, p.input
                        ),
                    );
                }
            }
            for (name, v) in [
                ("sent_s", c.sent_s),
                ("done_s", c.done_s),
                ("think_s", c.think_s),
            ] {
                if let Some(x) = v {
                    if !(0.0..1e9).contains(&x) {
                        return bad(i, name, format!("must be a time in [0, 1e9) s, got {x}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The session as a tree of `CORPUS_BLOCK_SIZE`-token blocks, named `index`. A call's blocks are
    /// its prefix call's first blocks, then (for a call without a long enough prefix) the application
    /// prefix's blocks, then blocks of its own; application blocks are shared with every session of
    /// the same source whose agent starts with a prefix of the same length, and declared the tree's
    /// application prefix. `check` must have passed.
    pub fn to_tree(&self, index: u64) -> SessionTree {
        let bs = CORPUS_BLOCK_SIZE;
        let own = mix2(OWN_SALT, mix64(hash_str(&self.id)));
        let source = hash_str(&self.source);
        // Calls that extend the whole of their prefix call's chain, while it is that chain's tip,
        // grow the same chain: a session of long prompts holds each block id once.
        let mut chains: Vec<Vec<u64>> = Vec::new();
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(self.calls.len()); // (chain, length)
        let mut app_ids: Vec<u64> = Vec::new();
        for (i, c) in self.calls.iter().enumerate() {
            let full = (c.input / bs) as usize;
            let app_blocks = (c.app / bs) as usize;
            let shared = c.prefix.map_or(0, |(_, n)| (n / bs) as usize).min(full);
            let from = c.prefix.filter(|_| shared >= app_blocks && shared > 0);
            let chain = match from {
                Some((j, _)) => {
                    let (cj, len) = at[j as usize];
                    if shared == len && chains[cj].len() == len {
                        cj
                    } else {
                        chains.push(chains[cj][..shared].to_vec());
                        chains.len() - 1
                    }
                }
                None => {
                    let key = mix2(APP_SALT ^ source, c.app as u64);
                    let app: Vec<u64> = (0..app_blocks.min(full) as u64)
                        .map(|p| mix2(key, p))
                        .collect();
                    app_ids.extend_from_slice(&app);
                    chains.push(app);
                    chains.len() - 1
                }
            };
            let ids = &mut chains[chain];
            let start = ids.len() as u64;
            ids.extend((start..full as u64).map(|p| mix2(own, ((i as u64) << 32) | p)));
            at.push((chain, full));
        }
        let chains: Vec<Arc<[u64]>> = chains.into_iter().map(Arc::from).collect();
        let mut requests = Vec::with_capacity(self.calls.len());
        let mut root_turn = 0u32;
        let mut turn_of_call: Vec<u32> = Vec::with_capacity(self.calls.len());
        for (i, c) in self.calls.iter().enumerate() {
            // A root call opens a turn; a sub-agent's calls carry the turn of the call they follow.
            let turn = if c.agent == 0 {
                root_turn += 1;
                root_turn - 1
            } else {
                c.deps.first().map_or(0, |&d| turn_of_call[d as usize])
            };
            turn_of_call.push(turn);
            let kind = match c.kind {
                CallKind::Compaction => RequestKind::Compaction,
                CallKind::Turn => RequestKind::turn_of(c.agent),
            };
            let (chain, len) = at[i];
            requests.push(Request {
                id: i as u32,
                agent: c.agent,
                kind,
                deps: c.deps.clone(),
                think_ns: (self.gap_s(i) * 1e9).round() as u64,
                blocks: Blocks::prefix_of(chains[chain].clone(), len),
                input_tokens: c.input,
                output_tokens: c.output,
                background: c.background,
                turn,
            });
        }
        let tree = SessionTree::new(index, bs, requests)
            .expect("a checked session makes a valid tree")
            .with_app_prefix(app_ids);
        match self.arrivals_ns() {
            Some(a) => tree.with_arrivals(a).expect("one arrival per call"),
            None => tree,
        }
    }

    /// The client's time before call `i`, end to start as the benchmark's replayer derives it: its
    /// send time less the latest finish of the calls it waited for, where the log recorded both
    /// (the Weka traces' `t` and `api_time`, a log's own request times); else the recorded
    /// `think_s`; else 0.
    fn gap_s(&self, i: usize) -> f64 {
        let c = &self.calls[i];
        if c.deps.is_empty() {
            return 0.0;
        }
        let done: Option<Vec<f64>> = c
            .deps
            .iter()
            .map(|&d| self.calls[d as usize].done_s)
            .collect();
        match (c.sent_s, done) {
            (Some(sent), Some(done)) => {
                (sent - done.into_iter().fold(f64::NEG_INFINITY, f64::max)).max(0.0)
            }
            _ => c.think_s.unwrap_or(0.0),
        }
    }

    /// Send times as nanoseconds, when every call has one.
    fn arrivals_ns(&self) -> Option<Vec<u64>> {
        self.calls
            .iter()
            .map(|c| c.sent_s.map(|s| (s * 1e9).round() as u64))
            .collect()
    }

    /// A tree as a corpus session of `source`: each request's prefix is the longest it shares with
    /// any earlier request (its block ids say so), its application prefix the leading blocks the tree
    /// declares; times are the recorded arrivals where the tree has them.
    pub fn from_tree(tree: &SessionTree, source: &str) -> Session {
        let bs = tree.block_size;
        let app: std::collections::HashSet<u64> = tree.app_prefix().iter().copied().collect();
        let mut first_holder: HashMap<u64, u32> = HashMap::new();
        let arrivals = tree.arrivals_ns();
        let origin = tree.first_arrival_ns().unwrap_or(0);
        let mut calls = Vec::with_capacity(tree.len());
        // Agents numbered in order of their first call, as the format has them (a tree numbers its
        // streams in another order: a Weka trace's in planning order).
        let mut agent_ids: HashMap<u32, u32> = HashMap::new();
        for r in tree.requests() {
            let next = agent_ids.len() as u32;
            let agent = *agent_ids.entry(r.agent).or_insert(next);
            let ids = r.blocks.as_slice();
            let hit = ids.iter().rposition(|id| first_holder.contains_key(id));
            let prefix = hit.map(|p| (first_holder[&ids[p]], ((p + 1) as u32) * bs));
            let app_blocks = ids.iter().take_while(|id| app.contains(id)).count() as u32;
            for &id in ids {
                first_holder.entry(id).or_insert(r.id);
            }
            calls.push(Call {
                agent,
                kind: match r.kind {
                    RequestKind::Compaction => CallKind::Compaction,
                    _ => CallKind::Turn,
                },
                deps: r.deps.clone(),
                background: r.background,
                sent_s: arrivals.map(|a| (a[r.id as usize] - origin) as f64 / 1e9),
                done_s: None,
                think_s: Some(r.think_ns as f64 / 1e9),
                input: r.input_tokens,
                cached: None,
                prefix,
                app: app_blocks * bs,
                output: r.output_tokens,
            });
        }
        Session::new(source, &format!("tree-{}", tree.session_id), calls)
    }
}

/// A stable, opaque 16-hex-digit id for a log's own session id.
pub fn opaque_id(source: &str, original_id: &str) -> String {
    format!("{:016x}", mix2(hash_str(source), hash_str(original_id)))
}

/// FNV-1a over the bytes, then mixed: stable across platforms and builds.
fn hash_str(s: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in s.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix64(h)
}

/// Parses corpus JSONL text: one session per line, each checked.
pub fn parse_corpus(file: &str, text: &str) -> Result<Vec<Session>, InputError> {
    let mut out = Vec::new();
    for (n, line) in lines(text) {
        let s: Session = serverbench_config::parse_json_line(file, n, line)?;
        s.check()
            .map_err(|(field, why)| InputError::new(file, n, field, why))?;
        out.push(s);
    }
    Ok(out)
}

/// Writes sessions as corpus JSONL.
pub fn write_corpus<'a, W: std::io::Write>(
    sessions: impl IntoIterator<Item = &'a Session>,
    mut w: W,
) -> std::io::Result<()> {
    for s in sessions {
        serde_json::to_writer(&mut w, s)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Each session's id beside the files it was read from, one JSON line per session (`workload export
/// --origins`: a corpus manifest's entries); `origins[i]` belongs to `sessions[i]`.
pub fn write_origins<W: std::io::Write>(
    sessions: &[Session],
    origins: &[Vec<String>],
    mut w: W,
) -> std::io::Result<()> {
    for (s, files) in sessions.iter().zip(origins) {
        serde_json::to_writer(&mut w, &serde_json::json!({"id": s.id, "files": files}))?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Non-empty lines with their 1-based numbers (the corpus and the line-based importers).
pub(crate) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(agent: u32, deps: Vec<u32>, input: u32, prefix: Option<(u32, u32)>, app: u32) -> Call {
        Call {
            agent,
            deps,
            input,
            prefix,
            app,
            output: 10,
            think_s: Some(1.5),
            ..Call::default()
        }
    }

    fn session() -> Session {
        Session::new(
            "test",
            "s1",
            vec![
                call(0, vec![], 1000, None, 640),
                call(1, vec![0], 800, None, 320),
                call(0, vec![0, 1], 1500, Some((0, 1000)), 0),
                call(1, vec![1], 900, Some((1, 800)), 0),
            ],
        )
    }

    #[test]
    fn origins_name_each_session_and_its_files_one_line_each() {
        let s = session();
        let mut out = Vec::new();
        write_origins(
            &[s.clone(), s.clone()],
            &[vec!["a.jsonl".into()], vec![]],
            &mut out,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            serde_json::json!({"id": s.id, "files": ["a.jsonl"]})
        );
        assert_eq!(lines[1]["files"], serde_json::json!([]));
    }

    #[test]
    fn a_session_becomes_a_tree_whose_blocks_follow_its_prefixes() {
        let s = session();
        s.check().unwrap();
        let t = s.to_tree(3);
        let r = t.requests();
        assert_eq!(r[0].blocks.len(), 15);
        // Call 2 extends call 0: its first 15 blocks (1000 / 64) are call 0's.
        assert_eq!(&r[2].blocks.as_slice()[..15], r[0].blocks.as_slice());
        assert_ne!(r[2].blocks.as_slice()[15], r[3].blocks.as_slice()[12]);
        // The root's 10 application blocks and the sub-agent's 5 are declared.
        assert_eq!(t.app_prefix().len(), 15);
        assert_eq!(r[1].turn, 0);
        assert_eq!(r[2].turn, 1);
        assert_eq!(r[2].think_ns, 1_500_000_000);
        // Another session of the same source with the same application prefix shares it.
        let other = Session::new("test", "s2", vec![call(0, vec![], 1000, None, 640)]).to_tree(0);
        assert_eq!(
            other.requests()[0].blocks.as_slice()[..10],
            r[0].blocks.as_slice()[..10]
        );
        assert_ne!(
            other.requests()[0].blocks.as_slice()[10],
            r[0].blocks.as_slice()[10]
        );
    }

    #[test]
    fn gaps_are_end_to_start_where_the_log_has_both_times() {
        let mut s = session();
        // Call 2 waited for calls 0 (done at 4 s) and 1 (done at 9 s), and was sent at 10 s: its gap
        // is 1 s whatever the recorded think time (1.5 s).
        for (i, (sent, done)) in [(0.0, 4.0), (5.0, 9.0), (10.0, 12.0), (9.5, 11.0)]
            .into_iter()
            .enumerate()
        {
            s.calls[i].sent_s = Some(sent);
            s.calls[i].done_s = Some(done);
        }
        let t = s.to_tree(0);
        assert_eq!(t.requests()[2].think_ns, 1_000_000_000);
        // Sent before what it waited for finished (clock skew): no negative gap.
        assert_eq!(t.requests()[3].think_ns, 500_000_000);
        // Without a finish time of a dependency, the recorded think time.
        s.calls[1].done_s = None;
        assert_eq!(s.to_tree(0).requests()[2].think_ns, 1_500_000_000);
    }

    #[test]
    fn a_tree_round_trips_through_a_session() {
        let t = session().to_tree(0);
        let back = Session::from_tree(&t, "test");
        back.check().unwrap();
        // Prefixes are found at block granularity: call 2 shares call 0's 15 full blocks.
        assert_eq!(back.calls[2].prefix, Some((0, 960)));
        assert_eq!(back.calls[0].app, 640);
        let again = back.to_tree(0);
        let uncached = |t: &SessionTree| crate::workload_stats([t]).uncached_tokens;
        assert_eq!(uncached(&again), uncached(&t));
    }

    #[test]
    fn bad_sessions_name_the_field() {
        type Edit = Box<dyn Fn(&mut Session)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|s| s.calls[1].deps = vec![3]), "calls[1].deps"),
            (
                Box::new(|s| s.calls[2].prefix = Some((3, 10))),
                "calls[2].prefix",
            ),
            (
                Box::new(|s| s.calls[2].prefix = Some((1, 900))),
                "calls[2].prefix",
            ),
            (Box::new(|s| s.calls[0].output = 0), "calls[0].output"),
            (Box::new(|s| s.calls[0].app = 5000), "calls[0].app"),
            (Box::new(|s| s.calls[1].agent = 4), "calls[1].agent"),
            (
                Box::new(|s| s.calls[3].think_s = Some(-1.0)),
                "calls[3].think_s",
            ),
            (Box::new(|s| s.version = 9), "version"),
        ];
        for (edit, field) in cases {
            let mut s = session();
            edit(&mut s);
            assert_eq!(s.check().unwrap_err().0, field);
        }
    }

    #[test]
    fn corpus_lines_parse_and_name_file_line_and_field() {
        let mut text = Vec::new();
        write_corpus([&session(), &session()], &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert_eq!(parse_corpus("c.jsonl", &text).unwrap().len(), 2);
        let broken = text.replacen("\"output\":10", "\"output\":0", 1);
        let e = parse_corpus("c.jsonl", &broken).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "calls[0].output"));
    }
}
