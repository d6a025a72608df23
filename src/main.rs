//! The `serverbench` binary: argument parsing, progress bars, tables, files and exit codes.
//! All the work happens in the library crates; this crate is glue.

#[macro_use]
mod output;
mod calibrate;
mod cli;
mod compare;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "no_cuda.rs"]
mod cuda;
mod inputs;
mod meta;
mod model;
mod real;
mod screen;
mod signals;
mod simulate;
mod slo;
mod sweep;
mod verify;
mod whatif;
mod workload;

use clap::Parser;

fn main() {
    let code = match try_main() {
        Ok(()) => 0,
        // Standard output was closed by its reader (`| head`): nothing more to say.
        Err(e) if broken_pipe(&e) => 0,
        Err(e) => match e.downcast_ref::<Exit>() {
            Some(Exit(code, message)) => {
                eprintln!("{message}");
                *code
            }
            None => {
                eprintln!("error: {e:#}");
                2
            }
        },
    };
    std::process::exit(code);
}

/// This program's path, for the `replay` child processes of `compare` and `verify`.
pub fn this_exe() -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context;
    std::env::current_exe().context("cannot find this executable")
}

/// A command that did its work and ends with a code of its own (an interrupted or invalid replay),
/// after printing its message to standard error.
#[derive(Debug)]
pub struct Exit(i32, String);

/// The error that ends the process with `code` after printing `message` ([`Exit`]).
pub fn exit(code: i32, message: impl Into<String>) -> anyhow::Error {
    Exit(code, message.into()).into()
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for Exit {}

/// Whether the error is a write to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn try_main() -> anyhow::Result<()> {
    let mut cli = cli::Cli::parse();
    cli.command.settle_protocol(inputs::deployment_protocol);
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
        cli::Command::Calibrate(a) if a.microbench => cuda::microbench(&a),
        cli::Command::Calibrate(a) => calibrate::run(a),
        cli::Command::Workload(w) => workload::run(w),
        cli::Command::Model(cli::ModelCommand::Show(a)) => model::show(&a.model),
        cli::Command::Hardware(cli::HardwareCommand::List) => model::hardware_list(),
        cli::Command::Freeze(a) => verify::freeze(a),
        cli::Command::Keygen(a) => verify::keygen(a),
        cli::Command::Verify(a) => verify::verify(a),
    }
}
