//! FlashAttention 3's split-KV decode schedule (vLLM's `FLASH_ATTN` backend on Hopper): how many pieces
//! each decode's KV is cut into, and how much longer than its bytes alone the step's attention takes when
//! those pieces do not fill the GPU evenly. Pure integer arithmetic; never sees a request or a clock.
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
//! Time model: thread blocks start longest first as SMs free up (FlashAttention 3 sorts the batch by
//! blocks per piece); every running block reads at the same rate, the bandwidth shared among them but
//! never more than one SM's own read rate ([`HardwareSpec::sm_read_bandwidth`]). The excess is the
//! time beyond the bytes at full bandwidth, as decode context tokens read at that bandwidth.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Tokens per KV block of FlashAttention 3's decode kernel (`kBlockN` for head size 128 and paged KV).
pub const BLOCK_TOKENS: u32 = 128;
/// The most pieces a sequence is split into: vLLM's `flash_attn_max_num_splits_for_cuda_graph`.
pub const MAX_SPLITS: u32 = 32;

/// One deployment's split-KV schedule: its GPU's SMs and how many of them saturate its memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitKv {
    /// Streaming multiprocessors of one GPU.
    pub sms: u32,
    /// Thread blocks that read at the GPU's full bandwidth together (memory bandwidth over one SM's
    /// read rate); fewer read at that many's share each.
    pub saturating_blocks: u32,
    /// KV heads one GPU holds (the model's over tensor parallelism).
    pub kv_heads: u32,
}

/// Buffers the schedule's arithmetic reuses from one step to the next.
#[derive(Clone, Debug, Default)]
pub struct SplitScratch {
    groups: Vec<Group>,
    running: BinaryHeap<Reverse<(u64, u64)>>,
}

/// Thread blocks of one sequence's pieces: `count` blocks each reading `tokens` tokens of one head.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    tokens: u64,
    count: u32,
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
        self.excess_tokens_with(contexts, &mut SplitScratch::default())
    }

    /// [`SplitKv::excess_tokens`] with buffers kept from an earlier call.
    pub fn excess_tokens_with(&self, contexts: &[u32], scratch: &mut SplitScratch) -> u64 {
        let context: u64 = contexts.iter().map(|&c| c as u64).sum();
        self.overrun(contexts, scratch).scale(context)
    }

    /// The schedule's time beyond its reads, and its reads, for these contexts: all it depends on is
    /// each context's block count.
    fn overrun(&self, contexts: &[u32], scratch: &mut SplitScratch) -> Overrun {
        if contexts.is_empty() || self.kv_heads == 0 || self.sms == 0 {
            return Overrun { extra: 0, work: 1 };
        }
        let groups = &mut scratch.groups;
        self.groups(contexts, groups);
        groups.sort_unstable_by(|a, b| b.cmp(a));
        let work: u64 = groups.iter().map(|g| g.tokens * g.count as u64).sum();
        let blocks: u64 = groups.iter().map(|g| g.count as u64).sum();
        let extra = if blocks <= self.sms as u64 {
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

    /// The thread blocks of the batch, grouped by the tokens each reads, into `out`.
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

    /// Time to read every group, longest first on `sms` slots, in one head's tokens at the full
    /// bandwidth: running blocks share the bandwidth, each at most `1 / saturating_blocks` of it.
    fn span(&self, longest_first: &[Group], running: &mut BinaryHeap<Reverse<(u64, u64)>>) -> u64 {
        let slots = self.sms as u64;
        let floor = self.saturating_blocks.max(1) as u64;
        running.clear();
        let (mut next, mut waiting_in_next) =
            (0usize, longest_first.first().map_or(0, |g| g.count));
        let (mut now, mut span, mut busy) = (0u64, 0u64, 0u64);
        loop {
            while busy < slots && next < longest_first.len() {
                let take = (slots - busy).min(waiting_in_next as u64);
                running.push(Reverse((now + longest_first[next].tokens, take)));
                busy += take;
                waiting_in_next -= take as u32;
                if waiting_in_next == 0 {
                    next += 1;
                    waiting_in_next = longest_first.get(next).map_or(0, |g| g.count);
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

/// The split-KV excess of each step of a run of decode steps, where every sequence reads one key more
/// a step: recomputed only when a context enters a new block, so each step gets the bits
/// [`SplitKv::excess_tokens`] gives for its own contexts. Its buffers are kept from one run to the next.
#[derive(Clone, Debug, Default)]
pub struct SplitRun {
    split: SplitKv,
    /// Keys each sequence reads in the run's first step.
    first: Vec<u32>,
    keys: Vec<u32>,
    scratch: SplitScratch,
    step: u32,
    /// The step at which some context next enters a new block.
    next: u32,
    overrun: Overrun,
}

impl SplitRun {
    /// A run whose first step's sequences read `first` keys each.
    pub fn new(split: SplitKv, first: Vec<u32>) -> SplitRun {
        let mut run = SplitRun::default();
        run.start(split, first.into_iter());
        run
    }

    /// Starts a run (reusing the buffers) whose first step's sequences read `first` keys each; returns
    /// that step's excess, [`SplitKv::excess_tokens`] of those keys.
    pub fn start(&mut self, split: SplitKv, first: impl Iterator<Item = u32>) -> u64 {
        self.split = split;
        self.first.clear();
        self.first.extend(first);
        self.overrun = split.overrun(&self.first, &mut self.scratch);
        self.next = steps_to_next_block(&self.first);
        self.step = 0;
        let keys: u64 = self.first.iter().map(|&k| k as u64).sum();
        self.overrun.scale(keys)
    }

    /// The excess of the run's next step, whose sequences read `keys` keys in all.
    pub fn next_excess(&mut self, keys: u64) -> u64 {
        self.step += 1;
        if self.step >= self.next {
            let step = self.step;
            self.keys.clear();
            self.keys
                .extend(self.first.iter().map(|&k| k.saturating_add(step)));
            self.overrun = self.split.overrun(&self.keys, &mut self.scratch);
            self.next = step + steps_to_next_block(&self.keys);
        }
        self.overrun.scale(keys)
    }
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

    /// Qwen3-8B (8 KV heads) on one H200: 132 SMs, 75 blocks saturate its memory.
    fn h200() -> SplitKv {
        SplitKv {
            sms: 132,
            saturating_blocks: 75,
            kv_heads: 8,
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
            assert_eq!(run.next_excess(sum), s.excess_tokens(&keys), "step {t}");
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
        let mut z = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |m: u64| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            z % m
        };
        let (mut heap, mut groups, mut one_pass) = (BinaryHeap::new(), Vec::new(), 0);
        for _ in 0..2000 {
            let s = SplitKv {
                sms: 132,
                saturating_blocks: 1 + next(132) as u32,
                kv_heads: 1 + next(8) as u32,
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
}
