//! The simulator's driver: the replay state machine and one engine replica in virtual time, producing
//! records and a summary. Deterministic: the same inputs give byte-identical records.

use crate::deployment::Deployment;
use crate::deployment::{Refusal, Router};
use crate::des::{EventQueue, Time};
use crate::engine::{
    CapacityError, EngineStats, Replica, ReplicaOptions, RunBounds, SeqEvent, SeqInput, StepSample,
};
use crate::replay::{AgentxParams, Arrivals, Handle, Protocol, Ready, Replay, ReplayConfig};
use crate::score::{agentx_window, apply_agentx, summarise, Outcome, Record, Summary};
use serverbench_calibration::FieldError;
use serverbench_calibration::{BatchShape, CostModel, DpAttentionCost};
use serverbench_workloads::hash::mix2;
use serverbench_workloads::Request;
use serverbench_workloads::TreeSource;

/// Most lanes a run may have.
pub const MAX_CONCURRENCY: u32 = 16_384;
/// Longest window a run may have, seconds (30 days).
pub const MAX_WINDOW_S: f64 = 2_592_000.0;
/// Shortest window, seconds: a shorter one holds no request and would score a valid run of nothing.
pub const MIN_WINDOW_S: f64 = 1.0;
/// Longest idle-gap cap, seconds (one day).
pub const MAX_IDLE_GAP_CAP_S: f64 = 86_400.0;
/// Requests in a row that may end at one instant without time passing (each overflowing the context,
/// so never sent) before a run is declared stalled.
pub const MAX_INSTANT_OVERFLOWS: u64 = 100_000;

/// Why a run cannot be made.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunError {
    /// The deployment cannot hold a request of its context limit.
    #[error(transparent)]
    Capacity(#[from] CapacityError),
    /// A run option is out of range (the field is the option's name).
    #[error("{0}")]
    Config(FieldError),
    /// The run cannot advance.
    #[error(transparent)]
    Stalled(#[from] Stalled),
}

/// A run that cannot advance: every request due overflows the context, so none is sent and no time
/// passes (the workload asks for longer requests than the deployment accepts, and waits for none of
/// them).
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("no progress at t = {at_s} s: {count} requests in a row overflowed the context limit of {context_limit} tokens without time passing — the workload's requests are longer than this deployment accepts")]
pub struct Stalled {
    /// When, seconds.
    pub at_s: f64,
    /// Requests in a row that overflowed at that instant.
    pub count: u64,
    /// The deployment's context limit.
    pub context_limit: u32,
}

/// Counts the requests that end at one instant without being sent (context overflows); the real and
/// the simulated replay share it, so a workload that overflows forever fails in both.
#[derive(Clone, Copy, Debug, Default)]
pub struct OverflowGuard {
    at: u64,
    count: u64,
}

impl OverflowGuard {
    /// A request due at `t` overflowed; an error once [`MAX_INSTANT_OVERFLOWS`] did so at one instant.
    pub fn overflowed(&mut self, t: Time, context_limit: u32) -> Result<(), Stalled> {
        if t.0 != self.at {
            *self = OverflowGuard { at: t.0, count: 0 };
        }
        self.count += 1;
        if self.count > MAX_INSTANT_OVERFLOWS {
            return Err(Stalled {
                at_s: t.0 as f64 / 1e9,
                count: self.count,
                context_limit,
            });
        }
        Ok(())
    }
}

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunConfig {
    /// Lanes.
    pub concurrency: u32,
    /// Workload seed (also seeds the steady-start draws).
    pub seed: u64,
    /// Window `W`, seconds.
    pub window_s: f64,
    /// Cap on think times, seconds.
    pub idle_gap_cap_s: f64,
    /// Protocol (closed loop only).
    pub protocol: Protocol,
    /// The AgentX protocols' parameters (the scenario's defaults unless changed; ignored by the
    /// other protocols).
    pub agentx: AgentxParams,
    /// How trees arrive: the closed loop (the benchmark's score), recorded times, or a Poisson rate.
    pub arrivals: Arrivals,
    /// Keep per-step samples.
    pub timeline: bool,
    /// Simulate every decode step on its own instead of merging runs of identical decode steps
    /// (same results, slower; for checking the merge).
    pub step_by_step: bool,
    /// Recount the KV bookkeeping after every step and panic on a mismatch (tests and debugging; slow).
    pub audit: bool,
    /// The prompts reach the server as text (`--api text` or `chat`), which its front end tokenizes: each
    /// request also takes the profile's `tokenize_s_per_token`. Always so under the AgentX protocols,
    /// whose requests are chat completions.
    pub text_prompts: bool,
    /// The server has served before this run, so its engine compiled every kernel variant its steps
    /// need (no step waits for a compile, [`serverbench_calibration::MoeCompiles`]): a later run on
    /// the same server start, as `compare` makes them. Always so under the steady start, whose lanes
    /// join a server mid-session; else a run meets a freshly started server's compiles.
    pub kernels_warm: bool,
}

impl RunConfig {
    /// The defaults: c = 16, seed 0, 1800 s, 10 s idle-gap cap, steady start (the command line defaults
    /// to `--start cold`).
    pub fn new(concurrency: u32, seed: u64, window_s: f64) -> RunConfig {
        RunConfig {
            concurrency,
            seed,
            window_s,
            idle_gap_cap_s: 10.0,
            protocol: Protocol::Steady,
            agentx: AgentxParams::agentx(),
            arrivals: Arrivals::Closed,
            timeline: false,
            audit: false,
            step_by_step: false,
            text_prompts: false,
            kernels_warm: false,
        }
    }

    /// Checks the options; the error's field is the option's name (`concurrency`, `window`, `idle_gap_cap`).
    pub fn check(&self) -> Result<(), FieldError> {
        if self.concurrency == 0 || self.concurrency > MAX_CONCURRENCY {
            return Err(FieldError::new(
                "concurrency",
                format!("must be between 1 and {MAX_CONCURRENCY} lanes"),
            ));
        }
        if !(self.window_s >= MIN_WINDOW_S && self.window_s <= MAX_WINDOW_S) {
            return Err(FieldError::new(
                "window",
                format!(
                    "must be between {MIN_WINDOW_S} s and {MAX_WINDOW_S} s (30 days), got {:?}",
                    self.window_s
                ),
            ));
        }
        if !(self.idle_gap_cap_s >= 0.0 && self.idle_gap_cap_s <= MAX_IDLE_GAP_CAP_S) {
            return Err(FieldError::new(
                "idle_gap_cap",
                format!(
                    "must be between 0 and {MAX_IDLE_GAP_CAP_S} seconds, got {}",
                    self.idle_gap_cap_s
                ),
            ));
        }
        Ok(())
    }

    /// The replay part of the configuration.
    pub fn replay(&self) -> ReplayConfig {
        ReplayConfig {
            concurrency: self.concurrency,
            idle_gap_cap_ns: Time::from_secs(self.idle_gap_cap_s).0,
            protocol: self.protocol,
            seed: self.seed,
            arrivals: self.arrivals,
            agentx: self.agentx,
            window_ns: Time::from_secs(self.window_s).0,
        }
    }
}

/// A finished simulation.
#[derive(Clone, Debug)]
pub struct RunOutput {
    /// One record per request sent inside the window, in send order.
    pub records: Vec<Record>,
    /// The summary.
    pub summary: Summary,
    /// Per-step samples, when asked for.
    pub timeline: Option<Vec<StepSample>>,
    /// Under the AgentX protocols: what the protocol did, with every lane's start plan.
    pub agentx: Option<crate::replay::AgentxStats>,
}

enum Event {
    Due(Handle),
    /// A request sent earlier (its record's tag) reaches the engine after the profile's request latency.
    Arrive(Handle, u64),
    /// A replica's step (or run of decode steps) ends; the generation tells a cut-short run's stale end apart.
    StepEnd(u32, u64),
    /// The replay's next wake-up: open loop, the next session tree arrives; AgentX, a timer fires.
    TreeArrives,
}

/// A request that reached a busy replica under asynchronous scheduling, waiting for the step the
/// scheduler had already picked.
#[derive(Clone, Copy, Debug)]
struct Held {
    handle: Handle,
    tag: u64,
    /// Step ends still to wait for before it reaches the scheduler.
    steps_left: u8,
}

struct Sim<'a> {
    audit: bool,
    merge: bool,
    /// The window's length.
    window_len: Time,
    /// When the window closes: nothing is sent from then on (the end of time until the window opens).
    window_end: Time,
    /// When the run ends: the window's end plus the protocol's grace.
    run_end: Time,
    /// When the replay's next wake-up is scheduled, if one is.
    wake_at: Option<Time>,
    /// Per record, whether it was a warm-up request (never scored).
    warm: Vec<bool>,
    deployment: &'a Deployment,
    /// The longest request the engine accepts ([`Deployment::request_limit`]).
    request_limit: u32,
    cost: &'a CostModel,
    /// Data-parallel attention: the replicas are attention ranks, `ranks()` to a group that steps in
    /// lockstep at this cost (`engine.data_parallel_attention`); `None`: each replica steps alone.
    lockstep: Option<&'a DpAttentionCost>,
    /// The shapes of a lockstep group's step, one per rank (kept between steps).
    group_shapes: Vec<BatchShape>,
    replay: Replay<'a>,
    replicas: Vec<Replica>,
    busy: Vec<bool>,
    generation: Vec<u64>,
    /// Times of the `Due` and `Arrive` events in the queue (how many at each), so a decode run can stop at
    /// the next one.
    dues: std::collections::BTreeMap<u64, u32>,
    /// When the server's front end is done with the requests sent so far (the profile's
    /// `frontend_s_per_token`: it takes one request at a time).
    frontend_free: Time,
    /// `engine.async_scheduling` (not under data-parallel attention): requests that reached a busy
    /// replica wait for the step it had already picked.
    async_scheduling: bool,
    /// The prompts arrive as text ([`RunConfig::text_prompts`], the AgentX protocols): the front end also
    /// tokenizes them (the profile's `tokenize_s_per_token`).
    text_prompts: bool,
    /// Per replica, the requests waiting for that step to end.
    held: Vec<Vec<Held>>,
    next_replica: u32,
    queue: EventQueue<Event>,
    records: Vec<Record>,
    ready: Vec<Ready>,
    events: Vec<SeqEvent>,
    overflows: OverflowGuard,
    stalled: Option<Stalled>,
}

/// Runs one closed-loop replay of `source` against the simulated deployment.
pub fn simulate(
    deployment: &Deployment,
    cost: &CostModel,
    source: &dyn TreeSource,
    cfg: &RunConfig,
) -> Result<RunOutput, RunError> {
    cfg.check().map_err(RunError::Config)?;
    // Under data-parallel attention each of a replica's tp GPUs is an attention rank with its own
    // scheduler and KV pool, priced by the rank's cost model (its attention holds every KV head).
    let lockstep = deployment.dp_attention_cost();
    let (ranks, rank_cost) = match &lockstep {
        Some(c) => (c.ranks(), c.rank()),
        None => (1, cost),
    };
    let mut replicas = Vec::new();
    for r in 0..deployment.dp * ranks {
        let opts = ReplicaOptions {
            seed: mix2(cfg.seed, r as u64),
            report_tokens: false,
            count_shared_reads: rank_cost.prices_shared_reads(),
            split_kv: rank_cost.split_kv(),
            varlen: rank_cost.varlen(),
            kernels_warm: cfg.kernels_warm || cfg.protocol == Protocol::Steady,
            timeline: cfg.timeline,
        };
        replicas.push(deployment.replica(opts)?);
    }
    let mut sim = Sim {
        audit: cfg.audit,
        merge: !cfg.step_by_step,
        window_len: Time::from_secs(cfg.window_s),
        window_end: Time(u64::MAX),
        run_end: Time(u64::MAX),
        wake_at: None,
        warm: Vec::new(),
        deployment,
        request_limit: deployment.request_limit(),
        cost,
        lockstep: lockstep.as_ref(),
        group_shapes: Vec::new(),
        replay: Replay::new(source, cfg.replay())
            .map_err(|e| RunError::Config(FieldError::new("arrivals", e)))?,
        busy: vec![false; replicas.len()],
        generation: vec![0; replicas.len()],
        dues: Default::default(),
        frontend_free: Time(0),
        async_scheduling: deployment.engine.async_scheduling && lockstep.is_none(),
        text_prompts: cfg.text_prompts || cfg.protocol.is_agentx(),
        held: vec![Vec::new(); replicas.len()],
        replicas,
        next_replica: 0,
        queue: EventQueue::new(),
        records: Vec::new(),
        ready: Vec::new(),
        events: Vec::new(),
        overflows: OverflowGuard::default(),
        stalled: None,
    };
    sim.start();
    let graceless = sim.replay.grace_ns() == 0;
    while let Some((t, ev)) = sim.queue.pop() {
        if let Event::Due(_) | Event::Arrive(..) | Event::TreeArrives = ev {
            sim.popped_due(t);
        }
        match ev {
            Event::Due(_) | Event::TreeArrives if t >= sim.window_end => continue,
            // Without a grace a request that reaches the engine after the window is cancelled.
            Event::Arrive(..) if graceless && t >= sim.window_end => continue,
            Event::TreeArrives => sim.trees_arrive(t),
            _ if t > sim.run_end => break,
            Event::Due(h) => {
                sim.dispatch(h, t);
                if let Some(stalled) = sim.stalled {
                    return Err(stalled.into());
                }
            }
            Event::Arrive(h, tag) => sim.arrive(h, tag, t),
            Event::StepEnd(r, g) if g != sim.generation[r as usize] => continue,
            Event::StepEnd(r, _) => sim.step_end(r as usize, t),
        }
        if sim.queue.peek_time() != Some(t) {
            if let Some(group) = sim.lockstep {
                sim.start_group_steps(group, t);
            } else {
                for r in 0..sim.replicas.len() {
                    if !sim.busy[r] {
                        sim.start_step(r, t);
                    }
                }
            }
        }
    }
    Ok(sim.finish(cfg))
}

impl Sim<'_> {
    fn start(&mut self) {
        self.replay.start(Time::ZERO, &mut self.ready);
        self.sync_window();
        if self.replay.warms() {
            let dp = self.replicas.len() as u32;
            for r in &self.ready {
                let (tree, _) = self.replay.tree(r.handle.lane);
                let req = self.replay.request(r.handle);
                self.replicas[(r.handle.lane % dp) as usize].warm(
                    &req.blocks,
                    tree.block_size,
                    req.input_tokens,
                );
            }
        }
        self.flush_ready();
    }

    /// The window opens when the replay says (at once, or after the AgentX warm-up).
    fn sync_window(&mut self) {
        if self.window_end.0 != u64::MAX {
            return;
        }
        if let Some(origin) = self.replay.window_origin() {
            self.window_end = origin.plus(self.window_len.0);
            self.run_end = self.window_end.plus(self.replay.grace_ns());
        }
    }

    /// The replay's wake-up at `t`: trees arriving now start, timers due now fire.
    fn trees_arrive(&mut self, t: Time) {
        if self.wake_at == Some(t) {
            self.wake_at = None;
        }
        self.replay.arrive(t, &mut self.ready);
        self.flush_ready();
    }

    /// The replay's next wake-up as an event (decode runs stop there, as at a due request), unless
    /// one is already scheduled no later.
    fn wake(&mut self) {
        let Some(at) = self.replay.next_arrival() else {
            return;
        };
        if at >= self.window_end || self.wake_at.is_some_and(|w| w <= at) {
            return;
        }
        self.wake_at = Some(at);
        *self.dues.entry(at.0).or_insert(0) += 1;
        self.queue
            .schedule(at, Event::TreeArrives)
            .expect("wake-ups are never in the past");
    }

    fn popped_due(&mut self, t: Time) {
        if let std::collections::btree_map::Entry::Occupied(mut e) = self.dues.entry(t.0) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    fn flush_ready(&mut self) {
        self.sync_window();
        for r in self.ready.drain(..) {
            *self.dues.entry(r.at.0).or_insert(0) += 1;
            self.queue
                .schedule(r.at, Event::Due(r.handle))
                .expect("ready times are never in the past");
        }
        self.wake();
    }

    /// The replica the deployment's router sends a request to.
    fn route(&mut self, lane: u32, req: &Request, block_size: u32) -> usize {
        let n = self.replicas.len();
        if n == 1 {
            return 0;
        }
        let load = |r: &Replica| r.running() + r.waiting();
        let least_loaded = |replicas: &[Replica], among: &[usize]| {
            *among
                .iter()
                .min_by_key(|&&i| (load(&replicas[i]), i))
                .expect("replicas")
        };
        let all: Vec<usize> = (0..n).collect();
        match self.deployment.router {
            Router::RoundRobin => {
                self.next_replica = (self.next_replica + 1) % n as u32;
                ((self.next_replica + n as u32 - 1) % n as u32) as usize
            }
            Router::LeastLoaded => least_loaded(&self.replicas, &all),
            Router::SessionAffinity => (lane % n as u32) as usize,
            Router::PrefixAware => {
                let cached: Vec<u32> = self
                    .replicas
                    .iter()
                    .map(|r| r.cached_prefix_blocks(&req.blocks, block_size))
                    .collect();
                let best = *cached.iter().max().expect("replicas");
                let tied: Vec<usize> = (0..n).filter(|&i| cached[i] == best).collect();
                least_loaded(&self.replicas, &tied)
            }
        }
    }

    /// The client sends request `h` now: its record starts; it reaches the engine now, or once the front
    /// end has taken it in (after the requests sent before it) and the profile's request latency has
    /// passed ([`Sim::arrive`]).
    fn dispatch(&mut self, h: Handle, t: Time) {
        let (_, index) = self.replay.tree(h.lane);
        let req = self.replay.request(h);
        let tag = self.records.len() as u64;
        let max_tokens = self.replay.max_tokens(h);
        let refusal = self
            .deployment
            .refusal(req.input_tokens, max_tokens, self.request_limit);
        let mut record = Record::sent(index, h.lane, 0, req, t.0);
        record.output_requested = max_tokens;
        self.warm.push(self.replay.is_warmup(h));
        if let Some(refusal) = refusal {
            if let Err(e) = self.overflows.overflowed(t, self.request_limit) {
                self.stalled = Some(e);
                return;
            }
            record.finish_ns = Some(t.0);
            match refusal {
                Refusal::ContextOverflow => {
                    record.outcome = Outcome::ContextOverflow;
                    self.records.push(record);
                    self.replay.overflowed(h, t, &mut self.ready);
                }
                Refusal::PoolExceeded => {
                    record.outcome = Outcome::Error(Refusal::POOL_EXCEEDED.into());
                    self.records.push(record);
                    self.replay.complete(h, t, &mut self.ready);
                }
            }
            self.flush_ready();
            return;
        }
        self.records.push(record);
        let mut frontend = self.cost.frontend_ns(req.input_tokens);
        if self.text_prompts {
            frontend += self.cost.tokenize_ns(req.input_tokens);
        }
        let latency = self.cost.request_latency_ns();
        if latency == 0 && frontend == 0 {
            self.arrive(h, tag, t);
        } else {
            // The client sent it now; the front end takes it in after the requests before it, and the
            // engine sees it a latency later (decode runs stop there).
            let taken_in = self.frontend_free.max(t).plus(frontend);
            self.frontend_free = taken_in;
            let at = taken_in.plus(latency);
            *self.dues.entry(at.0).or_insert(0) += 1;
            self.queue
                .schedule(at, Event::Arrive(h, tag))
                .expect("arrivals are in the future");
        }
    }

    /// Request `tag` reaches the engine: routed to a replica (the router decides now) and submitted; a
    /// decode run in progress on that replica is cut at `t`. Under asynchronous scheduling a busy
    /// replica has already picked its next step: the request is held until that one ends too.
    fn arrive(&mut self, h: Handle, tag: u64, t: Time) {
        let block_size = self.replay.tree(h.lane).0.block_size;
        let req = self.replay.request(h).clone();
        let replica = self.route(h.lane, &req, block_size);
        self.records[tag as usize].replica = replica as u32;
        if self.async_scheduling && self.busy[replica] {
            self.held[replica].push(Held {
                handle: h,
                tag,
                steps_left: 1,
            });
        } else {
            self.submit(replica, h, tag, req);
        }
        if self.busy[replica] {
            if let Some(end) = self.replicas[replica].truncate_run(t) {
                self.generation[replica] += 1;
                let ev = Event::StepEnd(replica as u32, self.generation[replica]);
                self.queue
                    .schedule(end, ev)
                    .expect("a run is cut at or after now");
            }
        }
    }

    /// Hands request `tag` (`req`) to `replica`'s scheduler.
    fn submit(&mut self, replica: usize, h: Handle, tag: u64, req: Request) {
        let block_size = self.replay.tree(h.lane).0.block_size;
        let input = SeqInput {
            tag,
            blocks: req.blocks,
            workload_block_size: block_size,
            input: req.input_tokens,
            output: self.records[tag as usize].output_requested,
            kind: req.kind,
        };
        self.replicas[replica].submit(input);
    }

    /// At a step's end on replica `r`: the held requests whose wait is over reach its scheduler, the
    /// others wait one more step; all of them at once if the replica has nothing else to run.
    fn release_held(&mut self, r: usize) {
        if self.held[r].is_empty() {
            return;
        }
        let idle = !self.replicas[r].has_work();
        let mut held = std::mem::take(&mut self.held[r]);
        held.retain_mut(|e| {
            if idle || e.steps_left == 0 {
                let req = self.replay.request(e.handle).clone();
                self.submit(r, e.handle, e.tag, req);
                false
            } else {
                e.steps_left -= 1;
                true
            }
        });
        self.held[r] = held;
    }

    fn start_step(&mut self, r: usize, t: Time) {
        let replica = &mut self.replicas[r];
        if !replica.has_work() {
            return;
        }
        if let Some(shape) = replica.schedule() {
            let first = self.cost.step_ns(&shape)
                + replica.take_transfer_ns()
                + replica.compile_ns(self.cost.moe_compiles(), &shape);
            // A held request joins the step after this one: no run may pass it.
            let held = (!self.held[r].is_empty()).then_some(t);
            let bounds = RunBounds {
                next_due: held.or(self.dues.keys().next().map(|&d| Time(d))),
                next_event: self.queue.peek_time(),
                window_end: self.run_end,
            };
            let dt = if self.merge {
                replica.extend_decode_run(self.cost, &shape, first, t, bounds)
            } else {
                first
            };
            replica.note_step(t, dt, &shape);
            self.check(r);
            self.queue
                .schedule(t.plus(dt), Event::StepEnd(r as u32, self.generation[r]))
                .expect("steps end in the future");
            self.busy[r] = true;
        }
    }

    /// Data-parallel attention: every group of attention ranks none of which is mid-step starts one
    /// step together if any rank has work; the step lasts what the slowest rank and the routed layers
    /// over all the group's tokens take ([`DpAttentionCost::step_ns`]), for every rank that runs.
    /// Decode runs are not merged: the ranks' steps differ.
    fn start_group_steps(&mut self, cost: &DpAttentionCost, t: Time) {
        let ranks = cost.ranks() as usize;
        for g in 0..self.replicas.len() / ranks {
            let group = g * ranks..(g + 1) * ranks;
            if group.clone().any(|r| self.busy[r]) {
                continue;
            }
            self.group_shapes.clear();
            let mut ran = Vec::with_capacity(ranks);
            for r in group.clone() {
                let replica = &mut self.replicas[r];
                let shape = if replica.has_work() {
                    replica.schedule()
                } else {
                    None
                };
                ran.push(shape.is_some());
                self.group_shapes.push(shape.unwrap_or_default());
            }
            if !ran.contains(&true) {
                continue;
            }
            let mut dt = cost.step_ns(&self.group_shapes);
            let mut transfer = 0;
            for (i, r) in group.clone().enumerate() {
                let replica = &mut self.replicas[r];
                let compile = replica.compile_ns(cost.rank().moe_compiles(), &self.group_shapes[i]);
                transfer = transfer.max(replica.take_transfer_ns() + compile);
            }
            dt += transfer;
            for (i, r) in group.enumerate() {
                if !ran[i] {
                    continue;
                }
                let shape = self.group_shapes[i];
                self.replicas[r].note_step(t, dt.max(1), &shape);
                self.check(r);
                self.queue
                    .schedule(
                        t.plus(dt.max(1)),
                        Event::StepEnd(r as u32, self.generation[r]),
                    )
                    .expect("steps end in the future");
                self.busy[r] = true;
            }
        }
    }

    fn check(&self, r: usize) {
        if self.audit {
            if let Err(e) = self.replicas[r].audit() {
                panic!("KV bookkeeping broken: {e}");
            }
        }
    }

    fn step_end(&mut self, r: usize, t: Time) {
        self.busy[r] = false;
        self.replicas[r].finish_step(&mut self.events);
        self.check(r);
        self.release_held(r);
        for e in std::mem::take(&mut self.events) {
            match e {
                SeqEvent::Emitted { .. } | SeqEvent::Admitted { .. } => {}
                SeqEvent::FirstToken { tag } => {
                    self.records[tag as usize].first_token_ns = Some(t.0)
                }
                SeqEvent::Finished { tag, seq } => {
                    let p = self.replicas[r].progress(seq);
                    let rec = &mut self.records[tag as usize];
                    rec.last_token_ns = Some(t.0);
                    rec.finish_ns = Some(t.0);
                    rec.output_tokens = p.generated;
                    rec.cached_tokens = p.cached_tokens;
                    rec.preemptions = p.preemptions;
                    rec.itl_max_ns = (p.generated > 1).then_some(p.max_itl_ns);
                    rec.outcome = Outcome::Completed;
                    let h = Handle {
                        lane: rec.lane,
                        request: rec.request,
                    };
                    self.replay.complete(h, t, &mut self.ready);
                }
            }
        }
        self.flush_ready();
    }

    fn finish(mut self, cfg: &RunConfig) -> RunOutput {
        for replica in &mut self.replicas {
            let in_flight: Vec<_> = replica.in_flight().collect();
            for (seq, tag) in in_flight {
                let p = replica.progress(seq);
                let r = &mut self.records[tag as usize];
                r.output_tokens = p.generated;
                r.cached_tokens = p.cached_tokens;
                r.preemptions = p.preemptions;
                r.itl_max_ns = (p.generated > 1).then_some(p.max_itl_ns);
                r.outcome = Outcome::Cancelled;
            }
            replica.cancel_all();
        }
        let agentx = self.replay.agentx_stats().map(|stats| {
            let origin = self.replay.window_origin().unwrap_or(Time(u64::MAX));
            let records = std::mem::take(&mut self.records);
            agentx_window(records, &self.warm, origin.0, self.run_end.0, stats)
        });
        let agentx = agentx.map(|(kept, a)| {
            self.records = kept;
            a
        });
        let (_, mut summary) = summarise(&self.records, self.deployment, cfg.window_s);
        let mut st = EngineStats::default();
        let mut itl = crate::engine::IntervalHistogram::default();
        for r in &self.replicas {
            st.add(&r.stats);
            itl.merge(&r.itl);
        }
        summary.itl_s = itl.quantiles_s();
        summary.describe_run(&cfg.replay(), self.replay.open_stats());
        summary.kv_occupancy_mean = ratio(st.occupancy_integral, st.busy_ns as f64);
        summary.kv_occupancy_max = st.occupancy_max;
        summary.prefix_hit_rate = ratio(st.hit_tokens as f64, st.lookup_tokens as f64);
        summary.preemptions = st.preemptions;
        summary.swaps = st.swaps;
        summary.kernel_compiles = st.kernel_compiles;
        summary.spec_tokens_per_verify = ratio(st.spec_tokens as f64, st.spec_verifies as f64);
        summary.steps = st.steps;
        summary.trees_started = self.replay.trees_started();
        if let Some(a) = agentx {
            // The engine's counters include the warm-up; the window's hit rate is its records'.
            summary.prefix_hit_rate = records_hit_rate(&self.records);
            apply_agentx(&mut summary, a);
        }
        let timeline = cfg.timeline.then(|| {
            let mut all: Vec<StepSample> = self
                .replicas
                .iter_mut()
                .enumerate()
                .flat_map(|(i, r)| {
                    let mut t = r.take_timeline();
                    t.iter_mut().for_each(|s| s.replica = i as u32);
                    t
                })
                .collect();
            all.sort_by_key(|s| (s.start_ns, s.replica));
            all
        });
        RunOutput {
            agentx: self.replay.agentx_stats().cloned(),
            records: self.records,
            summary,
            timeline,
        }
    }
}

/// Prompt tokens served from the prefix cache over prompt tokens, of completed records.
pub fn records_hit_rate(records: &[Record]) -> f64 {
    let (hit, all) = records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .fold((0u64, 0u64), |(h, a), r| {
            (h + r.cached_tokens as u64, a + r.input_tokens as u64)
        });
    ratio(hit as f64, all as f64)
}

/// `a / b`, or 0 when there is nothing to divide by.
fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}
