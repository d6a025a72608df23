//! What every way of calibrating shares: the fit options of the flags, reporting the fit and writing
//! the profile. The fits are `serverbench_calibration::calibrate`; it reads no measurements.

use crate::cli::CalibrateArgs;
use anyhow::{Context, Result};
use serverbench_calibration::calibrate::FitOptions;
use serverbench_calibration::{Fit, GraphRule, Profile};
use std::path::Path;

/// The current time, UTC, RFC 3339 (written into fitted profiles).
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// `--measured-on`, or what the command itself knows when it was not given.
pub fn measured_on(a: &CalibrateArgs, known: String) -> String {
    if a.measured_on == "unknown" {
        known
    } else {
        a.measured_on.clone()
    }
}

/// The fit options `calibrate`'s flags give, fitted now.
pub fn options(a: &CalibrateArgs) -> FitOptions {
    FitOptions {
        model: a.model.clone(),
        hardware: a.hardware.clone(),
        base_profile: a.base_profile.clone(),
        name: a.name.clone(),
        notes: a.notes.clone(),
        attention_tile: a.attention_tile,
        memory_efficiency: a.memory_efficiency,
        single_row_memory_efficiency: a.single_row_memory_efficiency,
        request_latency_ms: a.request_latency_ms,
        fit_frontend: a.fit_frontend,
        graphs: a.graph_max_tokens.map(GraphRule::mixed),
        fitted_at: now(),
    }
}

/// Prints the coefficients and the fit's error to stderr.
pub fn report(fit: &Fit) {
    eprint!("{}", serverbench_calibration::report::fit_text(fit));
}

/// Writes (or prints) a profile as YAML.
pub fn write_profile(p: &Profile, out: Option<&Path>) -> Result<()> {
    let text = serverbench_calibration::report::profile_yaml(p)?;
    match out {
        Some(path) => {
            std::fs::write(path, text)
                .with_context(|| format!("{}: cannot write", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
        None => out!("{text}")?,
    }
    Ok(())
}
