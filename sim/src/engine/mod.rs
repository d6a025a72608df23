//! One engine replica: a scheduling policy over the KV manager, advancing one step (forward pass) at a
//! time. It decides what each step computes; how long a step takes comes from outside (the cost model
//! in the simulator, the GPU in the CUDA engine). Pure logic: no time source, no IO.
//!
//! The parts, one file each: [`policy`] (what runs next), `admission` (waiting → running), `preempt`
//! (giving blocks back), `speculate` (verify draws), `decode_run` (merged runs of decode steps), `seq`
//! (the sequences), `stats` (totals and timeline samples). This file holds the replica's state and the
//! step's life cycle: submit → [`Replica::schedule`] → (the step runs) → [`Replica::finish_step`].

mod admission;
mod config;
mod decode_run;
pub mod policy;
mod preempt;
mod seq;
mod speculate;
mod stats;

pub use config::{
    CacheEntry, CacheEviction, EngineConfig, KindAcceptance, Preemption, SpecMethod, Speculative,
    WaitingOrder, MAX_BLOCK_SIZE, MAX_DRAFT_PARAMS, MAX_NUM_SEQS, MAX_SWAP_SPACE_GIB,
};
pub use decode_run::RunBounds;
pub use policy::{Admission, DecodeBudget, Policy, SchedulingPolicy, Shortage, StepBuilder};
pub use seq::{SeqEvent, SeqId, SeqInput, SeqProgress};
pub use stats::{EngineStats, IntervalHistogram, StepSample};

use crate::des::Time;
use crate::kv::{AuditError, KvManager, PromptBlocks, ROOT};
use decode_run::DecodeRun;
use preempt::SwapSpace;
use seq::{Scheduled, Seq};
use serverbench_calibration::{
    BatchShape, KernelVariant, MemoryPlan, MoeCompiles, SharedReads, SplitCost, SplitKv, SplitRun,
    VarlenSeq, VarlenStep,
};
use serverbench_workloads::Blocks;
use speculate::Acceptance;
use std::collections::{BTreeSet, VecDeque};

/// Why a deployment cannot run.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CapacityError {
    /// The weights do not leave room for KV.
    #[error("the weights ({weights_gib:.2} GiB per GPU) and activation reserve ({reserve_gib:.2} GiB) exceed the memory budget ({budget_gib:.2} GiB per GPU)")]
    NoRoom {
        /// Per GPU.
        weights_gib: f64,
        /// Per GPU.
        reserve_gib: f64,
        /// Per GPU.
        budget_gib: f64,
    },
    /// No layer keeps KV per token of context (every layer linear): the pool has no unit.
    #[error("the model keeps no KV per token of context (no full-attention or sliding layers): its memory is not simulated")]
    NoTokenKv,
    /// One request of the context limit does not fit.
    #[error("one request at the context limit ({context} tokens) needs {need} KV blocks but the pool holds {have} ({pool_gib:.2} GiB per GPU after {weights_gib:.2} GiB of weights, {kv_per_token} bytes of KV per token per GPU)")]
    ContextTooLong {
        /// Context limit.
        context: u32,
        /// Blocks needed.
        need: u64,
        /// Blocks there are.
        have: u64,
        /// KV pool per GPU.
        pool_gib: f64,
        /// Weights per GPU.
        weights_gib: f64,
        /// KV bytes per token per GPU.
        kv_per_token: f64,
    },
}

/// Why an engine with physical paging cannot use this configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PagingError {
    /// Speculative decoding needs draft tokens the engine does not compute.
    #[error("speculative decoding is not supported by an engine with physical paging")]
    Speculative,
    /// Swapped KV would have to be copied to host memory.
    #[error("swap preemption is not supported by an engine with physical paging; use recompute")]
    Swap,
    /// The pool is empty or larger than block ids can name.
    #[error("KV capacity of {0} blocks is out of range")]
    Capacity(u64),
}

/// One sequence's part of the scheduled step, as an engine that computes it needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepEntry {
    /// Sequence id.
    pub seq: SeqId,
    /// The caller's tag.
    pub tag: u64,
    /// First position computed by this step (tokens before it are in KV).
    pub start: u32,
    /// Positions computed: `start..start + tokens`.
    pub tokens: u32,
    /// True when the step ends with the sequence's next output token (its logits are sampled).
    pub emits: bool,
}

/// What a replica does besides scheduling, chosen by its driver.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReplicaOptions {
    /// Seeds the speculative acceptance draws.
    pub seed: u64,
    /// Report every emitted token ([`SeqEvent::Emitted`]), for servers that stream them.
    pub report_tokens: bool,
    /// Count the decode re-reads of shared prefix blocks ([`BatchShape::decode_shared`]) in every
    /// step's shape: set it when the cost model prices them
    /// ([`serverbench_calibration::CostModel::prices_shared_reads`]); it costs a walk over the step's
    /// prefix paths.
    pub count_shared_reads: bool,
    /// The decode attention's split-KV schedule ([`serverbench_calibration::CostModel::split_kv`]):
    /// every pure decode step's [`BatchShape::decode_split_excess`] (and, where the GPU's L2 is modelled,
    /// [`BatchShape::decode_l2_saved`]) is set from its contexts.
    pub split_kv: Option<SplitKv>,
    /// The attention of steps that prefill and decode together, one varlen call
    /// ([`serverbench_calibration::CostModel::varlen`]): every such step's
    /// [`BatchShape::varlen_excess_s`] is set from its chunks and contexts.
    pub varlen: Option<VarlenStep>,
    /// Every fused-MoE kernel variant is compiled already ([`Replica::compile_ns`] is 0): the server
    /// served before.
    pub kernels_warm: bool,
    /// Keep one [`StepSample`] per step ([`Replica::take_timeline`]).
    pub timeline: bool,
}

/// What a replica's KV pool is sized from (a deployment's, for one replica).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KvLayout {
    /// One GPU's memory: weights, reserve, the KV pool and bytes per token and per sequence.
    pub plan: MemoryPlan,
    /// Longest prompt + output, tokens: one such request must fit.
    pub context_limit: u32,
    /// Sliding window of the model's sliding layers, if any.
    pub window: Option<u32>,
    /// Host link bandwidth, bytes/s (swap preemption).
    pub host_bandwidth: f64,
}

/// The KV pool's shape: blocks, per-sequence state and the sliding window.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    total_blocks: u64,
    state_blocks: u32,
    window: Option<u32>,
    paged: bool,
}

/// One engine replica.
pub struct Replica {
    cfg: EngineConfig,
    kv: KvManager,
    /// Blocks of per-sequence state (linear-attention state, sliding-window KV) every sequence holds.
    state_blocks: u32,
    window: Option<u32>,
    seqs: Vec<Seq>,
    free_ids: Vec<SeqId>,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    step: Vec<Scheduled>,
    /// The split-KV schedule of the last scheduled step (a run's first), while `split_ready`.
    split: SplitRun,
    split_ready: bool,
    /// The blocks the last scheduled pure decode step's sequences share, and their cache nodes.
    split_shared: SharedReads,
    split_nodes: Vec<u32>,
    /// The step's decodes and prefill chunks as one varlen call sees them.
    varlen_seqs: (Vec<VarlenSeq>, Vec<VarlenSeq>),
    /// Whether building the last step preempted a sequence.
    last_preempted: bool,
    run: DecodeRun,
    spec: Option<Speculative>,
    /// Seeds the speculative acceptance draws (see [`Replica::draw_tokens`]).
    spec_seed: u64,
    acceptance: Acceptance,
    swap: SwapSpace,
    opts: ReplicaOptions,
    /// The fused-MoE kernel variants compiled so far, once a step asked ([`Replica::compile_ns`]).
    compiled: Option<BTreeSet<KernelVariant>>,
    timeline: Option<Vec<StepSample>>,
    /// When the scheduled step ends, ns (set by [`Replica::note_step`]), and when the one before ended.
    step_end_ns: u64,
    prev_step_end_ns: u64,
    /// Sequences of the step being finished whose gap since their last token is the gap between the
    /// two steps' ends (counted into `itl` once per step).
    back_to_back: u64,
    /// Tags admitted for the first time by the scheduled step (reported when it finishes).
    admitted_now: Vec<u64>,
    /// Gaps between consecutive output tokens of every sequence (one per token after a request's first,
    /// or per output chunk where a step emits several).
    pub itl: IntervalHistogram,
    /// Totals.
    pub stats: EngineStats,
}

impl Replica {
    /// A replica sized from a memory plan ([`crate::Deployment::replica`] gives a deployment's); fails
    /// if one request of the context limit cannot fit.
    pub fn new(
        cfg: &EngineConfig,
        layout: &KvLayout,
        opts: ReplicaOptions,
    ) -> Result<Replica, CapacityError> {
        let (total, state_blocks) = layout.pool(cfg)?;
        let geometry = Geometry {
            total_blocks: total,
            state_blocks,
            window: layout.window,
            paged: false,
        };
        let swap = SwapSpace {
            kv_bytes_per_token: layout.plan.kv_bytes_per_token,
            host_bandwidth: layout.host_bandwidth,
            host_free_bytes: cfg.swap_space_gib * serverbench_calibration::GIB,
            transfer_ns: 0,
        };
        Ok(Replica::with_geometry(cfg, geometry, swap, opts))
    }
}

impl KvLayout {
    /// The longest request (prompt + output tokens) the engine accepts: the context limit, or with
    /// `cap_requests_at_pool` what the pool holds beside one sequence's state, less one token
    /// (SGLang's `max_req_len`), whichever is smaller. The context limit if the pool cannot be sized.
    pub fn request_limit(&self, cfg: &EngineConfig) -> u32 {
        if !cfg.cap_requests_at_pool {
            return self.context_limit;
        }
        match self.pool(cfg) {
            Ok((total, state)) => {
                let tokens = (total - state as u64) * cfg.block_size as u64;
                self.context_limit
                    .min(tokens.saturating_sub(1).min(u32::MAX as u64) as u32)
            }
            Err(_) => self.context_limit,
        }
    }

    /// The pool's blocks and the blocks of per-sequence state every sequence holds, for `cfg`'s block
    /// size; fails if the weights leave no room or one request of the context limit cannot fit.
    pub fn pool(&self, cfg: &EngineConfig) -> Result<(u64, u32), CapacityError> {
        let plan = self.plan;
        let gib = serverbench_calibration::GIB;
        if plan.kv_pool_bytes <= 0.0 {
            return Err(CapacityError::NoRoom {
                weights_gib: plan.weights_bytes / gib,
                reserve_gib: plan.activation_bytes / gib,
                budget_gib: plan.budget_bytes / gib,
            });
        }
        if plan.kv_bytes_per_token <= 0.0 {
            return Err(CapacityError::NoTokenKv);
        }
        let bs = cfg.block_size;
        let block_bytes = plan.kv_bytes_per_token * bs as f64;
        let (kv_bytes, state_bytes) = match cfg.state_pool_ratio {
            // The recurrent states live in a pool of their own (SGLang's `_handle_max_mamba_cache`:
            // ratio / (1 + ratio) of the memory after the weights); the KV pool gets the rest.
            Some(r) if plan.linear_state_bytes_per_seq > 0.0 => (
                plan.kv_pool_bytes / (1.0 + r),
                plan.state_bytes_per_seq - plan.linear_state_bytes_per_seq,
            ),
            _ => (plan.kv_pool_bytes, plan.state_bytes_per_seq),
        };
        let total = (kv_bytes / block_bytes).floor() as u64;
        let state_blocks = (state_bytes.max(0.0) / block_bytes).ceil() as u32;
        let need = self.context_limit.div_ceil(bs) as u64 + state_blocks as u64;
        if need > total && !(cfg.cap_requests_at_pool && total > state_blocks as u64) {
            return Err(CapacityError::ContextTooLong {
                context: self.context_limit,
                need,
                have: total,
                pool_gib: kv_bytes / gib,
                weights_gib: plan.weights_bytes / gib,
                kv_per_token: plan.kv_bytes_per_token,
            });
        }
        Ok((total, state_blocks))
    }
}

impl Replica {
    /// A replica with physical paging over exactly `total_blocks` blocks, for an engine that stores real
    /// KV (the CUDA engine): the same scheduler, with block tables. Models with per-sequence state,
    /// speculative decoding and swap preemption are not supported there.
    pub fn paged(
        cfg: &EngineConfig,
        total_blocks: u64,
        opts: ReplicaOptions,
    ) -> Result<Replica, PagingError> {
        if cfg.speculative.is_some() {
            return Err(PagingError::Speculative);
        }
        if cfg.preemption == Preemption::Swap {
            return Err(PagingError::Swap);
        }
        if total_blocks == 0 || total_blocks > u32::MAX as u64 {
            return Err(PagingError::Capacity(total_blocks));
        }
        let geometry = Geometry {
            total_blocks,
            state_blocks: 0,
            window: None,
            paged: true,
        };
        Ok(Replica::with_geometry(
            cfg,
            geometry,
            SwapSpace::default(),
            opts,
        ))
    }

    fn with_geometry(
        cfg: &EngineConfig,
        g: Geometry,
        swap: SwapSpace,
        opts: ReplicaOptions,
    ) -> Replica {
        let mut kv = if g.paged {
            KvManager::paged(g.total_blocks)
        } else {
            KvManager::new(g.total_blocks)
        };
        kv.cache.newest_first = cfg.cache_eviction == CacheEviction::NewestFirst;
        Replica {
            cfg: cfg.clone(),
            kv,
            state_blocks: g.state_blocks,
            window: g.window,
            seqs: Vec::new(),
            free_ids: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            step: Vec::new(),
            split: SplitRun::default(),
            split_ready: false,
            split_shared: SharedReads::default(),
            split_nodes: Vec::new(),
            varlen_seqs: Default::default(),
            last_preempted: false,
            run: DecodeRun::default(),
            spec: cfg.speculative.clone(),
            spec_seed: serverbench_workloads::hash::mix2(opts.seed, 0x5BEC),
            acceptance: Acceptance::new(cfg.speculative.as_ref()),
            swap,
            opts,
            compiled: None,
            timeline: opts.timeline.then(Vec::new),
            step_end_ns: 0,
            prev_step_end_ns: 0,
            back_to_back: 0,
            admitted_now: Vec::new(),
            itl: IntervalHistogram::default(),
            stats: EngineStats::default(),
        }
    }

    /// The per-step samples kept so far (with [`ReplicaOptions::timeline`]); empty afterwards.
    pub fn take_timeline(&mut self) -> Vec<StepSample> {
        self.timeline
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The scheduled step's entries, in batch order (valid between [`Replica::schedule`] and
    /// [`Replica::finish_step`]).
    pub fn step_entries(&self) -> impl Iterator<Item = StepEntry> + '_ {
        self.step.iter().map(|e| {
            let s = &self.seqs[e.seq.at()];
            StepEntry {
                seq: e.seq,
                tag: s.tag,
                start: e.start,
                tokens: e.tokens,
                emits: e.start + e.tokens >= s.known(),
            }
        })
    }

    /// Appends the physical blocks holding sequence `seq`'s KV, in position order (paging only).
    pub fn block_table(&self, seq: SeqId, out: &mut Vec<u32>) {
        let s = &self.seqs[seq.at()];
        self.kv.cache.path_blocks(s.kv_node, out);
        out.extend_from_slice(&s.table);
    }

    /// KV capacity in blocks.
    pub fn total_blocks(&self) -> u64 {
        self.kv.total()
    }

    /// KV blocks in use.
    pub fn used_blocks(&self) -> u64 {
        self.kv.used()
    }

    /// KV blocks free or held only by the prefix cache (evictable).
    pub fn kv_available_blocks(&self) -> u64 {
        self.kv.available()
    }

    /// Sequences running.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Sequences waiting.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// True when something is running or waiting.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || !self.waiting.is_empty()
    }

    /// Hands a request to the scheduler; returns its sequence id.
    pub fn submit(&mut self, input: SeqInput) -> SeqId {
        let prompt =
            PromptBlocks::new(input.blocks, input.workload_block_size, self.cfg.block_size);
        let seq = Seq {
            tag: input.tag,
            hashable: prompt.engine_blocks(),
            prompt,
            input: input.input,
            output: input.output,
            computed: 0,
            generated: 0,
            kv_node: ROOT,
            shared: 0,
            private: 0,
            inserted: false,
            admitted: false,
            progress: SeqProgress::default(),
            done: false,
            kind: input.kind,
            draw_key: serverbench_workloads::hash::mix2(self.spec_seed, input.tag),
            swapped: 0,
            last_token_ns: 0,
            table: Vec::new(),
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.seqs[id.at()] = seq;
                id
            }
            None => {
                self.seqs.push(seq);
                SeqId(self.seqs.len() as u32 - 1)
            }
        };
        self.waiting.push_back(id);
        id
    }

    /// A sequence's progress.
    pub fn progress(&self, seq: SeqId) -> SeqProgress {
        let s = &self.seqs[seq.at()];
        SeqProgress {
            generated: s.generated,
            ..s.progress
        }
    }

    /// Tags of all sequences still in the engine (running, then waiting).
    pub fn in_flight(&self) -> impl Iterator<Item = (SeqId, u64)> + '_ {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .map(|&id| (id, self.seqs[id.at()].tag))
    }

    /// Blocks of a prompt this replica's prefix cache holds now (for prefix-aware routing).
    pub fn cached_prefix_blocks(&self, blocks: &Blocks, workload_block_size: u32) -> u32 {
        if !self.cfg.prefix_caching {
            return 0;
        }
        let prompt = PromptBlocks::new(blocks.clone(), workload_block_size, self.cfg.block_size);
        self.kv
            .cache
            .lookup(ROOT, 0, prompt.engine_blocks(), &prompt)
            .blocks
    }

    /// Puts a prompt's blocks in the prefix cache, unreferenced, as far as free memory allows (steady-state
    /// start): the blocks a one-token request of its `prompt_tokens` leaves cached under the policy
    /// ([`SchedulingPolicy::warm_tokens`]). An engine with physical paging starts cold: nothing is warmed.
    pub fn warm(&mut self, blocks: &Blocks, workload_block_size: u32, prompt_tokens: u32) {
        if !self.cfg.prefix_caching || self.kv.is_paged() {
            return;
        }
        let prompt = PromptBlocks::new(blocks.clone(), workload_block_size, self.cfg.block_size);
        let kept = self
            .cfg
            .policy
            .get()
            .warm_tokens(prompt_tokens, self.cfg.max_num_batched_tokens);
        let n = prompt.engine_blocks().min(kept / self.cfg.block_size);
        let m = self.kv.cache.lookup(ROOT, 0, n, &prompt);
        let room = self.kv.free();
        let n = n.min(m.blocks + room as u32);
        if n <= m.blocks {
            return;
        }
        let node = self.kv.cache.insert(ROOT, 0, n, &prompt, Vec::new());
        self.kv.cache.release(node);
    }

    /// Blocks a sequence must add to hold `tokens` computed tokens.
    #[inline]
    fn blocks_to_add(&self, s: &Seq, tokens: u32) -> u32 {
        let want = tokens.div_ceil(self.cfg.block_size) + self.state_blocks;
        want.saturating_sub(s.shared + s.private)
    }

    /// Chooses the next step's batch with the configured policy; returns its shape, or `None` when
    /// there is nothing to run.
    pub fn schedule(&mut self) -> Option<BatchShape> {
        self.step.clear();
        let policy = self.cfg.policy.get();
        let mut b = StepBuilder {
            budget: self.cfg.max_num_batched_tokens,
            preempted: false,
            r: self,
        };
        policy.next_batch(&mut b);
        self.last_preempted = b.preempted;
        if self.step.is_empty() {
            return None;
        }
        let mut b = self.shape();
        if self.opts.count_shared_reads && b.decode_seqs > 1 && self.window.is_none() {
            b.decode_shared = self.decode_shared_tokens();
        }
        self.split_ready = false;
        if let Some(k) = self.opts.split_kv {
            if b.prefill_seqs == 0 && self.spec.is_none() && self.window.is_none() {
                let cost = self.split_cost(k);
                b.decode_split_excess = cost.excess;
                b.decode_l2_saved = cost.l2_saved;
                self.split_ready = true;
            }
        }
        if let Some(v) = self.opts.varlen {
            let mixed = b.prefill_seqs > 0 && b.decode_seqs > 0;
            if mixed && self.spec.is_none() && self.window.is_none() {
                b.varlen_excess_s = self.varlen_excess(&v, &b);
            }
        }
        Some(b)
    }

    /// [`VarlenStep::excess_s`] of the scheduled step: each decode reads its context and its new
    /// token's key, each chunk its cached prefix and its own tokens.
    fn varlen_excess(&mut self, v: &VarlenStep, b: &BatchShape) -> f64 {
        let (decodes, chunks) = &mut self.varlen_seqs;
        decodes.clear();
        chunks.clear();
        for e in &self.step {
            let s = &self.seqs[e.seq.at()];
            if s.is_decode_entry(e.tokens, e.start) {
                decodes.push(VarlenSeq {
                    queries: 1,
                    keys: e.start.saturating_add(1),
                });
            } else {
                chunks.push(VarlenSeq {
                    queries: e.tokens,
                    keys: e.start.saturating_add(e.tokens),
                });
            }
        }
        v.excess_s(b, decodes, chunks)
    }

    /// [`SplitKv::cost_of`] the step's decodes (each reads its context and its new token's key, and
    /// the cached blocks it shares with others of the step when the L2 is modelled), kept as the start
    /// of a run of decode steps ([`SplitRun`]).
    fn split_cost(&mut self, k: SplitKv) -> SplitCost {
        self.split_shared.clear();
        if k.l2.is_some() && self.step.len() > 1 {
            let (seqs, shared) = (&self.seqs, &mut self.split_shared);
            self.split_nodes.clear();
            self.split_nodes
                .extend(self.step.iter().map(|e| seqs[e.seq.at()].kv_node));
            let bs = self.cfg.block_size as u64;
            self.kv
                .cache
                .shared_path_runs(&self.split_nodes, |node, from, to, i| {
                    shared.add(node, from as u64 * bs, to as u64 * bs, i)
                });
        }
        let keys = self.step.iter().map(|e| e.start.saturating_add(1));
        self.split.start(k, keys, &self.split_shared)
    }

    /// Context tokens the step's decode sequences read that another of them reads too: the repeats of
    /// the cached prefix blocks they share (what an engine reads once and then finds in L2).
    fn decode_shared_tokens(&mut self) -> u64 {
        let (seqs, step) = (&self.seqs, &self.step);
        let decoding = step.iter().filter_map(|e| {
            let s = &seqs[e.seq.at()];
            s.is_decode_entry(e.tokens, e.start).then_some(s.kv_node)
        });
        self.kv.cache.repeated_path_blocks(decoding) * self.cfg.block_size as u64
    }

    /// Time the last scheduled step spends moving swapped KV over the host link, ns (taken once).
    pub fn take_transfer_ns(&mut self) -> u64 {
        std::mem::take(&mut self.swap.transfer_ns)
    }

    /// Time the scheduled step `shape` waits for the engine to compile its fused-MoE kernel variant,
    /// ns: the compile time where it is the first step to need that variant (none before it, nor the
    /// engine's start-up, [`MoeCompiles::warm`]), else 0; always 0 where compiles are not modelled.
    /// Call once per scheduled step: the variant counts as compiled from then on.
    pub fn compile_ns(&mut self, compiles: Option<&MoeCompiles>, shape: &BatchShape) -> u64 {
        let Some(c) = compiles.filter(|_| !self.opts.kernels_warm) else {
            return 0;
        };
        let Some(v) = c.eager_variant(shape.tokens(), shape.prefill_seqs > 0) else {
            return 0;
        };
        let warm = self.cfg.max_num_batched_tokens;
        let compiled = self
            .compiled
            .get_or_insert_with(|| c.warm(warm).into_iter().collect());
        if compiled.insert(v) {
            self.stats.kernel_compiles += 1;
            c.compile_ns()
        } else {
            0
        }
    }

    fn shape(&self) -> BatchShape {
        let mut b = BatchShape::default();
        for e in &self.step {
            let s = &self.seqs[e.seq.at()];
            if s.is_decode_entry(e.tokens, e.start) {
                match &self.spec {
                    Some(sp) => b.add_verify(e.start, sp.k, self.window),
                    None => b.add_decode(e.start, self.window),
                }
            } else {
                b.add_prefill(e.tokens, e.start, self.window);
            }
        }
        if let Some(sp) = &self.spec {
            if b.decode_seqs > 0 {
                b.draft_passes = sp.draft_passes();
            }
        }
        b
    }

    /// Records the step that was scheduled as starting at `start` and lasting `step_ns` (occupancy, timeline).
    pub fn note_step(&mut self, start: Time, step_ns: u64, shape: &BatchShape) {
        self.prev_step_end_ns = self.step_end_ns;
        self.step_end_ns = start.0 + step_ns;
        let occ = self.kv.used() as f64 / self.kv.total().max(1) as f64;
        self.run.occupancy = occ;
        self.stats.steps += self.run.repeat as u64;
        self.stats.busy_ns += step_ns;
        self.stats.occupancy_integral += occ * step_ns as f64;
        self.stats.occupancy_max = self.stats.occupancy_max.max(occ);
        if let Some(t) = &mut self.timeline {
            t.push(StepSample {
                replica: 0,
                start_ns: start.0,
                step_ns,
                running: self.running.len() as u32,
                waiting: self.waiting.len() as u32,
                prefill_tokens: shape.prefill_tokens as u32,
                decode_seqs: shape.decode_seqs,
                kv_occupancy: occ,
            });
        }
    }

    /// Applies the scheduled step's results (its tokens come out now); appends events.
    pub fn finish_step(&mut self, events: &mut Vec<SeqEvent>) {
        events.extend(
            self.admitted_now
                .drain(..)
                .map(|tag| SeqEvent::Admitted { tag }),
        );
        let mut any_done = false;
        let (repeat, in_run) = (self.run.repeat as usize, self.run.active);
        self.run.repeat = 1;
        self.run.active = false;
        let report = self.opts.report_tokens;
        // Inside a run every sequence of the batch emits at every step end: the run's own gaps are the
        // same for all of them.
        let run_gap = if in_run {
            self.run.longest_gap(repeat)
        } else {
            0
        };
        for k in 0..self.step.len() {
            let Scheduled {
                seq: id, tokens, ..
            } = self.step[k];
            if in_run {
                // A run of decode steps: the tokens were drawn when the run was planned; no first
                // tokens and no cache inserts happen in decode steps.
                let m = self.run_emitted(k, repeat);
                if self.spec.is_some() {
                    self.stats.spec_verifies += repeat as u64;
                    self.stats.spec_tokens += m as u64;
                }
                let (first, last) = (self.run.step_end(0), self.run.step_end(repeat - 1));
                self.note_tokens(id, first, last, run_gap);
                any_done |= self.emit_decoded(id, m, false, events);
                continue;
            }
            let s = &self.seqs[id.at()];
            if self.spec.is_some() && tokens == 1 && s.is_decoding() {
                let m = self.draw_tokens(id, s.output_left());
                self.stats.spec_verifies += 1;
                self.stats.spec_tokens += m as u64;
                let at = self.step_end_ns;
                self.note_tokens(id, at, at, 0);
                any_done |= self.emit_decoded(id, m, report, events);
                continue;
            }
            any_done |= self.computed(id, tokens, events);
        }
        let gap = self.step_end_ns.saturating_sub(self.prev_step_end_ns);
        self.itl.add_n(gap, std::mem::take(&mut self.back_to_back));
        if in_run {
            let b = self.step.len() as u64;
            for i in 1..repeat {
                let gap = self.run.step_end(i) - self.run.step_end(i - 1);
                self.itl.add_n(gap, b);
            }
        }
        if any_done {
            let mut finished = Vec::new();
            self.running.retain(|&id| {
                let done = self.seqs[id.at()].done;
                if done {
                    finished.push(id);
                }
                !done
            });
            for id in finished {
                self.release_kv(id);
                self.free_ids.push(id);
            }
        }
        self.step.clear();
    }

    /// A step computed `n` more tokens of `id`: its prompt blocks enter the prefix cache once they are
    /// all computed (unless they entered as they were scheduled, [`CacheEntry::Scheduled`]), and an
    /// output token comes out when the step reached its last known token. True if the sequence finished.
    fn computed(&mut self, id: SeqId, n: u32, events: &mut Vec<SeqEvent>) -> bool {
        let ebs = self.cfg.block_size;
        let s = &mut self.seqs[id.at()];
        s.computed += n;
        if s.computed >= s.hashable * ebs {
            // SGLang frees a sliding-window request's KV behind its window while it decodes: the last
            // prefill chunk (this step's) keeps a hittable end only if it and the output fit in a
            // window plus the eviction interval.
            let end = match (self.window, self.cfg.sliding_window_eviction_interval) {
                (Some(w), Some(interval)) if n + s.output > w + interval => {
                    ((s.computed - n) / ebs).min(s.hashable)
                }
                _ => s.hashable,
            };
            self.enter_cache(id, end);
        }
        let s = &mut self.seqs[id.at()];
        s.inserted = s.inserted || s.computed >= s.hashable * ebs;
        if s.computed < s.known() {
            return false;
        }
        if s.generated == 0 {
            events.push(SeqEvent::FirstToken { tag: s.tag });
        }
        let at = self.step_end_ns;
        self.note_tokens(id, at, at, 0);
        self.emit(id, 1, self.opts.report_tokens, events)
    }

    /// Enters `id`'s prompt blocks up to engine block `end` into the prefix cache, if the cache is on,
    /// its prompt has not entered whole yet and `end` passes what it already shares: its private blocks
    /// there become cached ones (those another sequence cached meanwhile are given back).
    fn enter_cache(&mut self, id: SeqId, end: u32) {
        let s = &self.seqs[id.at()];
        if s.inserted || !self.cfg.prefix_caching || end <= s.shared {
            return;
        }
        let start = s.shared;
        let phys: Vec<u32> = if self.kv.is_paged() {
            self.seqs[id.at()]
                .table
                .drain(..(end - start) as usize)
                .collect()
        } else {
            Vec::new()
        };
        let s = &self.seqs[id.at()];
        let node = self.kv.cache.insert(s.kv_node, start, end, &s.prompt, phys);
        let moved = end - start;
        self.kv.private_became_cached(moved as u64);
        let s = &mut self.seqs[id.at()];
        s.kv_node = node;
        s.shared = end;
        s.private -= moved;
    }

    /// `id` was scheduled up to token `to`: under [`CacheEntry::Scheduled`] its whole prompt blocks
    /// below `to` enter the prefix cache now, before the step computes them (vLLM v1).
    pub(crate) fn scheduled_to(&mut self, id: SeqId, to: u32) {
        if self.cfg.cache_entry == CacheEntry::Scheduled {
            let s = &self.seqs[id.at()];
            let end = (to / self.cfg.block_size).min(s.hashable);
            self.enter_cache(id, end);
        }
    }

    /// `id` emits output at `first` and, inside a decode run, at every step end up to `last`, the
    /// run's longest gap between steps being `run_gap` (the run's own gaps go into the distribution
    /// once for the whole batch): the gap since its previous token goes into the distribution, and
    /// the longest into its progress.
    #[inline]
    fn note_tokens(&mut self, id: SeqId, first: u64, last: u64, run_gap: u64) {
        let s = &mut self.seqs[id.at()];
        if s.generated > 0 {
            let gap = first.saturating_sub(s.last_token_ns);
            s.progress.max_itl_ns = s.progress.max_itl_ns.max(gap.max(run_gap));
            if s.last_token_ns == self.prev_step_end_ns && first == self.step_end_ns {
                self.back_to_back += 1;
            } else {
                self.itl.add(gap);
            }
        }
        s.last_token_ns = last;
    }

    /// A decoding sequence emitted `m` tokens (their KV is now computed); reports them when asked and
    /// the finish when it has all its output. Returns true if it finished.
    #[inline]
    fn emit_decoded(
        &mut self,
        id: SeqId,
        m: u32,
        report: bool,
        events: &mut Vec<SeqEvent>,
    ) -> bool {
        self.seqs[id.at()].computed += m;
        self.emit(id, m, report, events)
    }

    /// `m` more output tokens of `id` came out: reported when asked, and the finish when it has all its
    /// output. Returns true if it finished.
    #[inline]
    fn emit(&mut self, id: SeqId, m: u32, report: bool, events: &mut Vec<SeqEvent>) -> bool {
        let s = &mut self.seqs[id.at()];
        s.generated += m;
        if report {
            events.push(SeqEvent::Emitted {
                tag: s.tag,
                count: m,
            });
        }
        if s.generated >= s.output {
            s.done = true;
            events.push(SeqEvent::Finished {
                tag: s.tag,
                seq: id,
            });
        }
        s.done
    }

    /// Gives `id` `add` more private blocks that [`KvManager::allocate`] has counted.
    fn grant(&mut self, id: SeqId, add: u32) {
        let s = &mut self.seqs[id.at()];
        s.private += add;
        self.kv.take_phys(add, &mut s.table);
    }

    /// Gives back every block `id` holds: its reference on cached blocks and its private ones.
    fn release_kv(&mut self, id: SeqId) {
        let s = &mut self.seqs[id.at()];
        if s.kv_node != ROOT {
            self.kv.cache.release(s.kv_node);
        }
        self.kv.free_private(s.private as u64);
        self.kv.return_phys(s.table.drain(..));
        s.kv_node = ROOT;
        s.shared = 0;
        s.private = 0;
        s.inserted = false;
    }

    /// Recomputes the KV bookkeeping from scratch and compares it with the running counters:
    /// private blocks, cached and evictable blocks, reference counts, and `used <= total`.
    /// For tests and debugging; O(sequences × path length).
    pub fn audit(&self) -> Result<(), AuditError> {
        let live: Vec<SeqId> = self
            .running
            .iter()
            .chain(self.waiting.iter())
            .copied()
            .collect();
        let private: u64 = live
            .iter()
            .map(|&id| self.seqs[id.at()].private as u64)
            .sum();
        let holders: Vec<u32> = live
            .iter()
            .map(|&id| self.seqs[id.at()].kv_node)
            .filter(|&n| n != ROOT)
            .collect();
        self.kv.audit(private, &holders)?;
        if self.kv.is_paged() {
            for &id in &live {
                let s = &self.seqs[id.at()];
                if s.table.len() != s.private as usize {
                    return Err(AuditError(format!(
                        "sequence {} counts {} private blocks but holds {} physical ids",
                        id.0,
                        s.private,
                        s.table.len()
                    )));
                }
            }
            let tables: Vec<&[u32]> = live
                .iter()
                .map(|&id| self.seqs[id.at()].table.as_slice())
                .collect();
            self.kv.audit_phys(&tables)?;
        }
        for &id in &self.waiting {
            let s = &self.seqs[id.at()];
            if s.private != 0 || s.kv_node != ROOT {
                return Err(AuditError(format!("waiting sequence {} holds KV", id.0)));
            }
        }
        if self.running.len() > self.cfg.max_num_seqs as usize {
            return Err(AuditError(format!(
                "{} running sequences exceed max_num_seqs {}",
                self.running.len(),
                self.cfg.max_num_seqs
            )));
        }
        Ok(())
    }

    /// Takes one sequence out of the engine before it finishes (its client went away): its blocks and
    /// any swapped-out KV are given back, and its progress stays readable until the next submit. Call
    /// between steps (after [`Replica::finish_step`]). False if the sequence is not in the engine.
    pub fn cancel(&mut self, seq: SeqId) -> bool {
        debug_assert!(self.step.is_empty(), "cancel between steps");
        if let Some(i) = self.running.iter().position(|&id| id == seq) {
            self.running.remove(i);
        } else if let Some(i) = self.waiting.iter().position(|&id| id == seq) {
            self.waiting.remove(i);
        } else {
            return false;
        }
        self.release_kv(seq);
        let s = &mut self.seqs[seq.at()];
        self.swap.host_free_bytes += s.swapped as f64 * self.swap.kv_bytes_per_token;
        s.swapped = 0;
        s.done = true;
        self.free_ids.push(seq);
        true
    }

    /// Removes every sequence (the window closed); their progress stays readable until the next submit.
    pub fn cancel_all(&mut self) {
        let ids: Vec<SeqId> = self
            .running
            .drain(..)
            .chain(self.waiting.drain(..))
            .collect();
        for id in ids {
            self.release_kv(id);
            self.free_ids.push(id);
        }
        self.step.clear();
    }
}

#[cfg(test)]
mod tests;
