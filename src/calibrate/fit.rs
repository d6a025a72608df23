//! What every way of calibrating shares: reading step logs, fitting a profile for the arguments'
//! model, GPU and base profile, reporting the fit and writing the profile.

use crate::cli::CalibrateArgs;
use anyhow::{anyhow, bail, Context, Result};
use serverbench_calibration::{
    fit_profile, parse_step_log, Fit, FitRecord, FitSetup, FitTarget, HardwareSpec, ModelSpec,
    Profile, StepSample,
};
use std::path::Path;

/// The current time, UTC, RFC 3339 (written into fitted profiles).
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// `wall` or `gpu`.
pub fn parse_target(s: &str) -> Result<FitTarget> {
    match s {
        "wall" => Ok(FitTarget::Wall),
        "gpu" => Ok(FitTarget::Gpu),
        other => bail!("--target: expected wall or gpu, got {other:?}"),
    }
}

/// Reads one step log, decompressing `.gz`; errors name the file, line and field.
pub fn read_step_log(path: &Path, target: FitTarget) -> Result<Vec<StepSample>> {
    let text = read_text(path)?;
    Ok(parse_step_log(&path.display().to_string(), &text, target)?)
}

/// A text file (at most `MAX_DATA_BYTES`), gunzipped when its name ends in `.gz`.
pub fn read_text(path: &Path) -> Result<String> {
    Ok(serverbench_config::read_text(
        path,
        serverbench_config::MAX_DATA_BYTES,
    )?)
}

/// `--measured-on`, or what the command itself knows when it was not given.
pub fn measured_on(a: &CalibrateArgs, known: String) -> String {
    if a.measured_on == "unknown" {
        known
    } else {
        a.measured_on.clone()
    }
}

/// The `--base-profile` preset.
pub fn base_profile(a: &CalibrateArgs) -> Result<Profile> {
    Profile::preset(&a.base_profile)
        .ok_or_else(|| anyhow!("--base-profile: no profile preset {:?}", a.base_profile))
}

/// Fits the profile for the arguments' model, GPU and base profile.
pub fn fit_steps(
    a: &CalibrateArgs,
    samples: &[StepSample],
    inputs: Vec<String>,
    method: &str,
    target: Option<FitTarget>,
    measured_on: &str,
) -> Result<Fit> {
    let base = base_profile(a)?;
    let latency = a.request_latency_ms.unwrap_or(0.0) / 1e3;
    fit_on_base(
        a,
        &base,
        samples,
        inputs,
        method,
        target,
        measured_on,
        latency,
    )
}

/// [`fit_steps`] over a given base profile, writing `request_latency_s` into the fitted profile.
#[allow(clippy::too_many_arguments)]
pub fn fit_on_base(
    a: &CalibrateArgs,
    base: &Profile,
    samples: &[StepSample],
    inputs: Vec<String>,
    method: &str,
    target: Option<FitTarget>,
    measured_on: &str,
    request_latency_s: f64,
) -> Result<Fit> {
    let (model, hardware) = model_and_hardware(a)?;
    let setup = FitSetup {
        model: &model,
        hardware: &hardware,
        base,
        name: a.name.clone(),
        attention_tile: a.attention_tile,
        memory_efficiency: a.memory_efficiency,
        single_row_memory_efficiency: a.single_row_memory_efficiency,
        front_end: a.fit_frontend,
        record: FitRecord {
            method: method.into(),
            inputs,
            model: model.name.clone(),
            measured_on: measured_on.to_string(),
            fitted_at: now(),
            target: target.map(|t| t.name().to_string()),
            notes: a.notes.clone(),
            ..Default::default()
        },
    };
    let mut fit = fit_profile(samples, &setup).map_err(|e| anyhow!("cannot fit: {e}"))?;
    if !setup.front_end {
        fit.profile.request_latency_s = request_latency_s;
    }
    fit.profile
        .check()
        .map_err(|e| anyhow!("--request-latency-ms: {e}"))?;
    Ok(fit)
}

/// Prints the coefficients and the fit's error to stderr.
pub fn report(fit: &Fit) {
    let c = &fit.profile;
    eprintln!(
        "fitted {} steps, held out {}: GEMM {:.1} %, weight streaming {:.1} % ({:.1} % at one token), attention {:.1} %, KV {:.1} % ({:.1} % for shared re-reads) of peak; \
         step overhead {:.3} ms, per sequence {:.1} µs; prefill attention {:.2} µs per token of span + {:.2} per round of {:.0} tiles",
        fit.train.steps,
        fit.held_out.steps,
        100.0 * c.gemm_efficiency,
        100.0 * c.memory_efficiency,
        100.0 * c.single_row_memory_efficiency.unwrap_or(c.memory_efficiency),
        100.0 * c.attention_efficiency,
        100.0 * c.kv_efficiency.unwrap_or(c.memory_efficiency),
        100.0
            * c.shared_kv_efficiency
                .or(c.kv_efficiency)
                .unwrap_or(c.memory_efficiency),
        1e3 * c.step_overhead_s,
        1e6 * c.per_sequence_overhead_s,
        1e6 * c.attention_span_s_per_token,
        1e6 * c.attention_sweep_s_per_token,
        c.attention_parallel_tiles
    );
    eprintln!(
        "step-time error: held out median {:.2} %, p90 {:.2} %; fitted median {:.2} %, p90 {:.2} %",
        100.0 * fit.held_out.median_ape,
        100.0 * fit.held_out.p90_ape,
        100.0 * fit.train.median_ape,
        100.0 * fit.train.p90_ape
    );
}

/// Writes (or prints) a profile as YAML.
pub fn write_profile(p: &Profile, out: Option<&Path>) -> Result<()> {
    let text = format!(
        "# Cost-model profile written by `serverbench calibrate`; see docs/calibration.md.\n{}",
        serde_yaml::to_string(p)?
    );
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

/// The `--model` and `--hardware` presets.
pub fn model_and_hardware(a: &CalibrateArgs) -> Result<(ModelSpec, HardwareSpec)> {
    let model = ModelSpec::preset(&a.model)
        .ok_or_else(|| anyhow!("--model: no model preset {:?}", a.model))?;
    let hardware = HardwareSpec::preset(&a.hardware)
        .ok_or_else(|| anyhow!("--hardware: no hardware preset {:?}", a.hardware))?;
    Ok((model, hardware))
}
