//! Screening: many seeds at one configuration, ranked by difficulty (simulated D), beside the value
//! each seed's workload offers an infinitely fast server; seeds outside [p10, p90] are flagged.

use crate::{run_all, Study, StudyError};
use serde::Serialize;
use serverbench_workloads::quantile;

/// One seed's result.
#[derive(Clone, Debug, Serialize)]
pub struct SeedRow {
    /// 1 = hardest (lowest D).
    pub rank: usize,
    /// Workload seed.
    pub seed: u64,
    /// Qualified value per GPU dollar.
    pub d: f64,
    /// Gross value per GPU dollar.
    pub g: f64,
    /// `D / G`.
    pub f: f64,
    /// Value an infinitely fast server would be asked for in the window (workload scan), dollars.
    pub offered_value: f64,
    /// "low" below p10 of D, "high" above p90, empty inside.
    pub flag: String,
}

/// The screen's result.
#[derive(Clone, Debug, Serialize)]
pub struct ScreenResult {
    /// Deployment name.
    pub deployment: String,
    /// Lanes.
    pub concurrency: u32,
    /// Window, seconds.
    pub window_s: f64,
    /// D quantiles and mean over seeds.
    pub d_p10: f64,
    /// Median D.
    pub d_p50: f64,
    /// 90th-percentile D.
    pub d_p90: f64,
    /// Mean D.
    pub d_mean: f64,
    /// Seeds whose D is nearest the median: representative development seeds.
    pub representative: Vec<u64>,
    /// Seeds with the lowest D.
    pub hardest: Vec<u64>,
    /// Hardest first.
    pub seeds: Vec<SeedRow>,
}

/// Screens `seeds` at `concurrency`; rows come back hardest first, ties broken by seed, so rankings
/// are stable.
pub fn screen(
    study: &Study,
    concurrency: u32,
    seeds: &[u64],
    progress: &(dyn Fn() + Sync),
) -> Result<ScreenResult, StudyError> {
    if seeds.is_empty() {
        return Err(StudyError::NothingToRun);
    }
    let d = &study.deployment;
    let jobs: Vec<_> = seeds
        .iter()
        .map(|&s| study.config(concurrency, s))
        .collect();
    let mut rows = run_all(&jobs, study.threads, progress, |cfg| {
        let out = study.run(cfg)?;
        let source = study.workload.source(cfg.seed, d.context_limit)?;
        let offer = serverbench_sim::scan(
            source.as_ref(),
            &d.prices,
            cfg.seed,
            cfg.concurrency,
            cfg.window_s,
            cfg.idle_gap_cap_s,
        )?;
        let s = out.summary.score;
        Ok(SeedRow {
            rank: 0,
            seed: cfg.seed,
            d: s.d,
            g: s.g,
            f: s.f,
            offered_value: offer.value,
            flag: String::new(),
        })
    })?;
    rows.sort_by(|x, y| x.d.total_cmp(&y.d).then(x.seed.cmp(&y.seed)));
    let ds: Vec<f64> = rows.iter().map(|r| r.d).collect();
    let (p10, p50, p90) = (quantile(&ds, 0.1), quantile(&ds, 0.5), quantile(&ds, 0.9));
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = i + 1;
        r.flag = if r.d < p10 {
            "low".into()
        } else if r.d > p90 {
            "high".into()
        } else {
            String::new()
        };
    }
    let mut by_median: Vec<&SeedRow> = rows.iter().collect();
    by_median.sort_by(|x, y| {
        (x.d - p50)
            .abs()
            .total_cmp(&(y.d - p50).abs())
            .then(x.seed.cmp(&y.seed))
    });
    let named = 3.min(rows.len());
    Ok(ScreenResult {
        deployment: d.name.clone(),
        concurrency,
        window_s: study.replay.window_s,
        d_p10: p10,
        d_p50: p50,
        d_p90: p90,
        d_mean: ds.iter().sum::<f64>() / ds.len() as f64,
        representative: by_median[..named].iter().map(|r| r.seed).collect(),
        hardest: rows[..named].iter().map(|r| r.seed).collect(),
        seeds: rows,
    })
}
