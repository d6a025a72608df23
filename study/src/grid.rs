//! Many runs in parallel, collected in job order, and the spread of a metric over seeds.

use crate::StudyError;
use rayon::prelude::*;
use serde::Serialize;
use serverbench_workloads::quantile;
use std::sync::atomic::{AtomicBool, Ordering};

/// A request to stop a study between runs (the binary makes it on SIGINT or SIGTERM): runs not yet
/// started are skipped, and the study returns those that finished.
#[derive(Debug, Default)]
pub struct Stop(AtomicBool);

impl Stop {
    /// Asks the study to start no more runs.
    pub fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether a stop was asked for.
    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Runs `f` on every job on `threads` worker threads (`None`: one per core) and returns the results in
/// job order, so the output never depends on the thread count; `progress` is called after each job.
pub fn run_all<J: Sync, T: Send>(
    jobs: &[J],
    threads: Option<usize>,
    progress: &(dyn Fn() + Sync),
    f: impl Fn(&J) -> Result<T, StudyError> + Sync,
) -> Result<Vec<T>, StudyError> {
    let all = run_until(jobs, threads, &Stop::default(), &|_, _| progress(), f)?;
    Ok(all.into_iter().flatten().collect())
}

/// [`run_all`] that starts no job once `stop` is requested: a job it skipped is `None`. `done(i, r)` is
/// called as job `i` finishes with `r` (from a worker thread).
pub fn run_until<J: Sync, T: Send>(
    jobs: &[J],
    threads: Option<usize>,
    stop: &Stop,
    done: &(dyn Fn(usize, &T) + Sync),
    f: impl Fn(&J) -> Result<T, StudyError> + Sync,
) -> Result<Vec<Option<T>>, StudyError> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .map_err(|e| StudyError::Threads(e.to_string()))?;
    pool.install(|| {
        jobs.par_iter()
            .enumerate()
            .map(|(i, job)| {
                if stop.is_requested() {
                    return Ok(None);
                }
                let r = f(job)?;
                done(i, &r);
                Ok(Some(r))
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
