//! `serverbench calibrate`: reads step logs (plain or gzip), runs microbenchmarks or probes an endpoint,
//! and writes a fitted profile YAML with its provenance. The fitting itself is in `serverbench-calibration`.

use crate::cli::CalibrateArgs;
use anyhow::{anyhow, bail, Context, Result};
use serverbench_calibration::{
    check_profile, fit_profile, parse_step_log, predict_steps, Fit, FitRecord, FitSetup, FitTarget,
    HardwareSpec, ModelSpec, Profile, StepSample,
};
use std::io::Read;
use std::path::Path;

/// Runs the command.
pub fn run(a: CalibrateArgs) -> Result<()> {
    if a.microbench {
        return crate::cuda::microbench_calibrate(&a);
    }
    if let Some(url) = &a.endpoint {
        return crate::probe::endpoint_calibrate(&a, url);
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

/// The `--model` and `--hardware` presets.
fn model_and_hardware(a: &CalibrateArgs) -> Result<(ModelSpec, HardwareSpec)> {
    let model = ModelSpec::preset(&a.model)
        .ok_or_else(|| anyhow!("--model: no model preset {:?}", a.model))?;
    let hardware = HardwareSpec::preset(&a.hardware)
        .ok_or_else(|| anyhow!("--hardware: no hardware preset {:?}", a.hardware))?;
    Ok((model, hardware))
}

/// `--check`: the profile's error on the given steps, per class, as a table on stdout.
fn check(a: &CalibrateArgs, name: &str, samples: &[StepSample]) -> Result<()> {
    let profile = load_profile("--check", name)?;
    let (model, hardware) = model_and_hardware(a)?;
    println!(
        "profile {} against {} steps ({} time)\n",
        profile.name,
        samples.len(),
        a.target
    );
    println!("| steps | count | median error | median abs error | p90 abs error |");
    println!("|---|---:|---:|---:|---:|");
    let predicted = predict_steps(samples, &model, &hardware, &profile);
    for c in check_profile(samples, &predicted) {
        println!(
            "| {} | {} | {:+.2} % | {:.2} % | {:.2} % |",
            c.class,
            c.steps,
            100.0 * c.median_error,
            100.0 * c.abs.median_ape,
            100.0 * c.abs.p90_ape
        );
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

fn now() -> String {
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

/// A text file, gunzipped when its name ends in `.gz`.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    if path.extension().is_some_and(|e| e == "gz") {
        let mut text = String::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .with_context(|| format!("{}: not a gzip file of UTF-8 text", path.display()))?;
        Ok(text)
    } else {
        String::from_utf8(bytes).map_err(|_| anyhow!("{}: not UTF-8 text", path.display()))
    }
}

/// `--measured-on`, or what the command itself knows when it was not given.
pub fn measured_on(a: &CalibrateArgs, known: String) -> String {
    if a.measured_on == "unknown" {
        known
    } else {
        a.measured_on.clone()
    }
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
    let (model, hardware) = model_and_hardware(a)?;
    let base = Profile::preset(&a.base_profile)
        .ok_or_else(|| anyhow!("--base-profile: no profile preset {:?}", a.base_profile))?;
    let setup = FitSetup {
        model: &model,
        hardware: &hardware,
        base: &base,
        name: a.name.clone(),
        attention_tile: a.attention_tile,
        memory_efficiency: a.memory_efficiency,
        single_row_memory_efficiency: a.single_row_memory_efficiency,
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
    fit.profile.request_latency_s = a.request_latency_ms / 1e3;
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
        None => print!("{text}"),
    }
    Ok(())
}
