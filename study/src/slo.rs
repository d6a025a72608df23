//! SLO freezing: run a reference configuration on independent seeds, take each seed's p90 TTFT and
//! p90 TPOT; the frozen targets are the maximum over seeds of each (docs/definitions.md).

use crate::{run_all, Study, StudyError};
use serde::Serialize;
use serverbench_sim::Slo;

/// One seed's p90s.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SeedP90 {
    /// Workload seed.
    pub seed: u64,
    /// p90 TTFT, seconds.
    pub ttft_s: f64,
    /// p90 TPOT, seconds.
    pub tpot_s: f64,
}

/// Per-seed p90s at `concurrency` and the frozen targets (the maximum over seeds of each).
pub fn freeze_slo(
    study: &Study,
    concurrency: u32,
    seeds: &[u64],
    progress: &(dyn Fn() + Sync),
) -> Result<(Vec<SeedP90>, Slo), StudyError> {
    if seeds.is_empty() {
        return Err(StudyError::NothingToRun);
    }
    let jobs: Vec<_> = seeds
        .iter()
        .map(|&s| study.config(concurrency, s))
        .collect();
    let rows = run_all(&jobs, study.threads, progress, |cfg| {
        let s = study.run(cfg)?.summary;
        Ok(SeedP90 {
            seed: cfg.seed,
            ttft_s: s.ttft_s.p90,
            tpot_s: s.tpot_s.p90,
        })
    })?;
    let slo = Slo {
        ttft_s: rows.iter().map(|r| r.ttft_s).fold(0.0, f64::max),
        tpot_s: rows.iter().map(|r| r.tpot_s).fold(0.0, f64::max),
    };
    Ok((rows, slo))
}
