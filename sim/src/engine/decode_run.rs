//! Merged decode runs: a decode-only step repeated while nothing inside the engine could change the
//! batch becomes one event that stands for the whole run. The run is planned step by step (each step's
//! time from the cost model, each verify draw in the order a step-by-step engine makes it), so it gives
//! the same tokens, times and cache contents as simulating every step, and is cut short exactly where
//! an arriving request would first be seen.

use super::Replica;
use crate::des::Time;
use serverbench_calibration::{BatchShape, CostModel};

/// Longest run of decode steps one event stands for.
const MAX_RUN: usize = 4096;

/// Where a decode run being planned must stop (ns): at the first step ending at or after `stop` (the
/// next request due), by `quiet` (the next event of any kind) if it evicts, and before `window_end`.
#[derive(Clone, Copy, Debug)]
struct RunLimits {
    stop: u64,
    quiet: u64,
    window_end: u64,
}

/// The state of the run being planned or executed.
#[derive(Clone, Debug)]
pub(crate) struct DecodeRun {
    /// Steps the scheduled step stands for (1 outside a run).
    pub(crate) repeat: u32,
    /// End of each step of the run, ns.
    ends: Vec<u64>,
    /// KV occupancy during the run (for the stats a cut-short run takes back).
    pub(crate) occupancy: f64,
    /// Whether an arrival may cut the run short (not once it evicts).
    truncatable: bool,
    /// Tokens each step entry emits in each step of the run (step-major; speculation only).
    emit: Vec<u32>,
    /// Tokens each decode entry still wants while a run is planned (kept for its allocation).
    left: Vec<u32>,
    /// True while the scheduled step is a planned run.
    pub(crate) active: bool,
    plain_steps: u32,
    plain_limit: u32,
}

impl Default for DecodeRun {
    fn default() -> Self {
        DecodeRun {
            repeat: 1,
            ends: Vec::new(),
            occupancy: 0.0,
            truncatable: false,
            emit: Vec::new(),
            left: Vec::new(),
            active: false,
            plain_steps: 0,
            plain_limit: 0,
        }
    }
}

impl DecodeRun {
    /// When step `i` of the run ends, ns.
    pub(crate) fn step_end(&self, i: usize) -> u64 {
        self.ends[i]
    }

    /// The longest gap between consecutive step ends of the run's first `steps` steps, ns.
    pub(crate) fn longest_gap(&self, steps: usize) -> u64 {
        self.ends[..steps]
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }
}

/// When to consider merging, and where a run must end.
#[derive(Clone, Copy, Debug)]
pub struct RunBounds {
    /// The next request already due at the engine, if any.
    pub next_due: Option<Time>,
    /// The next event of any kind, if any.
    pub next_event: Option<Time>,
    /// The end of the window.
    pub window_end: Time,
}

impl Replica {
    /// Extends a decode-only step into a run of decode steps, as long as nothing inside the engine could
    /// change the batch: no sequence finishes before the run's last step, no waiting request could be
    /// admitted (the policy's [`crate::SchedulingPolicy::waiting_stays_blocked`]), no step but the
    /// last ends at or after `next_due`, no step ends after `window_end`, and the run's blocks fit in
    /// free memory (so nothing is evicted early). Speculative verify draws are made here, step by step,
    /// in the order a step-by-step engine makes them. Returns the run's total time (each step rounded as
    /// a single step would be), so one event can stand for the run. A request that arrives during the
    /// run cuts it short ([`Replica::truncate_run`]).
    pub fn extend_decode_run(
        &mut self,
        cost: &CostModel,
        first: &BatchShape,
        first_ns: u64,
        start: Time,
        bounds: RunBounds,
    ) -> u64 {
        self.run.repeat = 1;
        self.run.active = false;
        self.run.ends.clear();
        self.run.emit.clear();
        let admission_blocked = self.waiting.is_empty()
            || self
                .cfg
                .policy
                .get()
                .waiting_stays_blocked(self.last_preempted);
        if first.prefill_seqs > 0
            || !admission_blocked
            || self.window.is_some()
            || self.timeline.is_some()
            || self.kv.is_paged()
        {
            return first_ns;
        }
        self.run.active = true;
        let mut left = std::mem::take(&mut self.run.left);
        left.clear();
        left.extend(
            self.step
                .iter()
                .map(|e| self.seqs[e.seq.at()].output_left()),
        );
        self.run.plain_steps = 0;
        self.run.plain_limit = left.iter().copied().min().unwrap_or(1);
        let limits = RunLimits {
            stop: bounds.next_due.map_or(u64::MAX, |t| t.0),
            quiet: bounds.next_event.map_or(u64::MAX, |t| t.0),
            window_end: bounds.window_end.0,
        };
        let end = start.0 + first_ns;
        self.run.ends.push(end);
        let finished = self.emit_step(&mut left);
        let b = self.step.len();
        if let Some(k) = self.spec.as_ref().map(|sp| sp.k as f64) {
            // A verify of k drafts after context c attends k(c + 1) + k(k + 1)/2 pairs: whole numbers,
            // which f64 adds exactly, so the pairs grow by k per emitted token in any order of summing.
            let mut shape = *first;
            self.plan_run(end, limits, &mut left, finished, |r| {
                let emitted: u32 = r.run.emit[r.run.emit.len() - b..].iter().sum();
                shape.decode_context += emitted as u64;
                shape.full_pairs += k * emitted as f64;
                cost.step_ns(&shape)
            });
        } else {
            // Otherwise a step's shape depends on its entries' contexts only through their sum, which
            // grows by one token per entry and step: the clock times each step from that sum alone.
            let mut clock = cost.clock(first);
            let mut context = first.decode_context;
            if self.split_ready {
                // The split-KV cost follows the contexts' blocks from the first step's schedule
                // ([`SplitRun`], started by `schedule`).
                let mut split = std::mem::take(&mut self.split);
                self.plan_run(end, limits, &mut left, finished, |_| {
                    context += b as u64;
                    clock.set_split(split.next_cost(context + b as u64));
                    clock.ns(context)
                });
                self.split = split;
            } else {
                self.plan_run(end, limits, &mut left, finished, |_| {
                    context += b as u64;
                    clock.ns(context)
                });
            }
        }
        self.run.left = left;
        self.run.truncatable = true;
        let mut k = self.run.ends.len();
        let mut need = if k > 1 { self.run_blocks(k) } else { 0 };
        if k > 1 && need > self.kv.free() {
            // The run would evict cached blocks: keep it inside the quiet time before the next event of
            // any kind, so no arrival can cut it short after an eviction a step-by-step engine would
            // not yet have made.
            k = self.run.ends.partition_point(|&e| e <= limits.quiet).max(1);
            self.keep_steps(k);
            self.run.truncatable = false;
            need = if k > 1 { self.run_blocks(k) } else { 0 };
        }
        if k > 1 && !self.kv.allocate(need) {
            k = 1;
            self.keep_steps(1);
        }
        if k > 1 {
            for i in 0..self.step.len() {
                let id = self.step[i].seq.at();
                let add = self.blocks_to_add(&self.seqs[id], self.run_reach(i, k));
                self.seqs[id].private += add;
            }
        }
        self.run.repeat = k as u32;
        self.run.ends[k - 1] - start.0
    }

    /// Tokens each scheduled decode sequence emits in the next step of a run (one, or a verify draw);
    /// true when one of them is done. Without speculation every step emits one token per sequence
    /// and nothing is recorded.
    #[inline(always)]
    fn emit_step(&mut self, left: &mut [u32]) -> bool {
        if self.spec.is_none() {
            self.run.plain_steps += 1;
            return self.run.plain_steps >= self.run.plain_limit;
        }
        self.emit_verify_step(left)
    }

    /// [`Replica::emit_step`] with speculation: one verify draw per sequence.
    fn emit_verify_step(&mut self, left: &mut [u32]) -> bool {
        let mut finished = false;
        for (i, l) in left.iter_mut().enumerate() {
            let m = self.draw_tokens(self.step[i].seq, *l);
            self.run.emit.push(m);
            *l -= m;
            finished |= *l == 0;
        }
        finished
    }

    /// Plans the run's further steps after the first (which ends at `end`), each lasting what
    /// `next_ns` says, until a sequence finishes, the run reaches [`MAX_RUN`] steps or `limits.stop`, or
    /// a step would end after `limits.window_end`. A run that needs more blocks than are free must end
    /// by `limits.quiet` ([`Replica::extend_decode_run`] cuts it there): checked as the run doubles, so
    /// that few steps are planned past that only to be dropped.
    #[inline]
    fn plan_run(
        &mut self,
        mut end: u64,
        limits: RunLimits,
        left: &mut [u32],
        mut finished: bool,
        mut next_ns: impl FnMut(&mut Self) -> u64,
    ) {
        let mut stop = limits.stop;
        while !finished && self.run.ends.len() < MAX_RUN && end < stop {
            let next = end + next_ns(self);
            if next > limits.window_end {
                break;
            }
            end = next;
            self.run.ends.push(end);
            finished = self.emit_step(left);
            let k = self.run.ends.len();
            if k.is_power_of_two() && stop > limits.quiet && self.run_blocks(k) > self.kv.free() {
                stop = limits.quiet;
            }
        }
    }

    /// Keeps the first `k` steps of the run (and the tokens they emit).
    fn keep_steps(&mut self, k: usize) {
        self.run.ends.truncate(k);
        if self.spec.is_some() {
            self.run.emit.truncate(k * self.step.len());
        }
    }

    /// Tokens entry `i` of the step emits in the first `k` steps of the run.
    #[inline]
    pub(crate) fn run_emitted(&self, i: usize, k: usize) -> u32 {
        if self.spec.is_none() {
            return k as u32;
        }
        let b = self.step.len();
        (0..k).map(|j| self.run.emit[j * b + i]).sum()
    }

    /// Tokens entry `i` of the step must have KV room for during the first `k` steps of the run: its
    /// computed tokens before the last of them, plus the last step's reservation.
    #[inline]
    fn run_reach(&self, i: usize, k: usize) -> u32 {
        self.seqs[self.step[i].seq.at()].computed
            + self.run_emitted(i, k - 1)
            + self.decode_reserve()
    }

    /// Blocks the scheduled decode sequences need to add for the first `k` steps of the run.
    fn run_blocks(&self, k: usize) -> u64 {
        (0..self.step.len())
            .map(|i| {
                self.blocks_to_add(&self.seqs[self.step[i].seq.at()], self.run_reach(i, k)) as u64
            })
            .sum()
    }

    /// Cuts a running decode run short because a request arrived at `at`: the run now ends with the
    /// first of its steps that ends at or after `at` (where a step-by-step engine would next look at
    /// its queue). Frees the blocks of the dropped steps, forgets the tokens they would have emitted, and
    /// returns the new end, or `None` when the run already ends there.
    pub fn truncate_run(&mut self, at: Time) -> Option<Time> {
        if self.run.repeat <= 1 || !self.run.truncatable {
            return None;
        }
        let keep = self.run.ends.partition_point(|&e| e < at.0) + 1;
        if keep >= self.run.repeat as usize {
            return None;
        }
        let (old_end, new_end) = (
            *self.run.ends.last().expect("a run"),
            self.run.ends[keep - 1],
        );
        let bs = self.cfg.block_size;
        for i in 0..self.step.len() {
            let id = self.step[i].seq.at();
            let want = self.run_reach(i, keep).div_ceil(bs) + self.state_blocks;
            let s = &self.seqs[id];
            let excess = (s.shared + s.private).saturating_sub(want);
            self.seqs[id].private -= excess;
            self.kv.free_private(excess as u64);
        }
        self.keep_steps(keep);
        let removed = old_end - new_end;
        self.stats.steps -= self.run.repeat as u64 - keep as u64;
        self.stats.busy_ns -= removed;
        self.stats.occupancy_integral -= self.run.occupancy * removed as f64;
        self.run.repeat = keep as u32;
        Some(Time(new_end))
    }
}
