//! FlashAttention 3's split-KV decode schedule (vLLM's `FLASH_ATTN` backend on Hopper): how many pieces
//! each decode's KV is cut into, how much longer than its bytes alone the step's attention takes when
//! those pieces do not fill the GPU evenly, and how much of a shared prefix the GPU's L2 serves to the
//! pieces that re-read it. Pure arithmetic; never sees a request or a clock.
//!
//! The rule, read from FlashAttention 3's `prepare_varlen_num_blocks` (the scheduler vLLM 0.26.0 calls
//! through `get_scheduler_metadata` with `num_splits` 32 in a CUDA graph): the KV of a sequence is
//! `⌈context / 128⌉` blocks; with `N` blocks in the whole batch and `h` KV heads, each SM is given
//! `⌈1.1 · N · h / SMs⌉` blocks, and a sequence of `n` blocks is split into `min(⌈n / that⌉, 32)`
//! pieces, at least 1. Each (piece, KV head) is one thread block that reads its share of the KV. The
//! 10 % margin leaves about 120 blocks for the 132 SMs of an H200 when the contexts are equal; each
//! sequence rounding its own piece count up can push unequal batches past the SM count, and the blocks
//! left over run in a second pass that the few SMs running them cannot read at the GPU's bandwidth.
//! The device measured both (`results/h200-vllm/split-kv/`): the split counts exactly, and a batch of
//! 3 sequences of 59,920, 154,391 and 57,090 tokens taking 3 ms longer a step than 3 equal ones.
//!
//! Time model: thread blocks start in the batch's order (sequence, then piece, then head: the order the
//! kernel's grid enumerates them) as SMs free up; every running block reads at the same rate, the
//! bandwidth shared among them but never more than one SM's own read rate
//! ([`HardwareSpec::sm_read_bandwidth`]). The excess is the time beyond the bytes at full bandwidth, as
//! decode context tokens read at that bandwidth. A ragged batch of more blocks than SMs leaves its
//! later sequences' long pieces to the second pass; started longest first, the H200 bench's ragged 16-
//! and 32-sequence batches came out 7–20 % short, in batch order 3–6 % (`split-kv/order-check.md`).
//!
//! L2 reuse ([`L2Reuse`], where the GPU's file gives it): decodes whose block tables hold the same pages
//! (a shared prefix) read those pages once from memory and again from the L2 when another thread block
//! read them shortly before. Thread blocks start in the batch's order as the SMs free up, each reading
//! one 128-key block a block-time and walking its piece from its last block to its first
//! (FlashAttention's loop runs from the causal edge back); a re-read of a shared block `gap`
//! block-times after the nearest earlier read of it by the same KV head is served from the L2 with
//! probability `exp(−gap / window)`, costing `hit_cost` of a read from memory. [`SharedReads`] says
//! which decodes share which blocks.
//!
//! [`HardwareSpec::sm_read_bandwidth`]: crate::HardwareSpec::sm_read_bandwidth

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Tokens per KV block of FlashAttention 3's decode kernel (`kBlockN` for head size 128 and paged KV).
pub const BLOCK_TOKENS: u32 = 128;
/// The most pieces a sequence is split into: vLLM's `flash_attn_max_num_splits_for_cuda_graph`.
pub const MAX_SPLITS: u32 = 32;

/// One deployment's split-KV schedule: its GPU's SMs, how many of them saturate its memory, and its L2.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplitKv {
    /// Streaming multiprocessors of one GPU.
    pub sms: u32,
    /// Thread blocks that read at the GPU's full bandwidth together (memory bandwidth over one SM's
    /// read rate); fewer read at that many's share each.
    pub saturating_blocks: u32,
    /// KV heads one GPU holds (the model's over tensor parallelism).
    pub kv_heads: u32,
    /// How the L2 serves re-reads of blocks several decodes share; `None` where not modelled.
    pub l2: Option<L2Reuse>,
}

/// The L2's share of a decode batch's re-reads of shared KV blocks, as a GPU's file gives it
/// ([`crate::HardwareSpec::l2_reuse`]).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct L2Reuse {
    /// Block-times (one thread block reading one 128-key block) over which a re-read's chance of
    /// finding the block in the L2 falls by a factor of e.
    pub window_blocks: f64,
    /// What a read served from the L2 costs, as a share of one from memory (0 to 1).
    pub hit_cost: f64,
}

/// Which decodes of a batch read the same physical KV blocks: one entry per (shared run, decode), where
/// a shared run is any run of blocks two or more decodes hold in common (its `group`, e.g. a prefix
/// cache node; every reader of a group reads the same run). Only 128-key blocks whose keys all lie in
/// the run count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedReads {
    /// (group, first block, end block, decode index in the batch).
    reads: Vec<(u32, u32, u32, u32)>,
}

impl SharedReads {
    /// No shared blocks.
    pub fn clear(&mut self) {
        self.reads.clear();
    }

    /// Whether no block is shared.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty()
    }

    /// Records that decode `decode` (its index in the batch) reads the 128-key blocks of group `group`
    /// that lie wholly in tokens `from..to` of its context.
    pub fn add(&mut self, group: u32, from: u64, to: u64, decode: u32) {
        let b = BLOCK_TOKENS as u64;
        let block = |t: u64| u32::try_from(t).unwrap_or(u32::MAX);
        let (first, end) = (block(from.div_ceil(b)), block(to / b));
        if first < end {
            self.reads.push((group, first, end, decode));
        }
    }

    /// Every one of `decodes` decodes reads the same first `tokens` tokens (a common system prompt).
    pub fn common_prefix(decodes: u32, tokens: u64) -> SharedReads {
        let mut reads = SharedReads::default();
        if decodes > 1 {
            for d in 0..decodes {
                reads.add(0, 0, tokens, d);
            }
        }
        reads
    }

    /// Sorts the entries so that the readers of one block are adjacent.
    fn sort(&mut self) {
        self.reads.sort_unstable();
    }
}

/// Buffers the schedule's arithmetic reuses from one step to the next.
#[derive(Clone, Debug, Default)]
pub struct SplitScratch {
    groups: Vec<Group>,
    running: BinaryHeap<Reverse<(u64, u64)>>,
    /// (blocks, blocks per piece, first thread block) of each decode.
    geometry: Vec<(u64, u64, u32)>,
    /// Each thread block's start, block-times, in the batch's order, and the SMs' next free times.
    starts: Vec<u64>,
    sm_free: BinaryHeap<Reverse<u64>>,
    /// Blocks at which some reader of a shared run enters a new piece.
    cuts: Vec<u64>,
    times: Vec<u64>,
    /// `exp(−gap / window)` for whole gaps, and the window it was made for.
    decay: Vec<f64>,
    decay_window: f64,
}

/// Thread blocks of one sequence's pieces: `count` blocks each reading `tokens` tokens of one head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    tokens: u64,
    count: u32,
}

/// What the split-KV schedule does to one decode step's reads, in decode context tokens read at the
/// full bandwidth: the time its uneven pieces add, and the time the L2 saves on shared blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitCost {
    /// [`crate::BatchShape::decode_split_excess`].
    pub excess: u64,
    /// [`crate::BatchShape::decode_l2_saved`].
    pub l2_saved: u64,
}

impl SplitKv {
    /// Pieces each sequence of a decode batch is split into, for KV contexts (keys) of `contexts`.
    pub fn splits(&self, contexts: &[u32]) -> Vec<u32> {
        let per_sm = self.blocks_per_sm(contexts);
        contexts
            .iter()
            .map(|&c| pieces(blocks(c), per_sm))
            .collect()
    }

    /// `⌈1.1 · N · h / SMs⌉` as FlashAttention 3 computes it (in `f32`), at least 1.
    fn blocks_per_sm(&self, contexts: &[u32]) -> u64 {
        let total: u64 = contexts.iter().map(|&c| blocks(c)).sum();
        let x = total as f32 * 1.1f32 * self.kv_heads as f32 / self.sms.max(1) as f32;
        (x.ceil() as u64).max(1)
    }

    /// Decode context tokens' worth of reading that the schedule adds to a step whose decodes read
    /// `contexts` keys each: 0 when the pieces keep enough SMs reading to the end.
    pub fn excess_tokens(&self, contexts: &[u32]) -> u64 {
        self.cost(
            contexts,
            &SharedReads::default(),
            &mut SplitScratch::default(),
        )
        .excess
    }

    /// The schedule's excess and L2 saving for a step whose decodes read `contexts` keys each and
    /// share the blocks `shared` lists (sorted or not).
    pub fn cost_of(&self, contexts: &[u32], shared: &SharedReads) -> SplitCost {
        let mut sorted = shared.clone();
        sorted.sort();
        self.cost(contexts, &sorted, &mut SplitScratch::default())
    }

    /// [`SplitKv::cost_of`] with `shared` sorted and buffers kept from an earlier call.
    fn cost(
        &self,
        contexts: &[u32],
        shared: &SharedReads,
        scratch: &mut SplitScratch,
    ) -> SplitCost {
        let context: u64 = contexts.iter().map(|&c| c as u64).sum();
        SplitCost {
            excess: self.overrun(contexts, scratch).scale(context),
            l2_saved: self.l2_saved(contexts, shared, scratch),
        }
    }

    /// The schedule's time beyond its reads, and its reads, for these contexts: all it depends on is
    /// each context's block count.
    fn overrun(&self, contexts: &[u32], scratch: &mut SplitScratch) -> Overrun {
        if contexts.is_empty() || self.kv_heads == 0 || self.sms == 0 {
            return Overrun { extra: 0, work: 1 };
        }
        let groups = &mut scratch.groups;
        self.groups(contexts, groups);
        let work: u64 = groups.iter().map(|g| g.tokens * g.count as u64).sum();
        let blocks: u64 = groups.iter().map(|g| g.count as u64).sum();
        let extra = if blocks <= self.sms as u64 {
            groups.sort_unstable_by(|a, b| b.cmp(a));
            self.one_pass_extra(groups)
        } else {
            self.span(groups, &mut scratch.running).saturating_sub(work)
        };
        Overrun {
            extra,
            work: work.max(1),
        }
    }

    /// `span − work` when every thread block starts at once (no more blocks than SMs): while `r` blocks
    /// are left reading, `r` under the saturating count, the GPU reads at `r / saturating_blocks` of its
    /// bandwidth, so only the longest blocks' tail adds time.
    fn one_pass_extra(&self, longest_first: &[Group]) -> u64 {
        let floor = self.saturating_blocks.max(1) as u64;
        let (mut extra, mut left) = (0u64, 0u64);
        for (i, g) in longest_first.iter().enumerate() {
            left += g.count as u64;
            if left >= floor {
                break;
            }
            let next = longest_first.get(i + 1).map_or(0, |h| h.tokens);
            extra += (g.tokens - next) * (floor - left);
        }
        extra
    }

    /// The thread blocks of the batch, grouped by the tokens each reads, into `out`, in the batch's
    /// order (a sequence's full pieces, then its shorter last one).
    fn groups(&self, contexts: &[u32], out: &mut Vec<Group>) {
        out.clear();
        let per_sm = self.blocks_per_sm(contexts);
        for &c in contexts {
            let n = blocks(c);
            let k = pieces(n, per_sm) as u64;
            let per_piece = n.div_ceil(k);
            let full = n / per_piece;
            let last = n - full * per_piece;
            let mut push = |blk: u64, pieces: u64| {
                if blk > 0 && pieces > 0 {
                    out.push(Group {
                        tokens: blk * BLOCK_TOKENS as u64,
                        count: (pieces * self.kv_heads as u64) as u32,
                    });
                }
            };
            push(per_piece, full);
            push(last, 1);
        }
    }

    /// Time to read every group, started in the given order on `sms` slots as they free up, in one
    /// head's tokens at the full bandwidth: running blocks share the bandwidth, each at most
    /// `1 / saturating_blocks` of it.
    fn span(&self, in_order: &[Group], running: &mut BinaryHeap<Reverse<(u64, u64)>>) -> u64 {
        let slots = self.sms as u64;
        let floor = self.saturating_blocks.max(1) as u64;
        running.clear();
        let (mut next, mut waiting_in_next) = (0usize, in_order.first().map_or(0, |g| g.count));
        let (mut now, mut span, mut busy) = (0u64, 0u64, 0u64);
        loop {
            while busy < slots && next < in_order.len() {
                let take = (slots - busy).min(waiting_in_next as u64);
                running.push(Reverse((now + in_order[next].tokens, take)));
                busy += take;
                waiting_in_next -= take as u32;
                if waiting_in_next == 0 {
                    next += 1;
                    waiting_in_next = in_order.get(next).map_or(0, |g| g.count);
                }
            }
            let Some(Reverse((end, _))) = running.peek().copied() else {
                return span;
            };
            span += (end - now) * busy.max(floor);
            now = end;
            while let Some(&Reverse((e, n))) = running.peek() {
                if e != end {
                    break;
                }
                running.pop();
                busy -= n;
            }
        }
    }

    /// Decode context tokens' worth of reading the L2 saves: for each shared block and KV head, its
    /// readers' read times sorted, each re-read a hit with probability `exp(−gap / window)`, each hit
    /// saving `1 − hit_cost` of its 128 keys' read (the heads' mean). `shared` is sorted.
    fn l2_saved(&self, contexts: &[u32], shared: &SharedReads, scratch: &mut SplitScratch) -> u64 {
        let Some(l2) = self.l2 else { return 0 };
        if shared.is_empty() || contexts.len() < 2 || self.kv_heads == 0 || self.sms == 0 {
            return 0;
        }
        self.start_times(contexts, scratch);
        scratch.set_decay(l2.window_blocks);
        let heads = self.kv_heads as usize;
        // One wave: every thread block starts at once, and every head reads alike.
        let one_wave = scratch.starts.len() <= self.sms as usize;
        let mut hits = 0.0;
        for readers in shared.reads.chunk_by(|a, b| a.0 == b.0) {
            let (lo, hi) = (readers[0].1 as u64, readers[0].2 as u64);
            scratch.cuts.clear();
            scratch.cuts.extend([lo, hi]);
            for &(_, _, _, d) in readers {
                if let Some(&(_, pp, _)) = scratch.geometry.get(d as usize) {
                    let first_cut = (lo / pp + 1) * pp;
                    scratch.cuts.extend((first_cut..hi).step_by(pp as usize));
                }
            }
            scratch.cuts.sort_unstable();
            scratch.cuts.dedup();
            for w in 0..scratch.cuts.len() - 1 {
                let (a, b) = (scratch.cuts[w], scratch.cuts[w + 1]);
                let per_block = if one_wave {
                    heads as f64 * scratch.segment_hits(readers, a, heads, 0)
                } else {
                    (0..heads)
                        .map(|h| scratch.segment_hits(readers, a, heads, h))
                        .sum()
                };
                hits += (b - a) as f64 * per_block;
            }
        }
        let saved = hits / heads as f64 * BLOCK_TOKENS as f64 * (1.0 - l2.hit_cost).clamp(0.0, 1.0);
        saved.round() as u64
    }

    /// Each decode's (blocks, blocks per piece, its first thread block), and each thread block's start
    /// in block-times: started in the batch's order (sequence, piece, head) as the SMs free up, each
    /// SM reading one block a block-time.
    fn start_times(&self, contexts: &[u32], scratch: &mut SplitScratch) {
        let per_sm = self.blocks_per_sm(contexts);
        let (heads, sms) = (self.kv_heads as u64, self.sms as usize);
        let (geometry, starts, free) = (
            &mut scratch.geometry,
            &mut scratch.starts,
            &mut scratch.sm_free,
        );
        geometry.clear();
        starts.clear();
        free.clear();
        for &c in contexts {
            let n = blocks(c);
            let pp = n.div_ceil(pieces(n, per_sm) as u64);
            geometry.push((n, pp, starts.len() as u32));
            for j in 0..n.div_ceil(pp) {
                let len = pp.min(n - j * pp);
                for _ in 0..heads {
                    // The first wave starts at once; later blocks take the SM that frees first.
                    let t = if starts.len() < sms {
                        0
                    } else {
                        free.pop().map_or(0, |Reverse(t)| t)
                    };
                    starts.push(t);
                    free.push(Reverse(t + len));
                }
            }
        }
    }
}

impl SplitScratch {
    /// The L2 hits of head `h` at one block of a segment that starts at block `a`, where no reader
    /// changes piece: each reader's read of block `b` comes at its piece's start plus its piece's last
    /// block minus `b`, so the gaps, and the hits, are the same at every block of the segment.
    fn segment_hits(
        &mut self,
        readers: &[(u32, u32, u32, u32)],
        a: u64,
        heads: usize,
        h: usize,
    ) -> f64 {
        self.times.clear();
        for &(_, _, _, d) in readers {
            let Some(&(n, pp, first)) = self.geometry.get(d as usize) else {
                continue;
            };
            if a < n {
                let j = a / pp;
                let tb = first as usize + j as usize * heads + h;
                self.times.push(self.starts[tb] + ((j + 1) * pp).min(n) - 1);
            }
        }
        self.times.sort_unstable();
        self.times
            .windows(2)
            .map(|w| {
                self.decay
                    .get((w[1] - w[0]) as usize)
                    .copied()
                    .unwrap_or(0.0)
            })
            .sum()
    }

    /// Fills the table of `exp(−gap / window)` for the gaps at which it is above 1e-12.
    fn set_decay(&mut self, window: f64) {
        if self.decay_window == window && !self.decay.is_empty() {
            return;
        }
        let w = window.max(1e-3);
        let len = ((w * 27.7).ceil() as usize).clamp(1, 1 << 20);
        self.decay.clear();
        self.decay.extend((0..len).map(|g| (-(g as f64) / w).exp()));
        self.decay_window = window;
    }
}

/// A schedule's span beyond its reads (`extra`) and its reads (`work`), in one head's tokens at the
/// full bandwidth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Overrun {
    extra: u64,
    work: u64,
}

impl Overrun {
    /// The overrun as tokens of a step whose decodes read `context` keys in all.
    fn scale(self, context: u64) -> u64 {
        (self.extra as u128 * context as u128 / self.work as u128) as u64
    }
}

/// The split-KV cost of each step of a run of decode steps, where every sequence reads one key more
/// a step: recomputed only when a context enters a new block, so each step gets the bits
/// [`SplitKv::cost_of`] gives for its own contexts. Its buffers are kept from one run to the next.
#[derive(Clone, Debug, Default)]
pub struct SplitRun {
    split: SplitKv,
    /// Keys each sequence reads in the run's first step.
    first: Vec<u32>,
    keys: Vec<u32>,
    /// The blocks the run's decodes share (sorted).
    shared: SharedReads,
    scratch: SplitScratch,
    step: u32,
    /// The step at which some context next enters a new block.
    next: u32,
    overrun: Overrun,
    l2_saved: u64,
}

impl SplitRun {
    /// A run whose first step's sequences read `first` keys each and share no block.
    pub fn new(split: SplitKv, first: Vec<u32>) -> SplitRun {
        let mut run = SplitRun::default();
        run.start(split, first.into_iter(), &SharedReads::default());
        run
    }

    /// Starts a run (reusing the buffers) whose first step's sequences read `first` keys each and
    /// share the blocks `shared` lists; returns that step's cost, [`SplitKv::cost_of`] of those keys.
    pub fn start(
        &mut self,
        split: SplitKv,
        first: impl Iterator<Item = u32>,
        shared: &SharedReads,
    ) -> SplitCost {
        self.split = split;
        self.first.clear();
        self.first.extend(first);
        self.shared.clone_from(shared);
        self.shared.sort();
        self.step = 0;
        self.next = steps_to_next_block(&self.first);
        (self.overrun, self.l2_saved) = price(split, &self.first, &self.shared, &mut self.scratch);
        let keys: u64 = self.first.iter().map(|&k| k as u64).sum();
        self.cost(keys)
    }

    /// The cost of the run's next step, whose sequences read `keys` keys in all.
    pub fn next_cost(&mut self, keys: u64) -> SplitCost {
        self.step += 1;
        if self.step >= self.next {
            let step = self.step;
            self.keys.clear();
            self.keys
                .extend(self.first.iter().map(|&k| k.saturating_add(step)));
            (self.overrun, self.l2_saved) =
                price(self.split, &self.keys, &self.shared, &mut self.scratch);
            self.next = step + steps_to_next_block(&self.keys);
        }
        self.cost(keys)
    }

    fn cost(&self, keys: u64) -> SplitCost {
        SplitCost {
            excess: self.overrun.scale(keys),
            l2_saved: self.l2_saved,
        }
    }
}

/// A step's overrun and L2 saving for these keys (`shared` sorted): what a run keeps between the steps
/// at which some context enters a new block.
fn price(
    split: SplitKv,
    keys: &[u32],
    shared: &SharedReads,
    scratch: &mut SplitScratch,
) -> (Overrun, u64) {
    (
        split.overrun(keys, scratch),
        split.l2_saved(keys, shared, scratch),
    )
}

/// Steps until the first of these key counts, each growing by one a step, enters a new block.
fn steps_to_next_block(keys: &[u32]) -> u32 {
    let b = BLOCK_TOKENS;
    keys.iter()
        .map(|&k| match (b + 1 - k % b) % b {
            0 => b,
            d => d,
        })
        .min()
        .unwrap_or(u32::MAX)
}

/// KV blocks of a context.
fn blocks(context: u32) -> u64 {
    (context as u64).div_ceil(BLOCK_TOKENS as u64)
}

/// Pieces a sequence of `n` blocks is split into when each SM is given `per_sm` blocks.
fn pieces(n: u64, per_sm: u64) -> u32 {
    n.div_ceil(per_sm).clamp(1, MAX_SPLITS as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded xorshift: `next(m)` draws below `m`.
    fn xorshift(mut z: u64) -> impl FnMut(u64) -> u64 {
        move |m| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            z % m
        }
    }

    /// Qwen3-8B (8 KV heads) on one H200: 132 SMs, 75 blocks saturate its memory.
    fn h200() -> SplitKv {
        SplitKv {
            sms: 132,
            saturating_blocks: 75,
            kv_heads: 8,
            l2: None,
        }
    }

    /// The split counts FlashAttention 3 returned on the H200 for these batches (its scheduler
    /// metadata, `results/h200-vllm/split-kv/fa3-bench/fa3.json`).
    #[test]
    fn splits_are_the_ones_the_gpu_chose() {
        let cases: [(&[u32], &[u32]); 9] = [
            (&[1024], &[8]),
            (&[131_072], &[15]),
            (&[65_536, 65_536], &[8, 8]),
            (&[43_690, 43_690, 43_690], &[5, 5, 5]),
            (&[21_845; 6], &[3; 6]),
            (&[16_384, 16_384, 16_384, 147_456], &[2, 2, 2, 12]),
            (&[8192, 122_880], &[1, 14]),
            (&[20_000, 60_000, 180_000], &[2, 4, 11]),
            (&[59_920, 154_391, 57_090], &[4, 9, 4]),
        ];
        for (ctx, want) in cases {
            assert_eq!(h200().splits(ctx), want, "{ctx:?}");
        }
    }

    /// Equal contexts fill at most 132 SMs in one pass and cost their bytes alone; the unequal batches
    /// the GPU ran slower get an excess of the size measured (3.2 ms a step of 36 layers at 32 µs
    /// per 1K tokens: about 100K tokens).
    #[test]
    fn only_batches_that_overflow_the_sms_pay_more() {
        let s = h200();
        for ctx in [
            vec![131_072],
            vec![65_536; 2],
            vec![43_690; 3],
            vec![32_768; 4],
            vec![16_384; 8],
            vec![24_576; 16],
        ] {
            assert_eq!(s.excess_tokens(&ctx), 0, "{ctx:?}");
        }
        let ragged = s.excess_tokens(&[59_920, 154_391, 57_090]);
        assert!((90_000..110_000).contains(&ragged), "{ragged}");
        // Six equal sequences round up to 3 pieces each: 144 blocks, 12 of them in a second pass.
        let six = s.excess_tokens(&[43_690; 6]);
        assert!(six > 40_000, "{six}");
        // No decodes, no heads or no SMs: nothing to add.
        assert_eq!(s.excess_tokens(&[]), 0);
        assert_eq!(SplitKv { sms: 0, ..s }.excess_tokens(&[100; 3]), 0);
    }

    /// A run's excess, step by step, is what each step's own contexts give.
    #[test]
    fn a_run_gives_each_step_its_own_excess() {
        let s = h200();
        let first = vec![59_920, 154_391, 57_090, 300, 127, 128, 129];
        let mut run = SplitRun::new(s, first.clone());
        for t in 1..400u32 {
            let keys: Vec<u32> = first.iter().map(|&k| k + t).collect();
            let sum: u64 = keys.iter().map(|&k| k as u64).sum();
            assert_eq!(
                run.next_cost(sum).excess,
                s.excess_tokens(&keys),
                "step {t}"
            );
        }
        assert_eq!(steps_to_next_block(&[128]), 1);
        assert_eq!(steps_to_next_block(&[129]), 128);
        assert_eq!(steps_to_next_block(&[127, 300]), 2);
    }

    /// A lone short piece reads at one SM's rate: its time is its tokens times the saturating count.
    #[test]
    fn a_lone_block_reads_at_one_sms_rate() {
        let s = SplitKv {
            sms: 132,
            saturating_blocks: 75,
            kv_heads: 1,
            l2: None,
        };
        // One block of 128 tokens: span 128 × 75, work 128, excess 74 × the context.
        assert_eq!(s.excess_tokens(&[100]), 74 * 100);
        let mut heap = BinaryHeap::new();
        assert_eq!(
            s.span(
                &[Group {
                    tokens: 128,
                    count: 1
                }],
                &mut heap
            ),
            128 * 75
        );
        // 200 equal blocks on 132 slots: the first 132 together, then 68 under the floor of 75.
        let g = [Group {
            tokens: 10,
            count: 200,
        }];
        assert_eq!(s.span(&g, &mut heap), 10 * 132 + 10 * 75);
    }

    /// The one-pass shortcut is the general schedule's time whenever the blocks fit the SMs.
    #[test]
    fn the_one_pass_shortcut_agrees_with_the_schedule() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let (mut heap, mut groups, mut one_pass) = (BinaryHeap::new(), Vec::new(), 0);
        for _ in 0..2000 {
            let s = SplitKv {
                sms: 132,
                saturating_blocks: 1 + next(132) as u32,
                kv_heads: 1 + next(8) as u32,
                l2: None,
            };
            let contexts: Vec<u32> = (0..1 + next(12))
                .map(|_| 1 + next(200_000) as u32)
                .collect();
            s.groups(&contexts, &mut groups);
            groups.sort_unstable_by(|a, b| b.cmp(a));
            if groups.iter().map(|g| g.count as u64).sum::<u64>() > 132 {
                continue;
            }
            one_pass += 1;
            let work: u64 = groups.iter().map(|g| g.tokens * g.count as u64).sum();
            let span = s.span(&groups, &mut heap);
            assert_eq!(s.one_pass_extra(&groups), span - work, "{s:?} {contexts:?}");
        }
        assert!(one_pass > 500, "{one_pass} one-pass cases");
    }

    /// The soft L2 window fitted to the H200 bench (`l2_reuse_model.py --fit-soft`, order s,j,h).
    fn h200_l2() -> SplitKv {
        SplitKv {
            l2: Some(L2Reuse {
                window_blocks: 16.0,
                hit_cost: 0.68,
            }),
            ..h200()
        }
    }

    /// Started in the batch's order, a ragged batch of more thread blocks than SMs leaves the long
    /// pieces of its last sequences to the second pass: it takes longer than longest first, the same
    /// time for equal contexts, and the H200 bench's ragged 16-sequence case matches the Python port
    /// (`scripts/vllm/l2_reuse_model.py`, `span_s`: 565.0 µs a layer in batch order, 494.0 longest first).
    #[test]
    fn thread_blocks_start_in_the_batch_order() {
        let s = h200();
        let ragged: Vec<u32> = (0..16).map(|i| 20_000 + (i * 7919) % 30_000).collect();
        let span_of = |ctx: &[u32], longest_first: bool| {
            let mut g = Vec::new();
            s.groups(ctx, &mut g);
            if longest_first {
                g.sort_unstable_by(|a, b| b.cmp(a));
            }
            s.span(&g, &mut BinaryHeap::new())
        };
        // One head's tokens at 4.8 TB/s, 512 bytes a token (K and V of 128 bf16 values): seconds.
        let us = |tokens: u64| tokens as f64 * 512.0 / 4.8e12 * 1e6;
        assert!((us(span_of(&ragged, false)) - 565.0).abs() < 0.5);
        assert!((us(span_of(&ragged, true)) - 494.0).abs() < 0.5);
        let equal = [30_000u32; 16];
        assert_eq!(span_of(&equal, false), span_of(&equal, true));
        assert!(s.excess_tokens(&ragged) > 0);
    }

    /// The L2 saving is the Python model's hits (`once_hits`, τ 16, launch order s,j,h) times 128 keys
    /// times 1 − 0.68: equal contexts re-read every shared block at the same time (all hits), unequal
    /// ones at gaps, and batches of more thread blocks than SMs (16 and 40 sequences: 184 and 320
    /// blocks) partly a wave later.
    #[test]
    fn shared_blocks_are_saved_as_the_python_model_says() {
        let s = h200_l2();
        let sixteen: Vec<u32> = (0..16).map(|i| 20_000 + (i * 7919) % 30_000).collect();
        let forty: Vec<u32> = (0..40).map(|i| 30_000 + (i * 104_729) % 40_000).collect();
        let cases: [(&[u32], f64); 5] = [
            (&[20_000; 4], 468.0),
            (&[21_480, 25_480, 20_780], 278.210_161_843_513_56),
            (
                &[25_000, 60_000, 23_000, 21_000, 90_000, 20_500],
                408.546_236_324_992_83,
            ),
            (&sixteen, 1_104.348_695_536_829_4),
            (&forty, 2_210.702_291_667_986),
        ];
        for (ctx, hits) in cases {
            let shared = SharedReads::common_prefix(ctx.len() as u32, 20_000);
            let want = (hits * 128.0 * 0.32).round() as u64;
            assert_eq!(s.cost_of(ctx, &shared).l2_saved, want, "{ctx:?}");
        }
        // No L2 model, one decode, or nothing shared: nothing saved.
        let shared = SharedReads::common_prefix(4, 20_000);
        assert_eq!(h200().cost_of(&[20_000; 4], &shared).l2_saved, 0);
        assert_eq!(
            s.cost_of(&[20_000], &SharedReads::common_prefix(1, 20_000))
                .l2_saved,
            0
        );
        assert_eq!(s.cost_of(&[20_000; 4], &SharedReads::default()).l2_saved, 0);
    }

    /// Groups split the readers: two pairs sharing different prefixes save what each pair saves alone,
    /// and a block only partly inside the shared tokens is not counted.
    #[test]
    fn each_shared_prefix_counts_its_own_readers() {
        let s = h200_l2();
        let ctx = [30_000u32, 30_000, 40_000, 40_000];
        let mut shared = SharedReads::default();
        shared.add(7, 0, 10_000, 0);
        shared.add(7, 0, 10_000, 1);
        shared.add(9, 0, 12_800, 2);
        shared.add(9, 0, 12_800, 3);
        // Equal contexts within a pair: every re-read at gap 0; 78 and 100 whole blocks.
        let hits = (78 + 100) as f64;
        assert_eq!(
            s.cost_of(&ctx, &shared).l2_saved,
            (hits * 128.0 * 0.32).round() as u64
        );
        let mut r = SharedReads::default();
        r.add(0, 100, 300, 0);
        assert_eq!(r.reads, vec![(0, 1, 2, 0)]);
    }

    /// A run's L2 saving, step by step, is what each step's own contexts give.
    #[test]
    fn a_run_gives_each_step_its_own_l2_saving() {
        let s = h200_l2();
        let first = vec![21_000u32, 20_500, 33_000, 20_001, 64_000];
        let shared = SharedReads::common_prefix(first.len() as u32, 20_000);
        let mut run = SplitRun::default();
        let cost = run.start(s, first.iter().copied(), &shared);
        assert_eq!(cost, s.cost_of(&first, &shared));
        assert!(cost.l2_saved > 0 && cost.excess == s.excess_tokens(&first));
        for t in 1..300u32 {
            let keys: Vec<u32> = first.iter().map(|&k| k + t).collect();
            let sum: u64 = keys.iter().map(|&k| k as u64).sum();
            assert_eq!(run.next_cost(sum), s.cost_of(&keys, &shared), "step {t}");
        }
    }

    /// The segment arithmetic is the block-by-block model: every shared block, every head, each
    /// reader's read at its thread block's start plus its offset in its piece walked from the end.
    #[test]
    fn segments_give_what_block_by_block_gives() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for _ in 0..300 {
            let s = h200_l2();
            let decodes = 2 + next(40) as usize;
            // Each decode reads one of three shared prefixes of 9,000, 18,000 or 27,000 tokens, then
            // keys of its own.
            let (mut contexts, mut shared) = (Vec::new(), SharedReads::default());
            for d in 0..decodes {
                let group = next(3) as u32;
                let prefix = 9_000 * (group as u64 + 1);
                contexts.push((prefix + 1 + next(100_000)) as u32);
                shared.add(group, 0, prefix, d as u32);
            }
            let mut sorted = shared.clone();
            sorted.sort();
            let mut scratch = SplitScratch::default();
            s.start_times(&contexts, &mut scratch);
            scratch.set_decay(16.0);
            let heads = s.kv_heads as usize;
            let mut hits = 0.0;
            for readers in sorted.reads.chunk_by(|a, b| a.0 == b.0) {
                for block in readers[0].1 as u64..readers[0].2 as u64 {
                    for h in 0..heads {
                        let mut t: Vec<u64> = readers
                            .iter()
                            .map(|r| {
                                let (n, pp, first) = scratch.geometry[r.3 as usize];
                                let j = block / pp;
                                let tb = first as usize + j as usize * heads + h;
                                scratch.starts[tb] + ((j + 1) * pp).min(n) - 1 - block
                            })
                            .collect();
                        t.sort_unstable();
                        hits += t
                            .windows(2)
                            .map(|w| (-((w[1] - w[0]) as f64) / 16.0).exp())
                            .sum::<f64>();
                    }
                }
            }
            let want = hits / heads as f64 * 128.0 * 0.32;
            let got = s.cost_of(&contexts, &shared).l2_saved as f64;
            assert!(
                (got - want).abs() <= 1.0 + 1e-9 * want,
                "{got} vs {want}: {contexts:?}"
            );
        }
    }
}
