//! FlashAttention 3's one varlen call for a step that prefills and decodes together (vLLM's
//! `FLASH_ATTN` backend on Hopper): the time the call takes beyond its prefill chunks alone and its
//! decodes alone. Pure arithmetic; never sees a request or a clock.
//!
//! Read from FlashAttention 3's source (vLLM's fork, `hopper/`), the call makes three choices once for
//! the whole batch, and each is worse for a mix than for either part alone:
//! 1. *One tile shape* (`flash_api.cpp` `mha_fwd` → `tile_size_fwd_sm90`): 64 query rows a tile only when
//!    the longest query, its query heads per KV head packed in (`PackGQA`), fits 64 rows; with a chunk of
//!    more than 16 tokens every tile is 128 rows, the decodes' too, and a decode tile's 4 real rows pay
//!    the full 128-row MMAs for each 128-key block.
//! 2. *One split rule* (`flash_prepare_scheduler.cu` `prepare_varlen_num_blocks`): each SM gets
//!    `⌈1.1 · Σ m-blocks · n-blocks · KV heads / SMs⌉` blocks, and a sequence is cut into at most the
//!    static `num_splits` pieces of that size; the chunk's query blocks swell the sum, so the decodes get
//!    fewer, longer pieces. With `num_splits` 0 (vLLM's steps past its graph sizes) the heuristic
//!    (`heuristics.h` `num_splits_heuristic`) gives one piece once the longest query has 0.8 · SMs
//!    query blocks over the KV heads.
//! 3. *One tile walk* (`tile_scheduler.hpp` `VarlenDynamicPersistentTileScheduler`): one persistent
//!    block per SM takes tiles in batch order (vLLM puts the decodes first), within a sequence of
//!    several pieces head, then piece, then query block (last first), else in sections of heads the L2
//!    holds; the chunk's tiles past the first wave wait for the long decode tiles.
//!
//! Time model (fitted to the H200's bench of chunk-alone and decode-alone calls, the mixed calls
//! predicted: [`VarlenTiles`]): the tiles run as a fluid list schedule on the SMs, each costing a fixed
//! overhead plus, per 128-key block, `max(c, m) + overlap · min(c, m)`, `c` the MMA time of its tile
//! shape and `m` its block's bytes at one SM's read rate (a chunk's query blocks of one head and piece
//! share their keys through the L2); the running tiles share the memory's bandwidth, water-filled. The
//! combine kernel reads the pieces' partial results. The excess of a step is the mixed call's time less
//! the two parts' — what the cost model, which prices the parts, lacks.

use serde::{Deserialize, Serialize};

/// Keys per KV block of a tile (`kBlockN` for head size 128).
const BLOCK_KEYS: u64 = 128;
/// The L2 the scheduler sizes its head sections for (`get_nheads_in_l2`), bytes.
const SCHEDULER_L2_BYTES: u64 = 32 * 1024 * 1024;

/// A GPU's tile costs in FlashAttention 3's varlen kernel ([`crate::HardwareSpec::varlen_tiles`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VarlenTiles {
    /// MMA time of one 128-key block in a 128-row tile, seconds (a 64-row tile: half).
    pub mma_block_s: f64,
    /// What one SM reads from memory at most, bytes/s.
    pub sm_read_bandwidth: f64,
    /// What all SMs read together at most, bytes/s.
    pub memory_bandwidth: f64,
    /// A tile's fixed cost, seconds.
    pub tile_overhead_s: f64,
    /// The share of the shorter of a block's MMA and read that does not overlap the longer (0 to 1).
    pub overlap: f64,
}

/// One deployment's varlen attention: its GPU's SMs and tile costs, and the model's heads on one GPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Varlen {
    /// Streaming multiprocessors of one GPU.
    pub sms: u32,
    /// KV heads one GPU holds.
    pub kv_heads: u32,
    /// Query heads per KV head.
    pub q_per_kv: u32,
    /// Head size.
    pub head_dim: u32,
    /// Bytes of one key or value element.
    pub kv_bytes: u32,
    /// The GPU's tile costs.
    pub tiles: VarlenTiles,
}

/// One sequence of a varlen call: its query tokens (1 for a decode) and its keys (cached and new).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seq {
    /// Query tokens.
    pub queries: u32,
    /// Keys it attends to, its queries' own included.
    pub keys: u32,
}

/// What FlashAttention 3 decides once for a call: the tile rows, the static split count, and each
/// sequence's query blocks, key blocks and pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Query rows of every tile (64 or 128).
    pub rows: u32,
    /// The static split count (1: no split).
    pub splits: u32,
    /// (query blocks, key blocks, pieces) of each sequence, in the call's order.
    pub seqs: Vec<(u64, u64, u64)>,
}

/// Tiles of equal cost started one after another: `count` tiles of `units` work units each (key
/// blocks, the fixed cost counted as blocks), each unit taking `mma_s` of MMA and reading `bytes`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Group {
    units: f64,
    count: u32,
    mma_s: f64,
    bytes: f64,
}

impl Varlen {
    /// Seconds a layer's attention of the step takes beyond its chunks alone and its decodes' reads at
    /// the full bandwidth — the two parts a cost model prices (it gives a mixed step's decodes no
    /// split-KV tail of their own); 0 without both. `split_arg` is the `num_splits` the engine passes
    /// (vLLM: 32 for steps its CUDA graphs replay, 0 otherwise).
    pub fn excess_s(&self, decodes: &[Seq], chunks: &[Seq], split_arg: u32) -> f64 {
        if decodes.is_empty() || chunks.is_empty() {
            return 0.0;
        }
        let all: Vec<Seq> = decodes.iter().chain(chunks).copied().collect();
        let mixed = self.call_s(&all, split_arg);
        mixed - self.call_s(chunks, split_arg) - self.read_s(decodes)
    }

    /// Seconds the sequences' keys and values take to read at the full bandwidth.
    pub fn read_s(&self, seqs: &[Seq]) -> f64 {
        let per_key = 2 * self.head_dim as u64 * self.kv_bytes as u64 * self.kv_heads as u64;
        let keys: u64 = seqs.iter().map(|s| s.keys as u64).sum();
        (keys * per_key) as f64 / self.tiles.memory_bandwidth
    }

    /// Seconds one varlen call over `seqs` (in the call's order) takes: its tiles' schedule and the
    /// combine kernel (no per-call floor).
    pub fn call_s(&self, seqs: &[Seq], split_arg: u32) -> f64 {
        if seqs.is_empty() {
            return 0.0;
        }
        let s = self.schedule(seqs, split_arg);
        self.makespan_s(&self.groups(seqs, &s)) + self.combine_s(seqs, &s)
    }

    /// FlashAttention 3's choices for a call over `seqs`.
    pub fn schedule(&self, seqs: &[Seq], split_arg: u32) -> Schedule {
        let qpk = self.q_per_kv.max(1) as u64;
        let max_q = seqs.iter().map(|s| s.queries as u64).max().unwrap_or(1);
        let max_k = seqs.iter().map(|s| s.keys as u64).max().unwrap_or(1);
        let rows: u64 = if max_q * qpk <= 64 { 64 } else { 128 };
        let heads = self.kv_heads.max(1) as u64;
        let splits = if split_arg == 0 {
            let m = (max_q * qpk).div_ceil(rows);
            self.split_heuristic(heads * m, max_k.div_ceil(BLOCK_KEYS))
        } else {
            split_arg as u64
        };
        let blocks: Vec<(u64, u64)> = seqs
            .iter()
            .map(|s| {
                (
                    (s.queries as u64 * qpk).div_ceil(rows),
                    (s.keys as u64).div_ceil(BLOCK_KEYS),
                )
            })
            .collect();
        let per_sm = (splits > 1).then(|| {
            let total: u64 = blocks.iter().map(|&(m, n)| m * n).sum();
            // The kernel's own float arithmetic (f32), rounded up.
            let sms = self.sms.max(1) as f32;
            ((((total as f32) * 1.1f32) * heads as f32) / sms)
                .ceil()
                .max(1.0) as u64
        });
        let seqs = blocks
            .iter()
            .map(|&(m, n)| {
                let pieces = per_sm.map_or(1, |b| n.div_ceil(b).min(splits).max(1));
                (m, n, pieces)
            })
            .collect();
        Schedule {
            rows: rows as u32,
            splits: splits as u32,
            seqs,
        }
    }

    /// `num_splits_heuristic` for `total_m` query blocks over the heads and `n` key blocks of the
    /// longest sequence (the batch taken as one sequence, as the kernel's `get_num_splits` does;
    /// causal, so its branch for huge non-causal heads never applies).
    fn split_heuristic(&self, total_m: u64, n: u64) -> u64 {
        let sms = self.sms.max(1) as u64;
        if total_m as f64 >= 0.8 * sms as f64 {
            return 1;
        }
        if n <= 4 {
            return 1;
        }
        let most = 128.min(sms).min(n);
        let eff = |s: u64| {
            let w = total_m as f64 * s as f64 / sms as f64;
            w / w.ceil()
        };
        let best = (1..=most).map(eff).fold(0.0f64, f64::max);
        (1..=most).find(|&s| eff(s) >= 0.85 * best).unwrap_or(1)
    }

    /// Heads of one section of a one-piece sequence's tiles (`get_nheads_in_l2`, packed GQA).
    fn heads_in_l2(&self, n: u64) -> u64 {
        let qpk = self.q_per_kv.max(1) as u64;
        let max_kv = (SCHEDULER_L2_BYTES / qpk) / (BLOCK_KEYS * 2 * self.head_dim as u64 * 2);
        let h = [16, 8, 4, 2]
            .into_iter()
            .find(|&h| n * h <= max_kv)
            .unwrap_or(1);
        h.min(self.kv_heads.max(1) as u64)
    }

    /// The call's tiles in the walk's order, consecutive equal tiles grouped.
    fn groups(&self, seqs: &[Seq], s: &Schedule) -> Vec<Group> {
        let t = &self.tiles;
        let mma = if s.rows == 128 {
            t.mma_block_s
        } else {
            t.mma_block_s / 2.0
        };
        let block_bytes = (BLOCK_KEYS * 2 * self.head_dim as u64 * self.kv_bytes as u64) as f64;
        let heads = self.kv_heads.max(1) as u64;
        let mut out: Vec<Group> = Vec::new();
        let mut push = |blocks: u64, m_blocks: u64| {
            let units = blocks as f64 + t.tile_overhead_s / mma;
            let bytes = block_bytes / m_blocks as f64 * blocks as f64 / units;
            match out.last_mut() {
                Some(g) if g.units == units && g.bytes == bytes => g.count += 1,
                _ => out.push(Group {
                    units,
                    count: 1,
                    mma_s: mma,
                    bytes,
                }),
            }
        };
        for (seq, &(m_blocks, n_all, pieces)) in seqs.iter().zip(&s.seqs) {
            let rows = s.rows as u64;
            let qpk = self.q_per_kv.max(1) as u64;
            // Key blocks of query block `m`'s piece `p`: up to its causal edge, cut into even pieces.
            let range = |m: u64, p: u64| {
                let last_query = ((m + 1) * rows - 1) / qpk + 1;
                let edge = (last_query + seq.keys as u64 - seq.queries as u64).div_ceil(BLOCK_KEYS);
                let n = n_all.min(edge);
                let per = n.div_ceil(pieces);
                let lo = p * per;
                (lo + per).min(n).saturating_sub(lo)
            };
            if pieces > 1 {
                for _ in 0..heads {
                    for p in 0..pieces {
                        for i in 0..m_blocks {
                            push(range(m_blocks - 1 - i, p), m_blocks);
                        }
                    }
                }
            } else {
                let section = self.heads_in_l2(n_all.max(1));
                let mut first = 0;
                while first < heads {
                    let hs = section.min(heads - first);
                    for i in 0..m_blocks {
                        for _ in 0..hs {
                            push(range(m_blocks - 1 - i, 0), m_blocks);
                        }
                    }
                    first += hs;
                }
            }
        }
        out
    }

    /// The schedule's length: the SMs take groups' tiles in order as they free up; each running tile
    /// works at `1 / (max(c, m) + overlap · min(c, m))` units a second alone, and the running tiles'
    /// reads share the memory's bandwidth, water-filled.
    fn makespan_s(&self, groups: &[Group]) -> f64 {
        let t = &self.tiles;
        let sms = self.sms.max(1);
        let mut todo = groups.iter().copied().rev().collect::<Vec<_>>();
        let mut running: Vec<Group> = Vec::new();
        let (mut busy, mut now) = (0u32, 0.0f64);
        let mut rates: Vec<f64> = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        loop {
            while busy < sms {
                let Some(g) = todo.last_mut() else { break };
                let take = g.count.min(sms - busy);
                running.push(Group { count: take, ..*g });
                busy += take;
                g.count -= take;
                if g.count == 0 {
                    todo.pop();
                }
            }
            if running.is_empty() {
                return now;
            }
            rates.clear();
            rates.extend(running.iter().map(|g| {
                let read = g.bytes / t.sm_read_bandwidth;
                let (hi, lo) = (g.mma_s.max(read), g.mma_s.min(read));
                1.0 / (hi + t.overlap * lo)
            }));
            let demand: f64 = running
                .iter()
                .zip(&rates)
                .map(|(g, r)| r * g.bytes * g.count as f64)
                .sum();
            if demand > t.memory_bandwidth {
                water_fill(&running, &mut rates, &mut order, busy, t.memory_bandwidth);
            }
            let dt = running
                .iter()
                .zip(&rates)
                .map(|(g, r)| g.units / r)
                .fold(f64::INFINITY, f64::min);
            now += dt;
            let mut i = 0;
            while i < running.len() {
                let r = rates[i];
                let g = &mut running[i];
                g.units -= r * dt;
                if g.units <= 1e-9 {
                    busy -= g.count;
                    running.swap_remove(i);
                    rates.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
    }

    /// The combine kernel: reads the partial results (fp32 rows and their scales) of every sequence
    /// cut into pieces and writes its output, at the memory's bandwidth.
    fn combine_s(&self, seqs: &[Seq], s: &Schedule) -> f64 {
        if s.splits <= 1 {
            return 0.0;
        }
        let q_heads = (self.kv_heads * self.q_per_kv) as f64;
        let d = self.head_dim as f64;
        let bytes: f64 = seqs
            .iter()
            .zip(&s.seqs)
            .filter(|(_, &(_, _, p))| p > 1)
            .map(|(q, &(_, _, p))| {
                q.queries as f64 * q_heads * (p as f64 * (d * 4.0 + 4.0) + d * 2.0)
            })
            .sum();
        bytes / self.tiles.memory_bandwidth
    }
}

/// Caps the running groups' rates so that their reads together take the bandwidth `bw`: the groups
/// that ask least keep their rate, the rest read at one common level.
fn water_fill(running: &[Group], rates: &mut [f64], order: &mut Vec<usize>, busy: u32, bw: f64) {
    let demand = |i: usize| rates[i] * running[i].bytes;
    order.clear();
    order.extend(0..running.len());
    order.sort_by(|&a, &b| demand(a).total_cmp(&demand(b)));
    let (mut left, mut n) = (bw, busy as f64);
    let mut level = demand(*order.last().expect("running tiles"));
    for &i in order.iter() {
        if demand(i) * n >= left {
            level = left / n;
            break;
        }
        left -= demand(i) * running[i].count as f64;
        n -= running[i].count as f64;
    }
    for (i, r) in rates.iter_mut().enumerate() {
        let d = *r * running[i].bytes;
        if d > level {
            *r = level / running[i].bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The H200's tile costs as fitted (`presets/hardware/h200.yaml`) and Qwen3-8B's heads.
    fn qwen3_h200() -> Varlen {
        Varlen {
            sms: 132,
            kv_heads: 8,
            q_per_kv: 4,
            head_dim: 128,
            kv_bytes: 2,
            tiles: VarlenTiles {
                mma_block_s: 1.818e-6,
                sm_read_bandwidth: 114.2e9,
                memory_bandwidth: 4.426e12,
                tile_overhead_s: 1.95e-6,
                overlap: 0.045,
            },
        }
    }

    fn decodes(n: usize, keys: u32) -> Vec<Seq> {
        vec![Seq { queries: 1, keys }; n]
    }

    fn chunk(queries: u32, prefix: u32) -> Vec<Seq> {
        vec![Seq {
            queries,
            keys: prefix + queries,
        }]
    }

    #[test]
    fn pieces_follow_the_kernels_rule() {
        let v = qwen3_h200();
        // 2 × 60,000 keys alone: 8 pieces each, 64-row tiles; beside a 64-token chunk over 147,456
        // cached keys: 128-row tiles and 3 pieces (the chunk 6), as FlashAttention 3 returned them.
        let alone = v.schedule(&decodes(2, 60_000), 32);
        assert_eq!((alone.rows, alone.seqs[0].2), (64, 8));
        let mixed: Vec<Seq> = decodes(2, 60_000)
            .into_iter()
            .chain(chunk(64, 147_456))
            .collect();
        let s = v.schedule(&mixed, 32);
        assert_eq!(s.rows, 128);
        assert_eq!(
            s.seqs.iter().map(|x| x.2).collect::<Vec<_>>(),
            vec![3, 3, 6]
        );
        // num_splits 0 past the graphs: a 512-token chunk's 16 query blocks over 8 heads pass 0.8 of
        // the SMs, so nothing is split.
        let big: Vec<Seq> = decodes(2, 60_000)
            .into_iter()
            .chain(chunk(512, 65_536))
            .collect();
        assert_eq!(v.schedule(&big, 0).splits, 1);
    }

    /// The calls' times equal the Python model's (`scripts/vllm/fa3_varlen_model.py`, less its per-call
    /// floor of 50.3 µs), µs a layer.
    #[test]
    fn call_times_match_the_python_model() {
        let v = qwen3_h200();
        let with = |mut d: Vec<Seq>, c: Vec<Seq>| {
            d.extend(c);
            d
        };
        let ragged = (0..16)
            .map(|i| Seq {
                queries: 1,
                keys: 30_000 + i * 1_000,
            })
            .collect();
        let cases = [
            (decodes(2, 60_000), 32, 111.17549028468143),
            (chunk(64, 65_536), 32, 122.98785121195168),
            (
                with(decodes(2, 60_000), chunk(64, 147_456)),
                32,
                644.6359025494155,
            ),
            (
                with(decodes(8, 24_576), chunk(64, 65_536)),
                32,
                500.866733558592,
            ),
            (
                with(decodes(2, 60_000), chunk(512, 65_536)),
                0,
                1805.754750262697,
            ),
            (
                with(decodes(8, 24_576), chunk(2048, 147_456)),
                0,
                8793.882878458839,
            ),
            (ragged, 32, 577.1902076729843),
            (
                with(decodes(2, 60_000), chunk(256, 147_456)),
                32,
                1921.886037907192,
            ),
        ];
        for (seqs, split, python_us) in cases {
            let us = v.call_s(&seqs, split) * 1e6;
            assert!(
                (us - python_us).abs() < 1e-6 * python_us,
                "{us} against {python_us}"
            );
        }
    }

    #[test]
    fn a_mix_costs_more_than_its_parts_where_the_bench_measured_it() {
        let v = qwen3_h200();
        let e = v.excess_s(&decodes(8, 24_576), &chunk(64, 65_536), 32);
        assert!(e > 100e-6, "{e}");
        assert_eq!(v.excess_s(&[], &chunk(64, 65_536), 32), 0.0);
        assert_eq!(v.excess_s(&decodes(8, 24_576), &[], 32), 0.0);
    }
}
