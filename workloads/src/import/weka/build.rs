//! A Weka trace as AgentX's loader reconstructs it (`weka_trace.py`), built into a session tree with
//! its recorded clock: the root's calls split into agent chains by prefix evidence (the main chain and
//! flat chains), each sub-agent's calls likewise (its chains are siblings), every sub-agent spawned by
//! the last main-chain call before its entry and joined by the first main-chain call after it that
//! starts once it has ended (none: a background branch), siblings with the same spawn and join one
//! branch, and the replay barriers of each scope. Sub-agents nested inside sub-agents (which AgentX's
//! schema refuses) are spawned and joined the same way from their enclosing sub-agent's main chain.
//! Pure; no IO.

use super::chains::{detect, split_preamble, Indexed, EPSILON_S};
use super::schema::{Call, Entry, RawTrace, Sub};
use crate::error::InputError;
use crate::import::{prompt_chain, Ids};
use crate::recorded::{infer_barriers, Recorded, Spawn, Stream};
use crate::tree::{Request, RequestKind, SessionTree};
use std::sync::Arc;

/// A built trace: its tree, and what was left out of it and why (one reason per thing).
pub struct Built {
    /// The tree, with its recorded clock.
    pub tree: SessionTree,
    /// What was left out (sub-agents nothing could spawn, empty ones), and lines of calls recorded
    /// with no output (each asks for one token).
    pub skipped: Vec<String>,
}

/// One stream being planned: its calls (with absolute start times) in replay order, each with its
/// position in its `requests` list.
struct StreamPlan {
    name: String,
    scope: u32,
    calls: Chain,
    branch: Option<usize>,
    background: bool,
    /// System and tool tokens opening its first prompt.
    declared: u64,
    /// Where it comes from in the file (its entry's position, its chain): streams spawned together
    /// are emitted in this order.
    source: (usize, usize),
}

struct BranchPlan {
    parent: usize,
    spawn_turn: usize,
    join_turn: Option<usize>,
    start_t: f64,
    children: Vec<usize>,
}

struct Planner<'a> {
    block_size: u64,
    trace_id: String,
    streams: Vec<StreamPlan>,
    branches: Vec<BranchPlan>,
    scopes: u32,
    skipped: Vec<String>,
    agent_ids: std::collections::HashMap<String, String>,
    file: &'a str,
    line: usize,
}

/// Builds trace `raw` (tree `index` of file number `nth` among the inputs, which salts local ids);
/// `None` when the trace holds no call at all.
pub fn build(
    file: &str,
    raw: &RawTrace,
    index: u64,
    nth: usize,
) -> Result<Option<Built>, InputError> {
    let mut p = Planner {
        block_size: raw.block_size,
        trace_id: raw.id.clone(),
        streams: Vec::new(),
        branches: Vec::new(),
        scopes: 1,
        skipped: Vec::new(),
        agent_ids: Default::default(),
        file,
        line: raw.line,
    };
    let (calls, subs) = split_entries(&raw.entries, None);
    let (main, flats) = root_chains(calls);
    if main.is_empty() {
        if !subs.is_empty() {
            p.skipped
                .push("a trace with sub-agents but no main-agent call".into());
        }
        return Ok(None);
    }
    p.streams.push(StreamPlan {
        name: raw.id.clone(),
        scope: 0,
        calls: main,
        branch: None,
        background: false,
        declared: raw.declared,
        source: (0, 0),
    });
    p.subagent_branches(0, &subs)?;
    p.flat_branches(flats, raw.declared);
    p.emit(file, raw, index, nth).map(Some)
}

/// Sub-agent entries with their positions in their `requests` list.
type Subs<'a> = Vec<(usize, &'a Sub)>;

/// Branches being formed: (spawning turn, joining turn) and their members.
type Groups<T> = Vec<((usize, Option<usize>), Vec<T>)>;

/// The calls and the sub-agent entries of a `requests` list, with their positions; a sub-agent's
/// inner times (`within`: its entry's `t`) become absolute where they were written relative to it.
fn split_entries(entries: &[Entry], within: Option<f64>) -> (Chain, Subs<'_>) {
    let mut calls = Vec::new();
    let mut subs = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        match e {
            Entry::Call(c) => {
                let mut c = c.clone();
                if let Some(base) = within {
                    if c.t + EPSILON_S < base {
                        c.t += base;
                    }
                }
                calls.push((i, c));
            }
            Entry::Sub(s) => subs.push((i, s)),
        }
    }
    (calls, subs)
}

/// Calls with their positions in their `requests` list.
type Chain = Vec<(usize, Call)>;

/// `(t, position)` order.
fn in_time_order(chain: &mut Chain) {
    chain.sort_by(|a, b| a.1.t.total_cmp(&b.1.t).then(a.0.cmp(&b.0)));
}

/// The chains of `calls`: the main one (a preamble joined to it, then in time order), then the others.
fn chains_of(calls: &[(usize, Call)]) -> (Chain, Vec<Chain>) {
    let indexed: Vec<Indexed<'_>> = calls.iter().map(|(i, c)| (*i, c)).collect();
    let (pre, rest) = split_preamble(&indexed);
    let det = detect(&rest);
    let take = |chain: &[usize]| -> Chain {
        chain
            .iter()
            .map(|&p| (rest[p].0, rest[p].1.clone()))
            .collect()
    };
    let mut main = if rest.is_empty() {
        Vec::new()
    } else {
        take(&det.chains[det.main])
    };
    if !pre.is_empty() {
        main.extend(pre.iter().map(|&(i, c)| (i, c.clone())));
        in_time_order(&mut main);
    }
    let workers = det.workers.iter().map(|&w| take(&det.chains[w])).collect();
    (main, workers)
}

/// The root's main chain and its flat chains (AgentX: detection only when there are two calls or
/// more; without another chain the main one keeps the file order).
fn root_chains(calls: Chain) -> (Chain, Vec<Chain>) {
    if calls.len() < 2 {
        return (calls, Vec::new());
    }
    let (main, workers) = chains_of(&calls);
    if workers.is_empty() {
        return (calls, Vec::new());
    }
    (main, workers)
}

/// A sub-agent's chains: its main chain first, then the others (siblings in its branch).
fn sub_chains(calls: &[(usize, Call)]) -> Vec<Chain> {
    if calls.is_empty() {
        return Vec::new();
    }
    let (main, workers) = chains_of(calls);
    let mut out = vec![main];
    out.extend(workers);
    out
}

/// A sub-agent's recorded end: `t + duration_ms` (a negative duration counts as 0), else the latest
/// end of its calls, else its `t`.
fn sub_end(s: &Sub, calls: &[(usize, Call)]) -> f64 {
    match s.duration_ms {
        Some(d) => s.t + (d / 1000.0).max(0.0),
        None => calls
            .iter()
            .map(|(_, c)| c.end())
            .fold(None, |m: Option<f64>, e| Some(m.map_or(e, |m| m.max(e))))
            .unwrap_or(s.t),
    }
}

impl<'a> Planner<'a> {
    /// Positions of the parent stream's calls by their list position, in list order.
    fn positions(&self, parent: usize) -> Vec<(usize, usize, f64)> {
        let mut v: Vec<(usize, usize, f64)> = self.streams[parent]
            .calls
            .iter()
            .enumerate()
            .map(|(pos, (outer, c))| (*outer, pos, c.t))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    /// The branch a child starting at list position `outer` and ending at `end` belongs to: spawned by
    /// the parent's last call before it (by position), joined by the first later call starting once it
    /// has ended. `default_spawn` is used when no call comes before it.
    fn spawn_join(
        &self,
        parent: usize,
        outer: usize,
        end: f64,
        default_spawn: Option<usize>,
    ) -> Option<(usize, Option<usize>)> {
        let pos = self.positions(parent);
        let spawn = pos
            .iter()
            .filter(|p| p.0 < outer)
            .map(|p| p.1)
            .max()
            .or(default_spawn)?;
        let join = pos
            .iter()
            .find(|p| p.0 > outer && p.2 + EPSILON_S >= end)
            .map(|p| p.1)
            // A join before the spawn can never wait (AgentX registers no gate for it).
            .filter(|&j| j > spawn);
        Some((spawn, join))
    }

    fn subagent_branches(
        &mut self,
        parent: usize,
        subs: &[(usize, &Sub)],
    ) -> Result<(), InputError> {
        let mut groups: Groups<(usize, &Sub, Chain)> = Vec::new();
        for &(outer, s) in subs {
            let (calls, nested) = split_entries(&s.entries, Some(s.t));
            let Some(key) = self.spawn_join(parent, outer, sub_end(s, &calls), None) else {
                self.skipped
                    .push("a sub-agent with no call of its parent before it".into());
                continue;
            };
            if let Some(first) = self.agent_ids.insert(s.agent_id.clone(), s.path.clone()) {
                return Err(InputError::new(
                    self.file,
                    self.line,
                    format!("{}.agent_id", s.path),
                    format!("duplicate agent_id {:?} (also at {first})", s.agent_id),
                ));
            }
            if calls.is_empty() && nested.is_empty() {
                self.skipped.push("a sub-agent with no call".into());
                continue;
            }
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push((outer, s, calls)),
                None => groups.push((key, vec![(outer, s, calls)])),
            }
        }
        for ((spawn_turn, join_turn), members) in groups {
            let b = self.branches.len();
            self.branches.push(BranchPlan {
                parent,
                spawn_turn,
                join_turn,
                start_t: members.iter().map(|m| m.1.t).fold(f64::INFINITY, f64::min),
                children: Vec::new(),
            });
            let background = join_turn.is_none() || self.streams[parent].background;
            for (outer, s, calls) in members {
                let scope = self.scopes;
                self.scopes += 1;
                let chains = sub_chains(&calls);
                let first_hash = chains
                    .first()
                    .and_then(|c| c.iter().map(|x| &x.1.hash_ids).find(|h| !h.is_empty()))
                    .cloned()
                    .unwrap_or_default();
                let mut first_stream = None;
                for (n, chain) in chains.into_iter().enumerate() {
                    if chain.is_empty() {
                        continue;
                    }
                    let name = if n == 0 {
                        format!("{}::sa:{}", self.trace_id, s.agent_id)
                    } else {
                        format!("{}::sa:{}:fa:{:03}", self.trace_id, s.agent_id, n - 1)
                    };
                    let declared = if n == 0 {
                        s.declared
                    } else {
                        declared_if_covered(s.declared, &first_hash, &chain, self.block_size)
                    };
                    first_stream.get_or_insert(self.streams.len());
                    self.branches[b].children.push(self.streams.len());
                    self.streams.push(StreamPlan {
                        name,
                        scope,
                        calls: chain,
                        branch: Some(b),
                        background,
                        declared,
                        source: (outer, n),
                    });
                }
                let (_, nested) = split_entries(&s.entries, Some(s.t));
                if let (Some(f), false) = (first_stream, nested.is_empty()) {
                    self.subagent_branches(f, &nested)?;
                }
            }
        }
        Ok(())
    }

    fn flat_branches(&mut self, flats: Vec<Chain>, declared: u64) {
        let main_hash = self.streams[0]
            .calls
            .iter()
            .map(|x| &x.1.hash_ids)
            .find(|h| !h.is_empty())
            .cloned()
            .unwrap_or_default();
        let mut groups: Groups<(usize, Chain)> = Vec::new();
        for (n, chain) in flats.into_iter().enumerate() {
            let end = chain
                .iter()
                .map(|c| c.1.end())
                .fold(f64::NEG_INFINITY, f64::max);
            let key = self
                .spawn_join(0, chain[0].0, end, Some(0))
                .expect("a default spawn turn");
            match groups.iter_mut().find(|g| g.0 == key) {
                Some(g) => g.1.push((n, chain)),
                None => groups.push((key, vec![(n, chain)])),
            }
        }
        for ((spawn_turn, join_turn), members) in groups {
            let b = self.branches.len();
            self.branches.push(BranchPlan {
                parent: 0,
                spawn_turn,
                join_turn,
                start_t: members
                    .iter()
                    .map(|m| m.1[0].1.t)
                    .fold(f64::INFINITY, f64::min),
                children: Vec::new(),
            });
            for (n, chain) in members {
                self.branches[b].children.push(self.streams.len());
                let declared = declared_if_covered(declared, &main_hash, &chain, self.block_size);
                let source = (chain[0].0, 0);
                self.streams.push(StreamPlan {
                    name: format!("{}::fa:{n:03}", self.trace_id),
                    scope: 0,
                    calls: chain,
                    branch: Some(b),
                    background: join_turn.is_none(),
                    declared,
                    source,
                });
            }
        }
    }

    /// The tree: each stream's calls in order, a branch's streams right after the call that spawns it.
    fn emit(
        mut self,
        file: &str,
        raw: &RawTrace,
        index: u64,
        nth: usize,
    ) -> Result<Built, InputError> {
        let salt = if raw.local {
            ((nth as u64) << 32) | (index + 1)
        } else {
            0
        };
        let mut e = Emitter {
            planner: &self,
            requests: Vec::new(),
            ids: vec![Vec::new(); self.streams.len()],
            start_ns: Vec::new(),
            api_ns: Vec::new(),
            stream_of: Vec::new(),
            app_prefix: Vec::new(),
            no_output: 0,
            file,
            line: raw.line,
            block_size: raw.block_size,
            salt,
        };
        e.stream(0, 0)?;
        let Emitter {
            mut requests,
            ids,
            start_ns,
            api_ns,
            stream_of,
            app_prefix,
            no_output,
            ..
        } = e;
        // Joins: the joining call waits for the last call of every stream of the branch.
        let mut streams = Vec::with_capacity(self.streams.len());
        for (s, plan) in self.streams.iter().enumerate() {
            let spawn = plan.branch.map(|b| {
                let br = &self.branches[b];
                let join = br.join_turn.map(|j| ids[br.parent][j]);
                if let (Some(j), Some(&last)) = (join, ids[s].last()) {
                    requests[j as usize].deps.push(last);
                }
                Spawn {
                    parent: ids[br.parent][br.spawn_turn],
                    join,
                    branch: b as u32,
                    branch_start_ns: ns(br.start_t),
                }
            });
            streams.push(Stream {
                name: plan.name.clone(),
                scope: plan.scope,
                spawn,
            });
        }
        let end_ns: Vec<i64> = start_ns
            .iter()
            .zip(&api_ns)
            .map(|(&s, a)| s.saturating_add(a.unwrap_or(0) as i64))
            .collect();
        let scope_of: Vec<u32> = self.streams.iter().map(|s| s.scope).collect();
        let barriers = infer_barriers(&start_ns, &end_ns, &stream_of, &scope_of);
        let recorded = Recorded {
            trace_id: raw.id.clone(),
            start_ns,
            api_ns,
            streams,
            barriers,
        };
        let tree = SessionTree::new(index, raw.block_size as u32, requests)
            .map_err(|e| InputError::new(file, raw.line, "requests", e.to_string()))?
            .with_app_prefix(app_prefix)
            .with_recorded(Some(Arc::new(recorded)));
        self.skipped.extend(
            (0..no_output).map(|_| "a call recorded with no output (asks for 1 token)".to_string()),
        );
        Ok(Built {
            tree,
            skipped: self.skipped,
        })
    }
}

/// AgentX's `_chain_init_tokens`: a chain that is not its agent's main one opens with the declared
/// system and tool tokens only when its first prompt starts with the same declared blocks.
fn declared_if_covered(declared: u64, base_hash: &[u64], chain: &Chain, block_size: u64) -> u64 {
    let blocks = declared.div_ceil(block_size) as usize;
    let first = chain
        .iter()
        .map(|x| &x.1.hash_ids)
        .find(|h| !h.is_empty())
        .map_or(&[][..], |h| &h[..]);
    let covered = blocks > 0
        && first.len() >= blocks
        && base_hash.len() >= blocks
        && first[..blocks] == base_hash[..blocks];
    if covered {
        declared
    } else {
        0
    }
}

/// Seconds as nanoseconds.
fn ns(t: f64) -> i64 {
    (t * 1e9).round() as i64
}

struct Emitter<'p, 'a> {
    planner: &'p Planner<'a>,
    requests: Vec<Request>,
    ids: Vec<Vec<u32>>,
    start_ns: Vec<i64>,
    api_ns: Vec<Option<u64>>,
    stream_of: Vec<u32>,
    app_prefix: Vec<u64>,
    no_output: usize,
    file: &'p str,
    line: usize,
    block_size: u64,
    salt: u64,
}

impl Emitter<'_, '_> {
    /// The latest call sent by `t_ns` among `call` and the calls it waits for, directly or not (ties:
    /// the later in the tree); `None` when all were sent after.
    fn sent_by(&self, call: u32, t_ns: i64) -> Option<u32> {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![call];
        let mut best: Option<u32> = None;
        while let Some(r) = stack.pop() {
            if !seen.insert(r) {
                continue;
            }
            let at = self.start_ns[r as usize];
            if at <= t_ns && best.map_or(true, |b| (self.start_ns[b as usize], b) < (at, r)) {
                best = Some(r);
            }
            stack.extend(self.requests[r as usize].deps.iter().copied());
        }
        best
    }

    /// Emits stream `s` (its first call belongs to root turn `turn`), its branches after their
    /// spawning calls.
    fn stream(&mut self, s: usize, turn: u32) -> Result<(), InputError> {
        let plan = &self.planner.streams[s];
        let declared = plan.declared;
        let spawn_from = plan.branch.map(|b| {
            let br = &self.planner.branches[b];
            (self.ids[br.parent][br.spawn_turn], br.start_t)
        });
        let mut turn = turn;
        for (k, (_, call)) in plan.calls.iter().enumerate() {
            let t = call.t;
            let id = self.requests.len() as u32;
            let (deps, think_s) = match (k, spawn_from) {
                (0, None) => (Vec::new(), 0.0),
                (0, Some((parent, start))) if ns(t) >= self.start_ns[parent as usize] => {
                    (vec![parent], (t - start).max(0.0))
                }
                // Sent before its spawning call (AgentX sends it with that call): it waits for
                // what had been sent by then.
                (0, Some((parent, _))) => match self.sent_by(parent, ns(t)) {
                    Some(j) => {
                        let end = self.start_ns[j as usize]
                            .saturating_add(self.api_ns[j as usize].unwrap_or(0) as i64);
                        (vec![j], ((ns(t) - end) as f64 / 1e9).max(0.0))
                    }
                    None => (Vec::new(), 0.0),
                },
                _ => {
                    let prev = &plan.calls[k - 1].1;
                    let gap = t - prev.t - prev.api_time.unwrap_or(0.0).max(0.0);
                    (vec![*self.ids[s].last().expect("k > 0")], gap.max(0.0))
                }
            };
            if s == 0 {
                turn = k as u32;
            }
            let blocks = prompt_chain(
                &call.hash_ids,
                call.input,
                self.block_size,
                self.salt,
                Ids::FullBlocks,
            )
            .map_err(|e| {
                InputError::new(self.file, self.line, format!("{}.hash_ids", call.path), e)
            })?;
            if k == 0 && declared > 0 {
                // Whole blocks of declared tokens only: the last partial one holds other content.
                let n = (declared / self.block_size).min(blocks.len() as u64) as usize;
                self.app_prefix.extend_from_slice(&blocks.as_slice()[..n]);
            }
            let output = if call.output == 0 {
                self.no_output += 1;
                1
            } else {
                call.output as u32
            };
            self.requests.push(Request {
                id,
                agent: s as u32,
                kind: if s == 0 {
                    RequestKind::RootTurn
                } else {
                    RequestKind::SubagentTurn
                },
                deps,
                think_ns: (think_s * 1e9).round() as u64,
                input_tokens: call.input as u32,
                output_tokens: output,
                background: plan.background,
                turn,
                blocks,
            });
            self.ids[s].push(id);
            self.start_ns.push(ns(t));
            self.api_ns
                .push(call.api_time.map(|a| (a.max(0.0) * 1e9).round() as u64));
            self.stream_of.push(s as u32);
            // Streams spawned by this call, in file order.
            let mut spawned: Vec<usize> = self
                .planner
                .branches
                .iter()
                .filter(|br| br.parent == s && br.spawn_turn == k)
                .flat_map(|br| br.children.iter().copied())
                .collect();
            spawned.sort_by_key(|&c| self.planner.streams[c].source);
            for c in spawned {
                self.stream(c, turn)?;
            }
        }
        Ok(())
    }
}
