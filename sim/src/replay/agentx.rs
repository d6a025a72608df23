//! The AgentX protocol (SemiAnalysis's `agentx` and `inferencex-agentx-mvp` scenarios): lanes take
//! trace rows in order, each starts at a seeded instant t* inside its session with every stream live
//! at t* primed by its last earlier request, a pressure warm-up of back-to-back one-token requests
//! (`agentx` only), then the measured phase on the recording's own clock: end-to-start gaps after each
//! live completion, sub-agents spawned at their recorded offsets (while their parent's request is
//! still on the wire when the recording says so), joins, replay barriers between streams, a per-tree
//! and a global idle cap that move pending timers, and a fresh tree at turn 0 whenever one drains.
//! Mechanisms and their sources: docs/definitions.md ("The AgentX protocol"). It never reads a clock:
//! callers tell it the time and it keeps its own timers, which they wake it for.

use super::numpy_rng::{lane_seed, uniform};
use super::{Handle, Ready};
use crate::des::Time;
use serde::{Deserialize, Serialize};
use serverbench_workloads::hash::mix2;
use serverbench_workloads::{Recorded, SessionTree, TreeSource};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Salt of the cache-bust marker of each tree instance.
const MARKER_SALT: u64 = 0xA6E7_7B05_7000_0001;

/// The protocol's parameters, with AgentX's defaults ([`AgentxParams::agentx`], [`AgentxParams::mvp`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentxParams {
    /// Earliest start point, as a share of the session's recorded span.
    pub start_min: f64,
    /// Latest start point, as a share of the session's recorded span.
    pub start_max: f64,
    /// A tree with nothing on the wire for this long has its timers moved up (`None`: no cap), ns.
    pub tree_idle_cap_ns: Option<u64>,
    /// Requests per lane in the pressure warm-up after the primers (`None`: primers only).
    pub warmup_per_lane: Option<u32>,
    /// How long requests still running at the end of the window may finish and count, ns.
    pub grace_ns: u64,
}

impl AgentxParams {
    /// The `agentx` scenario: start in [25 %, 75 %], a 300 s per-tree idle cap, 10 warm-up requests
    /// per lane, 30 s of grace.
    pub fn agentx() -> AgentxParams {
        AgentxParams {
            start_min: 0.25,
            start_max: 0.75,
            tree_idle_cap_ns: Some(300_000_000_000),
            warmup_per_lane: Some(10),
            grace_ns: 30_000_000_000,
        }
    }

    /// The `inferencex-agentx-mvp` scenario: start anywhere in the session, no per-tree cap, primers
    /// only, 30 s of grace (a duration given on the command line).
    pub fn mvp() -> AgentxParams {
        AgentxParams {
            start_min: 0.0,
            start_max: 1.0,
            tree_idle_cap_ns: None,
            warmup_per_lane: None,
            grace_ns: 30_000_000_000,
        }
    }

    /// Checks the values; the error names the field.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let ratio = |x: f64| (0.0..=1.0).contains(&x);
        if !(ratio(self.start_min) && ratio(self.start_max) && self.start_min <= self.start_max) {
            return Err((
                "start_ratios",
                format!(
                    "must be two shares 0 <= lo <= hi <= 1, got {} and {}",
                    self.start_min, self.start_max
                ),
            ));
        }
        if self.warmup_per_lane.is_some_and(|n| n > 1_000_000) {
            return Err(("warmup_per_lane", "must be at most 1,000,000".into()));
        }
        Ok(())
    }
}

/// Where the replay is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Primers are on the wire (never scored).
    Primers,
    /// The pressure warm-up (never scored).
    Pressure,
    /// The measured phase.
    Profiling,
    /// The window has closed: nothing more is sent.
    Over,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    Turn { lane: u32, gen: u64, req: u32 },
    Watchdog { lane: u32, gen: u64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Unspawned,
    Live,
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing decided yet.
    Idle,
    /// A timer will fire it.
    Timer,
    /// Its timer fired; it waits for joined streams or barrier predecessors.
    Waiting,
    /// Past the warm-up quota: handed to the measured phase.
    Deferred,
    /// Given to the driver (on the wire once it says so).
    Issued,
    /// Returned, or completed before the lane's start point.
    Done,
}

/// The static structure of a tree, found once per instance.
struct Index {
    /// Per stream, its requests in order.
    turns: Vec<Vec<u32>>,
    /// Per request, its stream and its position in it.
    place: Vec<(u32, u32)>,
    /// Per request, the streams whose branches it spawns, by branch.
    spawns: Vec<Vec<u32>>,
    /// Per request, the streams it joins.
    joins: Vec<Vec<u32>>,
    /// Per branch: its streams.
    branches: Vec<Vec<u32>>,
}

impl Index {
    fn new(tree: &SessionTree, rec: &Recorded) -> Index {
        let n = tree.len();
        let mut turns = vec![Vec::new(); rec.streams.len()];
        let mut place = vec![(0, 0); n];
        for r in tree.requests() {
            let s = r.agent as usize;
            place[r.id as usize] = (r.agent, turns[s].len() as u32);
            turns[s].push(r.id);
        }
        let mut spawns = vec![Vec::new(); n];
        let mut joins = vec![Vec::new(); n];
        let mut branches: Vec<Vec<u32>> = Vec::new();
        for (s, st) in rec.streams.iter().enumerate() {
            let Some(sp) = st.spawn else { continue };
            if turns[s].is_empty() {
                continue;
            }
            spawns[sp.parent as usize].push(s as u32);
            if let Some(j) = sp.join {
                joins[j as usize].push(s as u32);
            }
            let b = sp.branch as usize;
            if branches.len() <= b {
                branches.resize(b + 1, Vec::new());
            }
            branches[b].push(s as u32);
        }
        Index {
            turns,
            place,
            spawns,
            joins,
            branches,
        }
    }
}

/// One lane's tree instance.
struct Lane {
    /// The tree behind this instance's cache-bust marker.
    marked: serverbench_workloads::repeat::Marked,
    rec: Arc<Recorded>,
    ix: Index,
    /// The row drawn (position in the source's stream).
    row: u64,
    /// Which instance this is (timers of an earlier one are stale).
    gen: u64,
    /// The recorded instant the measured phase's offsets count from, ns.
    origin_ns: i64,
    status: Vec<Status>,
    /// Per stream: the next turn (position) to issue.
    next: Vec<u32>,
    state: Vec<State>,
    warmup: Vec<bool>,
    /// Branches already spawned while their parent was on the wire.
    overlapped: Vec<bool>,
    in_flight: u32,
    watchdog: Option<(u64, u64)>,
    idle_expired: bool,
    quota_used: u32,
    /// Requests waiting for joins or barriers.
    waiting: Vec<u32>,
}

/// One live stream of a lane at its start, as planned (for the conformance report).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StreamStart {
    /// The stream's name.
    pub stream: String,
    /// Its next turn (position in the stream).
    pub next_turn: u32,
    /// Its recorded next start after the lane's start point, ms.
    pub offset_ms: f64,
    /// Waiting for spawned streams before its next turn.
    pub waiting: bool,
    /// The turn primed before the measured phase, if any.
    pub primer_turn: Option<u32>,
}

/// A lane as the protocol started it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LanePlan {
    /// Lane.
    pub lane: u32,
    /// The row it replays (position in the trace, counting from 0 and wrapping).
    pub row: u64,
    /// The trace's id.
    pub trace: String,
    /// Its start point on the trace's clock, ms.
    pub t_star_ms: f64,
    /// Its live streams at the start point.
    pub states: Vec<StreamStart>,
    /// When its primers were sent after the replay began, s.
    pub primer_offsets_s: Vec<f64>,
    /// When its first measured request was due after the measured phase began, s (absent when none).
    pub first_dispatch_s: Option<f64>,
}

/// What the protocol did besides the scored requests.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AgentxStats {
    /// Primers sent.
    pub primers: u64,
    /// Pressure warm-up requests sent.
    pub pressure_requests: u64,
    /// When the measured phase began after the replay started, s.
    pub warmup_s: f64,
    /// Rows skipped at lane building (no live stream at their start point).
    pub unspawnable_rows: u64,
    /// Times the per-tree idle cap moved a tree's timers, and the seconds it removed.
    pub tree_idle_jumps: u64,
    /// Seconds removed by the per-tree cap.
    pub tree_idle_skipped_s: f64,
    /// Times the global idle cap moved every timer.
    pub global_idle_jumps: u64,
    /// Seconds removed by the global cap.
    pub global_idle_skipped_s: f64,
    /// Streams ended early by a context overflow.
    pub killed_streams: u64,
    /// Lanes' start plans.
    pub lanes: Vec<LanePlan>,
}

/// The AgentX replay.
pub struct Agentx<'a> {
    source: &'a dyn TreeSource,
    params: AgentxParams,
    seed: u64,
    concurrency: u32,
    global_cap_ns: u64,
    window_ns: u64,
    lanes: Vec<Lane>,
    rows_drawn: u64,
    instances: u64,
    phase: Phase,
    timers: BTreeMap<(u64, u64), Timer>,
    timer_seq: u64,
    in_flight: u32,
    idle_since: Time,
    origin: Option<Time>,
    primers_out: u64,
    paused: bool,
    stats: AgentxStats,
}

impl<'a> Agentx<'a> {
    /// A replay of `source`'s rows with `concurrency` lanes, a global idle cap of `global_cap_ns` and
    /// a measured window of `window_ns`.
    pub fn new(
        source: &'a dyn TreeSource,
        params: AgentxParams,
        seed: u64,
        concurrency: u32,
        global_cap_ns: u64,
        window_ns: u64,
    ) -> Agentx<'a> {
        Agentx {
            source,
            params,
            seed,
            concurrency,
            global_cap_ns,
            window_ns,
            lanes: Vec::new(),
            rows_drawn: 0,
            instances: 0,
            phase: Phase::Primers,
            timers: BTreeMap::new(),
            timer_seq: 0,
            in_flight: 0,
            idle_since: Time::ZERO,
            origin: None,
            primers_out: 0,
            paused: false,
            stats: AgentxStats::default(),
        }
    }

    /// Builds the lanes and sends the primers (spread so that every lane reaches its start point
    /// together); the rest follows from completions and timers.
    pub fn start(&mut self, now: Time, out: &mut Vec<Ready>) {
        let pool = self
            .source
            .finite_len()
            .unwrap_or(self.concurrency as u64)
            .max(1);
        let attempts = self.concurrency as u64 + 2 * pool;
        let mut tried = 0;
        let mut primers: Vec<(u32, u32, f64)> = Vec::new();
        while (self.lanes.len() as u32) < self.concurrency && tried < attempts {
            tried += 1;
            let row = self.rows_drawn;
            self.rows_drawn += 1;
            let lane = self.lanes.len() as u32;
            match self.snapshot_lane(lane, row) {
                Some((l, p)) => {
                    primers.extend(p.into_iter().map(|(r, lead)| (lane, r, lead)));
                    self.lanes.push(l);
                }
                None => self.stats.unspawnable_rows += 1,
            }
        }
        let max_lead = primers.iter().map(|p| p.2).fold(0.0, f64::max);
        for &(lane, req, lead) in &primers {
            let offset_s = max_lead - lead;
            self.stats.lanes[lane as usize]
                .primer_offsets_s
                .push(offset_s);
            let l = &mut self.lanes[lane as usize];
            l.warmup[req as usize] = true;
            l.state[req as usize] = State::Timer;
            let gen = l.gen;
            let at = now.plus(Time::from_secs(offset_s).0);
            self.add_timer(at, Timer::Turn { lane, gen, req });
        }
        self.primers_out = primers.len() as u64;
        self.stats.primers = self.primers_out;
        self.fire_due(now, out);
        if self.primers_out == 0 {
            self.after_primers(now, out);
        }
    }

    /// The lane's tree at its start point: its state, and its primers with their leads (s).
    fn snapshot_lane(&mut self, lane: u32, row: u64) -> Option<(Lane, Vec<(u32, f64)>)> {
        let mut l = self.instance(row);
        let rec = l.rec.clone();
        let ms = |r: u32| rec.start_ns[r as usize] as f64 / 1e6;
        let (lo_ns, hi_ns) = rec.span_ns();
        let (start_ms, end_ms) = (lo_ns as f64 / 1e6, hi_ns as f64 / 1e6);
        let duration = end_ms - start_ms;
        let lo = start_ms + self.params.start_min * duration;
        let hi = (start_ms + self.params.start_max * duration).max(lo);
        let t_star = if hi == lo {
            lo
        } else {
            uniform(lane_seed(self.seed, &rec.trace_id, lane), lo, hi)
        };
        let firsts: Vec<Option<u32>> =
            l.ix.turns
                .iter()
                .map(|turns| {
                    turns
                        .iter()
                        .position(|&r| ms(r) >= t_star)
                        .map(|p| p as u32)
                })
                .collect();
        let first_at_or_after = |s: usize| firsts[s];
        // Everything recorded before the start point counts as done (replay barriers see it so).
        for (turns, first) in l.ix.turns.iter().zip(&firsts) {
            let k = first.unwrap_or(turns.len() as u32) as usize;
            for &r in &turns[..k] {
                l.state[r as usize] = State::Done;
            }
        }
        let root_next = first_at_or_after(0);
        let mut live: Vec<(u32, u32)> = Vec::new();
        let mut pending_joins: Vec<u32> = Vec::new();
        for streams in &l.ix.branches {
            let Some(&first) = streams.first() else {
                continue;
            };
            let sp = rec.streams[first as usize].spawn.expect("a branch stream");
            let start = sp.branch_start_ns as f64 / 1e6;
            if t_star < start {
                let (parent, pos) = l.ix.place[sp.parent as usize];
                let parent_next = if parent == 0 {
                    root_next
                } else {
                    first_at_or_after(parent as usize)
                };
                let not_completed = t_star < ms(sp.parent) || parent_next.is_some_and(|n| n <= pos);
                if not_completed {
                    continue;
                }
            }
            let mut any = false;
            for &s in streams {
                match first_at_or_after(s as usize) {
                    None => l.status[s as usize] = Status::Done,
                    Some(k) => {
                        l.status[s as usize] = Status::Live;
                        l.next[s as usize] = k;
                        live.push((s, k));
                        any = true;
                    }
                }
            }
            if let (true, Some(j)) = (any, sp.join) {
                pending_joins.push(j);
            }
        }
        let mut states = Vec::new();
        match root_next {
            Some(k) => {
                l.status[0] = Status::Live;
                l.next[0] = k;
                states.push((0u32, k));
            }
            None => l.status[0] = Status::Done,
        }
        states.extend(live);
        let waiting = |s: u32, k: u32| s == 0 && pending_joins.contains(&l.ix.turns[0][k as usize]);
        if states.is_empty() || states.iter().all(|&(s, k)| waiting(s, k)) {
            return None;
        }
        l.origin_ns = (t_star * 1e6).round() as i64;
        let cap_ms = self.global_cap_ns as f64 / 1e6;
        let mut primers = Vec::new();
        let mut plan = LanePlan {
            lane,
            row,
            trace: rec.trace_id.clone(),
            t_star_ms: t_star,
            states: Vec::new(),
            primer_offsets_s: Vec::new(),
            first_dispatch_s: None,
        };
        for &(s, k) in &states {
            let next_req = l.ix.turns[s as usize][k as usize];
            let primer = (k >= 1).then(|| l.ix.turns[s as usize][k as usize - 1]);
            if let Some(p) = primer {
                let lead_ms = (t_star - ms(p)).min(cap_ms);
                primers.push((p, lead_ms / 1e3));
            }
            plan.states.push(StreamStart {
                stream: rec.streams[s as usize].name.clone(),
                next_turn: k,
                offset_ms: (ms(next_req) - t_star).max(0.0),
                waiting: waiting(s, k),
                primer_turn: primer.map(|_| k - 1),
            });
        }
        self.stats.lanes.push(plan);
        Some((l, primers))
    }

    /// A fresh instance of row `row`: every stream unspawned, its own cache-bust marker.
    fn instance(&mut self, row: u64) -> Lane {
        let base = self.source.tree(row);
        let rec = base.recorded().cloned().unwrap_or_else(|| {
            Arc::new(base.derived_recording(format!("tree-{}", base.session_id)))
        });
        self.instances += 1;
        let salt = mix2(mix2(MARKER_SALT, self.seed), self.instances);
        let ix = Index::new(&base, &rec);
        let (n, streams) = (base.len(), rec.streams.len());
        Lane {
            marked: serverbench_workloads::repeat::Marked::new(base, salt),
            rec,
            ix,
            row,
            gen: self.instances,
            origin_ns: 0,
            status: vec![Status::Unspawned; streams],
            next: vec![0; streams],
            state: vec![State::Idle; n],
            warmup: vec![false; n],
            overlapped: vec![false; n],
            in_flight: 0,
            watchdog: None,
            idle_expired: false,
            quota_used: 0,
            waiting: Vec::new(),
        }
    }

    fn add_timer(&mut self, at: Time, t: Timer) -> (u64, u64) {
        self.timer_seq += 1;
        let key = (at.0, self.timer_seq);
        self.timers.insert(key, t);
        key
    }

    /// When the next timer fires.
    pub fn next_wake(&self) -> Option<Time> {
        self.timers.keys().next().map(|&(at, _)| Time(at))
    }

    /// Fires every timer due by `now`.
    pub fn fire_due(&mut self, now: Time, out: &mut Vec<Ready>) {
        self.check_over(now);
        while let Some((&key, &t)) = self.timers.iter().next() {
            if key.0 > now.0 {
                break;
            }
            self.timers.remove(&key);
            match t {
                Timer::Turn { lane, gen, req } => {
                    if self.lanes[lane as usize].gen == gen {
                        self.try_issue(lane, req, now, out);
                    }
                }
                Timer::Watchdog { lane, gen } => {
                    if self.lanes[lane as usize].gen == gen {
                        self.watchdog_fires(lane, now);
                    }
                }
            }
        }
        self.global_cap(now);
    }

    /// The tree a lane replays (as recorded: its requests' block ids unmarked) and its row.
    pub fn tree(&self, lane: u32) -> (&Arc<SessionTree>, u64) {
        let l = &self.lanes[lane as usize];
        (l.marked.tree(), l.row)
    }

    /// The request behind a handle, its block ids behind its tree instance's marker.
    pub fn request(&self, h: Handle) -> &serverbench_workloads::Request {
        self.lanes[h.lane as usize].marked.request(h.request)
    }

    /// Whether the request was sent as part of the warm-up (never scored; one output token).
    pub fn is_warmup(&self, h: Handle) -> bool {
        self.lanes[h.lane as usize].warmup[h.request as usize]
    }

    /// When the measured window opened.
    pub fn origin(&self) -> Option<Time> {
        self.origin
    }

    /// The grace after the window, ns.
    pub fn grace_ns(&self) -> u64 {
        self.params.grace_ns
    }

    /// Trees started (instances).
    pub fn trees_started(&self) -> u64 {
        self.instances
    }

    /// Lanes built.
    pub fn lanes(&self) -> u32 {
        self.lanes.len() as u32
    }

    /// What the protocol did, with every lane's start plan.
    pub fn stats(&self) -> &AgentxStats {
        &self.stats
    }

    fn check_over(&mut self, now: Time) {
        if let Some(o) = self.origin {
            if self.phase == Phase::Profiling && now.0 >= o.0 + self.window_ns {
                self.phase = Phase::Over;
                self.timers.clear();
            }
        }
    }

    /// Tries to send request `req` of `lane` now: after joined streams have finished and barrier
    /// predecessors have completed; in the pressure warm-up, within the lane's quota.
    fn try_issue(&mut self, lane: u32, req: u32, now: Time, out: &mut Vec<Ready>) {
        if self.phase == Phase::Over {
            return;
        }
        let l = &mut self.lanes[lane as usize];
        if l.warmup[req as usize] && self.phase == Phase::Primers {
            self.issue(lane, req, now, out);
            return;
        }
        let joins_done = l.ix.joins[req as usize]
            .iter()
            .all(|&s| l.status[s as usize] != Status::Live);
        let barriers_done = l.rec.barriers[req as usize]
            .iter()
            .all(|&p| l.state[p as usize] == State::Done);
        if !(joins_done && barriers_done) {
            l.state[req as usize] = State::Waiting;
            l.waiting.push(req);
            if self.phase == Phase::Profiling && l.in_flight == 0 && l.idle_expired {
                self.arm_watchdog(lane, now, true);
            }
            return;
        }
        if self.phase == Phase::Pressure {
            let quota = self.params.warmup_per_lane.unwrap_or(0);
            if self.paused || l.quota_used >= quota {
                l.state[req as usize] = State::Deferred;
                return;
            }
            l.quota_used += 1;
            l.warmup[req as usize] = true;
            self.stats.pressure_requests += 1;
            if self.lanes.iter().all(|x| x.quota_used >= quota) {
                self.paused = true;
            }
        }
        self.issue(lane, req, now, out);
    }

    /// Request `req` of `lane` goes to the driver now: it is on the wire from this instant (its
    /// tree's idle watchdog stops), and branches the recording started while this root request was
    /// running are spawned (the overlap path).
    fn issue(&mut self, lane: u32, req: u32, now: Time, out: &mut Vec<Ready>) {
        self.in_flight += 1;
        let l = &mut self.lanes[lane as usize];
        l.state[req as usize] = State::Issued;
        l.in_flight += 1;
        l.idle_expired = false;
        if let Some(key) = l.watchdog.take() {
            self.timers.remove(&key);
        }
        out.push(Ready {
            at: now,
            handle: Handle { lane, request: req },
        });
        if !matches!(self.phase, Phase::Pressure | Phase::Profiling) {
            return;
        }
        let l = &self.lanes[lane as usize];
        let (stream, _) = l.ix.place[req as usize];
        let api = l.rec.api_ns[req as usize].unwrap_or(0);
        if stream != 0 || api == 0 {
            return;
        }
        let start = l.rec.start_ns[req as usize];
        let end = start.saturating_add(api as i64);
        let streams: Vec<u32> = l.ix.spawns[req as usize]
            .iter()
            .copied()
            .filter(|&s| {
                l.rec.streams[s as usize]
                    .spawn
                    .expect("spawned")
                    .branch_start_ns
                    < end
            })
            .collect();
        if !streams.is_empty() {
            self.lanes[lane as usize].overlapped[req as usize] = true;
            self.spawn(lane, &streams, start, now, out);
        }
    }

    /// Starts `streams` (their branch spawned now): each first turn after its recorded offset from
    /// `origin_ns` (0 in the warm-up).
    fn spawn(
        &mut self,
        lane: u32,
        streams: &[u32],
        origin_ns: i64,
        now: Time,
        out: &mut Vec<Ready>,
    ) {
        for &s in streams {
            let l = &mut self.lanes[lane as usize];
            if l.status[s as usize] != Status::Unspawned {
                continue;
            }
            l.status[s as usize] = Status::Live;
            l.next[s as usize] = 0;
            let first = l.ix.turns[s as usize][0];
            let offset = if self.phase == Phase::Pressure {
                0
            } else {
                (l.rec.start_ns[first as usize] - origin_ns).max(0) as u64
            };
            self.schedule(lane, first, now, offset, out);
        }
    }

    /// Request `req` becomes due `delay` ns after `now` (at once when 0).
    fn schedule(&mut self, lane: u32, req: u32, now: Time, delay: u64, out: &mut Vec<Ready>) {
        if delay == 0 {
            self.try_issue(lane, req, now, out);
        } else {
            let l = &mut self.lanes[lane as usize];
            l.state[req as usize] = State::Timer;
            let gen = l.gen;
            self.add_timer(now.plus(delay), Timer::Turn { lane, gen, req });
        }
    }

    /// Request `h` returned at `now` (completed, failed or cancelled).
    pub fn complete(&mut self, h: Handle, now: Time, out: &mut Vec<Ready>) {
        self.returned(h, now, false, out);
    }

    /// Request `h` overflowed the context at `now` (never sent): its stream ends there.
    pub fn overflowed(&mut self, h: Handle, now: Time, out: &mut Vec<Ready>) {
        self.returned(h, now, true, out);
    }

    fn returned(&mut self, h: Handle, now: Time, overflow: bool, out: &mut Vec<Ready>) {
        self.check_over(now);
        self.in_flight -= 1;
        let (lane, r) = (h.lane, h.request);
        let l = &mut self.lanes[lane as usize];
        l.in_flight -= 1;
        l.state[r as usize] = State::Done;
        if self.in_flight == 0 {
            self.idle_since = now;
        }
        if self.phase == Phase::Primers && l.warmup[r as usize] {
            self.primers_out -= 1;
            if self.primers_out == 0 {
                self.after_primers(now, out);
            }
            return;
        }
        let (stream, pos) = l.ix.place[r as usize];
        let last = pos as usize + 1 == l.ix.turns[stream as usize].len();
        if overflow && !last {
            self.stats.killed_streams += 1;
        }
        // Branches this request spawns (unless the overlap path already did).
        let spawned = l.ix.spawns[r as usize].clone();
        let overlapped = l.overlapped[r as usize];
        // A stream ended by an overflow spawns nothing more.
        let killed = overflow && !last;
        if !spawned.is_empty() && !overlapped && !killed && self.phase != Phase::Over {
            let by_branch = self.branch_starts(lane, &spawned);
            for (start, streams) in by_branch {
                self.spawn(lane, &streams, start, now, out);
            }
        }
        let l = &mut self.lanes[lane as usize];
        if last || overflow {
            l.status[stream as usize] = Status::Done;
            self.stream_done(lane, stream, now, out);
        } else {
            l.next[stream as usize] = pos + 1;
            let next = l.ix.turns[stream as usize][pos as usize + 1];
            let delay = if self.phase == Phase::Pressure {
                0
            } else {
                let prev_end = l.rec.end_ns(r);
                (l.rec.start_ns[next as usize] - prev_end).max(0) as u64
            };
            if self.phase != Phase::Over {
                self.schedule(lane, next, now, delay, out);
            }
        }
        self.release_waiting(lane, now, out);
        let l = &mut self.lanes[lane as usize];
        if self.phase == Phase::Profiling && l.in_flight == 0 {
            l.idle_expired = false;
            self.arm_watchdog(lane, now, false);
        }
        self.after_change(now, out);
        self.global_cap(now);
    }

    /// The branch starts of `streams` (grouped by branch, in order).
    fn branch_starts(&self, lane: u32, streams: &[u32]) -> Vec<(i64, Vec<u32>)> {
        let l = &self.lanes[lane as usize];
        let mut out: Vec<(u32, i64, Vec<u32>)> = Vec::new();
        for &s in streams {
            let sp = l.rec.streams[s as usize].spawn.expect("spawned");
            match out.iter_mut().find(|x| x.0 == sp.branch) {
                Some(x) => x.2.push(s),
                None => out.push((sp.branch, sp.branch_start_ns, vec![s])),
            }
        }
        out.into_iter().map(|(_, st, v)| (st, v)).collect()
    }

    /// A stream finished: a drained tree recycles its lane.
    fn stream_done(&mut self, lane: u32, _stream: u32, now: Time, out: &mut Vec<Ready>) {
        let l = &self.lanes[lane as usize];
        let drained = l.status[0] == Status::Done && !l.status.contains(&Status::Live);
        if !drained || l.in_flight > 0 {
            return;
        }
        if matches!(self.phase, Phase::Pressure | Phase::Profiling) {
            self.recycle(lane, now, out);
        }
    }

    /// The lane starts the next row at turn 0, with a new marker.
    fn recycle(&mut self, lane: u32, now: Time, out: &mut Vec<Ready>) {
        let row = self.rows_drawn;
        self.rows_drawn += 1;
        let old_watchdog = self.lanes[lane as usize].watchdog.take();
        if let Some(key) = old_watchdog {
            self.timers.remove(&key);
        }
        let quota = self.lanes[lane as usize].quota_used;
        let mut l = self.instance(row);
        l.quota_used = quota;
        l.status[0] = Status::Live;
        l.origin_ns = l.rec.start_ns[l.ix.turns[0][0] as usize];
        let first = l.ix.turns[0][0];
        self.lanes[lane as usize] = l;
        self.try_issue(lane, first, now, out);
    }

    /// Requests waiting on joins or barriers whose conditions now hold are sent.
    fn release_waiting(&mut self, lane: u32, now: Time, out: &mut Vec<Ready>) {
        if self.paused && self.phase == Phase::Pressure {
            return;
        }
        loop {
            let l = &mut self.lanes[lane as usize];
            let waiting = std::mem::take(&mut l.waiting);
            let (ready, still): (Vec<u32>, Vec<u32>) = waiting
                .into_iter()
                .filter(|&r| l.state[r as usize] == State::Waiting)
                .partition(|&r| l.ready(r));
            l.waiting = still;
            if ready.is_empty() {
                return;
            }
            for r in ready {
                self.try_issue(lane, r, now, out);
            }
        }
    }

    fn after_primers(&mut self, now: Time, out: &mut Vec<Ready>) {
        if self.params.warmup_per_lane.is_some() {
            self.phase = Phase::Pressure;
            for lane in 0..self.lanes.len() as u32 {
                let l = &self.lanes[lane as usize];
                let starts: Vec<u32> = (0..l.status.len())
                    .filter(|&s| l.status[s] == Status::Live)
                    .map(|s| l.ix.turns[s][l.next[s] as usize])
                    .collect();
                for r in starts {
                    self.try_issue(lane, r, now, out);
                }
            }
            self.after_change(now, out);
        } else {
            self.begin_profiling(now, out);
        }
    }

    /// Ends the pressure warm-up once every lane has used its quota (or none can go on) and nothing
    /// is on the wire.
    fn after_change(&mut self, now: Time, out: &mut Vec<Ready>) {
        if self.phase != Phase::Pressure || self.in_flight > 0 {
            return;
        }
        // With nothing on the wire and nothing due, a lane short of its quota cannot go on either.
        let stalled = self.timers.is_empty();
        if self.paused || stalled {
            self.begin_profiling(now, out);
        }
    }

    /// The measured phase starts at `now`: every live stream's next turn is due at its recorded
    /// offset from its tree's origin, less the earliest such offset of a stream not waiting for others.
    fn begin_profiling(&mut self, now: Time, out: &mut Vec<Ready>) {
        self.stats.warmup_s = now.0 as f64 / 1e9;
        self.phase = Phase::Profiling;
        self.origin = Some(now);
        self.idle_since = now;
        self.timers.clear();
        let mut planned: Vec<(u32, u32, i64, bool)> = Vec::new();
        let mut empty = Vec::new();
        for lane in 0..self.lanes.len() as u32 {
            let l = &mut self.lanes[lane as usize];
            l.waiting.clear();
            let before = planned.len();
            for s in 0..l.status.len() {
                if l.status[s] != Status::Live {
                    continue;
                }
                let Some(&r) = l.ix.turns[s].get(l.next[s] as usize) else {
                    continue;
                };
                if matches!(l.state[r as usize], State::Issued | State::Done) {
                    continue;
                }
                let waiting = !l.ix.joins[r as usize]
                    .iter()
                    .all(|&c| l.status[c as usize] != Status::Live);
                l.state[r as usize] = State::Idle;
                let offset = (l.rec.start_ns[r as usize] - l.origin_ns).max(0);
                planned.push((lane, r, offset, waiting));
            }
            if planned.len() == before {
                empty.push(lane);
            }
        }
        // A lane with nothing live starts a fresh row at turn 0.
        for lane in empty {
            let row = self.rows_drawn;
            self.rows_drawn += 1;
            let mut fresh = self.instance(row);
            fresh.status[0] = Status::Live;
            let first = fresh.ix.turns[0][0];
            self.lanes[lane as usize] = fresh;
            planned.push((lane, first, 0, false));
        }
        let t0 = planned
            .iter()
            .filter(|p| !p.3)
            .map(|p| p.2)
            .min()
            .unwrap_or(0);
        for &(lane, r, offset, waiting) in &planned {
            let delay = (offset - t0).max(0) as u64;
            if let Some(plan) = self.stats.lanes.get_mut(lane as usize) {
                let s = delay as f64 / 1e9;
                if !waiting {
                    plan.first_dispatch_s = Some(plan.first_dispatch_s.map_or(s, |f| f.min(s)));
                }
            }
            self.schedule(lane, r, now, delay, out);
        }
        for lane in 0..self.lanes.len() as u32 {
            if self.lanes[lane as usize].in_flight == 0 {
                self.arm_watchdog(lane, now, false);
            }
        }
        self.global_cap(now);
    }

    fn arm_watchdog(&mut self, lane: u32, now: Time, at_once: bool) {
        let Some(cap) = self.params.tree_idle_cap_ns else {
            return;
        };
        if self.phase != Phase::Profiling {
            return;
        }
        let l = &self.lanes[lane as usize];
        if l.watchdog.is_some() {
            return;
        }
        let gen = l.gen;
        let at = if at_once || l.idle_expired {
            now
        } else {
            now.plus(cap)
        };
        let key = self.add_timer(at, Timer::Watchdog { lane, gen });
        self.lanes[lane as usize].watchdog = Some(key);
    }

    /// The per-tree idle cap: a tree with nothing on the wire for the cap has every timer moved up so
    /// that its earliest fires now.
    fn watchdog_fires(&mut self, lane: u32, now: Time) {
        let l = &mut self.lanes[lane as usize];
        l.watchdog = None;
        if l.in_flight != 0 {
            return;
        }
        l.idle_expired = true;
        let gen = l.gen;
        let mine: Vec<(u64, u64)> = self
            .timers
            .iter()
            .filter(|(_, t)| matches!(t, Timer::Turn { lane: x, gen: g, .. } if *x == lane && *g == gen))
            .map(|(&k, _)| k)
            .collect();
        let Some(earliest) = mine.iter().map(|k| k.0).min() else {
            return;
        };
        if earliest <= now.0 {
            return;
        }
        let shift = earliest - now.0;
        for k in mine {
            let t = self.timers.remove(&k).expect("listed");
            self.timers.insert((k.0 - shift, k.1), t);
        }
        self.stats.tree_idle_jumps += 1;
        self.stats.tree_idle_skipped_s += shift as f64 / 1e9;
    }

    /// The global idle cap: with nothing on the wire anywhere, the earliest timer fires at most the
    /// cap after the wire went quiet; every timer moves by the same amount.
    fn global_cap(&mut self, now: Time) {
        if self.phase != Phase::Profiling || self.in_flight > 0 || self.global_cap_ns == 0 {
            return;
        }
        let target = now
            .0
            .max(self.idle_since.0.saturating_add(self.global_cap_ns));
        let Some(earliest) = self
            .timers
            .iter()
            .find(|(_, t)| matches!(t, Timer::Turn { .. }))
            .map(|(k, _)| k.0)
        else {
            return;
        };
        if earliest <= target {
            return;
        }
        let shift = earliest - target;
        let all = std::mem::take(&mut self.timers);
        for (k, t) in all {
            let at = match t {
                Timer::Turn { .. } => k.0 - shift,
                Timer::Watchdog { .. } => k.0,
            };
            self.timers.insert((at, k.1), t);
        }
        self.stats.global_idle_jumps += 1;
        self.stats.global_idle_skipped_s += shift as f64 / 1e9;
    }
}

impl Lane {
    /// Joined streams finished and barrier predecessors completed.
    fn ready(&self, r: u32) -> bool {
        self.ix.joins[r as usize]
            .iter()
            .all(|&s| self.status[s as usize] != Status::Live)
            && self.rec.barriers[r as usize]
                .iter()
                .all(|&p| self.state[p as usize] == State::Done)
    }
}
