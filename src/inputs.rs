//! The flags of `cli` as `serverbench_study::inputs`' choices (the library resolves deployments,
//! workloads and replay options, and reads the files they name; its functions are re-exported here);
//! plus what only the binary does with them: print the effective deployment.

use crate::cli::{DeploymentArgs, ReplayArgs, RunArgs, WorkloadArgs};
use anyhow::Result;
use serverbench_sim::Deployment;
use serverbench_study::inputs::{self as lib, DeploymentChoice, ReplayChoice, WorkloadChoice};
use serverbench_study::Study;

pub use lib::{
    check_levels, check_rates, check_scan, corpus_sessions, fitted_workload, import, run_config,
};
pub use lib::{
    deployment, deployment_protocol, model, seeds, source, study_on, threads, time_scale,
};
pub use lib::{trees, trees_of, windows};

/// An import's note, on standard error.
pub fn note(line: &str) {
    eprintln!("{line}");
}

/// `--deployment`, `--engine-config` and `--profile`.
pub fn deployment_choice(a: &DeploymentArgs) -> DeploymentChoice {
    DeploymentChoice {
        deployment: a.deployment.clone(),
        engine_config: a.engine_config.clone(),
        profile: a.profile.clone(),
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
    }
}

/// The deployment the arguments describe.
pub fn resolved(args: &DeploymentArgs) -> Result<Deployment> {
    lib::resolved(&deployment_choice(args))
}

/// The study the arguments describe.
pub fn study(run: &RunArgs) -> Result<Study> {
    lib::study(
        &deployment_choice(&run.deployment),
        &workload_choice(&run.workload),
        &replay_choice(&run.replay),
    )
}

/// Prints the effective deployment when asked; returns true if it did (the command should stop).
pub fn print_config(args: &DeploymentArgs, d: &Deployment) -> Result<bool> {
    if args.print_config {
        out!("{}", d.to_yaml())?;
    }
    Ok(args.print_config)
}
