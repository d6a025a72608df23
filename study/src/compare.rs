//! The statistics of a comparison of simulated and measured runs of the same configurations: per
//! run, each metric side by side with its relative error; per concurrency level over several seeds,
//! the rank agreement of per-seed D (Spearman).

use serde::Serialize;
use serverbench_sim::Summary;

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

    #[test]
    fn relative_errors_handle_zero_measurements() {
        assert_eq!(rel_error(1.1, 1.0).map(|e| (e * 1e9).round()), Some(1e8));
        assert_eq!(rel_error(0.0, 0.0), Some(0.0));
        assert_eq!(rel_error(0.2, 0.0), None);
    }
}
