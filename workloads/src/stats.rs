//! Summary statistics of a set of session trees, including the prefix reuse an infinite cache would see.

use crate::tree::{RequestKind, SessionTree};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Mean and quantiles of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Number of values.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
}

impl Quantiles {
    /// Quantiles of `values` (sorted in place); all zero for an empty sample.
    pub fn of(values: &mut [f64]) -> Quantiles {
        if values.is_empty() {
            return Quantiles::default();
        }
        values.sort_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Quantiles {
            count: values.len(),
            mean,
            p50: quantile(values, 0.5),
            p90: quantile(values, 0.9),
            p99: quantile(values, 0.99),
            max: values[values.len() - 1],
        }
    }
}

/// The `q`-quantile of sorted values by linear interpolation between closest ranks (numpy's default).
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => 0.0,
        1 => sorted[0],
        n => {
            let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, frac) = (pos.floor() as usize, pos.fract());
            if lo + 1 >= n {
                sorted[n - 1]
            } else {
                sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac
            }
        }
    }
}

/// The two-sample Kolmogorov–Smirnov distance: the largest gap between the empirical CDFs of `a`
/// and `b` (both sorted in place); 0 when either is empty.
pub fn ks_distance(a: &mut [f64], b: &mut [f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let (na, nb) = (a.len() as f64, b.len() as f64);
    let (mut i, mut j, mut d) = (0usize, 0usize, 0f64);
    while i < a.len() && j < b.len() {
        // Step past every value equal to the smaller one on both sides (ties move together).
        let x = a[i].min(b[j]);
        while i < a.len() && a[i] <= x {
            i += 1;
        }
        while j < b.len() && b[j] <= x {
            j += 1;
        }
        d = d.max((i as f64 / na - j as f64 / nb).abs());
    }
    d
}

/// What `workload stats` prints.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct WorkloadStats {
    /// Session trees summarised.
    pub trees: usize,
    /// Requests in them.
    pub requests: usize,
    /// Root turns per tree.
    pub root_turns: Quantiles,
    /// Requests per tree (all kinds).
    pub requests_per_tree: Quantiles,
    /// Prompt tokens per request.
    pub input_tokens: Quantiles,
    /// Output tokens per request.
    pub output_tokens: Quantiles,
    /// Think time before a request, seconds (requests with dependencies only; uncapped).
    pub think_time_s: Quantiles,
    /// Sub-agents.
    pub subagents: usize,
    /// Sub-agents launched in the background.
    pub background_subagents: usize,
    /// Compaction requests.
    pub compactions: usize,
    /// Fraction of prompt tokens an infinite prefix cache would serve from blocks seen before.
    pub prefix_reuse_ratio: f64,
    /// Per request, the prompt tokens an infinite prefix cache would not hold (what each request
    /// prefills; TTFT follows it).
    pub uncached_tokens: Quantiles,
}

/// Summarises trees in the order given (the order matters only for the prefix-reuse ratio). Trees are
/// read one at a time: an iterator that makes them as it goes (the generator) holds one in memory.
pub fn workload_stats<T: std::borrow::Borrow<SessionTree>>(
    trees: impl IntoIterator<Item = T>,
) -> WorkloadStats {
    let mut s = WorkloadStats::default();
    let (mut turns, mut per_tree, mut input, mut output, mut think) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut uncached = Vec::new();
    let mut seen: FxHashSet<u64> = FxHashSet::default();
    let (mut reused, mut total) = (0u64, 0u64);
    for t in trees {
        let t = t.borrow();
        s.trees += 1;
        s.requests += t.len();
        turns.push(t.root_turns() as f64);
        per_tree.push(t.len() as f64);
        let mut agents: HashMap<u32, bool> = HashMap::new();
        for r in t.requests() {
            input.push(r.input_tokens as f64);
            output.push(r.output_tokens as f64);
            if !r.deps.is_empty() {
                think.push(r.think_ns as f64 / 1e9);
            }
            if r.kind == RequestKind::Compaction {
                s.compactions += 1;
            }
            if r.agent > 0 {
                agents.insert(r.agent, r.background);
            }
            let ids = r.blocks.as_slice();
            let hit = ids
                .iter()
                .rposition(|id| seen.contains(id))
                .map_or(0, |i| i + 1);
            reused += hit as u64 * t.block_size as u64;
            total += r.input_tokens as u64;
            uncached.push((r.input_tokens as u64 - hit as u64 * t.block_size as u64) as f64);
            seen.extend(&ids[hit..]);
        }
        s.subagents += agents.len();
        s.background_subagents += agents.values().filter(|&&bg| bg).count();
    }
    s.root_turns = Quantiles::of(&mut turns);
    s.requests_per_tree = Quantiles::of(&mut per_tree);
    s.input_tokens = Quantiles::of(&mut input);
    s.output_tokens = Quantiles::of(&mut output);
    s.think_time_s = Quantiles::of(&mut think);
    s.uncached_tokens = Quantiles::of(&mut uncached);
    s.prefix_reuse_ratio = if total == 0 {
        0.0
    } else {
        reused as f64 / total as f64
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ks_distance_is_the_largest_cdf_gap() {
        let d = |a: &[f64], b: &[f64]| ks_distance(&mut a.to_vec(), &mut b.to_vec());
        assert_eq!(d(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]), 0.0);
        assert_eq!(d(&[1.0, 2.0], &[3.0, 4.0]), 1.0);
        // scipy.stats.ks_2samp([1, 2, 3, 4], [3, 4, 5, 6]).statistic == 0.5
        assert_eq!(d(&[1.0, 2.0, 3.0, 4.0], &[3.0, 4.0, 5.0, 6.0]), 0.5);
        // Ties: [1, 1, 2] against [1, 2, 2]: CDFs 2/3 and 1/3 at 1.
        assert!((d(&[1.0, 1.0, 2.0], &[1.0, 2.0, 2.0]) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(d(&[], &[1.0]), 0.0);
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        let mut v = vec![4.0, 1.0, 3.0, 2.0];
        let q = Quantiles::of(&mut v);
        assert_eq!(q.p50, 2.5);
        assert!((q.p90 - 3.7).abs() < 1e-12);
        assert_eq!(q.max, 4.0);
        assert_eq!(q.mean, 2.5);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    /// A second turn that extends the first by one block re-prefills that block and its tail; a
    /// sub-agent starting fresh re-prefills everything but the shared first block.
    #[test]
    fn uncached_tokens_are_what_an_infinite_cache_misses() {
        use crate::tree::{Blocks, Request, SessionTree};
        let req = |id: u32, agent: u32, deps: Vec<u32>, input: u32, blocks: Vec<u64>| Request {
            id,
            agent,
            kind: RequestKind::turn_of(agent),
            deps,
            think_ns: 0,
            input_tokens: input,
            output_tokens: 1,
            background: false,
            turn: 0,
            blocks: Blocks::from_vec(blocks),
        };
        let t = SessionTree::new(
            0,
            64,
            vec![
                req(0, 0, vec![], 140, vec![1, 2]),
                req(1, 1, vec![0], 200, vec![1, 7, 8]),
                req(2, 0, vec![0, 1], 210, vec![1, 2, 3]),
            ],
        )
        .unwrap();
        let s = workload_stats([t]);
        // 140 (nothing cached); 200 − 64 (block 1); 210 − 128 (blocks 1, 2).
        let mut want = vec![140.0, 136.0, 82.0];
        assert_eq!(s.uncached_tokens, Quantiles::of(&mut want));
        assert!((s.prefix_reuse_ratio - 192.0 / 550.0).abs() < 1e-12);
    }
}
