//! The `serverbench` binary: argument parsing, progress bars, tables, files and exit codes.
//! All the work happens in the library crates; this crate is glue.

mod calibrate;
mod cli;
mod compare;
mod cuda;
mod inputs;
mod output;
mod plot;
mod real;
mod screen;
mod simulate;
mod slo;
mod sweep;
mod whatif;
mod workload;

use clap::Parser;

fn main() {
    let code = match try_main() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

fn try_main() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    match cli.command {
        cli::Command::Simulate(a) => simulate::run(a),
        cli::Command::Sweep(a) => sweep::run(a),
        cli::Command::Screen(a) => screen::run(a),
        cli::Command::Slo(a) => slo::run(a),
        cli::Command::WhatIf(a) => whatif::run(a),
        cli::Command::Replay(a) => real::replay(a),
        cli::Command::Serve(a) => real::serve(a),
        cli::Command::CudaBench(a) => cuda::bench(a),
        cli::Command::CudaCheck(a) => cuda::check(a),
        cli::Command::Compare(a) => compare::run(a),
        cli::Command::Calibrate(a) => calibrate::run(a),
        cli::Command::Workload(w) => workload::run(w),
    }
}
