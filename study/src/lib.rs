//! Studies over many simulated replays: [`sweep`] (concurrency × seeds, and window sensitivity;
//! [`run_sweep`], the command's whole answer, [`SweepReport`]), [`run_screen`],
//! [`sweep_rates`] (Poisson arrival rates × seeds), [`under_model_error`] (the sweep's recommendation at
//! both ends of the cost model's error),
//! [`screen`] (seeds ranked by difficulty), [`freeze_slo`] (targets from a reference configuration),
//! [`what_if`] (each serving knob alone), and the statistics of simulated-against-measured
//! comparisons ([`compare`]), and the Ed25519 signatures of frozen decisions ([`seal`]). Callable from Rust; the binary only parses arguments, prints and writes.
//!
//! **Invariant:** results never depend on the thread count: runs execute in parallel (rayon) over a
//! fixed job list and are collected in job order. No IO, no clock, no terminal.
//!
//! ```
//! use serverbench_sim::{Deployment, RunConfig};
//! use serverbench_study::{sweep, Study};
//! use serverbench_workloads::Workload;
//!
//! let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
//! // The deployment's own workload spec (`synthetic-v1`: its 40,960-token context).
//! let w = Workload::builtin(d.workload.as_deref());
//! let study = Study::new(d, w, RunConfig::new(1, 0, 120.0));
//! let r = sweep(&study, &[1, 4], &[0, 1], &[], &|| {}).unwrap();
//! assert_eq!(r.levels.len(), 2);
//! assert!(r.levels.iter().any(|l| l.concurrency == r.best_mean));
//! ```

pub mod compare;
mod execute;
mod grid;
pub mod inputs;
pub mod plot;
pub mod report;
mod result_plots;
mod robust;
mod scan;
mod screen;
pub mod seal;
mod slo;
mod sweep;
mod sweep_report;
mod whatif;

pub use execute::{Executor, Inline, Work};
pub use grid::{run_all, run_until, Spread, Stop};
pub use result_plots::{rate_sweep_plot, screen_plot, sweep_plot, QUALIFIED_F};
pub use robust::{under_model_error, LevelUnderError, UnderError, DEFAULT_BAND};
pub use scan::{scan_seeds, SeedScan};
pub use screen::{run_screen, screen, ScreenPlan, ScreenResult, SeedRow};
pub use slo::{
    freeze_over_corpora, freeze_slo, slo_reference, with_frozen_slo, CorpusFreeze, SeedP90,
    SloReference,
};
pub use sweep::{
    sweep, sweep_rates, sweep_rates_until, Cell, Level, RateLevel, RateSweep, SweepPlan,
    SweepResult, WindowD,
};
pub use sweep_report::{run_sweep, BandPicks, Pick, SweepReport};
pub use whatif::{what_if, Knob, KnobRow, WhatIf, KNOBS};

use serverbench_calibration::{CostModel, FieldError};
use serverbench_sim::{Deployment, RunConfig, RunError, RunOutput, Unbounded};
use serverbench_workloads::Workload;

/// Why a study cannot run.
#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    /// The run cannot be made (capacity, options) or cannot advance.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The workload spec does not fit the deployment (the error itself is the message: as a source
    /// it was printed twice).
    #[error("workload spec: {0}")]
    Workload(FieldError),
    /// The workload's zero-service walk never advances.
    #[error(transparent)]
    Unbounded(#[from] Unbounded),
    /// No concurrency level or no seed was given.
    #[error("nothing to run: give at least one concurrency level and one seed")]
    NothingToRun,
    /// A level (or a seed) given twice: its rows would be the same run, each marked best.
    #[error("--{what}: {value} is given twice")]
    Repeated {
        /// `concurrency`, `seeds` or `rates`.
        what: &'static str,
        /// The repeated value.
        value: String,
    },
    /// The worker threads could not start.
    #[error("cannot start worker threads: {0}")]
    Threads(String),
    /// The caller's [`Executor`] could not carry out the runs (its own words).
    #[error("{0}")]
    Executor(String),
    /// Corpus draws asked of a workload that has one corpus (a trace) or of a protocol that draws
    /// sessions per seed.
    #[error("--corpus-draws: {0}")]
    CorpusDraws(&'static str),
}

impl From<FieldError> for StudyError {
    fn from(e: FieldError) -> StudyError {
        StudyError::Workload(e)
    }
}

/// One configuration to study: the deployment (its cost model built once), the workload, and the
/// replay options every run shares (window, idle-gap cap, start mode); each run sets its own
/// concurrency and seed.
#[derive(Clone, Debug)]
pub struct Study {
    /// The deployment.
    pub deployment: Deployment,
    /// Its cost model.
    pub cost: CostModel,
    /// Where the session trees come from.
    pub workload: Workload,
    /// The run options; `concurrency` and `seed` are set per run.
    pub replay: RunConfig,
    /// Worker threads (`None`: one per core). Results never depend on it.
    pub threads: Option<usize>,
}

impl Study {
    /// A study of `deployment` under `workload` with the options of `replay`.
    pub fn new(deployment: Deployment, workload: Workload, replay: RunConfig) -> Study {
        Study {
            cost: deployment.cost_model(),
            deployment,
            workload,
            replay,
            threads: None,
        }
    }

    /// The options of the run at `concurrency` lanes and `seed`.
    /// The open modes keep the study's cap on open trees: their load is the arrival rate, not `concurrency`.
    pub fn config(&self, concurrency: u32, seed: u64) -> RunConfig {
        RunConfig {
            concurrency: match self.replay.arrivals.is_closed() {
                true => concurrency,
                false => self.replay.concurrency,
            },
            seed,
            ..self.replay
        }
    }

    /// One simulated replay.
    pub fn run(&self, cfg: &RunConfig) -> Result<RunOutput, StudyError> {
        let source = self.workload.source_for(
            cfg.seed,
            self.deployment.context_limit,
            cfg.protocol.is_agentx(),
        )?;
        Ok(serverbench_sim::simulate(
            &self.deployment,
            &self.cost,
            source.as_ref(),
            cfg,
        )?)
    }

    /// The same study of another deployment (a knob changed).
    pub fn with_deployment(&self, deployment: Deployment) -> Study {
        Study {
            cost: deployment.cost_model(),
            deployment,
            ..self.clone()
        }
    }
}
