//! `serverbench calibrate`: reads step logs (plain or gzip), runs microbenchmarks or probes an endpoint,
//! and writes a fitted profile YAML with its provenance. The fitting itself is in `serverbench-calibration`.

mod endpoint;
mod fit;
mod from_ops;
#[cfg(feature = "cuda")]
mod microbench;
#[cfg(not(feature = "cuda"))]
mod microbench {
    //! `calibrate --microbench` runs on the CUDA engine, which this build leaves out.
    pub fn calibrate(_: &crate::cli::CalibrateArgs) -> anyhow::Result<()> {
        Err(crate::cuda::not_built("--microbench"))
    }
}

pub use fit::read_text;
use fit::{fit_steps, model_and_hardware, now, parse_target, read_step_log, report, write_profile};

use crate::cli::CalibrateArgs;
use anyhow::{anyhow, bail, Context, Result};
use serverbench_calibration::{
    check_profile, predict_steps_with, FitRecord, HardwareSpec, Profile, StepSample,
};
use std::path::Path;

/// Runs the command.
pub fn run(a: CalibrateArgs) -> Result<()> {
    if a.microbench {
        return microbench::calibrate(&a);
    }
    if let Some(url) = &a.endpoint {
        return endpoint::calibrate(&a, url);
    }
    if let Some(path) = &a.from_probes {
        return endpoint::from_probe_log(&a, path);
    }
    if !a.from_ops.is_empty() {
        return from_ops::calibrate(&a, &a.from_ops);
    }
    if let Some(from) = &a.derive_from {
        return derive(&a, from);
    }
    let target = parse_target(&a.target)?;
    let mut samples = Vec::new();
    let mut inputs = Vec::new();
    for path in &a.from_steps {
        let steps = read_step_log(path, target)?;
        inputs.push(format!("{} ({} steps)", path.display(), steps.len()));
        samples.extend(steps);
    }
    if let Some(name) = &a.check {
        return check(&a, name, &samples);
    }
    let fit = fit_steps(
        &a,
        &samples,
        inputs,
        "step-log least squares",
        Some(target),
        &a.measured_on,
    )?;
    report(&fit);
    write_profile(&fit.profile, a.out.as_deref())
}

/// A profile preset by name, or a profile YAML file; `flag` names the option in errors.
fn load_profile(flag: &str, name: &str) -> Result<Profile> {
    match Profile::preset(name) {
        Some(p) => Ok(p),
        None => {
            let text = read_text(Path::new(name))
                .with_context(|| format!("{flag}: {name:?} is not a profile preset"))?;
            Ok(Profile::from_yaml(name, &text)?)
        }
    }
}

/// `--check`: the profile's error on the given steps, per class, as a table on stdout.
fn check(a: &CalibrateArgs, name: &str, samples: &[StepSample]) -> Result<()> {
    let profile = load_profile("--check", name)?;
    let (model, hardware) = model_and_hardware(a)?;
    outln!(
        "profile {} against {} steps ({} time)\n",
        profile.name,
        samples.len(),
        a.target
    )?;
    outln!("| steps | count | median error | median abs error | p90 abs error |")?;
    outln!("|---|---:|---:|---:|---:|")?;
    let predicted = predict_steps_with(samples, &model, &hardware, &profile, a.split_kv);
    for c in check_profile(samples, &predicted) {
        outln!(
            "| {} | {} | {:+.2} % | {:.2} % | {:.2} % |",
            c.class,
            c.steps,
            100.0 * c.median_error,
            100.0 * c.abs.median_ape,
            100.0 * c.abs.p90_ape
        )?;
    }
    if let Some(path) = &a.per_step {
        std::fs::write(path, per_step_csv(samples, &predicted))
            .with_context(|| format!("--per-step: cannot write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// One CSV row per step: its features, the measured and the predicted time and the relative error.
fn per_step_csv(samples: &[StepSample], predicted: &[f64]) -> String {
    let mut out = String::from(
        "index,prefill_chunks,prefill_new_tokens,prefill_cached_max,decode_seqs,decode_context,decode_shared,measured_ms,predicted_ms,error_pct\n",
    );
    for (i, (s, p)) in samples.iter().zip(predicted).enumerate() {
        let b = s.shape(None);
        let cached = s.prefill.iter().map(|&(_, c)| c).max().unwrap_or(0);
        out += &format!(
            "{i},{},{},{cached},{},{},{},{:.4},{:.4},{:.3}\n",
            s.prefill.len(),
            b.prefill_tokens,
            b.decode_seqs,
            b.decode_context,
            b.decode_shared,
            1e3 * s.seconds,
            1e3 * p,
            100.0 * (p - s.seconds) / s.seconds
        );
    }
    out
}

fn derive(a: &CalibrateArgs, from: &str) -> Result<()> {
    let source = load_profile("--derive-from", from)?;
    if HardwareSpec::preset(&a.hardware).is_none() {
        bail!("--hardware: no hardware preset {:?}", a.hardware);
    }
    let measured = source.fit.as_ref();
    let record = FitRecord {
        method: format!("derived from {} for {}", source.name, a.hardware),
        inputs: vec![format!("profile {}", source.name)],
        model: measured.map_or(a.model.clone(), |r| r.model.clone()),
        measured_on: measured.map_or("not measured".into(), |r| r.measured_on.clone()),
        fitted_at: now(),
        target: measured.and_then(|r| r.target.clone()),
        memory_efficiency_fixed: measured.and_then(|r| r.memory_efficiency_fixed),
        single_row_memory_efficiency_fixed: measured
            .and_then(|r| r.single_row_memory_efficiency_fixed),
        notes: a.notes.clone(),
        ..Default::default()
    };
    let p = source.derived_for(&a.hardware, &a.name, record);
    p.check().map_err(|e| anyhow!("derived profile: {e}"))?;
    write_profile(&p, a.out.as_deref())
}
