//! Scheduling policies: what runs next, given the queues and the KV state. A policy composes the
//! replica's scheduling steps ([`StepBuilder`]: decode the running, continue their prefills, admit the
//! waiting, order the queue) in its own order and with its own admission rule; the KV bookkeeping
//! behind those steps is shared. Every property the rest of the engine relies on is a required item of
//! [`SchedulingPolicy`], so a new policy's author has to decide each one.
//!
//! Adding a policy: a file beside `vllm.rs` with a unit struct implementing the trait, and one line in
//! the `policies!` list below; its name is then accepted in `engine.policy`.

use super::seq::{Scheduled, SeqId};
use super::Replica;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A scheduler policy: the pure decision of which sequences the next step computes.
///
/// A policy is a unit struct composing the [`StepBuilder`]'s steps; registering it (one line in the
/// `policies!` list) makes its name a value of `engine.policy`:
///
/// ```
/// use serverbench_sim::{Admission, DecodeBudget, SchedulingPolicy, Shortage, StepBuilder};
///
/// /// First come, first served, never preempting: running requests first, then waiting ones.
/// pub struct Fcfs;
///
/// impl SchedulingPolicy for Fcfs {
///     fn name(&self) -> &'static str { "fcfs" }
///     fn summary(&self) -> &'static str { "running requests first, then waiting ones in arrival order" }
///     fn default_budgets(&self) -> (u32, u32) { (8192, 256) }
///     fn next_batch(&self, b: &mut StepBuilder<'_>) {
///         b.decode_running(DecodeBudget::Counted);
///         b.prefill_running(Shortage::Skip);
///         b.admit_waiting(Admission::FirstChunk);
///     }
///     // Admission runs every step and decode steps only use more blocks.
///     fn waiting_stays_blocked(&self, _preempted: bool) -> bool { true }
///     // Every computed block is cached.
///     fn warm_tokens(&self, tokens: u32, _budget: u32) -> u32 { tokens }
/// }
/// assert_eq!(Fcfs.name(), "fcfs");
/// ```
pub trait SchedulingPolicy: Sync + 'static {
    /// The name a deployment file gives in `engine.policy`.
    fn name(&self) -> &'static str;

    /// One line for listings: what the policy does.
    fn summary(&self) -> &'static str;

    /// Token budget per step and sequence cap when a deployment names this policy without them:
    /// `(max_num_batched_tokens, max_num_seqs)`.
    fn default_budgets(&self) -> (u32, u32);

    /// Chooses the next step's entries through `b`, under its token budget and sequence cap.
    fn next_batch(&self, b: &mut StepBuilder<'_>);

    /// Whether requests this policy left waiting after a decode-only step stay unadmitted through
    /// further decode-only steps, as long as no sequence finishes and no request arrives (`preempted`:
    /// the step preempted a sequence). Decode steps only grow KV use, so a policy whose admission
    /// depends on nothing else can say yes; one whose admission room grows as outputs progress must
    /// say no. The simulator merges runs of decode steps into one event only when this holds (or
    /// nothing waits), which keeps merged runs identical to step-by-step simulation.
    fn waiting_stays_blocked(&self, preempted: bool) -> bool;

    /// How many of a prompt's `tokens` the engine keeps in its prefix cache after serving the prompt
    /// as a request of one output token, with `budget` tokens per step: what a steady start finds
    /// cached, since the real replay warms each lane's first prompt with such a request.
    fn warm_tokens(&self, tokens: u32, budget: u32) -> u32;
}

mod sglang;
mod transformers;
mod vllm;

/// Declares the registry: every policy the engine knows, in listing order (the first is the default).
macro_rules! policies {
    ($($module:ident :: $ty:ident),+ $(,)?) => {
        const ALL: &[&dyn SchedulingPolicy] = &[$(&$module::$ty),+];
    };
}

policies![vllm::Vllm, sglang::Sglang, transformers::Transformers];

/// A policy of the registry, as a configuration field: written and read as its name.
#[derive(Clone, Copy)]
pub struct Policy(&'static dyn SchedulingPolicy);

impl Policy {
    /// vLLM's scheduler (the default).
    pub const VLLM: Policy = Policy(&vllm::Vllm);
    /// SGLang's scheduler.
    pub const SGLANG: Policy = Policy(&sglang::Sglang);
    /// `transformers serve --continuous-batching`'s FIFO scheduler.
    pub const TRANSFORMERS: Policy = Policy(&transformers::Transformers);

    /// The policy named `name`.
    pub fn named(name: &str) -> Option<Policy> {
        ALL.iter().find(|p| p.name() == name).map(|&p| Policy(p))
    }

    /// Every policy, in listing order.
    pub fn all() -> impl Iterator<Item = Policy> {
        ALL.iter().map(|&p| Policy(p))
    }

    /// Names of every policy, comma-separated (for error messages).
    pub fn names() -> String {
        ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// The policy itself.
    pub fn get(self) -> &'static dyn SchedulingPolicy {
        self.0
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy(ALL[0])
    }
}

impl PartialEq for Policy {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Policy {}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Policy::named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown policy {name:?} (policies: {})",
                Policy::names()
            ))
        })
    }
}

/// What happens when a running sequence needs blocks that are not free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortage {
    /// Preempt the newest running sequences until the blocks fit (possibly the sequence itself).
    PreemptNewest,
    /// Leave the sequence out of this step.
    Skip,
}

/// Whether the step's token budget limits its decode entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeBudget {
    /// Each decode costs one token of the budget; decoding stops when it is spent.
    Counted,
    /// Decodes are not counted against the budget (a decode batch of its own).
    Unlimited,
}

/// How much free memory a waiting request needs before it is admitted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Admission {
    /// Room for the blocks of its first chunk.
    FirstChunk,
    /// Room for `reserve` blocks kept for the running requests' future output, plus the larger of its
    /// uncached prompt and its first chunk, plus `output_ratio` of its remaining output (at most
    /// `output_cap` tokens).
    WholeRequest {
        /// Blocks kept free for the running requests.
        reserve: u64,
        /// Fraction of its own remaining output reserved.
        output_ratio: f64,
        /// Most output tokens counted.
        output_cap: u32,
    },
}

impl Admission {
    /// Blocks kept free for the running requests.
    pub(crate) fn reserve(&self) -> u64 {
        match *self {
            Admission::FirstChunk => 0,
            Admission::WholeRequest { reserve, .. } => reserve,
        }
    }
}

/// The step being built: the replica's queues and KV state, the token budget left, and whether a
/// sequence was preempted. A policy's [`SchedulingPolicy::next_batch`] calls these in its order.
pub struct StepBuilder<'a> {
    pub(super) r: &'a mut Replica,
    pub(super) budget: u32,
    pub(super) preempted: bool,
}

impl StepBuilder<'_> {
    /// True when nothing is scheduled yet.
    pub fn is_empty(&self) -> bool {
        self.r.step.is_empty()
    }

    /// True when a sequence was preempted while building this step.
    pub fn preempted(&self) -> bool {
        self.preempted
    }

    /// True when fewer than `fraction` of the KV blocks are free (free or held only by the prefix
    /// cache, so an allocation could take them).
    pub fn free_blocks_below(&self, fraction: f64) -> bool {
        (self.r.kv.available() as f64) < fraction * self.r.kv.total() as f64
    }

    /// The engine's knobs.
    pub fn config(&self) -> &crate::EngineConfig {
        &self.r.cfg
    }

    /// Output tokens each running sequence still wants.
    pub fn running_output_left(&self) -> impl Iterator<Item = u32> + '_ {
        self.r
            .running
            .iter()
            .map(|id| self.r.seqs[id.at()].output_left())
    }

    /// Schedules one decode token for every running sequence that is decoding, in running order,
    /// allocating its blocks; `budget` says whether decodes spend the token budget.
    pub fn decode_running(&mut self, budget: DecodeBudget) {
        let counted = budget == DecodeBudget::Counted;
        let mut i = 0;
        while i < self.r.running.len() && (!counted || self.budget > 0) {
            let id = self.r.running[i];
            let s = &self.r.seqs[id.at()];
            if !s.is_decoding() {
                i += 1;
                continue;
            }
            let add = self
                .r
                .blocks_to_add(s, s.computed + self.r.decode_reserve());
            if !self.make_room(id, add) {
                continue; // it preempted itself: it was the newest, so the loop ends
            }
            self.push(id, add, 1);
            if counted {
                self.budget -= 1;
            }
            i += 1;
        }
    }

    /// Schedules the next prefill chunk of every running sequence that is not decoding, in running
    /// order, while the token budget lasts; `shortage` says what happens when its blocks do not fit.
    pub fn prefill_running(&mut self, shortage: Shortage) {
        let mut i = 0;
        while i < self.r.running.len() && self.budget > 0 {
            let id = self.r.running[i];
            let s = &self.r.seqs[id.at()];
            if s.is_decoding() {
                i += 1;
                continue;
            }
            let n = s.remaining().min(self.budget);
            let add = self.r.blocks_to_add(s, s.computed + n);
            match shortage {
                Shortage::PreemptNewest => {
                    if !self.make_room(id, add) {
                        continue; // it preempted itself: the loop ends
                    }
                }
                Shortage::Skip => {
                    i += 1;
                    if !self.r.kv.allocate(add as u64) {
                        continue;
                    }
                    self.push(id, add, n);
                    self.budget -= n;
                    continue;
                }
            }
            self.push(id, add, n);
            self.budget -= n;
            i += 1;
        }
    }

    /// Admits waiting requests in queue order while the token budget, the sequence cap and `rule`
    /// allow; the first that does not fit stops admission.
    pub fn admit_waiting(&mut self, rule: Admission) {
        self.r.admit_waiting(&mut self.budget, rule);
    }

    /// Sorts the waiting queue by longest cached prefix (ties keep arrival order) while it holds at
    /// most `max_queue` requests; a longer queue, or one without a prefix cache, keeps arrival order.
    pub fn order_waiting_by_cached_prefix(&mut self, max_queue: usize) {
        self.r.order_waiting_by_cached_prefix(max_queue);
    }

    /// Allocates `add` blocks for `id`, preempting the newest running sequences while they do not
    /// fit; false if `id` itself was preempted.
    fn make_room(&mut self, id: SeqId, add: u32) -> bool {
        self.r
            .make_room(id, add, &mut self.budget, &mut self.preempted)
    }

    /// Gives `id` the `add` blocks just allocated and schedules `tokens` of it.
    fn push(&mut self, id: SeqId, add: u32, tokens: u32) {
        self.r.grant(id, add);
        let start = self.r.seqs[id.at()].computed;
        self.r.step.push(Scheduled {
            seq: id,
            tokens,
            start,
        });
        self.r.scheduled_to(id, start + tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_named_once_and_round_trip_through_yaml() {
        let names: Vec<&str> = Policy::all().map(|p| p.name()).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
        for p in Policy::all() {
            let text = serde_yaml::to_string(&p).unwrap();
            assert_eq!(serde_yaml::from_str::<Policy>(&text).unwrap(), p);
            let (tokens, seqs) = p.get().default_budgets();
            assert!(tokens > 0 && seqs > 0, "{p}");
            assert!(!p.get().summary().is_empty());
        }
        assert_eq!(Policy::default(), Policy::VLLM);
        let e = serde_yaml::from_str::<Policy>("tgi")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown policy") && e.contains("sglang"), "{e}");
    }
}
