//! Many runs in parallel, collected in job order, and the spread of a metric over seeds.

use crate::StudyError;
use rayon::prelude::*;
use serde::Serialize;
use serverbench_workloads::quantile;

/// Runs `f` on every job on `threads` worker threads (`None`: one per core) and returns the results in
/// job order, so the output never depends on the thread count; `progress` is called after each job.
pub fn run_all<J: Sync, T: Send>(
    jobs: &[J],
    threads: Option<usize>,
    progress: &(dyn Fn() + Sync),
    f: impl Fn(&J) -> Result<T, StudyError> + Sync,
) -> Result<Vec<T>, StudyError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| StudyError::Threads(e.to_string()))?;
    pool.install(|| {
        jobs.par_iter()
            .map(|job| {
                let r = f(job);
                progress();
                r
            })
            .collect()
    })
}

/// Mean, spread and extremes of one metric over seeds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Sample standard deviation (0 for one value).
    pub std: f64,
    /// 10th percentile.
    pub p10: f64,
}

impl Spread {
    /// The spread of `values` (all zero when there are none).
    pub fn of(values: &[f64]) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread {
            mean,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            std: var.sqrt(),
            p10: quantile(&sorted, 0.1),
        }
    }
}
