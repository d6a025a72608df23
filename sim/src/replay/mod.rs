//! The replay state machine: lanes, dependencies, think times, sub-agent joins and tree hand-over,
//! closed-loop (a lane starts its next tree when one drains) or open-loop (trees arrive at recorded
//! times or at a seeded Poisson rate, each in a slot of its own), under one of four protocols: `cold`,
//! `steady`, and AgentX's `agentx` and `agentx-mvp` (`agentx`: the benchmark's own replayer, with a
//! warm-up that is never scored and a window that opens after it). It never reads a clock: callers
//! tell it the time, and it tells them when each request and each wake-up becomes due. The simulator
//! drives it in virtual time, the real-time driver with timers.

pub mod agentx;
mod numpy_rng;

pub use agentx::{AgentxParams, AgentxStats, LanePlan, StreamStart};

use crate::des::Time;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serverbench_workloads::hash::mix2;
use serverbench_workloads::{Request, SessionTree, TreeSource};
use std::sync::Arc;

/// Largest Poisson rate (trees per second) and trace speed-up accepted.
pub const MAX_ARRIVAL_RATE: f64 = 1e6;
/// Most trees a recorded-arrival replay may hold.
pub const MAX_TRACE_TREES: u64 = 50_000_000;

/// How a replay runs its lanes: where they start, and what the window counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Every lane starts its first tree at turn 0 at time 0.
    Cold,
    /// Every lane starts its first tree at a seeded random root turn, with that turn's prefix warmed
    /// in the cache, so the window measures steady state rather than a cold start.
    Steady,
    /// AgentX's `agentx` scenario: rows in order, seeded start points inside each session, primers and
    /// a pressure warm-up never scored, the recording's own clock, idle caps, a window of requests
    /// issued before its end that finish within the grace ([`AgentxParams::agentx`]).
    Agentx,
    /// AgentX's `inferencex-agentx-mvp` scenario: as `agentx` with start points anywhere in the
    /// session, primers only, no per-tree idle cap ([`AgentxParams::mvp`]).
    AgentxMvp,
}

impl Protocol {
    /// Every protocol's name, in the order docs list them.
    pub const NAMES: [&'static str; 4] = ["cold", "steady", "agentx", "agentx-mvp"];

    /// Parses `cold`, `steady`, `agentx` or `agentx-mvp`.
    pub fn parse(s: &str) -> Option<Protocol> {
        match s {
            "cold" => Some(Protocol::Cold),
            "steady" => Some(Protocol::Steady),
            "agentx" => Some(Protocol::Agentx),
            "agentx-mvp" => Some(Protocol::AgentxMvp),
            _ => None,
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Cold => "cold",
            Protocol::Steady => "steady",
            Protocol::Agentx => "agentx",
            Protocol::AgentxMvp => "agentx-mvp",
        }
    }

    /// One of AgentX's scenarios.
    pub fn is_agentx(self) -> bool {
        matches!(self, Protocol::Agentx | Protocol::AgentxMvp)
    }

    /// The scenario's default parameters (`None` for `cold` and `steady`).
    pub fn agentx_defaults(self) -> Option<AgentxParams> {
        match self {
            Protocol::Agentx => Some(AgentxParams::agentx()),
            Protocol::AgentxMvp => Some(AgentxParams::mvp()),
            _ => None,
        }
    }
}

/// How session trees arrive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Arrivals {
    /// `concurrency` lanes; a lane starts the stream's next tree when its tree drains (the benchmark's
    /// score).
    #[default]
    Closed,
    /// Every request at its recorded arrival time (relative to the trace's first) divided by `speedup`,
    /// never before its dependencies complete; each tree of the trace plays once.
    Trace {
        /// Divides the recorded times (2 replays the trace twice as fast).
        speedup: f64,
    },
    /// New trees at seeded exponential gaps, `rate` per second; turns inside a tree stay closed-loop.
    Poisson {
        /// Trees per second.
        rate: f64,
    },
}

impl Arrivals {
    /// Parses `closed`, `trace`, `trace:SPEEDUP` or `poisson:RATE`.
    pub fn parse(s: &str) -> Result<Arrivals, String> {
        let number = |v: &str, what: &str| -> Result<f64, String> {
            match v.parse::<f64>() {
                Ok(x) if x > 0.0 && x <= MAX_ARRIVAL_RATE => Ok(x),
                _ => Err(format!(
                    "{what} must be a number above 0 and at most {MAX_ARRIVAL_RATE:e}, got {v:?}"
                )),
            }
        };
        match s.split_once(':') {
            None if s == "closed" => Ok(Arrivals::Closed),
            None if s == "trace" => Ok(Arrivals::Trace { speedup: 1.0 }),
            Some(("trace", v)) => Ok(Arrivals::Trace {
                speedup: number(v, "the trace's speed-up")?,
            }),
            Some(("poisson", v)) => Ok(Arrivals::Poisson {
                rate: number(v, "the Poisson rate (trees per second)")?,
            }),
            _ => Err(format!(
                "expected closed, trace, trace:SPEEDUP or poisson:RATE, got {s:?}"
            )),
        }
    }

    /// True for the closed loop.
    pub fn is_closed(&self) -> bool {
        *self == Arrivals::Closed
    }

    /// The flag's spelling: `closed`, `trace:2`, `poisson:0.5`.
    pub fn label(&self) -> String {
        match self {
            Arrivals::Closed => "closed".into(),
            Arrivals::Trace { speedup } => format!("trace:{speedup}"),
            Arrivals::Poisson { rate } => format!("poisson:{rate}"),
        }
    }
}

/// Replay parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayConfig {
    /// Lanes (`c`); in the open modes, the most trees open at once (an arrival past it waits for a
    /// tree to drain).
    pub concurrency: u32,
    /// Cap on each think time, ns (the idle-gap cap); under the AgentX protocols, the global idle
    /// cap (with nothing on the wire anywhere, the next request waits at most this long).
    pub idle_gap_cap_ns: u64,
    /// Protocol (closed loop only: the open modes start cold).
    pub protocol: Protocol,
    /// Seed of the steady-start, Poisson and AgentX start-point draws.
    pub seed: u64,
    /// How trees arrive.
    pub arrivals: Arrivals,
    /// The AgentX protocols' parameters (ignored by the others).
    pub agentx: AgentxParams,
    /// The measured window, ns (the AgentX protocols stop sending at its end).
    pub window_ns: u64,
}

impl ReplayConfig {
    /// How the replay actually starts: the open loop always starts cold.
    pub fn effective_start(&self) -> Protocol {
        match self.arrivals {
            Arrivals::Closed => self.protocol,
            _ => Protocol::Cold,
        }
    }
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

/// The open modes' arrival bookkeeping.
struct Open {
    /// Trace mode: tree indices in order of first arrival, each with that arrival (ns, the trace's
    /// first at 0, speed-up applied); empty for Poisson.
    order: Vec<(u64, u64)>,
    /// Trace mode: the trace's earliest recorded arrival, ns.
    base_ns: u64,
    /// When the replay started: the trace's first arrival, or Poisson's.
    origin: Time,
    /// When the next tree arrives.
    next: Option<Time>,
    /// Trees that have arrived.
    arrived: u64,
    /// Arrived trees not started yet (every slot was taken): when each arrived, and its index.
    pending: std::collections::VecDeque<(Time, u64)>,
    /// Slots whose tree drained.
    free: Vec<u32>,
    /// Trees open now.
    open: u32,
    /// Poisson gaps.
    rng: ChaCha8Rng,
}

impl Open {
    /// Nothing arrived yet: trees in `order` (a trace's, empty for Poisson), its earliest arrival
    /// `base_ns`, gaps drawn from `seed`.
    fn new(order: Vec<(u64, u64)>, base_ns: u64, seed: u64) -> Open {
        Open {
            order,
            base_ns,
            origin: Time::ZERO,
            next: None,
            arrived: 0,
            pending: Default::default(),
            free: Vec::new(),
            open: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        }
    }
}

/// What an open-loop replay waited for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenStats {
    /// Requests sent after their recorded arrival because a dependency completed later (trace mode).
    pub late_for_dependencies: u64,
    /// Trees that arrived while `concurrency` trees were open and waited for one to drain.
    pub waited_for_a_slot: u64,
}

/// The replay state machine.
pub struct Replay<'a> {
    cfg: ReplayConfig,
    source: &'a dyn TreeSource,
    next_tree: u64,
    lanes: Vec<Lane>,
    rng: ChaCha8Rng,
    open: Option<Open>,
    stats: OpenStats,
    agentx: Option<agentx::Agentx<'a>>,
}

impl<'a> Replay<'a> {
    /// A replay of `source` with `cfg.concurrency` lanes; call [`Replay::start`] next. A replay of
    /// recorded arrivals needs a finite source whose every tree has them (the error says which lacks).
    pub fn new(source: &'a dyn TreeSource, cfg: ReplayConfig) -> Result<Replay<'a>, String> {
        let agentx = if cfg.protocol.is_agentx() {
            if !cfg.arrivals.is_closed() {
                return Err(format!(
                    "the {} protocol replays closed-loop lanes; it takes no --arrivals {}",
                    cfg.protocol.name(),
                    cfg.arrivals.label()
                ));
            }
            cfg.agentx
                .check()
                .map_err(|(f, why)| format!("{f}: {why}"))?;
            Some(agentx::Agentx::new(
                source,
                cfg.agentx,
                cfg.seed,
                cfg.concurrency,
                cfg.idle_gap_cap_ns,
                cfg.window_ns,
            ))
        } else {
            None
        };
        let open = match cfg.arrivals {
            Arrivals::Closed => None,
            Arrivals::Trace { speedup } => Some(trace_order(source, speedup)?),
            Arrivals::Poisson { .. } => Some(Open::new(Vec::new(), 0, mix2(cfg.seed, 0xA221_7A15))),
        };
        Ok(Replay {
            cfg,
            source,
            next_tree: 0,
            lanes: Vec::new(),
            rng: ChaCha8Rng::seed_from_u64(mix2(cfg.seed, 0x57EAD7)),
            open,
            stats: OpenStats::default(),
            agentx,
        })
    }

    /// Whether the first requests' prefixes are warmed before the window (a closed-loop steady start).
    pub fn warms(&self) -> bool {
        self.cfg.effective_start() == Protocol::Steady
    }

    /// When the measured window opened: at once, except under the AgentX protocols, whose window
    /// opens when their warm-up has drained (`None` until then).
    pub fn window_origin(&self) -> Option<Time> {
        match &self.agentx {
            Some(a) => a.origin(),
            None => Some(Time::ZERO),
        }
    }

    /// How long after the window's end requests still running may finish and count, ns (0: they are
    /// cancelled at the end and scored as such; AgentX: they count if they finish in time, and leave
    /// no record otherwise).
    pub fn grace_ns(&self) -> u64 {
        self.agentx.as_ref().map_or(0, |a| a.grace_ns())
    }

    /// Whether the request was sent as warm-up (never scored, asking for one token).
    pub fn is_warmup(&self, h: Handle) -> bool {
        self.agentx.as_ref().is_some_and(|a| a.is_warmup(h))
    }

    /// The output tokens request `h` asks for: its recorded length, 1 in a warm-up.
    pub fn max_tokens(&self, h: Handle) -> u32 {
        if self.is_warmup(h) {
            1
        } else {
            self.request(h).output_tokens
        }
    }

    /// What the AgentX protocol did (`None` for the others).
    pub fn agentx_stats(&self) -> Option<&AgentxStats> {
        self.agentx.as_ref().map(|a| a.stats())
    }

    /// Lanes running (the AgentX protocol builds fewer when a trace has too few spawnable rows).
    pub fn lanes(&self) -> u32 {
        match &self.agentx {
            Some(a) => a.lanes(),
            None => self.lanes.len() as u32,
        }
    }

    /// Request `h` could not be sent: prompt and output pass the context limit. Under the AgentX
    /// protocols its stream ends there (the rest of that agent's session would overflow too); under
    /// the others it completes as failed and the replay goes on.
    pub fn overflowed(&mut self, h: Handle, now: Time, out: &mut Vec<Ready>) {
        match &mut self.agentx {
            Some(a) => a.overflowed(h, now, out),
            None => self.complete(h, now, out),
        }
    }

    /// Starts the replay at `now`; appends the first due requests to `out`. Closed loop: every lane
    /// starts a tree. Open loop: the trees arriving at `now` start; [`Replay::next_arrival`] says when
    /// to call [`Replay::arrive`] next.
    pub fn start(&mut self, now: Time, out: &mut Vec<Ready>) {
        if let Some(a) = &mut self.agentx {
            a.start(now, out);
            return;
        }
        if let Some(open) = &mut self.open {
            open.origin = now;
            open.next = match self.cfg.arrivals {
                Arrivals::Trace { .. } => open.order.first().map(|&(at, _)| now.plus(at)),
                _ => Some(now),
            };
            self.arrive(now, out);
            return;
        }
        for lane in 0..self.cfg.concurrency {
            let skip_below = match self.cfg.protocol {
                Protocol::Cold | Protocol::Agentx | Protocol::AgentxMvp => 0,
                Protocol::Steady => {
                    let tree = self.source.tree(self.next_tree);
                    let last = tree.requests().iter().map(|r| r.turn).max().unwrap_or(0);
                    self.rng.random_range(0..=last)
                }
            };
            let index = self.next_tree;
            let l = self.start_tree(lane, index, now, skip_below, out);
            self.lanes.push(l);
        }
    }

    /// When the replay next needs waking ([`Replay::arrive`]): the next tree arrival of the open loop,
    /// the next timer of the AgentX protocol; `None` otherwise (the closed loop's requests come due
    /// through [`Ready`] times) and once a trace has arrived whole.
    pub fn next_arrival(&self) -> Option<Time> {
        if let Some(a) = &self.agentx {
            return a.next_wake();
        }
        self.open.as_ref().and_then(|o| o.next)
    }

    /// Takes every tree arrival due by `now` (open loop): each starts in a free slot, or waits for one
    /// while `concurrency` trees are open; under the AgentX protocol, fires its timers due by `now`.
    /// Appends the requests that become due to `out`.
    pub fn arrive(&mut self, now: Time, out: &mut Vec<Ready>) {
        if let Some(a) = &mut self.agentx {
            a.fire_due(now, out);
            return;
        }
        let rate = match self.cfg.arrivals {
            Arrivals::Poisson { rate } => rate,
            _ => 0.0,
        };
        let Some(open) = &mut self.open else {
            return;
        };
        let n = open.order.len() as u64;
        while let Some(at) = open.next.filter(|&at| at <= now) {
            let index = match open.order.get(open.arrived as usize) {
                Some(&(_, index)) => index,
                None => open.arrived,
            };
            open.pending.push_back((at, index));
            open.arrived += 1;
            open.next = if rate > 0.0 {
                // Inverse-transform exponential gap, at least 1 ns so arrivals keep their order.
                let u: f64 = open.rng.random();
                let gap_ns = (-(1.0 - u).ln() / rate * 1e9).round().max(1.0);
                Some(at.plus(gap_ns.min(u64::MAX as f64 / 4.0) as u64))
            } else if open.arrived < n {
                Some(open.origin.plus(open.order[open.arrived as usize].0))
            } else {
                None
            };
        }
        self.start_waiting(now, out);
    }

    /// Starts arrived trees while slots allow.
    fn start_waiting(&mut self, now: Time, out: &mut Vec<Ready>) {
        loop {
            let open = self.open.as_mut().expect("open loop");
            if open.open >= self.cfg.concurrency {
                return;
            }
            let Some((at, index)) = open.pending.pop_front() else {
                return;
            };
            if now > at {
                self.stats.waited_for_a_slot += 1;
            }
            open.open += 1;
            let slot = open.free.pop().unwrap_or(self.lanes.len() as u32);
            let lane = self.start_tree(slot, index, now, 0, out);
            match self.lanes.get_mut(slot as usize) {
                Some(l) => *l = lane,
                None => self.lanes.push(lane),
            }
        }
    }

    /// Arrival bookkeeping of an open-loop replay.
    pub fn open_stats(&self) -> OpenStats {
        self.stats
    }

    /// Whether nothing more can happen: an open-loop replay whose trace has arrived whole and whose
    /// trees have all drained (a closed loop never finishes).
    pub fn finished(&self) -> bool {
        self.open
            .as_ref()
            .is_some_and(|o| o.next.is_none() && o.open == 0 && o.pending.is_empty())
    }

    /// The request behind a handle (under the AgentX protocols, its block ids behind its tree
    /// instance's cache-bust marker).
    pub fn request(&self, h: Handle) -> &Request {
        if let Some(a) = &self.agentx {
            return a.request(h);
        }
        &self.tree(h.lane).0.requests()[h.request as usize]
    }

    /// The tree a lane is replaying and its index in the stream.
    pub fn tree(&self, lane: u32) -> (&Arc<SessionTree>, u64) {
        if let Some(a) = &self.agentx {
            return a.tree(lane);
        }
        let l = &self.lanes[lane as usize];
        (&l.tree, l.index)
    }

    /// Trees started so far.
    pub fn trees_started(&self) -> u64 {
        match &self.agentx {
            Some(a) => a.trees_started(),
            None => self.next_tree,
        }
    }

    /// When request `r` of `tree`, ready at `now`, is sent: after its think time (capped) in the
    /// closed loop and for Poisson, at its recorded arrival (never before `now`) for a trace.
    fn due(&mut self, tree: &SessionTree, r: &Request, now: Time) -> Time {
        match (&self.open, self.cfg.arrivals) {
            (Some(open), Arrivals::Trace { speedup }) => {
                let recorded = tree.arrivals_ns().map_or(0, |a| a[r.id as usize]);
                let at = open
                    .origin
                    .plus(scaled(recorded.saturating_sub(open.base_ns), speedup));
                if at < now {
                    if !r.deps.is_empty() {
                        self.stats.late_for_dependencies += 1;
                    }
                    now
                } else {
                    at
                }
            }
            _ => now.plus(r.think_ns.min(self.cfg.idle_gap_cap_ns)),
        }
    }

    fn start_tree(
        &mut self,
        lane: u32,
        index: u64,
        now: Time,
        skip_below: u32,
        out: &mut Vec<Ready>,
    ) -> Lane {
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
                let at = self.due(&tree, r, now);
                out.push(Ready {
                    at,
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
    /// When the lane's tree drains, the closed loop starts the stream's next tree in the lane; the open
    /// loop frees the slot and starts a tree that waited for one.
    pub fn complete(&mut self, h: Handle, now: Time, out: &mut Vec<Ready>) {
        if let Some(a) = &mut self.agentx {
            a.complete(h, now, out);
            return;
        }
        let lane = &mut self.lanes[h.lane as usize];
        lane.outstanding -= 1;
        let tree = lane.tree.clone();
        let id = h.request as usize;
        let range = lane.dependents_start[id] as usize..lane.dependents_start[id + 1] as usize;
        for k in range {
            let lane = &mut self.lanes[h.lane as usize];
            let dep = lane.dependents[k];
            let m = &mut lane.missing[dep as usize];
            *m -= 1;
            if *m == 0 {
                let at = self.due(&tree, &tree.requests()[dep as usize], now);
                out.push(Ready {
                    at,
                    handle: Handle {
                        lane: h.lane,
                        request: dep,
                    },
                });
            }
        }
        if self.lanes[h.lane as usize].outstanding > 0 {
            return;
        }
        match &mut self.open {
            None => {
                let index = self.next_tree;
                let next = self.start_tree(h.lane, index, now, 0, out);
                self.lanes[h.lane as usize] = next;
            }
            Some(open) => {
                open.open -= 1;
                open.free.push(h.lane);
                self.start_waiting(now, out);
            }
        }
    }
}

/// `ns / speedup`, rounded to the nanosecond.
fn scaled(ns: u64, speedup: f64) -> u64 {
    if speedup == 1.0 {
        ns
    } else {
        (ns as f64 / speedup).round() as u64
    }
}

/// A trace's trees in order of first arrival, for a replay of recorded arrivals.
fn trace_order(source: &dyn TreeSource, speedup: f64) -> Result<Open, String> {
    let n = source
        .finite_len()
        .ok_or("a replay of recorded arrivals needs a trace (--trace), not the generator")?;
    if n > MAX_TRACE_TREES {
        return Err(format!(
            "the trace has {n} trees, more than the {MAX_TRACE_TREES} a replay of recorded arrivals holds"
        ));
    }
    let mut order = Vec::with_capacity(n as usize);
    for k in 0..n {
        let first = source.tree(k).first_arrival_ns().ok_or_else(|| {
            format!("tree {k} of the trace has no recorded arrival times (only Mooncake, Bailian and requests traces, or native exports of them, have them)")
        })?;
        order.push((first, k));
    }
    // Stable: trees arriving at one instant keep their file order.
    order.sort_by_key(|&(at, _)| at);
    let base_ns = order.first().map_or(0, |&(at, _)| at);
    for o in &mut order {
        o.0 = scaled(o.0 - base_ns, speedup);
    }
    // A trace draws nothing: the seed is unused.
    Ok(Open::new(order, base_ns, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serverbench_workloads::{Generator, WorkloadSpec};

    /// Walks a replay with a fixed service time, returning (send, finish, lane, tree, request) per request.
    fn walk(cfg: ReplayConfig, service_ns: u64, until: Time) -> Vec<(Time, Time, u32, u64, u32)> {
        let g = Generator::new(WorkloadSpec::synthetic_v1(), 1, 1_048_576).unwrap();
        let mut r = Replay::new(&g, cfg).unwrap();
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
            protocol: Protocol::Cold,
            seed: 1,
            arrivals: Arrivals::Closed,
            agentx: AgentxParams::agentx(),
            window_ns: u64::MAX,
        };
        let log = walk(cfg, 50_000_000, Time::from_secs(3000.0));
        let g = Generator::new(WorkloadSpec::synthetic_v1(), 1, 1_048_576).unwrap();
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
            protocol: Protocol::Cold,
            seed: 1,
            arrivals: Arrivals::Closed,
            agentx: AgentxParams::agentx(),
            window_ns: u64::MAX,
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
            protocol: Protocol::Steady,
            seed: 9,
            arrivals: Arrivals::Closed,
            agentx: AgentxParams::agentx(),
            window_ns: u64::MAX,
        };
        let g = Generator::new(WorkloadSpec::synthetic_v1(), 1, 1_048_576).unwrap();
        let mut r = Replay::new(&g, cfg).unwrap();
        let mut out = Vec::new();
        r.start(Time::ZERO, &mut out);
        let later = out.iter().filter(|x| r.request(x.handle).turn > 0).count();
        assert!(later >= 6, "most lanes start past turn 0 ({later} of 8)");
    }

    /// The first `n` tree arrival times of a Poisson replay, seconds.
    fn poisson_arrivals(rate: f64, seed: u64, n: usize) -> Vec<f64> {
        // A one-request trace, cycled: Poisson draws its own times and ignores recorded ones.
        let line = r#"{"arrival_s": 3, "input_tokens": 10, "output_tokens": 1}"#;
        let g = serverbench_workloads::parse_trace("t.jsonl", line, None).unwrap();
        let cfg = ReplayConfig {
            concurrency: u32::MAX,
            idle_gap_cap_ns: 0,
            protocol: Protocol::Steady,
            seed,
            arrivals: Arrivals::Poisson { rate },
            agentx: AgentxParams::agentx(),
            window_ns: u64::MAX,
        };
        let mut r = Replay::new(&g, cfg).unwrap();
        let mut out = Vec::new();
        r.start(Time::ZERO, &mut out);
        let mut times = vec![0.0];
        while times.len() < n {
            let at = r.next_arrival().unwrap();
            times.push(at.0 as f64 / 1e9);
            r.arrive(at, &mut out);
        }
        assert_eq!(
            r.trees_started(),
            n as u64,
            "every arrival starts a tree at once"
        );
        times
    }

    #[test]
    fn poisson_gaps_are_exponential_at_the_rate() {
        let t = poisson_arrivals(2.0, 5, 40_001);
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        // The mean of 40,000 gaps of mean 0.5 s has a standard error of 0.5 %.
        assert!((mean - 0.5).abs() < 0.01, "mean gap {mean} s");
        // Exponential: a gap exceeds the mean with probability 1/e, and twice the mean with 1/e².
        let above = |x: f64| gaps.iter().filter(|&&g| g > x).count() as f64 / gaps.len() as f64;
        assert!((above(0.5) - (-1.0f64).exp()).abs() < 0.01);
        assert!((above(1.0) - (-2.0f64).exp()).abs() < 0.01);
        assert_eq!(
            t,
            poisson_arrivals(2.0, 5, 40_001),
            "same seed, same arrivals"
        );
        assert_ne!(t[1..10], poisson_arrivals(2.0, 6, 10)[1..10]);
        assert!(poisson_arrivals(2.0, 5, 100).iter().all(|&x| x >= 0.0));
    }

    #[test]
    fn the_open_loop_ignores_the_steady_start() {
        let g = Generator::new(WorkloadSpec::synthetic_v1(), 1, 1_048_576).unwrap();
        let cfg = ReplayConfig {
            concurrency: 8,
            idle_gap_cap_ns: 1_000_000_000,
            protocol: Protocol::Steady,
            seed: 9,
            arrivals: Arrivals::Poisson { rate: 1.0 },
            agentx: AgentxParams::agentx(),
            window_ns: u64::MAX,
        };
        let mut r = Replay::new(&g, cfg).unwrap();
        assert!(!r.warms());
        let mut out = Vec::new();
        r.start(Time::ZERO, &mut out);
        assert!(!out.is_empty());
        assert!(out.iter().all(|x| r.request(x.handle).turn == 0));
        assert_eq!(r.trees_started(), 1);
    }
}
