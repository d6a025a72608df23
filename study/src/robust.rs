//! The recommendation under the cost model's own error: the same sweep at both ends of the profile's
//! stated band (every step slower, every step faster), and the level that, wherever in the band the
//! real server lies, gives up the least of the best level's mean D (least worst-case regret). Never
//! reads files or prints; the binary renders the result.

use crate::{sweep, Study, StudyError, SweepResult};
use serde::Serialize;
use serverbench_calibration::{Band, BandEnd};

/// The band a profile that states none is evaluated under: its figures were not measured against a
/// real server, so its steps may be this far off (compute and bandwidth efficiencies ±10 %, host
/// overheads ±25 %: the spread of the measured profiles' held-out step errors, docs/calibration.md).
pub const DEFAULT_BAND: Band = Band {
    compute: 0.10,
    memory: 0.10,
    overhead: 0.25,
};

/// One level's mean D at the profile's nominal figures and at both ends of its band.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LevelUnderError {
    /// Lanes.
    pub concurrency: u32,
    /// Mean D over seeds at the nominal figures.
    pub d_nominal: f64,
    /// At the slow end (efficiencies low, overheads high).
    pub d_slow: f64,
    /// At the fast end.
    pub d_fast: f64,
    /// The least of the three.
    pub d_worst: f64,
    /// The largest share of the best level's mean D that this level gives up in any of the three
    /// sweeps (0: best in all three; a sweep where no level scores costs nothing).
    pub regret_worst: f64,
    /// The mean over seeds of p90 TTFT at the nominal figures, as a fraction of the target (1: on it).
    pub ttft_to_target: f64,
    /// Likewise p90 TPOT.
    pub tpot_to_target: f64,
}

/// The sweep's levels under the cost model's error, and the recommendation that survives it.
#[derive(Clone, Debug, Serialize)]
pub struct UnderError {
    /// The band the ends were taken at.
    pub compute: f64,
    /// Bandwidth-bound efficiencies' half-width.
    pub memory: f64,
    /// Host overheads' half-width.
    pub overhead: f64,
    /// True when the profile states its band; false when [`DEFAULT_BAND`] stood in for it.
    pub stated: bool,
    /// Per level, in the sweep's order.
    pub levels: Vec<LevelUnderError>,
    /// The recommendation: the level whose largest regret over the three sweeps is least.
    pub least_regret: u32,
    /// The level whose least mean D over the three is best: the pick of planning for the slow end.
    pub best_worst_case: u32,
    /// The nominal recommendation (best mean D at the nominal figures).
    pub best_nominal: u32,
    /// The sweep at the slow end of the band (`sweep --band` prints its recommendations).
    #[serde(skip)]
    pub slow: SweepResult,
    /// The sweep at the fast end.
    #[serde(skip)]
    pub fast: SweepResult,
}

impl UnderError {
    /// The level of concurrency `c`.
    pub fn level(&self, c: u32) -> Option<&LevelUnderError> {
        self.levels.iter().find(|l| l.concurrency == c)
    }

    /// True when no level scores above 0 in any of the three sweeps: nothing to recommend.
    pub fn nothing_scores(&self) -> bool {
        self.levels
            .iter()
            .all(|l| l.d_nominal.max(l.d_slow).max(l.d_fast) <= 0.0)
    }

    /// When the nominal recommendation does not survive the error: which target its score hangs on
    /// (the one whose p90 sits nearer to it) and how near, as (`"TPOT"` or `"TTFT"`, |p90 ÷ target − 1|).
    pub fn hangs_on(&self) -> Option<(&'static str, f64)> {
        if self.best_nominal == self.least_regret {
            return None;
        }
        let l = self.level(self.best_nominal)?;
        let (tpot, ttft) = (
            (l.tpot_to_target - 1.0).abs(),
            (l.ttft_to_target - 1.0).abs(),
        );
        Some(if tpot <= ttft {
            ("TPOT", tpot)
        } else {
            ("TTFT", ttft)
        })
    }
}

/// Runs the sweep of `nominal` again at both ends of the deployment's profile band (or
/// [`DEFAULT_BAND`]) on the same levels and seeds, and picks the level of least worst-case regret.
pub fn under_model_error(study: &Study, nominal: &SweepResult) -> Result<UnderError, StudyError> {
    let (band, stated) = match study.deployment.profile.band {
        Some(b) => (b, true),
        None => (DEFAULT_BAND, false),
    };
    let concurrency: Vec<u32> = nominal.levels.iter().map(|l| l.concurrency).collect();
    let at = |end| -> Result<SweepResult, StudyError> {
        let mut d = study.deployment.clone();
        d.profile.band = Some(band);
        d.profile = d.profile.at_band_end(end);
        sweep(
            &study.with_deployment(d),
            &concurrency,
            &nominal.seeds,
            &[],
            &|| {},
        )
    };
    let (slow, fast) = (at(BandEnd::Slow)?, at(BandEnd::Fast)?);
    let slo = study.deployment.slo;
    let mut levels: Vec<LevelUnderError> = nominal
        .levels
        .iter()
        .map(|l| {
            let mean_at = |r: &SweepResult| {
                r.levels
                    .iter()
                    .find(|x| x.concurrency == l.concurrency)
                    .map_or(0.0, |x| x.d.mean)
            };
            let (d_slow, d_fast) = (mean_at(&slow), mean_at(&fast));
            LevelUnderError {
                concurrency: l.concurrency,
                d_nominal: l.d.mean,
                d_slow,
                d_fast,
                d_worst: l.d.mean.min(d_slow).min(d_fast),
                regret_worst: 0.0,
                ttft_to_target: l.ttft_p90_s.mean / slo.ttft_s,
                tpot_to_target: l.tpot_p90_s.mean / slo.tpot_s,
            }
        })
        .collect();
    let least_regret = set_regrets(&mut levels);
    let best_worst_case = levels
        .iter()
        .reduce(|b, l| if l.d_worst > b.d_worst { l } else { b })
        .map_or(0, |l| l.concurrency);
    Ok(UnderError {
        compute: band.compute,
        memory: band.memory,
        overhead: band.overhead,
        stated,
        levels,
        least_regret,
        best_worst_case,
        best_nominal: nominal.best_mean,
        slow,
        fast,
    })
}

/// Fills each level's `regret_worst` (against the best mean D of the same sweep: nominal, slow end,
/// fast end) and returns the level whose worst regret is least; on a tie, the first in sweep order.
pub(crate) fn set_regrets(levels: &mut [LevelUnderError]) -> u32 {
    let three = |l: &LevelUnderError| [l.d_nominal, l.d_slow, l.d_fast];
    let mut best = [0.0_f64; 3];
    for l in levels.iter() {
        for (b, d) in best.iter_mut().zip(three(l)) {
            *b = b.max(d);
        }
    }
    for l in levels.iter_mut() {
        l.regret_worst = best
            .iter()
            .zip(three(l))
            .filter(|(top, _)| **top > 0.0)
            .map(|(top, d)| 1.0 - d / top)
            .fold(0.0, f64::max);
    }
    levels
        .iter()
        .reduce(|b, l| {
            if l.regret_worst < b.regret_worst {
                l
            } else {
                b
            }
        })
        .map_or(0, |l| l.concurrency)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serverbench_sim::{Deployment, RunConfig};
    use serverbench_workloads::Workload;

    #[test]
    fn the_worst_case_pick_is_the_level_whose_least_d_is_best() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        assert!(
            d.profile.band.is_none(),
            "the case needs a profile without a band"
        );
        let w = Workload::builtin(d.workload.as_deref());
        let study = Study::new(d, w, RunConfig::new(1, 0, 120.0));
        let nominal = sweep(&study, &[1, 8, 32], &[0, 1], &[], &|| {}).unwrap();
        let u = under_model_error(&study, &nominal).unwrap();
        assert!(!u.stated);
        assert_eq!((u.compute, u.memory, u.overhead), (0.10, 0.10, 0.25));
        assert_eq!(u.best_nominal, nominal.best_mean);
        for l in &u.levels {
            assert_eq!(l.d_worst, l.d_nominal.min(l.d_slow).min(l.d_fast));
        }
        let best = u.level(u.best_worst_case).unwrap().d_worst;
        assert!(u.levels.iter().all(|l| l.d_worst <= best));
        let least = u.level(u.least_regret).unwrap().regret_worst;
        assert!(u.levels.iter().all(|l| l.regret_worst >= least));
        assert!(u
            .levels
            .iter()
            .all(|l| (0.0..=1.0).contains(&l.regret_worst)));
        // The slow end is slower: at the busiest level its p90 TPOT can only grow, so D cannot rise.
        let busy = u.level(32).unwrap();
        assert!(busy.d_slow <= busy.d_nominal + 1e-12, "{busy:?}");
        // Deterministic.
        let again = under_model_error(&study, &nominal).unwrap();
        assert_eq!(format!("{again:?}"), format!("{u:?}"));
    }

    fn level(concurrency: u32, (d_nominal, d_slow, d_fast): (f64, f64, f64)) -> LevelUnderError {
        LevelUnderError {
            concurrency,
            d_nominal,
            d_slow,
            d_fast,
            d_worst: d_nominal.min(d_slow).min(d_fast),
            regret_worst: f64::NAN,
            ttft_to_target: 0.5,
            tpot_to_target: 0.9,
        }
    }

    /// The simulated D of the Qwen3-30B-A3B replays on vLLM (results/h200-vllm/regret.md, set
    /// moe-syn-cold): 16 loses most at the slow end, 8 everywhere else, and vLLM measured 16 best.
    #[test]
    fn the_pick_is_the_level_of_least_worst_case_regret() {
        let mut ls = [
            level(4, (2.32, 2.12, 2.43)),
            level(8, (3.44, 2.89, 3.70)),
            level(16, (3.90, 2.47, 4.81)),
        ];
        assert_eq!(set_regrets(&mut ls), 16);
        // 8 gives up 1 − 3.70 / 4.81 at the fast end; 16 gives up 1 − 2.47 / 2.89 at the slow end.
        approx::assert_abs_diff_eq!(ls[1].regret_worst, 1.0 - 3.70 / 4.81, epsilon = 1e-12);
        approx::assert_abs_diff_eq!(ls[2].regret_worst, 1.0 - 2.47 / 2.89, epsilon = 1e-12);
        approx::assert_abs_diff_eq!(ls[0].regret_worst, 1.0 - 2.43 / 4.81, epsilon = 1e-12);
        // Planning for the slow end alone would take 8.
        assert!(ls[1].d_worst > ls[2].d_worst);
    }

    #[test]
    fn a_sweep_where_nothing_scores_costs_no_regret_and_a_tie_takes_the_first_level() {
        let mut ls = [level(2, (1.0, 0.0, 1.2)), level(4, (1.0, 0.0, 1.2))];
        assert_eq!(set_regrets(&mut ls), 2);
        assert_eq!((ls[0].regret_worst, ls[1].regret_worst), (0.0, 0.0));
        let mut none = [level(1, (0.0, 0.0, 0.0)), level(2, (0.0, 0.0, 0.0))];
        assert_eq!(set_regrets(&mut none), 1);
        assert!(none.iter().all(|l| l.regret_worst == 0.0));
    }
}
