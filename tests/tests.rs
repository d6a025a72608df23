//! Integration tests of the library crates and the binary (one test binary: links once, runs fast).

mod calibration;
mod cli;
mod fuzz;
mod hardening;
mod importers;
mod lessons;
mod open_loop;
mod report;
mod simulator;
mod third_party;
mod workload_model;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the binary with these arguments.
pub fn serverbench<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// A successful run's standard output (the test fails with its standard error otherwise).
pub fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// A fixture of this repository.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}
