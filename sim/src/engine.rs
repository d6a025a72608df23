//! One engine replica: the scheduler (policy `vllm`) over the KV manager, advancing one step (forward pass)
//! at a time. It decides what each step computes; how long a step takes comes from outside
//! (the cost model here, the GPU in the CUDA engine). Pure logic: no time source, no IO.

use crate::deployment::{Deployment, EngineConfig, Policy, Preemption, Speculative};
use crate::des::Time;
use crate::kv::{KvManager, Match, PromptBlocks, ROOT};
use serverbench_calibration::{BatchShape, CostModel};
use serverbench_workloads::Blocks;
use serverbench_workloads::RequestKind;
use std::collections::VecDeque;

/// A request handed to the engine.
#[derive(Clone, Debug)]
pub struct SeqInput {
    /// The caller's tag (returned in events).
    pub tag: u64,
    /// Prompt block chain.
    pub blocks: Blocks,
    /// Tokens per workload block.
    pub workload_block_size: u32,
    /// Prompt tokens.
    pub input: u32,
    /// Output tokens to generate.
    pub output: u32,
    /// Request kind (speculative acceptance may depend on it).
    pub kind: RequestKind,
}

/// What a step did to a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqEvent {
    /// The first output token came out at the end of this step.
    FirstToken {
        /// Caller's tag.
        tag: u64,
    },
    /// Output tokens came out at the end of this step (only when [`Replica::report_tokens`] is set).
    Emitted {
        /// Caller's tag.
        tag: u64,
        /// Tokens emitted by this step.
        count: u32,
    },
    /// The last output token came out; the sequence left the engine.
    Finished {
        /// Caller's tag.
        tag: u64,
        /// Sequence id (valid until the next submit).
        seq: u32,
    },
}

/// A sequence's progress, as the caller may read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeqProgress {
    /// Output tokens emitted so far.
    pub generated: u32,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: u32,
    /// Times the sequence was preempted.
    pub preemptions: u32,
}

#[derive(Clone, Debug)]
struct Seq {
    tag: u64,
    prompt: PromptBlocks,
    hashable: u32,
    input: u32,
    output: u32,
    computed: u32,
    generated: u32,
    kv_node: u32,
    shared: u32,
    private: u32,
    inserted: bool,
    admitted: bool,
    progress: SeqProgress,
    done: bool,
    kind: RequestKind,
    /// Keys this request's speculative acceptance draws (a hash of the replica's seed and the tag).
    draw_key: u64,
    /// Tokens whose KV sits in host memory after a swap-out (0 when not swapped).
    swapped: u32,
    /// Physical ids of the private blocks, in order (paging only).
    table: Vec<u32>,
}

impl Seq {
    #[inline]
    fn known(&self) -> u32 {
        self.input + self.generated
    }
}

/// Index of a request kind in per-kind tables.
fn kind_index(kind: RequestKind) -> usize {
    match kind {
        RequestKind::RootTurn => 0,
        RequestKind::SubagentTurn => 1,
        RequestKind::Compaction => 2,
    }
}

/// Per request kind, the acceptance thresholds α^j · 2⁶⁴ (j = 1..=k) of [`Replica::draw_tokens`];
/// empty without speculation.
fn acceptance_thresholds(spec: Option<&Speculative>) -> [Vec<u64>; 3] {
    let kinds = [
        RequestKind::RootTurn,
        RequestKind::SubagentTurn,
        RequestKind::Compaction,
    ];
    kinds.map(|kind| {
        spec.map_or_else(Vec::new, |sp| {
            let alpha = sp.alpha(kind);
            // `as` saturates: α = 1 gives u64::MAX (accepted but for one draw in 2⁶⁴).
            (1..=sp.k)
                .map(|j| (alpha.powi(j as i32) * 18_446_744_073_709_551_616.0) as u64)
                .collect()
        })
    })
}

/// The uniform 64-bit draw of a request's verify step starting at output `position`: SplitMix64 at
/// that position of the request's own sequence (`key` from the replica's seed and the request's tag).
#[inline]
fn acceptance_draw(key: u64, position: u64) -> u64 {
    serverbench_workloads::hash::mix64(
        key.wrapping_add(position.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    )
}

/// Drafts accepted for the uniform 64-bit draw `h`, given the thresholds α^j · 2⁶⁴ (j = 1..=k).
#[inline]
fn accepted_drafts(h: u64, below: &[u64]) -> u32 {
    below.iter().filter(|&&t| h < t).count() as u32
}

/// One step's sample, for timelines.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct StepSample {
    /// Replica that ran the step.
    pub replica: u32,
    /// Step start, ns.
    pub start_ns: u64,
    /// Step length, ns.
    pub step_ns: u64,
    /// Sequences running after scheduling.
    pub running: u32,
    /// Sequences waiting after scheduling.
    pub waiting: u32,
    /// Prefill tokens in the step.
    pub prefill_tokens: u32,
    /// Decode sequences in the step.
    pub decode_seqs: u32,
    /// Fraction of KV blocks in use.
    pub kv_occupancy: f64,
}

/// Running totals of a replica.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Steps run.
    pub steps: u64,
    /// Busy time, ns.
    pub busy_ns: u64,
    /// ∫ occupancy dt over steps, in block-fraction × ns.
    pub occupancy_integral: f64,
    /// Highest occupancy seen.
    pub occupancy_max: f64,
    /// Preemptions.
    pub preemptions: u64,
    /// Prompt tokens that were looked up at first admission.
    pub lookup_tokens: u64,
    /// Of those, tokens served from the cache.
    pub hit_tokens: u64,
    /// Speculative verify steps, counted per sequence.
    pub spec_verifies: u64,
    /// Tokens those verify steps emitted.
    pub spec_tokens: u64,
    /// Preemptions that swapped KV to host memory.
    pub swaps: u64,
}

impl EngineStats {
    /// Adds another replica's totals (the maximum occupancy is the larger).
    pub fn add(&mut self, o: &EngineStats) {
        self.steps += o.steps;
        self.busy_ns += o.busy_ns;
        self.occupancy_integral += o.occupancy_integral;
        self.occupancy_max = self.occupancy_max.max(o.occupancy_max);
        self.preemptions += o.preemptions;
        self.lookup_tokens += o.lookup_tokens;
        self.hit_tokens += o.hit_tokens;
        self.spec_verifies += o.spec_verifies;
        self.spec_tokens += o.spec_tokens;
        self.swaps += o.swaps;
    }
}

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

/// One sequence's part of the scheduled step, as an engine that computes it needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepEntry {
    /// Sequence id.
    pub seq: u32,
    /// The caller's tag.
    pub tag: u64,
    /// First position computed by this step (tokens before it are in KV).
    pub start: u32,
    /// Positions computed: `start..start + tokens`.
    pub tokens: u32,
    /// True when the step ends with the sequence's next output token (its logits are sampled).
    pub emits: bool,
}

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

/// One engine replica.
pub struct Replica {
    cfg: EngineConfig,
    kv: KvManager,
    state_blocks: u32,
    window: Option<u32>,
    seqs: Vec<Seq>,
    free_ids: Vec<u32>,
    waiting: VecDeque<u32>,
    running: Vec<u32>,
    step: Vec<(u32, u32, u32)>,
    repeat: u32,
    run_ends: Vec<u64>,
    run_occupancy: f64,
    run_truncatable: bool,
    /// Tokens each step entry emits in each step of the run (step-major).
    run_emit: Vec<u32>,
    /// Tokens each decode entry still wants while a run is planned (kept for its allocation).
    run_left: Vec<u32>,
    in_run: bool,
    last_preempted: bool,
    plain_steps: u32,
    plain_limit: u32,
    spec: Option<Speculative>,
    /// Seeds the speculative acceptance draws (see [`Replica::draw_tokens`]).
    spec_seed: u64,
    /// Per request kind, α^j · 2⁶⁴ for j = 1..=k: a draw below the j-th accepts the j-th draft.
    accept_below: [Vec<u64>; 3],
    kv_bytes_per_token: f64,
    host_bandwidth: f64,
    host_free_bytes: f64,
    transfer_ns: u64,
    /// Totals.
    pub stats: EngineStats,
    /// Per-step samples, when enabled.
    pub timeline: Option<Vec<StepSample>>,
    /// Report every emitted token ([`SeqEvent::Emitted`]), for servers that stream them.
    pub report_tokens: bool,
    /// Count the decode re-reads of shared prefix blocks ([`BatchShape::decode_shared`]) in every step's
    /// shape: set it when the cost model prices them ([`CostModel::prices_shared_reads`]); it costs a walk
    /// over the step's prefix paths.
    pub count_shared_reads: bool,
}

impl Replica {
    /// A replica sized from the deployment's memory plan; fails if one request of the context limit cannot fit.
    pub fn new(d: &Deployment, seed: u64) -> Result<Replica, CapacityError> {
        let plan = d.memory_plan();
        let gib = serverbench_calibration::GIB;
        if plan.kv_pool_bytes <= 0.0 {
            return Err(CapacityError::NoRoom {
                weights_gib: plan.weights_bytes / gib,
                reserve_gib: plan.activation_bytes / gib,
                budget_gib: plan.budget_bytes / gib,
            });
        }
        let bs = d.engine.block_size;
        let block_bytes = plan.kv_bytes_per_token * bs as f64;
        let total = (plan.kv_pool_bytes / block_bytes).floor() as u64;
        let state_blocks = (plan.state_bytes_per_seq / block_bytes).ceil() as u32;
        let need = d.context_limit.div_ceil(bs) as u64 + state_blocks as u64;
        if need > total {
            return Err(CapacityError::ContextTooLong {
                context: d.context_limit,
                need,
                have: total,
                pool_gib: plan.kv_pool_bytes / gib,
                weights_gib: plan.weights_bytes / gib,
                kv_per_token: plan.kv_bytes_per_token,
            });
        }
        let window = d.model_spec().sliding_attention.and_then(|s| s.window);
        Ok(Replica {
            cfg: d.engine.clone(),
            kv: KvManager::new(total),
            state_blocks,
            window,
            seqs: Vec::new(),
            free_ids: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            step: Vec::new(),
            repeat: 1,
            run_ends: Vec::new(),
            run_occupancy: 0.0,
            run_truncatable: false,
            run_emit: Vec::new(),
            run_left: Vec::new(),
            in_run: false,
            last_preempted: false,
            plain_steps: 0,
            plain_limit: 0,
            spec: d.engine.speculative.clone(),
            spec_seed: serverbench_workloads::hash::mix2(seed, 0x5BEC),
            accept_below: acceptance_thresholds(d.engine.speculative.as_ref()),
            kv_bytes_per_token: plan.kv_bytes_per_token,
            host_bandwidth: d.hardware_spec().host_bandwidth,
            host_free_bytes: d.engine.swap_space_gib * serverbench_calibration::GIB,
            transfer_ns: 0,
            stats: EngineStats::default(),
            timeline: None,
            report_tokens: false,
            count_shared_reads: false,
        })
    }

    /// A replica with physical paging over exactly `total_blocks` blocks, for an engine that stores real
    /// KV (the CUDA engine): the same scheduler, with block tables. Models with per-sequence state,
    /// speculative decoding and swap preemption are not supported there.
    pub fn paged(cfg: &EngineConfig, total_blocks: u64, seed: u64) -> Result<Replica, String> {
        if cfg.speculative.is_some() {
            return Err(
                "speculative decoding is not supported by an engine with physical paging".into(),
            );
        }
        if cfg.preemption == Preemption::Swap {
            return Err(
                "swap preemption is not supported by an engine with physical paging; use recompute"
                    .into(),
            );
        }
        if total_blocks == 0 || total_blocks > u32::MAX as u64 {
            return Err(format!(
                "KV capacity of {total_blocks} blocks is out of range"
            ));
        }
        let mut d = Deployment::preset("qwen3-8b-1xh200").expect("built-in preset");
        d.engine = cfg.clone();
        let mut r = Replica::new(&d, seed).map_err(|e| e.to_string())?;
        r.kv = KvManager::paged(total_blocks);
        r.state_blocks = 0;
        r.window = None;
        Ok(r)
    }

    /// The scheduled step's entries, in batch order (valid between [`Replica::schedule`] and
    /// [`Replica::finish_step`]).
    pub fn step_entries(&self) -> impl Iterator<Item = StepEntry> + '_ {
        self.step.iter().map(|&(id, n, start)| {
            let s = &self.seqs[id as usize];
            StepEntry {
                seq: id,
                tag: s.tag,
                start,
                tokens: n,
                emits: start + n >= s.known(),
            }
        })
    }

    /// Appends the physical blocks holding sequence `seq`'s KV, in position order (paging only).
    pub fn block_table(&self, seq: u32, out: &mut Vec<u32>) {
        let s = &self.seqs[seq as usize];
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
    pub fn submit(&mut self, input: SeqInput) -> u32 {
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
            table: Vec::new(),
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.seqs[id as usize] = seq;
                id
            }
            None => {
                self.seqs.push(seq);
                self.seqs.len() as u32 - 1
            }
        };
        self.waiting.push_back(id);
        id
    }

    /// A sequence's progress.
    pub fn progress(&self, seq: u32) -> SeqProgress {
        let s = &self.seqs[seq as usize];
        SeqProgress {
            generated: s.generated,
            ..s.progress
        }
    }

    /// Tags of all sequences still in the engine (running, then waiting).
    pub fn in_flight(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.running
            .iter()
            .chain(self.waiting.iter())
            .map(|&id| (id, self.seqs[id as usize].tag))
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

    /// Puts a prompt's blocks in the prefix cache, unreferenced, as far as free memory allows (steady-state start).
    /// An engine with physical paging starts cold: nothing is warmed.
    pub fn warm(&mut self, blocks: &Blocks, workload_block_size: u32) {
        if !self.cfg.prefix_caching || self.kv.is_paged() {
            return;
        }
        let prompt = PromptBlocks::new(blocks.clone(), workload_block_size, self.cfg.block_size);
        let n = prompt.engine_blocks();
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
        (want).saturating_sub(s.shared + s.private)
    }

    /// Chooses the next step's batch; returns its shape, or `None` when there is nothing to run.
    pub fn schedule(&mut self) -> Option<BatchShape> {
        self.step.clear();
        match self.cfg.policy {
            Policy::Vllm => self.schedule_vllm(),
            Policy::Sglang => self.schedule_sglang(),
        }
        if self.step.is_empty() {
            return None;
        }
        let mut b = self.shape();
        if self.count_shared_reads && b.decode_seqs > 1 && self.window.is_none() {
            b.decode_shared = self.decode_shared_tokens();
        }
        Some(b)
    }

    /// Context tokens the step's decode sequences read that another of them reads too: the repeats of
    /// the cached prefix blocks they share (what an engine reads once and then finds in L2).
    fn decode_shared_tokens(&mut self) -> u64 {
        let (seqs, step) = (&self.seqs, &self.step);
        let decoding = step.iter().filter_map(|&(id, n, prefix)| {
            let s = &seqs[id as usize];
            Self::is_decode_entry(s, n, prefix).then_some(s.kv_node)
        });
        self.kv.cache.repeated_path_blocks(decoding) * self.cfg.block_size as u64
    }

    /// Time the last scheduled step spends moving swapped KV over the host link, ns (taken once).
    pub fn take_transfer_ns(&mut self) -> u64 {
        std::mem::take(&mut self.transfer_ns)
    }

    /// Tokens a decode entry reserves KV for: the next token plus any draft tokens being verified.
    #[inline]
    fn decode_reserve(&self) -> u32 {
        1 + self.spec.as_ref().map_or(0, |s| s.k)
    }

    #[inline]
    fn is_decoding(s: &Seq) -> bool {
        s.generated > 0 && s.known() - s.computed == 1
    }

    /// Whether a step entry of `n` tokens after `prefix` is a decode (its last output token's KV), not a
    /// prefill chunk.
    #[inline]
    fn is_decode_entry(s: &Seq, n: u32, prefix: u32) -> bool {
        n == 1 && s.generated > 0 && prefix + 1 == s.known()
    }

    /// vLLM: running decodes, then running prefill chunks, then (if nothing was preempted) waiting
    /// requests in arrival order.
    fn schedule_vllm(&mut self) {
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut preempted = false;
        for decode_phase in [true, false] {
            let mut i = 0;
            while i < self.running.len() && budget > 0 {
                let id = self.running[i];
                let s = &self.seqs[id as usize];
                let remaining = s.known() - s.computed;
                if (remaining == 1 && s.generated > 0) != decode_phase {
                    i += 1;
                    continue;
                }
                let n = remaining.min(budget);
                let reserve = if decode_phase {
                    self.decode_reserve()
                } else {
                    n
                };
                let add = self.blocks_to_add(s, s.computed + reserve);
                if !self.make_room(id, add, &mut budget, &mut preempted) {
                    continue; // it preempted itself: it was the newest, so the loop ends
                }
                self.grant(id, add);
                self.step.push((id, n, self.seqs[id as usize].computed));
                budget -= n;
                i += 1;
            }
        }
        self.last_preempted = preempted;
        if !preempted {
            self.admit_waiting(&mut budget, 0);
        }
    }

    /// SGLang: a prefill batch (running chunks, then waiting requests by longest cached prefix,
    /// admitted conservatively) whenever there is prefill work that fits; otherwise a decode batch.
    fn schedule_sglang(&mut self) {
        let mut budget = self.cfg.max_num_batched_tokens;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let s = &self.seqs[id as usize];
            i += 1;
            if s.generated > 0 && s.known() - s.computed == 1 {
                continue;
            }
            let n = (s.known() - s.computed).min(budget);
            let add = self.blocks_to_add(s, s.computed + n);
            if self.kv.allocate(add as u64) {
                self.grant(id, add);
                self.step.push((id, n, self.seqs[id as usize].computed));
                budget -= n;
            }
        }
        self.order_waiting_by_prefix();
        let reserve = self.decode_reservation();
        self.admit_waiting(&mut budget, reserve);
        if !self.step.is_empty() {
            return;
        }
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() {
            let id = self.running[i];
            let s = &self.seqs[id as usize];
            if !Self::is_decoding(s) {
                i += 1;
                continue;
            }
            let add = self.blocks_to_add(s, s.computed + self.decode_reserve());
            if !self.make_room(id, add, &mut budget, &mut preempted) {
                continue;
            }
            self.grant(id, add);
            self.step.push((id, 1, self.seqs[id as usize].computed));
            i += 1;
        }
    }

    /// Sorts the waiting queue by longest cached prefix (ties keep arrival order), as SGLang's LPM
    /// policy does while the queue is short (at most 128); longer queues stay first-come first-served.
    fn order_waiting_by_prefix(&mut self) {
        if self.waiting.len() < 2 || self.waiting.len() > 128 || !self.cfg.prefix_caching {
            return;
        }
        let mut keyed: Vec<(u32, u32)> = self
            .waiting
            .iter()
            .map(|&id| {
                let s = &self.seqs[id as usize];
                (
                    self.kv.cache.lookup(ROOT, 0, s.hashable, &s.prompt).blocks,
                    id,
                )
            })
            .collect();
        keyed.sort_by(|a, b| b.0.cmp(&a.0)); // stable: equal matches keep their order
        self.waiting = keyed.into_iter().map(|(_, id)| id).collect();
    }

    /// Blocks SGLang keeps free for the output the running requests have still to generate.
    fn decode_reservation(&self) -> u64 {
        let tokens: f64 = self
            .running
            .iter()
            .map(|&id| {
                let s = &self.seqs[id as usize];
                (s.output - s.generated).min(4096) as f64
            })
            .sum();
        (tokens * self.cfg.new_token_ratio / self.cfg.block_size as f64).ceil() as u64
    }

    /// Allocates `add` blocks for `id`, preempting the newest running sequences while they do not fit.
    /// Returns false if `id` itself had to be preempted.
    fn make_room(&mut self, id: u32, add: u32, budget: &mut u32, preempted: &mut bool) -> bool {
        while !self.kv.allocate(add as u64) {
            let victim = *self
                .running
                .last()
                .expect("a sequence that needs blocks is running");
            self.preempt(victim, budget);
            *preempted = true;
            if victim == id {
                return false;
            }
        }
        true
    }

    fn preempt(&mut self, id: u32, budget: &mut u32) {
        self.running.pop();
        if let Some(pos) = self.step.iter().position(|&(s, _, _)| s == id) {
            *budget += self.step.remove(pos).1;
        }
        self.release_kv(id);
        let bytes = self.seqs[id as usize].computed as f64 * self.kv_bytes_per_token;
        if self.cfg.preemption == Preemption::Swap && bytes > 0.0 && bytes <= self.host_free_bytes {
            self.host_free_bytes -= bytes;
            self.transfer_ns += (bytes / self.host_bandwidth * 1e9).round() as u64;
            self.stats.swaps += 1;
            let s = &mut self.seqs[id as usize];
            s.swapped = s.computed;
        }
        let s = &mut self.seqs[id as usize];
        s.computed = 0;
        s.progress.preemptions += 1;
        self.stats.preemptions += 1;
        self.waiting.push_front(id);
    }

    /// Gives `id` `add` more private blocks that [`KvManager::allocate`] has counted.
    fn grant(&mut self, id: u32, add: u32) {
        let s = &mut self.seqs[id as usize];
        s.private += add;
        self.kv.take_phys(add, &mut s.table);
    }

    fn release_kv(&mut self, id: u32) {
        let s = &mut self.seqs[id as usize];
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

    /// Admits waiting requests in queue order while their first chunk fits, keeping `reserve` blocks
    /// free; the first that does not fit stops admission.
    fn admit_waiting(&mut self, budget: &mut u32, reserve: u64) {
        let ebs = self.cfg.block_size;
        while *budget > 0 && self.running.len() < self.cfg.max_num_seqs as usize {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            if self.seqs[id as usize].swapped > 0 {
                if !self.swap_in(id, budget, reserve) {
                    break;
                }
                continue;
            }
            let s = &self.seqs[id as usize];
            let m = if self.cfg.prefix_caching {
                self.kv.cache.lookup(ROOT, 0, s.hashable, &s.prompt)
            } else {
                Match::default()
            };
            let computed = (m.blocks * ebs).min(s.known() - 1);
            let n = (s.known() - computed).min(*budget);
            let need = (computed + n).div_ceil(ebs).saturating_sub(m.blocks) + self.state_blocks;
            let conservative = if reserve > 0 || self.cfg.policy == Policy::Sglang {
                // SGLang admits only if the whole uncached prompt and a share of the output fit.
                let rest = (s.input.saturating_sub(computed)).div_ceil(ebs) as u64;
                let out = ((s.output - s.generated).min(4096) as f64 * self.cfg.new_token_ratio
                    / ebs as f64)
                    .ceil() as u64;
                reserve + rest.max(need as u64) + out
            } else {
                need as u64
            };
            if conservative > self.kv.available() - m.evictable {
                break;
            }
            let node = self.kv.cache.acquire(&m, ROOT);
            let ok = self.kv.allocate(need as u64);
            debug_assert!(ok, "admission checked the room");
            let s = &mut self.seqs[id as usize];
            s.kv_node = node;
            s.shared = m.blocks;
            s.private = 0;
            s.computed = computed;
            self.grant(id, need);
            let s = &mut self.seqs[id as usize];
            if !s.admitted {
                s.admitted = true;
                s.progress.cached_tokens = computed;
                self.stats.lookup_tokens += s.input as u64;
                self.stats.hit_tokens += computed as u64;
            }
            self.waiting.pop_front();
            self.running.push(id);
            self.step.push((id, n, computed));
            *budget -= n;
        }
    }

    /// Brings a swapped-out sequence back: all its KV into private blocks, copied over the host link.
    fn swap_in(&mut self, id: u32, budget: &mut u32, reserve: u64) -> bool {
        let s = &self.seqs[id as usize];
        let computed = s.swapped;
        let n = (s.known() - computed).min(*budget);
        let need = (computed + n).div_ceil(self.cfg.block_size) + self.state_blocks;
        if need as u64 + reserve > self.kv.available() || !self.kv.allocate(need as u64) {
            return false;
        }
        let bytes = computed as f64 * self.kv_bytes_per_token;
        self.host_free_bytes += bytes;
        self.transfer_ns += (bytes / self.host_bandwidth * 1e9).round() as u64;
        let s = &mut self.seqs[id as usize];
        s.private = 0;
        s.computed = computed;
        s.swapped = 0;
        self.grant(id, need);
        let s = &mut self.seqs[id as usize];
        s.inserted = true; // its prompt blocks stay private: swapped KV is not re-shared
        self.waiting.pop_front();
        self.running.push(id);
        self.step.push((id, n, computed));
        *budget -= n;
        true
    }

    fn shape(&self) -> BatchShape {
        let mut b = BatchShape::default();
        for &(id, n, prefix) in &self.step {
            let s = &self.seqs[id as usize];
            if Self::is_decode_entry(s, n, prefix) {
                match &self.spec {
                    Some(sp) => b.add_verify(prefix, sp.k, self.window),
                    None => b.add_decode(prefix, self.window),
                }
            } else {
                b.add_prefill(n, prefix, self.window);
            }
        }
        if let Some(sp) = &self.spec {
            if b.decode_seqs > 0 {
                b.draft_passes = sp.draft_passes();
            }
        }
        b
    }

    /// Tokens a verify step emits for sequence `id` when it still wants `left` tokens: accepted drafts
    /// (each accepted with α until the first rejection, at most `k`) plus the verifier's own token.
    ///
    /// The uniform behind the draw is a hash of the replica's seed, the request's tag and the output
    /// position the step starts at, not the next number of a stream: the same request at the same
    /// position always gets the same draw, whatever else shares the batch and however steps are
    /// grouped into runs, so a run cut short needs no rewinding.
    fn draw_tokens(&self, id: usize, left: u32) -> u32 {
        let s = &self.seqs[id];
        let position = (s.output - left) as u64;
        let h = acceptance_draw(s.draw_key, position);
        // P(accepted ≥ j) = α^j, so one uniform decides them all: accepted = #{j ≤ k : u < α^j}
        // (the same distribution as drawing each draft until the first rejection). Counted without
        // an early exit, so the random outcome costs no mispredicted branch.
        (accepted_drafts(h, &self.accept_below[kind_index(s.kind)]) + 1).min(left)
    }

    /// Tokens each scheduled decode sequence emits in the next step of a run (one, or a verify draw);
    /// true when one of them is done. Without speculation every step emits one token per sequence
    /// and nothing is recorded.
    #[inline(always)]
    fn emit_step(&mut self, left: &mut [u32]) -> bool {
        if self.spec.is_none() {
            self.plain_steps += 1;
            return self.plain_steps >= self.plain_limit;
        }
        self.emit_verify_step(left)
    }

    /// [`Replica::emit_step`] with speculation: one verify draw per sequence.
    fn emit_verify_step(&mut self, left: &mut [u32]) -> bool {
        let mut finished = false;
        for i in 0..self.step.len() {
            let m = self.draw_tokens(self.step[i].0 as usize, left[i]);
            self.run_emit.push(m);
            left[i] -= m;
            finished |= left[i] == 0;
        }
        finished
    }

    /// Extends a decode-only step into a run of decode steps, as long as nothing inside the engine could
    /// change the batch: no sequence finishes before the run's last step, no waiting request could be
    /// admitted, no step but the last ends at or after `stop_at` (the next request already due), no step
    /// ends after `window_end`, and the run's blocks fit in free memory (so nothing is evicted early).
    /// Speculative verify draws are made here, step by step, in the order a step-by-step engine makes
    /// them. Returns the run's total time (each step rounded as a single step would be), so one event
    /// can stand for the run. A request that arrives during the run cuts it short
    /// ([`Replica::truncate_run`]). Step-by-step simulation gives the same tokens, times and cache contents.
    #[allow(clippy::too_many_arguments)]
    pub fn extend_decode_run(
        &mut self,
        cost: &CostModel,
        first: &BatchShape,
        first_ns: u64,
        start: Time,
        stop_at: Option<Time>,
        next_event: Option<Time>,
        window_end: Time,
    ) -> u64 {
        self.repeat = 1;
        self.in_run = false;
        self.run_ends.clear();
        self.run_emit.clear();
        let admission_blocked =
            self.waiting.is_empty() || (self.cfg.policy == Policy::Vllm && !self.last_preempted);
        if first.prefill_seqs > 0
            || !admission_blocked
            || self.window.is_some()
            || self.timeline.is_some()
            || self.kv.is_paged()
        {
            return first_ns;
        }
        self.in_run = true;
        let mut left = std::mem::take(&mut self.run_left);
        left.clear();
        left.extend(self.step.iter().map(|&(id, _, _)| {
            let s = &self.seqs[id as usize];
            s.output - s.generated
        }));
        self.plain_steps = 0;
        self.plain_limit = left.iter().copied().min().unwrap_or(1);
        let limits = RunLimits {
            stop: stop_at.map_or(u64::MAX, |t| t.0),
            quiet: next_event.map_or(u64::MAX, |t| t.0),
            window_end: window_end.0,
        };
        let end = start.0 + first_ns;
        self.run_ends.push(end);
        let finished = self.emit_step(&mut left);
        let b = self.step.len();
        if let Some(k) = self.spec.as_ref().map(|sp| sp.k as f64) {
            // A verify of k drafts after context c attends k(c + 1) + k(k + 1)/2 pairs: whole numbers,
            // which f64 adds exactly, so the pairs grow by k per emitted token in any order of summing.
            let mut shape = *first;
            self.plan_run(end, limits, &mut left, finished, |r| {
                let emitted: u32 = r.run_emit[r.run_emit.len() - b..].iter().sum();
                shape.decode_context += emitted as u64;
                shape.full_pairs += k * emitted as f64;
                cost.step_ns(&shape)
            });
        } else {
            // Otherwise a step's shape depends on its entries' contexts only through their sum, which
            // grows by one token per entry and step: the clock times each step from that sum alone.
            let clock = cost.clock(first);
            let mut context = first.decode_context;
            self.plan_run(end, limits, &mut left, finished, |_| {
                context += b as u64;
                clock.ns(context)
            });
        }
        self.run_left = left;
        self.run_truncatable = true;
        let mut k = self.run_ends.len();
        let mut need = if k > 1 { self.run_blocks(k) } else { 0 };
        if k > 1 && need > self.kv.free() {
            // The run would evict cached blocks: keep it inside the quiet time before the next event of
            // any kind, so no arrival can cut it short after an eviction a step-by-step engine would
            // not yet have made.
            k = self.run_ends.partition_point(|&e| e <= limits.quiet).max(1);
            self.keep_steps(k);
            self.run_truncatable = false;
            need = if k > 1 { self.run_blocks(k) } else { 0 };
        }
        if k > 1 && !self.kv.allocate(need) {
            k = 1;
            self.keep_steps(1);
        }
        if k > 1 {
            for i in 0..self.step.len() {
                let id = self.step[i].0 as usize;
                let add = self.blocks_to_add(&self.seqs[id], self.run_reach(i, k));
                self.seqs[id].private += add;
            }
        }
        self.repeat = k as u32;
        self.run_ends[k - 1] - start.0
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
        while !finished && self.run_ends.len() < MAX_RUN && end < stop {
            let next = end + next_ns(self);
            if next > limits.window_end {
                break;
            }
            end = next;
            self.run_ends.push(end);
            finished = self.emit_step(left);
            let k = self.run_ends.len();
            if k.is_power_of_two() && stop > limits.quiet && self.run_blocks(k) > self.kv.free() {
                stop = limits.quiet;
            }
        }
    }

    /// Keeps the first `k` steps of the run (and the tokens they emit).
    fn keep_steps(&mut self, k: usize) {
        self.run_ends.truncate(k);
        if self.spec.is_some() {
            self.run_emit.truncate(k * self.step.len());
        }
    }

    /// Tokens entry `i` of the step emits in the first `k` steps of the run.
    #[inline]
    fn run_emitted(&self, i: usize, k: usize) -> u32 {
        if self.spec.is_none() {
            return k as u32;
        }
        let b = self.step.len();
        (0..k).map(|j| self.run_emit[j * b + i]).sum()
    }

    /// Tokens entry `i` of the step must have KV room for during the first `k` steps of the run: its
    /// computed tokens before the last of them, plus the last step's reservation.
    #[inline]
    fn run_reach(&self, i: usize, k: usize) -> u32 {
        self.seqs[self.step[i].0 as usize].computed
            + self.run_emitted(i, k - 1)
            + self.decode_reserve()
    }

    /// Blocks the scheduled decode sequences need to add for the first `k` steps of the run.
    fn run_blocks(&self, k: usize) -> u64 {
        (0..self.step.len())
            .map(|i| {
                self.blocks_to_add(&self.seqs[self.step[i].0 as usize], self.run_reach(i, k)) as u64
            })
            .sum()
    }

    /// Cuts a running decode run short because a request arrived at `at`: the run now ends with the
    /// first of its steps that ends at or after `at` (where a step-by-step engine would next look at
    /// its queue). Frees the blocks of the dropped steps, forgets the tokens they would have emitted, and
    /// returns the new end, or `None` when the run already ends there.
    pub fn truncate_run(&mut self, at: Time) -> Option<Time> {
        if self.repeat <= 1 || !self.run_truncatable {
            return None;
        }
        let keep = self.run_ends.partition_point(|&e| e < at.0) + 1;
        if keep >= self.repeat as usize {
            return None;
        }
        let (old_end, new_end) = (
            *self.run_ends.last().expect("a run"),
            self.run_ends[keep - 1],
        );
        let bs = self.cfg.block_size;
        for i in 0..self.step.len() {
            let id = self.step[i].0 as usize;
            let want = self.run_reach(i, keep).div_ceil(bs) + self.state_blocks;
            let s = &self.seqs[id];
            let excess = (s.shared + s.private).saturating_sub(want);
            self.seqs[id].private -= excess;
            self.kv.free_private(excess as u64);
        }
        self.keep_steps(keep);
        let removed = old_end - new_end;
        self.stats.steps -= self.repeat as u64 - keep as u64;
        self.stats.busy_ns -= removed;
        self.stats.occupancy_integral -= self.run_occupancy * removed as f64;
        self.repeat = keep as u32;
        Some(Time(new_end))
    }

    /// Records the step that was scheduled as starting at `start` and lasting `step_ns` (occupancy, timeline).
    pub fn note_step(&mut self, start: Time, step_ns: u64, shape: &BatchShape) {
        let occ = self.kv.used() as f64 / self.kv.total().max(1) as f64;
        self.run_occupancy = occ;
        self.stats.steps += self.repeat as u64;
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
        let ebs = self.cfg.block_size;
        let mut any_done = false;
        let (repeat, in_run) = (self.repeat as usize, self.in_run);
        self.repeat = 1;
        self.in_run = false;
        let b = self.step.len();
        for k in 0..b {
            let (id, n, _) = self.step[k];
            if in_run {
                // A run of decode steps: the tokens were drawn when the run was planned; no first
                // tokens and no cache inserts happen in decode steps.
                let m = self.run_emitted(k, repeat);
                if self.spec.is_some() {
                    self.stats.spec_verifies += repeat as u64;
                    self.stats.spec_tokens += m as u64;
                }
                any_done |= self.emit_decoded(id, m, false, events);
                continue;
            }
            let s = &mut self.seqs[id as usize];
            if self.spec.is_some() && n == 1 && Self::is_decoding(s) {
                let left = s.output - s.generated;
                let m = self.draw_tokens(id as usize, left);
                self.stats.spec_verifies += 1;
                self.stats.spec_tokens += m as u64;
                any_done |= self.emit_decoded(id, m, self.report_tokens, events);
                continue;
            }
            let s = &mut self.seqs[id as usize];
            s.computed += n;
            if !s.inserted
                && self.cfg.prefix_caching
                && s.computed >= s.hashable * ebs
                && s.hashable > s.shared
            {
                let (start, end) = (s.shared, s.hashable);
                let phys: Vec<u32> = if self.kv.is_paged() {
                    s.table.drain(..(end - start) as usize).collect()
                } else {
                    Vec::new()
                };
                let s = &self.seqs[id as usize];
                let node = self.kv.cache.insert(s.kv_node, start, end, &s.prompt, phys);
                let moved = end - start;
                self.kv.private_became_cached(moved as u64);
                let s = &mut self.seqs[id as usize];
                s.kv_node = node;
                s.shared = end;
                s.private -= moved;
            }
            let s = &mut self.seqs[id as usize];
            s.inserted = s.inserted || s.computed >= s.hashable * ebs;
            if s.computed < s.known() {
                continue;
            }
            s.generated += 1;
            if s.generated == 1 {
                events.push(SeqEvent::FirstToken { tag: s.tag });
            }
            if self.report_tokens {
                events.push(SeqEvent::Emitted {
                    tag: s.tag,
                    count: 1,
                });
            }
            if s.generated >= s.output {
                s.done = true;
                any_done = true;
                events.push(SeqEvent::Finished {
                    tag: s.tag,
                    seq: id,
                });
            }
        }
        if any_done {
            let mut finished = Vec::new();
            self.running.retain(|&id| {
                let done = self.seqs[id as usize].done;
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

    /// Recomputes the KV bookkeeping from scratch and compares it with the running counters:
    /// private blocks, cached and evictable blocks, reference counts, and `used <= total`.
    /// For tests and debugging; O(sequences × path length).
    pub fn audit(&self) -> Result<(), String> {
        let live: Vec<u32> = self
            .running
            .iter()
            .chain(self.waiting.iter())
            .copied()
            .collect();
        let private: u64 = live
            .iter()
            .map(|&id| self.seqs[id as usize].private as u64)
            .sum();
        let holders: Vec<u32> = live
            .iter()
            .map(|&id| self.seqs[id as usize].kv_node)
            .filter(|&n| n != ROOT)
            .collect();
        self.kv.audit(private, &holders)?;
        if self.kv.is_paged() {
            for &id in &live {
                let s = &self.seqs[id as usize];
                if s.table.len() != s.private as usize {
                    return Err(format!(
                        "sequence {id} counts {} private blocks but holds {} physical ids",
                        s.private,
                        s.table.len()
                    ));
                }
            }
            let tables: Vec<&[u32]> = live
                .iter()
                .map(|&id| self.seqs[id as usize].table.as_slice())
                .collect();
            self.kv.audit_phys(&tables)?;
        }
        for &id in &self.waiting {
            let s = &self.seqs[id as usize];
            if s.private != 0 || s.kv_node != ROOT {
                return Err(format!("waiting sequence {id} holds KV"));
            }
        }
        if self.running.len() > self.cfg.max_num_seqs as usize {
            return Err(format!(
                "{} running sequences exceed max_num_seqs {}",
                self.running.len(),
                self.cfg.max_num_seqs
            ));
        }
        Ok(())
    }

    /// A decoding sequence emitted `m` tokens (their KV is now computed); reports them when asked and
    /// the finish when it has all its output. Returns true if it finished.
    fn emit_decoded(&mut self, id: u32, m: u32, report: bool, events: &mut Vec<SeqEvent>) -> bool {
        let s = &mut self.seqs[id as usize];
        s.computed += m;
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

    /// Removes every sequence (the window closed); their progress stays readable until the next submit.
    pub fn cancel_all(&mut self) {
        let ids: Vec<u32> = self
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
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use serverbench_workloads::hash::mix2;

    #[test]
    fn hashed_acceptance_draws_follow_the_truncated_geometric_law() {
        let spec = Speculative {
            method: crate::deployment::SpecMethod::Mtp,
            k: 3,
            acceptance: 0.7,
            acceptance_by_kind: Default::default(),
            draft_params: None,
        };
        let below = &acceptance_thresholds(Some(&spec))[0];
        let key = serverbench_workloads::hash::mix2(7, 42);
        let n = 200_000u64;
        let mut counts = [0u64; 4];
        for pos in 0..n {
            counts[accepted_drafts(acceptance_draw(key, pos), below) as usize] += 1;
        }
        // P(accepted = j) = α^j (1 − α) for j < k, and α^k for j = k.
        let want = [0.3, 0.21, 0.147, 0.343];
        for (j, (&c, w)) in counts.iter().zip(want).enumerate() {
            let got = c as f64 / n as f64;
            assert!((got - w).abs() < 0.004, "accepted = {j}: {got} vs {w}");
        }
        let sure = Speculative {
            acceptance: 1.0,
            ..spec
        };
        let below = &acceptance_thresholds(Some(&sure))[0];
        assert_eq!(accepted_drafts(u64::MAX - 1, below), 3);
        assert!(acceptance_thresholds(None).iter().all(|t| t.is_empty()));
    }

    /// A small paged replica under pressure: shared prefixes, chunked prefill, preemption, eviction.
    /// A paged run's block tables (tag, table) per step entry, and per step the decode re-reads the
    /// scheduler's shape counts beside those its block tables show (Σ decode blocks − distinct blocks).
    #[allow(clippy::type_complexity)]
    fn paged_run(total_blocks: u64, seed: u64) -> (Vec<(u64, Vec<u32>)>, Vec<(u64, u64)>) {
        let cfg = EngineConfig {
            block_size: 4,
            max_num_batched_tokens: 24,
            max_num_seqs: 6,
            ..EngineConfig::default()
        };
        let mut r = Replica::paged(&cfg, total_blocks, seed).unwrap();
        r.count_shared_reads = true;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut events = Vec::new();
        let mut tables = Vec::new();
        let mut shared = Vec::new();
        let mut inputs = std::collections::HashMap::new();
        let mut next_tag = 0u64;
        for _ in 0..400 {
            if r.running() + r.waiting() < 8 && rng.random::<f64>() < 0.3 {
                // Prompts share a 3-block system prefix and some share a second-level prefix.
                let family = rng.random_range(0..3u64);
                let own = rng.random_range(0..4u64);
                let mut chain = vec![1, 2, 3, 10 + family];
                for k in 0..own {
                    chain.push(mix2(next_tag, k));
                }
                let blocks = serverbench_workloads::hash::chain_ids(&chain, 0);
                let input = chain.len() as u32 * 4 + rng.random_range(0..4u32);
                inputs.insert(next_tag, input);
                r.submit(SeqInput {
                    tag: next_tag,
                    blocks: Blocks::from_vec(blocks),
                    workload_block_size: 4,
                    input,
                    output: rng.random_range(1..12u32),
                    kind: RequestKind::RootTurn,
                });
                next_tag += 1;
            }
            let Some(shape) = r.schedule() else {
                continue;
            };
            let entries: Vec<StepEntry> = r.step_entries().collect();
            let (mut read, mut distinct) = (0u64, std::collections::HashSet::new());
            for e in entries {
                let mut t = Vec::new();
                r.block_table(e.seq, &mut t);
                let used = (e.start + e.tokens).div_ceil(4) as usize;
                assert!(
                    t.len() >= used,
                    "the table covers every position the step writes"
                );
                if e.tokens == 1 && e.start >= inputs[&e.tag] {
                    read += used as u64;
                    distinct.extend(t[..used].iter().copied());
                }
                tables.push((e.tag, t));
            }
            shared.push((shape.decode_shared, (read - distinct.len() as u64) * 4));
            r.finish_step(&mut events);
            r.audit().unwrap();
        }
        (tables, shared)
    }

    #[test]
    fn physical_paging_keeps_every_block_in_one_place() {
        for seed in 0..8 {
            paged_run(40, seed);
        }
    }

    #[test]
    fn decode_steps_count_the_shared_prefix_reads_their_block_tables_show() {
        let (_, shared) = paged_run(400, 3);
        for (i, &(sim, tables)) in shared.iter().enumerate() {
            assert_eq!(sim, tables, "step {i}: repeated decode reads");
        }
        let sharing = shared.iter().filter(|s| s.0 > 0).count();
        assert!(sharing > 20, "only {sharing} steps re-read a shared block");
    }

    #[test]
    fn sequences_with_a_cached_prefix_read_the_same_physical_blocks() {
        let (tables, _) = paged_run(400, 3);
        // The shared 3-block system prefix (12 tokens = 3 engine blocks) sits in the same blocks for
        // every sequence that found it cached.
        let firsts: std::collections::HashSet<Vec<u32>> = tables
            .iter()
            .filter(|(_, t)| t.len() >= 3)
            .map(|(_, t)| t[..3].to_vec())
            .collect();
        assert!(
            firsts.len() < tables.len() / 4,
            "prefix blocks are reused: {} distinct prefixes over {} steps",
            firsts.len(),
            tables.len()
        );
    }
}
