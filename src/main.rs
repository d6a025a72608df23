//! The `serverbench` binary: argument parsing, progress bars, tables, files and exit codes.
//! All the work happens in the library crates; this crate is glue.

#[macro_use]
mod output;
mod calibrate;
mod cli;
mod compare;
mod cuda;
mod inputs;
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
        // Standard output was closed by its reader (`| head`): nothing more to say.
        Err(e) if broken_pipe(&e) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    };
    std::process::exit(code);
}

/// Whether the error is a write to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
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
