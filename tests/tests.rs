//! Integration tests of the library crates and the binary (one test binary: links once, runs fast).

mod calibration;
mod cli;
mod importers;
mod simulator;
mod workload_model;

use std::path::PathBuf;

/// The shared test data beside the repository (`../shared/data`).
pub fn shared_data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(rel)
}

/// A fixture of this repository.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}
