//! Screening: many seeds at one configuration, ranked by difficulty (simulated D), beside the value
//! each seed's workload offers an infinitely fast server; seeds outside [p10, p90] are flagged.

use crate::{run_until, Executor, Stop, Study, StudyError};
use serde::Serialize;
use serverbench_sim::RunConfig;
use serverbench_workloads::quantile;
use std::sync::Arc;

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
    /// Hardest first (only the seeds whose run finished, when `partial`).
    pub seeds: Vec<SeedRow>,
    /// True when the screen was stopped before every seed's run finished: the ranking and the
    /// quantiles are of the seeds that did.
    pub partial: bool,
}

/// Screens `seeds` at `concurrency`; rows come back hardest first, ties broken by seed, so rankings
/// are stable.
pub fn screen(
    study: &Study,
    concurrency: u32,
    seeds: &[u64],
    progress: &(dyn Fn() + Sync),
) -> Result<ScreenResult, StudyError> {
    let plan = ScreenPlan::new(study, concurrency, seeds)?;
    let rows = plan.run(study, &Stop::default(), &|_, _| progress())?;
    Ok(plan.result(study, rows))
}

/// `screen`: [`screen`] with its runs carried out by `exec`; a seed whose run did not finish is left
/// out of the ranking, which is then partial.
pub fn run_screen(
    study: Study,
    concurrency: u32,
    seeds: &[u64],
    exec: &impl Executor,
) -> Result<ScreenResult, StudyError> {
    let plan = ScreenPlan::new(&study, concurrency, seeds)?;
    let study = Arc::new(study);
    let (s, p) = (study.clone(), plan.clone());
    let rows = exec.execute(
        plan.len(),
        Box::new(move |stop, done| p.run(&s, stop, done)),
    )?;
    Ok(plan.result(&study, rows))
}

/// A screen's runs, one per seed, to run and then rank in two steps, so that a screen stopped
/// part-way still ranks the seeds that finished.
#[derive(Clone, Debug)]
pub struct ScreenPlan {
    concurrency: u32,
    jobs: Vec<RunConfig>,
}

impl ScreenPlan {
    /// The plan of [`screen`]; refuses an empty list of seeds.
    pub fn new(study: &Study, concurrency: u32, seeds: &[u64]) -> Result<ScreenPlan, StudyError> {
        if seeds.is_empty() {
            return Err(StudyError::NothingToRun);
        }
        Ok(ScreenPlan {
            concurrency,
            jobs: seeds
                .iter()
                .map(|&s| study.config(concurrency, s))
                .collect(),
        })
    }

    /// Runs in the plan.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether the plan has no run (never: [`ScreenPlan::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Runs the plan, starting no run once `stop` is requested (a seed not run is `None`);
    /// `done(i, row)` is called as seed `i` finishes.
    pub fn run(
        &self,
        study: &Study,
        stop: &Stop,
        done: &(dyn Fn(usize, &SeedRow) + Sync),
    ) -> Result<Vec<Option<SeedRow>>, StudyError> {
        let d = &study.deployment;
        run_until(&self.jobs, study.threads, stop, done, |cfg| {
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
        })
    }

    /// The ranking of the rows of [`ScreenPlan::run`]; partial when some are missing.
    pub fn result(&self, study: &Study, rows: Vec<Option<SeedRow>>) -> ScreenResult {
        let partial = rows.len() < self.jobs.len() || rows.iter().any(Option::is_none);
        let mut rows: Vec<SeedRow> = rows.into_iter().flatten().collect();
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
        ScreenResult {
            deployment: study.deployment.name.clone(),
            concurrency: self.concurrency,
            window_s: study.replay.window_s,
            d_p10: p10,
            d_p50: p50,
            d_p90: p90,
            d_mean: ds.iter().sum::<f64>() / ds.len().max(1) as f64,
            representative: by_median[..named].iter().map(|r| r.seed).collect(),
            hardest: rows[..named].iter().map(|r| r.seed).collect(),
            seeds: rows,
            partial,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Inline;
    use serverbench_sim::Deployment;
    use serverbench_workloads::Workload;

    fn study() -> Study {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        Study::new(d, w, RunConfig::new(1, 0, 60.0))
    }

    #[test]
    fn run_screen_is_the_screen_and_a_stopped_one_ranks_what_finished() {
        let whole = run_screen(study(), 2, &[0, 1, 2], &Inline(&|| {})).unwrap();
        let direct = screen(&study(), 2, &[0, 1, 2], &|| {}).unwrap();
        assert_eq!(format!("{whole:?}"), format!("{direct:?}"));
        assert!(!whole.partial);
        let first = run_screen(study(), 2, &[0, 1, 2], &crate::execute::FirstOnly).unwrap();
        assert!(first.partial);
        assert_eq!(first.seeds.len(), 1);
        assert_eq!((first.seeds[0].seed, first.seeds[0].rank), (0, 1));
        assert_eq!(first.representative, [0]);
    }
}
