//! The closed-loop replay state machine: lanes, dependencies, think times, sub-agent joins and tree
//! hand-over. It never reads a clock: callers tell it the time, and it tells them when each request
//! becomes due. The simulator drives it in virtual time, the real-time driver with timers.

use crate::des::Time;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serverbench_workloads::hash::mix2;
use serverbench_workloads::{Request, SessionTree, TreeSource};
use std::sync::Arc;

/// How lanes start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StartMode {
    /// Every lane starts its first tree at turn 0 at time 0.
    Cold,
    /// Every lane starts its first tree at a seeded random root turn, with that turn's prefix warmed
    /// in the cache, so the window measures steady state rather than a cold start.
    Steady,
}

impl StartMode {
    /// Parses `cold` or `steady`.
    pub fn parse(s: &str) -> Option<StartMode> {
        match s {
            "cold" => Some(StartMode::Cold),
            "steady" => Some(StartMode::Steady),
            _ => None,
        }
    }
}

/// Replay parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayConfig {
    /// Lanes (`c`).
    pub concurrency: u32,
    /// Cap on each think time, ns (the idle-gap cap).
    pub idle_gap_cap_ns: u64,
    /// Start mode.
    pub start: StartMode,
    /// Seed of the steady-start draws.
    pub seed: u64,
}

/// Identifies a request of the tree a lane is replaying.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    /// Lane.
    pub lane: u32,
    /// Request id inside the lane's current tree.
    pub request: u32,
}

/// A request that becomes due at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ready {
    /// When it may be sent.
    pub at: Time,
    /// Which request.
    pub handle: Handle,
}

struct Lane {
    tree: Arc<SessionTree>,
    index: u64,
    missing: Vec<u32>,
    dependents_start: Vec<u32>,
    dependents: Vec<u32>,
    outstanding: u32,
}

/// The replay state machine.
pub struct Replay<'a> {
    cfg: ReplayConfig,
    source: &'a dyn TreeSource,
    next_tree: u64,
    lanes: Vec<Lane>,
    rng: ChaCha8Rng,
}

impl<'a> Replay<'a> {
    /// A replay of `source` with `cfg.concurrency` lanes; call [`Replay::start`] next.
    pub fn new(source: &'a dyn TreeSource, cfg: ReplayConfig) -> Replay<'a> {
        Replay {
            cfg,
            source,
            next_tree: 0,
            lanes: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(mix2(cfg.seed, 0x57EAD7)),
        }
    }

    /// Starts every lane at `now`; appends the first due requests to `out`.
    pub fn start(&mut self, now: Time, out: &mut Vec<Ready>) {
        for lane in 0..self.cfg.concurrency {
            let skip_below = match self.cfg.start {
                StartMode::Cold => 0,
                StartMode::Steady => {
                    let tree = self.source.tree(self.next_tree);
                    let last = tree.requests().iter().map(|r| r.turn).max().unwrap_or(0);
                    self.rng.random_range(0..=last)
                }
            };
            let l = self.start_tree(lane, now, skip_below, out);
            self.lanes.push(l);
        }
    }

    /// The request behind a handle.
    pub fn request(&self, h: Handle) -> &Request {
        &self.lanes[h.lane as usize].tree.requests()[h.request as usize]
    }

    /// The tree a lane is replaying and its index in the stream.
    pub fn tree(&self, lane: u32) -> (&Arc<SessionTree>, u64) {
        let l = &self.lanes[lane as usize];
        (&l.tree, l.index)
    }

    /// Trees started so far.
    pub fn trees_started(&self) -> u64 {
        self.next_tree
    }

    fn start_tree(&mut self, lane: u32, now: Time, skip_below: u32, out: &mut Vec<Ready>) -> Lane {
        let index = self.next_tree;
        self.next_tree += 1;
        let tree = self.source.tree(index);
        let reqs = tree.requests();
        let n = reqs.len();
        let mut missing: Vec<u32> = reqs.iter().map(|r| r.deps.len() as u32).collect();
        let mut dependents_start = vec![0u32; n + 1];
        for r in reqs {
            for &d in &r.deps {
                dependents_start[d as usize + 1] += 1;
            }
        }
        for i in 0..n {
            dependents_start[i + 1] += dependents_start[i];
        }
        let mut fill = dependents_start.clone();
        let mut dependents = vec![0u32; dependents_start[n] as usize];
        for r in reqs {
            for &d in &r.deps {
                dependents[fill[d as usize] as usize] = r.id;
                fill[d as usize] += 1;
            }
        }
        // Steady start: requests of earlier turns count as done before the window.
        let mut outstanding = n as u32;
        for r in reqs.iter().filter(|r| r.turn < skip_below) {
            outstanding -= 1;
            missing[r.id as usize] = u32::MAX;
            let range = dependents_start[r.id as usize] as usize
                ..dependents_start[r.id as usize + 1] as usize;
            for &dep in &dependents[range] {
                if missing[dep as usize] != u32::MAX {
                    missing[dep as usize] -= 1;
                }
            }
        }
        for r in reqs {
            if missing[r.id as usize] == 0 {
                out.push(Ready {
                    at: now.plus(r.think_ns.min(self.cfg.idle_gap_cap_ns)),
                    handle: Handle {
                        lane,
                        request: r.id,
                    },
                });
            }
        }
        Lane {
            tree,
            index,
            missing,
            dependents_start,
            dependents,
            outstanding,
        }
    }

    /// Marks a request complete (successfully or not) at `now`; appends requests that become due.
    /// When the lane's tree drains, the lane starts the next tree of the stream.
    pub fn complete(&mut self, h: Handle, now: Time, out: &mut Vec<Ready>) {
        let cap = self.cfg.idle_gap_cap_ns;
        let lane = &mut self.lanes[h.lane as usize];
        lane.outstanding -= 1;
        let id = h.request as usize;
        let range = lane.dependents_start[id] as usize..lane.dependents_start[id + 1] as usize;
        for k in range {
            let dep = lane.dependents[k];
            let m = &mut lane.missing[dep as usize];
            *m -= 1;
            if *m == 0 {
                let think = lane.tree.requests()[dep as usize].think_ns.min(cap);
                out.push(Ready {
                    at: now.plus(think),
                    handle: Handle {
                        lane: h.lane,
                        request: dep,
                    },
                });
            }
        }
        if lane.outstanding == 0 {
            let next = self.start_tree(h.lane, now, 0, out);
            self.lanes[h.lane as usize] = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serverbench_workloads::{Generator, WorkloadSpec};

    /// Walks a replay with a fixed service time, returning (send, finish, lane, tree, request) per request.
    fn walk(cfg: ReplayConfig, service_ns: u64, until: Time) -> Vec<(Time, Time, u32, u64, u32)> {
        let g = Generator::new(WorkloadSpec::default(), 1, 1_048_576).unwrap();
        let mut r = Replay::new(&g, cfg);
        let mut q = crate::des::EventQueue::new();
        let mut out = Vec::new();
        r.start(Time::ZERO, &mut out);
        for x in out.drain(..) {
            q.schedule(x.at, (false, x.handle, Time::ZERO)).unwrap();
        }
        let mut log = Vec::new();
        while let Some((t, (done, h, sent))) = q.pop() {
            if t > until {
                break;
            }
            if done {
                let (_, index) = r.tree(h.lane);
                log.push((sent, t, h.lane, index, h.request));
                r.complete(h, t, &mut out);
                for x in out.drain(..) {
                    q.schedule(x.at, (false, x.handle, Time::ZERO)).unwrap();
                }
            } else {
                q.schedule(t.plus(service_ns), (true, h, t)).unwrap();
            }
        }
        log
    }

    #[test]
    fn no_request_is_sent_before_its_dependencies_complete() {
        let cfg = ReplayConfig {
            concurrency: 4,
            idle_gap_cap_ns: 10_000_000_000,
            start: StartMode::Cold,
            seed: 1,
        };
        let log = walk(cfg, 50_000_000, Time::from_secs(3000.0));
        let g = Generator::new(WorkloadSpec::default(), 1, 1_048_576).unwrap();
        let finish: std::collections::HashMap<(u64, u32), Time> =
            log.iter().map(|&(_, f, _, t, r)| ((t, r), f)).collect();
        let mut checked = 0;
        for &(sent, _, _, tree, req) in &log {
            let t = g.tree(tree);
            for &d in &t.requests()[req as usize].deps {
                let f = finish[&(tree, d)];
                assert!(sent >= f, "request {req} of tree {tree} sent at {sent:?} before dependency {d} finished at {f:?}");
                let think = t.requests()[req as usize].think_ns.min(10_000_000_000);
                assert!(sent.0 >= f.0 + think || t.requests()[req as usize].deps.len() > 1);
                checked += 1;
            }
        }
        assert!(checked > 100);
    }

    #[test]
    fn lanes_take_trees_in_stream_order() {
        let cfg = ReplayConfig {
            concurrency: 3,
            idle_gap_cap_ns: 1_000_000_000,
            start: StartMode::Cold,
            seed: 1,
        };
        let log = walk(cfg, 1_000_000, Time::from_secs(20_000.0));
        let mut first_seen: Vec<u64> = Vec::new();
        for &(_, _, _, tree, _) in &log {
            if !first_seen.contains(&tree) {
                first_seen.push(tree);
            }
        }
        assert!(first_seen.len() > 5);
        let mut sorted = first_seen.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            (0..sorted.len() as u64).collect::<Vec<_>>(),
            "every tree of the stream is used, none skipped"
        );
    }

    #[test]
    fn steady_start_skips_earlier_turns() {
        let cfg = ReplayConfig {
            concurrency: 8,
            idle_gap_cap_ns: 1_000_000_000,
            start: StartMode::Steady,
            seed: 9,
        };
        let g = Generator::new(WorkloadSpec::default(), 1, 1_048_576).unwrap();
        let mut r = Replay::new(&g, cfg);
        let mut out = Vec::new();
        r.start(Time::ZERO, &mut out);
        let later = out.iter().filter(|x| r.request(x.handle).turn > 0).count();
        assert!(later >= 6, "most lanes start past turn 0 ({later} of 8)");
    }
}
