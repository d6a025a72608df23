//! The workload scan over seeds: per seed, the value an infinitely fast server would be asked for
//! inside the window at `c` lanes (no engine, zero service time).

use crate::{run_all, StudyError};
use serverbench_sim::{Deployment, Offer};
use serverbench_workloads::Workload;

/// Scans every seed of `seeds` in parallel (results in seed order), at the deployment's prices and
/// context limit.
pub fn scan_seeds(
    workload: &Workload,
    d: &Deployment,
    seeds: &[u64],
    concurrency: u32,
    window_s: f64,
    idle_gap_cap_s: f64,
) -> Result<Vec<Offer>, StudyError> {
    run_all(seeds, None, &|| {}, |&seed| {
        let source = workload.source(seed, d.context_limit)?;
        Ok(serverbench_sim::scan(
            source.as_ref(),
            &d.prices,
            seed,
            concurrency,
            window_s,
            idle_gap_cap_s,
        )?)
    })
}
