//! A session tree's recorded clock: when each request started and how long its server took, which
//! stream (agent) each belongs to and how each stream was spawned and joined, and which requests of
//! other streams each one waited for in the recording. It is what a replay that follows the recording
//! (the AgentX protocol) needs beyond the dependency graph. Trees read from timed traces carry one;
//! [`crate::SessionTree::derived_recording`] makes one for any other tree from its think times. Pure; no IO.

use serde::{Deserialize, Serialize};

/// A tree's recorded clock and stream structure (see the module documentation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recorded {
    /// The trace's identity (AgentX seeds each lane's start point from it).
    pub trace_id: String,
    /// Per request (by id): its recorded start on the trace's clock, ns.
    pub start_ns: Vec<i64>,
    /// Per request: its recorded service time, ns (`None`: the trace has none; a negative one is 0).
    pub api_ns: Vec<Option<u64>>,
    /// Per agent (by id): its stream.
    pub streams: Vec<Stream>,
    /// Per request: requests of other streams of its scope that ended before it started in the
    /// recording (the latest of each such stream, AgentX's replay barriers).
    pub barriers: Vec<Vec<u32>>,
}

/// One stream of a tree: an agent's requests in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stream {
    /// Its name (`trace`, `trace::sa:AGENT`, `trace::fa:001`).
    pub name: String,
    /// Its replay scope: barriers connect streams of one scope only.
    pub scope: u32,
    /// How it was spawned (`None` for the root stream).
    pub spawn: Option<Spawn>,
}

/// How a stream was spawned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spawn {
    /// The request (id) whose turn spawned it.
    pub parent: u32,
    /// The request (id) that waits for it to finish; `None` for a background stream.
    pub join: Option<u32>,
    /// The branch it belongs to (streams spawned and joined together share one), numbered per tree.
    pub branch: u32,
    /// The branch's recorded start, ns on the trace's clock.
    pub branch_start_ns: i64,
}

impl Recorded {
    /// Whether this recording fits a tree of `requests` requests and `agents` agents: one entry per
    /// request and per agent, and every request it names one of the tree's; the reason otherwise.
    pub fn check(&self, requests: usize, agents: usize) -> Result<(), String> {
        if self.start_ns.len() != requests
            || self.api_ns.len() != requests
            || self.barriers.len() != requests
        {
            return Err(format!(
                "recorded: start_ns, api_ns and barriers need one entry per request ({requests})"
            ));
        }
        if self.streams.len() != agents {
            return Err(format!(
                "recorded.streams: one per agent ({agents}), got {}",
                self.streams.len()
            ));
        }
        let bad = |r: u32| r as usize >= requests;
        for (i, s) in self.streams.iter().enumerate() {
            if let Some(sp) = s.spawn {
                if bad(sp.parent) || sp.join.is_some_and(bad) {
                    return Err(format!(
                        "recorded.streams[{i}].spawn: names no request of the tree"
                    ));
                }
            }
        }
        if self.barriers.iter().flatten().any(|&r| bad(r)) {
            return Err("recorded.barriers: names no request of the tree".into());
        }
        Ok(())
    }

    /// The recorded end of request `r`: its start plus its service time (0 when unknown).
    pub fn end_ns(&self, r: u32) -> i64 {
        self.start_ns[r as usize].saturating_add(self.api_ns[r as usize].unwrap_or(0) as i64)
    }

    /// The earliest and latest recorded request start.
    pub fn span_ns(&self) -> (i64, i64) {
        let lo = self.start_ns.iter().copied().min().unwrap_or(0);
        let hi = self.start_ns.iter().copied().max().unwrap_or(0);
        (lo, hi)
    }
}

/// AgentX's replay barriers: within each scope, for every request, the latest request of each other
/// stream whose recorded interval `[start, start + api]` ended at or before it started (equal starts
/// are unordered), keeping only those not already ordered before another such request. `stream_of`
/// and `scope_of` give each request's stream and each stream's scope.
pub fn infer_barriers(
    start_ns: &[i64],
    end_ns: &[i64],
    stream_of: &[u32],
    scope_of: &[u32],
) -> Vec<Vec<u32>> {
    let n = start_ns.len();
    let mut out = vec![Vec::new(); n];
    let mut by_scope: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    for s in 0..scope_of.len() as u32 {
        by_scope.entry(scope_of[s as usize]).or_default().push(s);
    }
    for streams in by_scope.values() {
        if streams.len() < 2 {
            continue;
        }
        let members: Vec<Vec<usize>> = streams
            .iter()
            .map(|&s| (0..n).filter(|&r| stream_of[r] == s).collect())
            .collect();
        for (si, mine) in members.iter().enumerate() {
            for &target in mine {
                let t = start_ns[target];
                let mut frontier: Vec<usize> = Vec::new();
                for (oi, other) in members.iter().enumerate() {
                    if oi == si {
                        continue;
                    }
                    let latest = other
                        .iter()
                        .copied()
                        .filter(|&c| start_ns[c] < t && end_ns[c] <= t)
                        .max_by_key(|&c| (end_ns[c], start_ns[c], c));
                    frontier.extend(latest);
                }
                let mut keep: Vec<u32> = frontier
                    .iter()
                    .copied()
                    .filter(|&c| {
                        !frontier.iter().any(|&later| {
                            later != c
                                && start_ns[c] < start_ns[later]
                                && end_ns[c] <= start_ns[later]
                        })
                    })
                    .map(|c| c as u32)
                    .collect();
                keep.sort_unstable();
                out[target] = keep;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barriers_keep_the_latest_finished_request_of_each_other_stream() {
        // Stream 0: [0,10] [20,30]; stream 1: [5,8] [12,15] [25,40]; one scope.
        let start = [0, 20, 5, 12, 25];
        let end = [10, 30, 8, 15, 40];
        let stream = [0, 0, 1, 1, 1];
        let b = infer_barriers(&start, &end, &stream, &[0, 0]);
        assert_eq!(
            b[1],
            vec![3],
            "request 1 (starts 20) waits for stream 1's [12,15]"
        );
        assert_eq!(
            b[4],
            vec![0],
            "request 4 (starts 25) waits for stream 0's [0,10] only"
        );
        assert!(b[2].is_empty(), "[5,8] overlaps [0,10]: no edge");
        assert_eq!(b[3], vec![0], "[12,15] follows [0,10]");
        // Separate scopes: no edges at all.
        let b = infer_barriers(&start, &end, &stream, &[0, 1]);
        assert!(b.iter().all(Vec::is_empty));
    }
}
