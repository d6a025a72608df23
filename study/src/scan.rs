//! The workload scan over seeds: per seed, the value an infinitely fast server would be asked for
//! inside the window at `c` lanes (no engine, zero service time).

use crate::{run_all, StudyError};
use serverbench_sim::{Deployment, Offer};
use serverbench_workloads::{Quantiles, Workload};

/// The scan of every seed.
#[derive(Clone, Debug)]
pub struct SeedScan {
    /// Per seed, in the order given.
    pub offers: Vec<Offer>,
    /// The value offered per window over the seeds, dollars.
    pub value: Quantiles,
}

/// Scans every seed of `seeds` in parallel (results in seed order), at the deployment's prices and
/// context limit.
pub fn scan_seeds(
    workload: &Workload,
    d: &Deployment,
    seeds: &[u64],
    concurrency: u32,
    window_s: f64,
    idle_gap_cap_s: f64,
) -> Result<SeedScan, StudyError> {
    let offers = run_all(seeds, None, &|| {}, |&seed| {
        let source = workload.source(seed, d.context_limit)?;
        Ok(serverbench_sim::scan(
            source.as_ref(),
            &d.prices,
            seed,
            concurrency,
            window_s,
            idle_gap_cap_s,
        )?)
    })?;
    let mut values: Vec<f64> = offers.iter().map(|o| o.value).collect();
    Ok(SeedScan {
        value: Quantiles::of(&mut values),
        offers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_seed_is_scanned_in_order_and_the_values_summarised() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let s = scan_seeds(&w, &d, &[2, 0, 1], 4, 300.0, 10.0).unwrap();
        assert_eq!(
            s.offers.iter().map(|o| o.seed).collect::<Vec<_>>(),
            [2, 0, 1]
        );
        let values: Vec<f64> = s.offers.iter().map(|o| o.value).collect();
        let max = values.iter().copied().fold(f64::MIN, f64::max);
        assert_eq!(s.value.max, max);
        let mean = values.iter().sum::<f64>() / 3.0;
        approx::assert_relative_eq!(s.value.mean, mean, max_relative = 1e-12);
    }
}
