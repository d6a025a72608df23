//! Integration tests of the library crates and the binary (one test binary: links once, runs fast).

mod agent_logs;
mod agentx;
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

/// The property tests' settings: `cases` cases (or `PROPTEST_CASES`), no failure files, and a fixed
/// random seed so that every CI run tries the same inputs. `PROPTEST_RNG_SEED=<n>` tries another seed,
/// `PROPTEST_RNG_SEED=random` a fresh one each run (what a long local fuzzing run wants).
pub fn property_config(cases: u32) -> proptest::prelude::ProptestConfig {
    use proptest::test_runner::RngSeed;
    let seed = match std::env::var("PROPTEST_RNG_SEED").as_deref() {
        Ok("random") => RngSeed::Random,
        Ok(v) => RngSeed::Fixed(
            v.parse()
                .expect("PROPTEST_RNG_SEED is a number or \"random\""),
        ),
        Err(_) => RngSeed::Fixed(20_261_202),
    };
    proptest::prelude::ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(cases),
        failure_persistence: None,
        rng_seed: seed,
        ..proptest::prelude::ProptestConfig::default()
    }
}

/// A fixture of this repository.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// `compare --reuse` of the stored H200 seed runs (results/h200-fidelity/seeds, c = 4, seeds 1–8, 35 s,
/// steady start) into `out`, with `extra` flags: the stored summaries are copied to `out/real/`, so no
/// server is needed. Returns what it printed.
pub fn compare_stored_seeds(out: &std::path::Path, extra: &[&str]) -> String {
    let stored = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/h200-fidelity/seeds/real");
    for e in std::fs::read_dir(&stored).unwrap() {
        let e = e.unwrap();
        let to = out.join("real").join(e.file_name());
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(e.path().join("summary.json"), to.join("summary.json")).unwrap();
    }
    let args = [
        "compare",
        "-d",
        "qwen3-8b-1xh200",
        "--start",
        "steady",
        "-c",
        "4",
        "-s",
        "1,2,3,4,5,6,7,8",
        "-w",
        "35",
        "--reuse",
        "--out",
    ];
    stdout(&serverbench(
        args.iter()
            .map(OsStr::new)
            .chain([out.as_os_str()])
            .chain(extra.iter().map(OsStr::new)),
    ))
}
