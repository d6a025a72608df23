//! The statistics of a comparison of simulated and measured runs of the same configurations: per
//! run, each metric side by side with its relative error; per concurrency level over several seeds,
//! the rank agreement of per-seed D (Spearman).

use serde::Serialize;
use serverbench_sim::{Outcome, Record, Summary};
use serverbench_workloads::quantile;
use std::collections::HashMap;

/// A compared metric: its name and how to read it from a summary.
pub type Metric = (&'static str, fn(&Summary) -> f64);

/// The metrics compared, in table order.
pub const METRICS: [Metric; 9] = [
    ("D", |s| s.score.d),
    ("G", |s| s.score.g),
    ("f", |s| s.score.f),
    ("TTFT p50 s", |s| s.ttft_s.p50),
    ("TTFT p90 s", |s| s.ttft_s.p90),
    ("TTFT p99 s", |s| s.ttft_s.p99),
    ("TPOT p50 ms", |s| s.tpot_s.p50 * 1e3),
    ("TPOT p90 ms", |s| s.tpot_s.p90 * 1e3),
    ("TPOT p99 ms", |s| s.tpot_s.p99 * 1e3),
];

/// One metric of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Pair {
    /// Metric name.
    pub metric: &'static str,
    /// Simulated value.
    pub sim: f64,
    /// Measured value.
    pub real: f64,
    /// `(sim − real) / real`; `None` when the measured value is 0 and the simulated one is not.
    pub rel_error: Option<f64>,
}

/// One (concurrency, seed) run in both worlds.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Lanes.
    pub concurrency: u32,
    /// Workload seed.
    pub seed: u64,
    /// Completed requests (simulated, measured).
    pub completed: (usize, usize),
    /// The metrics.
    pub metrics: Vec<Pair>,
    /// The same requests in both runs, where the measured run's records are at hand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_requests: Option<SameRequests>,
}

/// The requests both runs completed, matched by tree and request (a replay sends the same requests on
/// both sides, each in its own time), with more than one output token: each one's TPOT against its
/// measured TPOT. A window's TPOT quantiles also differ by which requests each side completed in it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SameRequests {
    /// Requests both runs completed.
    pub both: usize,
    /// Requests completed by the simulated run only.
    pub only_simulated: usize,
    /// Requests completed by the measured run only.
    pub only_measured: usize,
    /// Median over the requests both completed of each one's `(sim − real) / real` TPOT; `None`
    /// when there are none.
    pub tpot_rel_error: Option<f64>,
    /// The same for each one's time to first token.
    pub ttft_rel_error: Option<f64>,
}

/// Matches two runs' records by tree and request; see [`SameRequests`].
pub fn same_requests(sim: &[Record], real: &[Record]) -> SameRequests {
    let timed = |records: &[Record]| -> HashMap<(u64, u32), (f64, f64)> {
        records
            .iter()
            .filter(|r| r.outcome == Outcome::Completed && r.output_tokens > 1)
            .filter_map(|r| Some(((r.tree, r.request), (r.tpot_s()?, r.ttft_s()?))))
            .collect()
    };
    let (s, m) = (timed(sim), timed(real));
    let shared: Vec<((f64, f64), (f64, f64))> = s
        .iter()
        .filter_map(|(k, a)| m.get(k).map(|b| (*a, *b)))
        .collect();
    let median_error = |pick: fn(&(f64, f64)) -> f64| {
        let mut e: Vec<f64> = shared
            .iter()
            .filter_map(|(a, b)| rel_error(pick(a), pick(b)))
            .collect();
        e.sort_by(f64::total_cmp);
        (!e.is_empty()).then(|| quantile(&e, 0.5))
    };
    SameRequests {
        both: shared.len(),
        only_simulated: s.len() - shared.len(),
        only_measured: m.len() - shared.len(),
        tpot_rel_error: median_error(|t| t.0),
        ttft_rel_error: median_error(|t| t.1),
    }
}

/// Rank agreement of per-seed D at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct SeedRanking {
    /// Lanes.
    pub concurrency: u32,
    /// Seeds compared.
    pub seeds: usize,
    /// Spearman rank correlation of per-seed D, simulator against measured.
    pub spearman_d: f64,
}

/// One run's metrics, simulated against measured.
pub fn row(concurrency: u32, seed: u64, sim: &Summary, real: &Summary) -> Row {
    Row {
        concurrency,
        seed,
        completed: (sim.completed, real.completed),
        metrics: METRICS
            .iter()
            .map(|(metric, get)| {
                let (s, r) = (get(sim), get(real));
                Pair {
                    metric,
                    sim: s,
                    real: r,
                    rel_error: rel_error(s, r),
                }
            })
            .collect(),
        same_requests: None,
    }
}

/// `(sim − real) / real`, 0 when both are 0, `None` when only the measured value is 0.
pub fn rel_error(sim: f64, real: f64) -> Option<f64> {
    if real != 0.0 {
        Some((sim - real) / real)
    } else if sim == 0.0 {
        Some(0.0)
    } else {
        None
    }
}

/// Per concurrency level with at least three seeds, the rank agreement of per-seed D.
pub fn rankings(rows: &[Row]) -> Vec<SeedRanking> {
    let mut levels: Vec<u32> = rows.iter().map(|r| r.concurrency).collect();
    levels.dedup();
    levels
        .into_iter()
        .filter_map(|c| {
            let at: Vec<&Row> = rows.iter().filter(|r| r.concurrency == c).collect();
            let (sim, real): (Vec<f64>, Vec<f64>) = at
                .iter()
                .map(|r| (r.metrics[0].sim, r.metrics[0].real))
                .unzip();
            (at.len() >= 3).then(|| SeedRanking {
                concurrency: c,
                seeds: at.len(),
                spearman_d: spearman(&sim, &real),
            })
        })
        .collect()
}

/// Spearman rank correlation (Pearson correlation of average ranks; ties share their mean rank).
/// 0 when either side has no spread.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    if va == 0.0 || vb == 0.0 {
        0.0
    } else {
        cov / (va * vb).sqrt()
    }
}

/// Average ranks (1-based; ties share their mean rank).
pub fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        for &k in &order[i..=j] {
            out[k] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_uses_average_ranks_and_spots_order() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
        assert_eq!(ranks(&[5.0, 1.0, 5.0, 0.0]), vec![3.5, 2.0, 3.5, 1.0]);
        // x = [1,2,3,4], y ranks [1,3,2,4]: 1 − 6·Σd²/(n(n²−1)) = 1 − 6·2/60 = 0.8
        assert!((spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]) - 0.8).abs() < 1e-12);
        assert_eq!(
            spearman(&[1.0, 1.0], &[1.0, 2.0]),
            0.0,
            "no spread on one side"
        );
    }

    /// A completed request of `tokens` tokens whose first token came after `ttft_ms` and whose tokens
    /// after it took `tpot_ms` each.
    fn timed(tree: u64, request: u32, tokens: u32, tpot_ms: u64, ttft_ms: u64) -> Record {
        let first = ttft_ms * 1_000_000;
        let last = first + tpot_ms * 1_000_000 * u64::from(tokens.saturating_sub(1));
        serde_json::from_value(serde_json::json!({
            "tree": tree, "request": request, "lane": 0, "replica": 0, "agent": 0, "kind": "root_turn",
            "send_ns": 0, "first_token_ns": first, "last_token_ns": last, "finish_ns": last,
            "input_tokens": 100, "output_requested": tokens, "output_tokens": tokens,
            "cached_tokens": 0, "preemptions": 0, "outcome": "completed"
        }))
        .unwrap()
    }

    fn request(tree: u64, request: u32, tokens: u32, tpot_ms: u64) -> Record {
        timed(tree, request, tokens, tpot_ms, 1)
    }

    #[test]
    fn the_same_requests_are_matched_by_tree_and_request() {
        let sim = [
            request(1, 1, 11, 9),  // −10 % against 10 ms
            request(1, 2, 11, 12), // +20 % against 10 ms
            request(2, 1, 11, 19), // −5 % against 20 ms
            request(2, 2, 11, 8),  // only simulated
            request(3, 1, 1, 0),   // one token: no TPOT, left out
        ];
        let real = [
            request(1, 1, 11, 10),
            request(1, 2, 11, 10),
            request(2, 1, 11, 20),
            request(4, 1, 11, 30), // only measured
            request(3, 1, 1, 0),
        ];
        let m = same_requests(&sim, &real);
        assert_eq!((m.both, m.only_simulated, m.only_measured), (3, 1, 1));
        // Errors −10 %, −5 %, +20 %: the median is −5 %.
        assert!((m.tpot_rel_error.unwrap() + 0.05).abs() < 1e-9, "{m:?}");
        assert_eq!(m.ttft_rel_error, Some(0.0));
        let none = same_requests(&sim[3..4], &real[3..4]);
        assert_eq!(
            (none.both, none.tpot_rel_error, none.ttft_rel_error),
            (0, None, None)
        );
        // First tokens 10 % and 30 % late, 20 % early: the median is +10 %.
        let late = [
            timed(1, 1, 3, 5, 110),
            timed(1, 2, 3, 5, 130),
            timed(1, 3, 3, 5, 80),
        ];
        let on_time = [
            timed(1, 1, 3, 5, 100),
            timed(1, 2, 3, 5, 100),
            timed(1, 3, 3, 5, 100),
        ];
        let t = same_requests(&late, &on_time);
        assert!((t.ttft_rel_error.unwrap() - 0.1).abs() < 1e-9, "{t:?}");
        assert_eq!(t.tpot_rel_error, Some(0.0));
        // An even count: the mean of the middle two (−10 % and +20 %).
        let two = same_requests(&sim[..2], &real[..2]);
        assert!((two.tpot_rel_error.unwrap() - 0.05).abs() < 1e-9, "{two:?}");
    }

    #[test]
    fn relative_errors_handle_zero_measurements() {
        assert_eq!(rel_error(1.1, 1.0).map(|e| (e * 1e9).round()), Some(1e8));
        assert_eq!(rel_error(0.0, 0.0), Some(0.0));
        assert_eq!(rel_error(0.2, 0.0), None);
    }
}
