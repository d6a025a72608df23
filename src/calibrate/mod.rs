//! `serverbench calibrate`: its flags handed to the fits (`serverbench_calibration::calibrate`, over
//! what `serverbench_calibration::sources` reads), the microbenchmarks or the endpoint's probing
//! (`serverbench_backends::calibrate`), and the fitted profile YAML written.

mod endpoint;
mod fit;
mod from_ops;
mod moe;

pub use fit::{options, report, write_profile};

use crate::cli::CalibrateArgs;
use anyhow::{Context, Result};
use serverbench_calibration::calibrate::{self as fits, Provenance};
use serverbench_calibration::report::{check_table, per_step_csv};
use serverbench_calibration::sources;
use serverbench_calibration::{predict_steps_on, GraphRule, LogEngine, StepSample};

/// Runs the command (`--microbench` is `crate::cuda`'s).
pub fn run(a: CalibrateArgs) -> Result<()> {
    if let Some(url) = &a.endpoint {
        return endpoint::calibrate(&a, url);
    }
    if let Some(path) = &a.from_probes {
        return endpoint::from_probe_log(&a, path);
    }
    if !a.from_moe_probes.is_empty() {
        return moe::calibrate(&a, &a.from_moe_probes);
    }
    if !a.from_ops.is_empty() {
        return from_ops::calibrate(&a, &a.from_ops);
    }
    if let Some(from) = &a.derive_from {
        return derive(&a, from);
    }
    let target = fits::parse_target(&a.target)?;
    let (samples, inputs) = sources::step_logs(&a.from_steps, target)?;
    if let Some(name) = &a.check {
        return check(&a, name, &samples);
    }
    let provenance = Provenance {
        method: "step-log least squares",
        inputs,
        target: Some(target),
        measured_on: &a.measured_on,
    };
    let fit = fits::fit_steps(&options(&a), &samples, provenance)?;
    report(&fit);
    write_profile(&fit.profile, a.out.as_deref())
}

/// `--check`: the profile's error on the given steps, per class, as a table on stdout.
fn check(a: &CalibrateArgs, name: &str, samples: &[StepSample]) -> Result<()> {
    let profile = sources::profile("--check", name)?;
    let (model, hardware) = fits::model_and_hardware(&options(a))?;
    let engine = LogEngine {
        split_kv_decode: a.split_kv,
        shared_prefix: a.shared_prefix,
        graphs: a.graph_max_tokens.map(GraphRule::mixed),
    };
    let predicted = predict_steps_on(samples, &model, &hardware, &profile, engine);
    let table = check_table(&profile.name, &a.target, samples, &predicted);
    out!("{table}")?;
    if let Some(path) = &a.per_step {
        std::fs::write(path, per_step_csv(samples, &predicted))
            .with_context(|| format!("--per-step: cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// `--derive-from`: a measured profile's efficiencies and overheads on `--hardware`.
fn derive(a: &CalibrateArgs, from: &str) -> Result<()> {
    let source = sources::profile("--derive-from", from)?;
    write_profile(&fits::derive(&options(a), &source)?, a.out.as_deref())
}
