//! The flags of `cli` handed to `serverbench_study::inputs`, which resolves deployments, workloads and
//! replay options (and reads the files they name); plus what only the binary does with them: print
//! the effective deployment.

use crate::cli::{DeploymentArgs, ReplayArgs, RunArgs, WorkloadArgs};
use anyhow::Result;
use serverbench_sim::{Deployment, RunConfig};
use serverbench_study::inputs::{self as lib, DeploymentChoice, ReplayChoice, WorkloadChoice};
use serverbench_study::Study;
use serverbench_workloads::{Imported, Session, SessionTree, TraceFormat, TreeSource, Workload};
use std::path::Path;
use std::sync::Arc;

pub use lib::{check_rates, trees, windows};
pub use lib::{checked, deployment, deployment_protocol, model, seeds, threads, time_scale};

/// An import's note, on standard error.
fn note(line: &str) {
    eprintln!("{line}");
}

fn deployment_choice(a: &DeploymentArgs) -> DeploymentChoice {
    DeploymentChoice {
        deployment: a.deployment.clone(),
        engine_config: a.engine_config.clone(),
        profile: a.profile.clone(),
    }
}

fn workload_choice(a: &WorkloadArgs) -> WorkloadChoice {
    WorkloadChoice {
        workload: a.workload.clone(),
        trace: a.trace.clone(),
        trace_format: a.trace_format,
        max_context_length: a.max_context_length,
        trace_repeat: a.trace_repeat,
        note,
    }
}

fn replay_choice(r: &ReplayArgs) -> ReplayChoice {
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

/// The study of deployment `d` (resolved from `run`'s deployment flags, perhaps changed since).
pub fn study_on(d: Deployment, run: &RunArgs) -> Result<Study> {
    lib::study_on(
        d,
        &deployment_choice(&run.deployment),
        &workload_choice(&run.workload),
        &replay_choice(&run.replay),
    )
}

/// The workload for deployment `d`, checked against its context limit.
pub fn fitted_workload(deployment: &str, args: &WorkloadArgs, d: &Deployment) -> Result<Workload> {
    lib::fitted_workload(deployment, &workload_choice(args), d)
}

/// A source of trees for deployment `d`.
pub fn source(
    deployment: &str,
    args: &WorkloadArgs,
    seed: u64,
    d: &Deployment,
    protocol: serverbench_sim::Protocol,
) -> Result<Arc<dyn TreeSource>> {
    lib::source(deployment, &workload_choice(args), seed, d, protocol)
}

/// The trees `workload stats` and `export` cover: a trace's, or the generator's first `n` for `seed`.
pub fn trees_of(
    args: &WorkloadArgs,
    seed: u64,
    n: u64,
    context_limit: u32,
) -> Result<Box<dyn Iterator<Item = Arc<SessionTree>>>> {
    lib::trees_of(&workload_choice(args), seed, n, context_limit)
}

/// The sessions `workload export --format corpus` writes, with the files each was read from.
pub fn corpus_sessions(
    args: &WorkloadArgs,
    seed: u64,
    n: u64,
    context_limit: u32,
    lenient: bool,
) -> Result<(Vec<Session>, Vec<Vec<String>>)> {
    lib::corpus_sessions(&workload_choice(args), seed, n, context_limit, lenient)
}

/// Reads inputs of one format, saying on standard error what was left out.
pub fn import(paths: &[&Path], format: Option<TraceFormat>, lenient: bool) -> Result<Imported> {
    lib::import(paths, format, lenient, note)
}

/// The run configuration for one replay.
pub fn run_config(r: &ReplayArgs, concurrency: u32, seed: u64) -> Result<RunConfig> {
    lib::run_config(&replay_choice(r), concurrency, seed)
}

/// Refuses a level no run can have, naming the flag.
pub fn check_levels(r: &ReplayArgs, concurrency: &[u32]) -> Result<()> {
    lib::check_levels(&replay_choice(r), concurrency)
}

/// Prints the effective deployment when asked; returns true if it did (the command should stop).
pub fn print_config(args: &DeploymentArgs, d: &Deployment) -> Result<bool> {
    if args.print_config {
        out!("{}", d.to_yaml())?;
    }
    Ok(args.print_config)
}
