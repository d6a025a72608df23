//! The flags of `cli` as `serverbench_study::inputs`' choices (the library resolves deployments,
//! workloads and replay options, and reads the files they name; its functions are re-exported here);
//! plus what only the binary does with them: print the effective deployment.

use crate::cli::{DeploymentArgs, OneRunArgs, ReplayArgs, RunArgs, WorkloadArgs};
use anyhow::Result;
use serverbench_sim::{Deployment, RunConfig};
use serverbench_study::inputs::{self as lib, DeploymentChoice, ReplayChoice, WorkloadChoice};
use serverbench_study::Study;
use serverbench_workloads::TreeSource;
use std::sync::Arc;

pub use lib::{
    check_closed_sweep, check_levels, check_scan, corpus_sessions, fit_corpus, fitted_workload,
};
pub use lib::{deployment, deployment_protocol, model, seeds, study_on, threads, time_scale};
pub use lib::{rate_sweep_study, trees_of, windows};

/// An import's note, on standard error.
pub fn note(line: &str) {
    eprintln!("{line}");
}

/// `--deployment`, `--engine-config`, `--profile` and `--model-config`.
pub fn deployment_choice(a: &DeploymentArgs) -> DeploymentChoice {
    DeploymentChoice {
        deployment: a.deployment.clone(),
        engine_config: a.engine_config.clone(),
        profile: a.profile.clone(),
        model: a.model_config.clone(),
    }
}

/// Where the session trees come from.
pub fn workload_choice(a: &WorkloadArgs) -> WorkloadChoice {
    WorkloadChoice {
        workload: a.workload.clone(),
        trace: a.trace.clone(),
        trace_format: a.trace_format,
        max_context_length: a.max_context_length,
        trace_repeat: a.trace_repeat,
        trace_as_recorded: a.trace_as_recorded,
        compact_as: a.compact_as.clone(),
        first_rows: a.first_rows.clone(),
        note,
    }
}

/// How they are replayed.
pub fn replay_choice(r: &ReplayArgs) -> ReplayChoice {
    ReplayChoice {
        window: r.window,
        idle_gap_cap: r.idle_gap_cap,
        protocol: r.protocol.clone(),
        start_ratios: r.start_ratios.clone(),
        tree_idle_cap: r.tree_idle_cap,
        warmup_per_lane: r.warmup_per_lane,
        grace: r.grace,
        arrivals: r.arrivals.clone(),
        max_open: r.max_open,
        kernels_warm: r.kernels_warm,
    }
}

/// The deployment the arguments describe.
pub fn resolved(args: &DeploymentArgs) -> Result<Deployment> {
    lib::resolved(&deployment_choice(args))
}

/// A run's deployment, workload and replay choices.
pub fn choices(run: &RunArgs) -> (DeploymentChoice, WorkloadChoice, ReplayChoice) {
    (
        deployment_choice(&run.deployment),
        workload_choice(&run.workload),
        replay_choice(&run.replay),
    )
}

/// One run's configuration and its session trees (`simulate`'s and `replay`'s), on deployment `d`.
pub fn one_run(
    run: &RunArgs,
    one: &OneRunArgs,
    d: &Deployment,
) -> Result<(RunConfig, Arc<dyn TreeSource>)> {
    let cfg = lib::run_config(&replay_choice(&run.replay), one.concurrency, one.seed)?;
    let w = workload_choice(&run.workload);
    let source = lib::source(&run.deployment.deployment, &w, one.seed, d, cfg.protocol)?;
    Ok((cfg, source))
}

/// The study the arguments describe.
pub fn study(run: &RunArgs) -> Result<Study> {
    let (d, w, r) = choices(run);
    lib::study(&d, &w, &r)
}

/// Prints the effective deployment when asked; returns true if it did (the command should stop).
pub fn print_config(args: &DeploymentArgs, d: &Deployment) -> Result<bool> {
    if args.print_config {
        out!("{}", d.to_yaml())?;
    }
    Ok(args.print_config)
}
