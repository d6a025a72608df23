//! `sweep`'s whole answer as one value, [`SweepReport`]: the grid of concurrency × seeds (run by an
//! [`Executor`]), its recommendation, and — when every run finished — the recommendation under the
//! cost model's error and where the picks sit at both ends of the profile's band. Never prints or
//! renders: a front end shows the value as a table, JSON, CSV or a plot.

use crate::{under_model_error, Executor, Study, StudyError, SweepPlan, SweepResult, UnderError};
use serde::Serialize;
use serverbench_calibration::Band;
use std::sync::Arc;

/// Everything `sweep` answers. Serialised, it is sweep.json: the result's fields and
/// `under_model_error`.
#[derive(Clone, Debug, Serialize)]
pub struct SweepReport {
    /// The grid: levels, windows, cells, the best mean and the best robust level.
    #[serde(flatten)]
    pub result: SweepResult,
    /// The levels under the cost model's error (absent when the sweep is partial).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub under_model_error: Option<UnderError>,
    /// The picks at the slow end, the nominal figures and the fast end of the profile's stated band
    /// (absent when the sweep is partial or the profile states no band).
    #[serde(skip)]
    pub band: Option<BandPicks>,
    /// The runs the grid planned (concurrency levels × seeds), finished or not.
    #[serde(skip)]
    pub planned_runs: usize,
}

/// One end's recommendation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pick {
    /// The level with the best mean D.
    pub best_mean: u32,
    /// Its mean D.
    pub best_mean_d: f64,
    /// The level with the best 10th-percentile D.
    pub best_robust: u32,
}

impl Pick {
    fn of(r: &SweepResult) -> Pick {
        Pick {
            best_mean: r.best_mean,
            best_mean_d: r.best_level().map_or(0.0, |l| l.d.mean),
            best_robust: r.best_robust,
        }
    }
}

/// The recommendation at both ends of the profile's stated band and at its nominal figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BandPicks {
    /// The band the ends were taken at.
    pub band: Band,
    /// Efficiencies low, overheads high.
    pub slow: Pick,
    /// The profile as it is.
    pub nominal: Pick,
    /// Efficiencies high, overheads low.
    pub fast: Pick,
}

impl BandPicks {
    /// The three picks with their names, slow end first.
    pub fn ends(&self) -> [(&'static str, Pick); 3] {
        [
            ("slow end", self.slow),
            ("nominal", self.nominal),
            ("fast end", self.fast),
        ]
    }

    /// Whether either end's recommendation (best mean or robust level) differs from the nominal one.
    pub fn moves(&self) -> bool {
        let key = |p: Pick| (p.best_mean, p.best_robust);
        key(self.slow) != key(self.nominal) || key(self.fast) != key(self.nominal)
    }
}

/// `sweep`: every concurrency × seed of `study` carried out by `exec` (with `windows`, seconds, each run
/// also scored over every prefix window); when every run finished, the same grid at both ends of the
/// cost model's error. A level or seed given twice is refused.
pub fn run_sweep(
    study: Study,
    concurrency: &[u32],
    seeds: &[u64],
    windows: &[f64],
    exec: &impl Executor,
) -> Result<SweepReport, StudyError> {
    let plan = SweepPlan::new(&study, concurrency, seeds, windows)?;
    let study = Arc::new(study);
    let (s, p) = (study.clone(), plan.clone());
    let cells = exec.execute(
        plan.len(),
        Box::new(move |stop, done| p.run(&s, stop, done)),
    )?;
    let result = plan.result(&study, cells);
    let under = match result.partial {
        true => None,
        false => Some(under_model_error(&study, &result)?),
    };
    Ok(SweepReport {
        band: under.as_ref().and_then(|u| band_picks(&study, &result, u)),
        under_model_error: under,
        planned_runs: plan.len(),
        result,
    })
}

/// The picks of the sweeps `under_model_error` ran, when the profile states its band.
fn band_picks(study: &Study, nominal: &SweepResult, u: &UnderError) -> Option<BandPicks> {
    Some(BandPicks {
        band: study.deployment.profile.band?,
        slow: Pick::of(&u.slow),
        nominal: Pick::of(nominal),
        fast: Pick::of(&u.fast),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Inline;
    use serverbench_sim::{Deployment, RunConfig};
    use serverbench_workloads::Workload;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn study(deployment: &str) -> Study {
        let d = Deployment::preset(deployment).unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        Study::new(d, w, RunConfig::new(1, 0, 120.0))
    }

    #[test]
    fn a_finished_sweep_answers_under_the_model_error_and_counts_its_runs() {
        let s = study("qwen3-8b-1xh200");
        let calls = AtomicUsize::new(0);
        let tick = || {
            calls.fetch_add(1, Ordering::Relaxed);
        };
        let r = run_sweep(s.clone(), &[1, 8], &[0, 1], &[], &Inline(&tick)).unwrap();
        assert_eq!((r.planned_runs, calls.load(Ordering::Relaxed)), (4, 4));
        assert!(!r.result.partial);
        let u = r.under_model_error.as_ref().expect("a finished sweep");
        assert_eq!(u.best_nominal, r.result.best_mean);
        // This profile states no band: the default one stands in, and there are no band picks.
        assert!(!u.stated && r.band.is_none());
        let direct = crate::sweep(&s, &[1, 8], &[0, 1], &[], &|| {}).unwrap();
        assert_eq!(format!("{:?}", r.result), format!("{direct:?}"));
    }

    #[test]
    fn band_picks_are_each_end_s_recommendation() {
        let mut s = study("qwen3-8b-1xh200");
        let band = Band {
            compute: 0.3,
            memory: 0.3,
            overhead: 0.5,
        };
        s.deployment.profile.band = Some(band);
        let r = run_sweep(s, &[1, 8, 32], &[0], &[], &Inline(&|| {})).unwrap();
        let (b, u) = (r.band.unwrap(), r.under_model_error.unwrap());
        assert_eq!(b.band, band);
        assert_eq!(b.nominal, Pick::of(&r.result));
        assert_eq!(b.slow, Pick::of(&u.slow));
        assert_eq!(b.fast, Pick::of(&u.fast));
        let same =
            |p: Pick| (p.best_mean, p.best_robust) == (b.nominal.best_mean, b.nominal.best_robust);
        assert_eq!(b.moves(), !(same(b.slow) && same(b.fast)));
        assert_eq!(b.ends().map(|e| e.0), ["slow end", "nominal", "fast end"]);
    }

    #[test]
    fn a_partial_sweep_has_no_answer_under_the_model_error() {
        let first = crate::execute::FirstOnly;
        let r = run_sweep(study("qwen3-8b-1xh200"), &[1, 8], &[0], &[], &first).unwrap();
        assert!(r.result.partial);
        assert_eq!((r.result.cells.len(), r.planned_runs), (1, 2));
        assert!(r.under_model_error.is_none() && r.band.is_none());
        let json = serde_json::to_value(&r).unwrap();
        assert!(json.get("under_model_error").is_none() && json["partial"] == true);
    }
}
