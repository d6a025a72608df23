//! The sweep: every concurrency level × every seed, summarised per level, and the level that gives the
//! best mean D and the best D of its worst seeds; optionally the D of shorter prefix windows of the
//! same runs (window sensitivity).

use crate::{run_until, Spread, Stop, Study, StudyError};
use serde::Serialize;
use serverbench_sim::{agentx_prefix_window, prefix_window, score, Arrivals, RunConfig};

/// One replay of the grid.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    /// Lanes.
    pub concurrency: u32,
    /// Workload seed.
    pub seed: u64,
    /// Qualified value per GPU dollar.
    pub d: f64,
    /// Gross value per GPU dollar.
    pub g: f64,
    /// `D / G`.
    pub f: f64,
    /// p90 TTFT, seconds.
    pub ttft_p90_s: f64,
    /// p90 TPOT, seconds.
    pub tpot_p90_s: f64,
    /// Requests sent in the window.
    pub requests: usize,
    /// The run was valid (`Summary::valid`: overflows and errors within their limits, and under the
    /// AgentX protocols its coverage and overflow checks).
    pub valid: bool,
    /// D of each prefix window, shortest first (only with windows).
    pub window_d: Vec<f64>,
}

/// A prefix window's D.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct WindowD {
    /// The window, seconds.
    pub window_s: f64,
    /// Mean D over seeds.
    pub d_mean: f64,
    /// Its ratio to the longest window's mean D.
    pub ratio_to_longest: f64,
}

/// Per-concurrency statistics over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct Level {
    /// Lanes.
    pub concurrency: u32,
    /// D over seeds.
    pub d: Spread,
    /// G over seeds.
    pub g: Spread,
    /// f over seeds.
    pub f: Spread,
    /// p90 TTFT over seeds, seconds.
    pub ttft_p90_s: Spread,
    /// p90 TPOT over seeds, seconds.
    pub tpot_p90_s: Spread,
    /// Every seed's run was valid.
    pub all_valid: bool,
    /// Seeds whose run was not.
    pub invalid_runs: usize,
    /// Mean D of each prefix window and its ratio to the longest window's.
    pub windows: Vec<WindowD>,
}

/// The sweep's result.
#[derive(Clone, Debug, Serialize)]
pub struct SweepResult {
    /// Deployment name.
    pub deployment: String,
    /// The runs' window, seconds (the longest prefix window when there are several).
    pub window_s: f64,
    /// Seeds of every level.
    pub seeds: Vec<u64>,
    /// One per concurrency, in the order given.
    pub levels: Vec<Level>,
    /// The level with the best mean D.
    pub best_mean: u32,
    /// The level with the best 10th-percentile D over seeds.
    pub best_robust: u32,
    /// Every run, level by level (only those that finished, when `partial`).
    pub cells: Vec<Cell>,
    /// True when the sweep was stopped before every run finished: levels and cells hold the runs that
    /// did, and a level none of whose runs finished is absent.
    pub partial: bool,
}

impl SweepResult {
    /// The level of `concurrency`, if the sweep has it.
    pub fn level(&self, concurrency: u32) -> Option<&Level> {
        self.levels.iter().find(|l| l.concurrency == concurrency)
    }

    /// The level with the best mean D (none when no run finished).
    pub fn best_level(&self) -> Option<&Level> {
        self.level(self.best_mean)
    }

    /// The level with the best 10th-percentile D (none when no run finished).
    pub fn robust_level(&self) -> Option<&Level> {
        self.level(self.best_robust)
    }
}

/// Refuses a list that names one value twice.
fn no_repeats<T: PartialEq + ToString>(what: &'static str, values: &[T]) -> Result<(), StudyError> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            return Err(StudyError::Repeated {
                what,
                value: v.to_string(),
            });
        }
    }
    Ok(())
}

/// Runs every concurrency × seed; with `windows` (seconds) the runs use the longest and each is also
/// scored over every prefix window. A level or seed given twice is refused.
pub fn sweep(
    study: &Study,
    concurrency: &[u32],
    seeds: &[u64],
    windows: &[f64],
    progress: &(dyn Fn() + Sync),
) -> Result<SweepResult, StudyError> {
    let plan = SweepPlan::new(study, concurrency, seeds, windows)?;
    let cells = plan.run(study, &Stop::default(), &|_, _| progress())?;
    Ok(plan.result(study, cells))
}

/// A sweep's runs, checked and listed (level by level, seeds in order), to run and then summarise in
/// two steps, so that a sweep stopped part-way still summarises the runs that finished.
#[derive(Clone, Debug)]
pub struct SweepPlan {
    concurrency: Vec<u32>,
    seeds: Vec<u64>,
    windows: Vec<f64>,
    jobs: Vec<RunConfig>,
}

impl SweepPlan {
    /// The plan of [`sweep`]; refuses what `sweep` refuses.
    pub fn new(
        study: &Study,
        concurrency: &[u32],
        seeds: &[u64],
        windows: &[f64],
    ) -> Result<SweepPlan, StudyError> {
        if concurrency.is_empty() || seeds.is_empty() {
            return Err(StudyError::NothingToRun);
        }
        no_repeats("concurrency", concurrency)?;
        no_repeats("seeds", seeds)?;
        let mut windows = windows.to_vec();
        windows.sort_by(f64::total_cmp);
        windows.dedup();
        let mut base = study.replay;
        if let Some(&longest) = windows.last() {
            base.window_s = longest;
        }
        let jobs = concurrency
            .iter()
            .flat_map(|&c| seeds.iter().map(move |&s| (c, s)))
            .map(|(c, s)| RunConfig {
                concurrency: c,
                seed: s,
                ..base
            })
            .collect();
        Ok(SweepPlan {
            concurrency: concurrency.to_vec(),
            seeds: seeds.to_vec(),
            windows,
            jobs,
        })
    }

    /// Runs in the plan.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether the plan has no run (never: [`SweepPlan::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Runs the plan, starting no run once `stop` is requested (a run not started is `None`);
    /// `done(i, cell)` is called as run `i` finishes.
    pub fn run(
        &self,
        study: &Study,
        stop: &Stop,
        done: &(dyn Fn(usize, &Cell) + Sync),
    ) -> Result<Vec<Option<Cell>>, StudyError> {
        let d = &study.deployment;
        run_until(&self.jobs, study.threads, stop, done, |cfg| {
            let out = study.run(cfg)?;
            let s = &out.summary;
            let window_d = self
                .windows
                .iter()
                .map(|&w| {
                    let cut = (w * 1e9) as u64;
                    let records = match cfg.protocol.is_agentx() {
                        true => agentx_prefix_window(&out.records, cut, cfg.agentx.grace_ns),
                        false => prefix_window(&out.records, cut),
                    };
                    score(&records, &d.prices, &d.slo, d.cost(w)).d
                })
                .collect();
            Ok(Cell {
                concurrency: cfg.concurrency,
                seed: cfg.seed,
                d: s.score.d,
                g: s.score.g,
                f: s.score.f,
                ttft_p90_s: s.ttft_s.p90,
                tpot_p90_s: s.tpot_s.p90,
                requests: s.requests,
                valid: s.valid,
                window_d,
            })
        })
    }

    /// The sweep's result from the cells of [`SweepPlan::run`], in job order; partial when some are
    /// missing.
    pub fn result(&self, study: &Study, cells: Vec<Option<Cell>>) -> SweepResult {
        let partial = cells.len() < self.jobs.len() || cells.iter().any(Option::is_none);
        let cells: Vec<Cell> = cells.into_iter().flatten().collect();
        let levels: Vec<Level> = self
            .concurrency
            .iter()
            .filter(|&&c| cells.iter().any(|x| x.concurrency == c))
            .map(|&c| level(c, &cells, &self.windows))
            .collect();
        let best = |key: fn(&Level) -> f64| {
            levels
                .iter()
                .reduce(|b, l| if key(l) > key(b) { l } else { b })
                .map_or(0, |l| l.concurrency)
        };
        SweepResult {
            deployment: study.deployment.name.clone(),
            window_s: self
                .windows
                .last()
                .copied()
                .unwrap_or(study.replay.window_s),
            seeds: self.seeds.clone(),
            best_mean: best(|l| l.d.mean),
            best_robust: best(|l| l.d.p10),
            levels,
            cells,
            partial,
        }
    }
}

fn level(c: u32, cells: &[Cell], windows: &[f64]) -> Level {
    let mine: Vec<&Cell> = cells.iter().filter(|x| x.concurrency == c).collect();
    let col = |f: &dyn Fn(&Cell) -> f64| Spread::of(&mine.iter().map(|x| f(x)).collect::<Vec<_>>());
    let means: Vec<f64> = (0..windows.len())
        .map(|i| col(&|x| x.window_d[i]).mean)
        .collect();
    let longest = means.last().copied().unwrap_or(0.0);
    let windows = windows
        .iter()
        .zip(&means)
        .map(|(&w, &m)| WindowD {
            window_s: w,
            d_mean: m,
            ratio_to_longest: if longest > 0.0 { m / longest } else { 0.0 },
        })
        .collect();
    Level {
        concurrency: c,
        d: col(&|x| x.d),
        g: col(&|x| x.g),
        f: col(&|x| x.f),
        ttft_p90_s: col(&|x| x.ttft_p90_s),
        tpot_p90_s: col(&|x| x.tpot_p90_s),
        all_valid: mine.iter().all(|x| x.valid),
        invalid_runs: mine.iter().filter(|x| !x.valid).count(),
        windows,
    }
}

/// One Poisson rate of a rate sweep: its statistics over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct RateLevel {
    /// Session trees per second.
    pub rate: f64,
    /// The level's statistics (`concurrency` is the cap on open trees).
    #[serde(flatten)]
    pub level: Level,
}

/// A sweep over Poisson arrival rates.
#[derive(Clone, Debug, Serialize)]
pub struct RateSweep {
    /// Deployment name.
    pub deployment: String,
    /// The runs' window, seconds.
    pub window_s: f64,
    /// Seeds of every rate.
    pub seeds: Vec<u64>,
    /// Most trees open at once.
    pub max_open: u32,
    /// One per rate, in the order given.
    pub levels: Vec<RateLevel>,
    /// The rate with the best mean D.
    pub best_mean: f64,
    /// The rate with the best 10th-percentile D over seeds.
    pub best_robust: f64,
    /// True when the sweep was stopped before every run finished (see [`SweepResult::partial`]).
    pub partial: bool,
}

/// Runs every Poisson `rate` (trees per second) × seed, open loop, with the study's cap on open trees.
pub fn sweep_rates(
    study: &Study,
    rates: &[f64],
    seeds: &[u64],
    progress: &(dyn Fn() + Sync),
) -> Result<RateSweep, StudyError> {
    sweep_rates_until(study, rates, seeds, &Stop::default(), progress)
}

/// [`sweep_rates`] that starts no run once `stop` is requested; the result is then partial.
pub fn sweep_rates_until(
    study: &Study,
    rates: &[f64],
    seeds: &[u64],
    stop: &Stop,
    progress: &(dyn Fn() + Sync),
) -> Result<RateSweep, StudyError> {
    if rates.is_empty() || seeds.is_empty() {
        return Err(StudyError::NothingToRun);
    }
    no_repeats("rates", rates)?;
    no_repeats("seeds", seeds)?;
    let cap = study.replay.concurrency;
    let mut levels = Vec::new();
    let mut partial = false;
    for &rate in rates {
        let mut at_rate = study.clone();
        at_rate.replay.arrivals = Arrivals::Poisson { rate };
        let plan = SweepPlan::new(&at_rate, &[cap], seeds, &[])?;
        let r = plan.result(&at_rate, plan.run(&at_rate, stop, &|_, _| progress())?);
        partial |= r.partial;
        if let Some(level) = r.levels.into_iter().next() {
            levels.push(RateLevel { rate, level });
        }
    }
    let best = |key: fn(&Level) -> f64| {
        levels
            .iter()
            .reduce(|b, l| if key(&l.level) > key(&b.level) { l } else { b })
            .map_or(0.0, |l| l.rate)
    };
    Ok(RateSweep {
        deployment: study.deployment.name.clone(),
        window_s: study.replay.window_s,
        seeds: seeds.to_vec(),
        max_open: cap,
        best_mean: best(|l| l.d.mean),
        best_robust: best(|l| l.d.p10),
        levels,
        partial,
    })
}
