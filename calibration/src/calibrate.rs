//! What `calibrate` does between reading its measurements and writing a profile: the fit of step
//! samples for a model, GPU and base profile (step logs, microbenchmarks), the fit of endpoint probes
//! (medians per shape, the request latency estimated, the attention layout chosen), a profile derived
//! for another GPU, and a profile from measured operator tables. It reads no measurements (the model and
//! base profile it names come by preset or file through `model_source` and `profile_source`), sends no
//! request and reads no clock (the caller gives `fitted_at`).

use crate::fit::{front_end_seconds, front_end_tokens};
use crate::ops::{fit_ops, profile_from_ops, read_op_table, ClassFit, OpsSources, UsedFit};
use crate::{
    fit_moe, fit_profile, merge_prefills, merge_runs, predict_steps, predict_steps_on,
    AttentionLayout, Band, Fit, FitRecord, FitSetup, FitTarget, GraphRule, HardwareSpec, LogEngine,
    ModelSpec, MoeFit, MoeFitSetup, MoeProbeRuns, OpClassRecord, Profile, StepSample,
};
use anyhow::{anyhow, bail, Result};
use std::collections::BTreeMap;

/// What a fit is told besides its samples (`calibrate`'s options).
#[derive(Clone, Debug, Default)]
pub struct FitOptions {
    /// The model whose steps were measured (a model preset).
    pub model: String,
    /// The GPU they were measured on (a hardware preset).
    pub hardware: String,
    /// The profile preset supplying what the measurements cannot inform.
    pub base_profile: String,
    /// Name of the new profile.
    pub name: String,
    /// Notes written to the profile.
    pub notes: String,
    /// Query tokens per tile of the engine's prefill attention kernel.
    pub attention_tile: u32,
    /// Weight-streaming efficiency fixed at a measured value.
    pub memory_efficiency: Option<f64>,
    /// Weight-streaming efficiency of one-token steps fixed at a measured value.
    pub single_row_memory_efficiency: Option<f64>,
    /// The front end's latency per request, ms.
    pub request_latency_ms: Option<f64>,
    /// Fit the front end's time per prompt token too (endpoint probes).
    pub fit_frontend: bool,
    /// The steps the engine replays as CUDA graphs (`--graph-max-tokens`): the probes' steps pay the
    /// base profile's host gaps in the others ([`crate::FitSetup::graphs`]).
    pub graphs: Option<GraphRule>,
    /// When the fit was made, UTC (RFC 3339), written into the profile.
    pub fitted_at: String,
}

/// `wall` or `gpu`.
pub fn parse_target(s: &str) -> Result<FitTarget> {
    match s {
        "wall" => Ok(FitTarget::Wall),
        "gpu" => Ok(FitTarget::Gpu),
        other => bail!("--target: expected wall or gpu, got {other:?}"),
    }
}

/// The `--model` (a preset or a `config.json`) and the `--hardware` preset.
pub fn model_and_hardware(o: &FitOptions) -> Result<(ModelSpec, HardwareSpec)> {
    let model = crate::model_source::model(&o.model).map_err(|e| anyhow!("--model: {e}"))?;
    let hardware = HardwareSpec::preset(&o.hardware)
        .ok_or_else(|| anyhow!("--hardware: no hardware preset {:?}", o.hardware))?;
    Ok((model, hardware))
}

/// The `--base-profile`: a profile preset by name, else a profile file.
pub fn base_profile(o: &FitOptions) -> Result<Profile> {
    crate::profile_source::profile("--base-profile", &o.base_profile)
}

/// `--from-moe-probes`' model, GPU and base profile, looked up and checked against each other.
#[derive(Clone, Debug)]
pub struct MoeTarget {
    /// The mixture of experts served (`--model`: a preset or a `config.json`).
    pub model: ModelSpec,
    /// The GPU it ran on (`--hardware`).
    pub hardware: HardwareSpec,
    /// `--base-profile`, a profile of that GPU.
    pub base: Profile,
}

/// The model, GPU and base profile `o` names; a base profile of another GPU is refused.
pub fn moe_target(o: &FitOptions) -> Result<MoeTarget> {
    let (model, hardware) = model_and_hardware(o)?;
    let base = base_profile(o)?;
    if base.hardware != hardware.name {
        bail!(
            "--base-profile: {} describes {}, not --hardware {}",
            base.name,
            base.hardware,
            hardware.name
        );
    }
    Ok(MoeTarget {
        model,
        hardware,
        base,
    })
}

/// What `--from-moe-probes` is told about the engine that was probed.
#[derive(Clone, Debug)]
pub struct MoeOptions {
    /// Its split-KV decode and CUDA-graph rule (`--moe-split-kv`, `--graph-max-tokens`).
    pub engine: LogEngine,
    /// Its prefill chunk, tokens (`--prefill-chunk`).
    pub prefill_chunk: u32,
    /// Where the probes were measured.
    pub measured_on: String,
}

/// `moe_layer_s` and `expert_memory_efficiency` (and, with a graph rule, the eager floor) fitted over
/// `t.base` to probe files' cases: the files are repeats, each case's time their mean.
pub fn fit_moe_probes(
    o: &FitOptions,
    t: &MoeTarget,
    m: &MoeOptions,
    runs: MoeProbeRuns,
) -> Result<MoeFit> {
    let (cases, prefills) = (merge_runs(&runs.decode), merge_prefills(&runs.prefill));
    let setup = MoeFitSetup {
        model: &t.model,
        hardware: &t.hardware,
        base: &t.base,
        name: o.name.clone(),
        engine: m.engine,
        prefill_chunk: m.prefill_chunk,
        record: FitRecord {
            method: format!(
                "mixture-of-experts decode probes least squares over profile {}",
                t.base.name
            ),
            inputs: runs.inputs,
            model: t.model.name.clone(),
            measured_on: m.measured_on.clone(),
            fitted_at: o.fitted_at.clone(),
            target: Some("wall".into()),
            notes: o.notes.clone(),
            ..Default::default()
        },
    };
    fit_moe(&cases, &prefills, &setup).map_err(|e| anyhow!("cannot fit: {e}"))
}

/// How a fit is recorded in the profile: the method, what was measured and where.
#[derive(Clone, Debug)]
pub struct Provenance<'a> {
    /// How the profile was fitted.
    pub method: &'a str,
    /// What was measured, one line each.
    pub inputs: Vec<String>,
    /// Which time was fitted, if the method has a choice.
    pub target: Option<FitTarget>,
    /// Where the measurements were taken.
    pub measured_on: &'a str,
}

/// Fits the profile for the options' model, GPU and base profile, with `--request-latency-ms`.
pub fn fit_steps(o: &FitOptions, samples: &[StepSample], p: Provenance<'_>) -> Result<Fit> {
    let base = base_profile(o)?;
    let latency = o.request_latency_ms.unwrap_or(0.0) / 1e3;
    fit_on_base(o, &base, samples, p, latency)
}

/// [`fit_steps`] over a given base profile, writing `request_latency_s` into the fitted profile.
pub fn fit_on_base(
    o: &FitOptions,
    base: &Profile,
    samples: &[StepSample],
    p: Provenance<'_>,
    request_latency_s: f64,
) -> Result<Fit> {
    let (model, hardware) = model_and_hardware(o)?;
    let setup = FitSetup {
        model: &model,
        hardware: &hardware,
        base,
        name: o.name.clone(),
        attention_tile: o.attention_tile,
        memory_efficiency: o.memory_efficiency,
        single_row_memory_efficiency: o.single_row_memory_efficiency,
        front_end: o.fit_frontend,
        graphs: o.graphs,
        record: FitRecord {
            method: p.method.into(),
            inputs: p.inputs,
            model: model.name.clone(),
            measured_on: p.measured_on.to_string(),
            fitted_at: o.fitted_at.clone(),
            target: p.target.map(|t| t.name().to_string()),
            notes: o.notes.clone(),
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

/// `--derive-from`: the measured profile `source`'s efficiencies and overheads on the options' GPU.
pub fn derive(o: &FitOptions, source: &Profile) -> Result<Profile> {
    if HardwareSpec::preset(&o.hardware).is_none() {
        bail!("--hardware: no hardware preset {:?}", o.hardware);
    }
    let measured = source.fit.as_ref();
    let record = FitRecord {
        method: format!("derived from {} for {}", source.name, o.hardware),
        inputs: vec![format!("profile {}", source.name)],
        model: measured.map_or(o.model.clone(), |r| r.model.clone()),
        measured_on: measured.map_or("not measured".into(), |r| r.measured_on.clone()),
        fitted_at: o.fitted_at.clone(),
        target: measured.and_then(|r| r.target.clone()),
        memory_efficiency_fixed: measured.and_then(|r| r.memory_efficiency_fixed),
        single_row_memory_efficiency_fixed: measured
            .and_then(|r| r.single_row_memory_efficiency_fixed),
        notes: o.notes.clone(),
        ..Default::default()
    };
    let p = source.derived_for(&o.hardware, &o.name, record);
    p.check().map_err(|e| anyhow!("derived profile: {e}"))?;
    Ok(p)
}

/// One attention layout's fit of the endpoint probes.
#[derive(Clone, Debug)]
pub struct LayoutTrial {
    /// The layout.
    pub layout: AttentionLayout,
    /// Its estimated request latency, seconds.
    pub request_latency_s: f64,
    /// Its front end's time per prompt token, seconds (fitted only with `fit_frontend`).
    pub frontend_s_per_token: f64,
    /// Mean squared relative error over the probes.
    pub error: f64,
}

/// The fit of endpoint probes: both layouts tried, the better one kept.
#[derive(Clone, Debug)]
pub struct ProbeFit {
    /// Each layout's result, in the order tried.
    pub trials: Vec<LayoutTrial>,
    /// The fit kept.
    pub fit: Fit,
}

/// Fits both attention layouts, each with its request latency, and keeps the one whose squared
/// relative error over all probes is smaller (the first on a tie).
pub fn fit_probes(
    o: &FitOptions,
    samples: &[StepSample],
    inputs: Vec<String>,
    measured_on: &str,
) -> Result<ProbeFit> {
    let base = base_profile(o)?;
    let samples = &medians(samples);
    let mut best: Option<(f64, Fit)> = None;
    let mut trials = Vec::new();
    for layout in [AttentionLayout::PerSequence, AttentionLayout::Packed] {
        let base = Profile {
            attention_layout: layout,
            ..base.clone()
        };
        let fit = fit_with_latency(o, &base, samples, &inputs, measured_on)?;
        let error = probe_error(o, &fit.profile, samples)?;
        trials.push(LayoutTrial {
            layout,
            request_latency_s: fit.profile.request_latency_s,
            frontend_s_per_token: fit.profile.frontend_s_per_token,
            error,
        });
        if !matches!(&best, Some((e, _)) if *e <= error) {
            best = Some((error, fit));
        }
    }
    let (_, fit) = best.expect("two layouts were fitted");
    Ok(ProbeFit { trials, fit })
}

/// One sample per probed shape: the median time of its repetitions (a server's first request of a new
/// shape can be much slower: allocations, kernel selection), in the order the shapes first appear.
pub fn medians(samples: &[StepSample]) -> Vec<StepSample> {
    let mut groups: Vec<(StepSample, Vec<f64>)> = Vec::new();
    for s in samples {
        match groups.iter_mut().find(|(g, _)| {
            g.prefill == s.prefill
                && g.decode == s.decode
                && g.decode_kv_distinct == s.decode_kv_distinct
        }) {
            Some((_, times)) => times.push(s.seconds),
            None => groups.push((s.clone(), vec![s.seconds])),
        }
    }
    groups
        .into_iter()
        .map(|(mut s, mut times)| {
            times.sort_by(f64::total_cmp);
            s.seconds = times[times.len() / 2];
            s
        })
        .collect()
}

/// True for a TTFT probe (a prefill step alone, whose time includes the request's latency).
fn is_ttft(s: &StepSample) -> bool {
    s.decode.is_empty()
}

/// The fit with the request latency estimated (unless `request_latency_ms` gives it): TTFT probes
/// minus the latency are fitted with the decode probes, then the latency is moved by the TTFT probes'
/// median residual, a few times over (the decode probes pin the step overhead the latency would
/// otherwise hide in). With `fit_frontend` the latency and the front end's time per prompt token are
/// variables of the one least-squares fit instead (`FitSetup::front_end`).
fn fit_with_latency(
    o: &FitOptions,
    base: &Profile,
    samples: &[StepSample],
    inputs: &[String],
    measured_on: &str,
) -> Result<Fit> {
    let provenance = || Provenance {
        method: "endpoint probes least squares",
        inputs: inputs.to_vec(),
        target: Some(FitTarget::Wall),
        measured_on,
    };
    if o.fit_frontend {
        if o.request_latency_ms.is_some() {
            bail!("--request-latency-ms: --fit-frontend fits the request latency itself");
        }
        return fit_on_base(o, base, samples, provenance(), 0.0);
    }
    let fixed = o.request_latency_ms.map(|ms| ms / 1e3);
    let mut latency = fixed.unwrap_or(0.0);
    let rounds = if fixed.is_some() { 1 } else { 6 };
    let mut fit = None;
    for _ in 0..rounds {
        // The base's front end per prompt token stays in the fitted profile: the probes lose it too.
        let shifted = less_latency(samples, latency, base.frontend_s_per_token);
        let f = fit_on_base(o, base, &shifted, provenance(), latency)?;
        if fixed.is_none() {
            let (model, hardware) = model_and_hardware(o)?;
            let predicted = predict_steps(samples, &model, &hardware, &f.profile);
            let mut residuals: Vec<f64> = samples
                .iter()
                .zip(&predicted)
                .filter(|(s, _)| is_ttft(s))
                .map(|(s, p)| s.seconds - p - base.frontend_s_per_token * front_end_tokens(s))
                .collect();
            if !residuals.is_empty() {
                residuals.sort_by(f64::total_cmp);
                let next = residuals[residuals.len() / 2].max(0.0);
                let settled = (next - latency).abs() < 1e-5;
                latency = next;
                if settled {
                    fit = Some(f);
                    break;
                }
            }
        }
        fit = Some(f);
    }
    let mut fit = fit.expect("at least one round");
    fit.profile.request_latency_s = latency;
    Ok(fit)
}

/// The TTFT probes less the front end: `latency` and `per_token` × their prompt tokens (never below a
/// tenth of their time).
fn less_latency(samples: &[StepSample], latency: f64, per_token: f64) -> Vec<StepSample> {
    samples
        .iter()
        .map(|s| {
            let mut s = s.clone();
            if is_ttft(&s) {
                let front = latency + per_token * front_end_tokens(&s);
                s.seconds = (s.seconds - front).max(s.seconds / 10.0);
            }
            s
        })
        .collect()
}

/// Mean squared relative error of a profile over the probes (TTFT probes with its request latency).
fn probe_error(o: &FitOptions, p: &Profile, samples: &[StepSample]) -> Result<f64> {
    let (model, hardware) = model_and_hardware(o)?;
    let engine = LogEngine {
        graphs: o.graphs,
        ..LogEngine::default()
    };
    let predicted = predict_steps_on(samples, &model, &hardware, p, engine);
    let sum: f64 = samples
        .iter()
        .zip(&predicted)
        .map(|(s, &t)| {
            let t = if is_ttft(s) {
                t + front_end_seconds(p, s)
            } else {
                t
            };
            ((t - s.seconds) / s.seconds).powi(2)
        })
        .sum();
    Ok(sum / samples.len().max(1) as f64)
}

/// One measured operator table as read: its path as shown, its file name, its text.
#[derive(Clone, Debug)]
pub struct OpsTable {
    /// The path, as errors name it.
    pub name: String,
    /// The file name, as the profile's inputs name it.
    pub file_name: String,
    /// The CSV text.
    pub text: String,
}

/// What `--from-ops` is told besides the tables.
#[derive(Clone, Debug)]
pub struct OpsOptions {
    /// The GPU whose compute-bound rows set the compute efficiencies (`None`: `hardware`).
    pub compute_gpu: Option<String>,
    /// The GPU whose bandwidth-bound rows set the bandwidth efficiencies (`None`: `hardware`).
    pub memory_gpu: Option<String>,
    /// The profile's band: compute, bandwidth and overhead half-widths.
    pub band: Option<Vec<f64>>,
    /// Where the tables were measured.
    pub measured_on: String,
}

/// A profile fitted from operator tables, with every class fitted and the ones it uses.
#[derive(Clone, Debug)]
pub struct OpsCalibration {
    /// The profile.
    pub profile: Profile,
    /// Every operator class fitted on every GPU.
    pub fits: Vec<ClassFit>,
    /// The fits the profile uses, with the field each sets.
    pub used: Vec<UsedFit>,
    /// Rows of operators no profile term prices, by operator.
    pub skipped: BTreeMap<String, usize>,
}

/// The `--hardware` preset `--from-ops` fits for.
pub fn ops_target(hardware: &str) -> Result<HardwareSpec> {
    HardwareSpec::preset(hardware).ok_or_else(|| {
        anyhow!(
            "--hardware: no hardware preset {hardware:?} (one of: {})",
            HardwareSpec::preset_names()
        )
    })
}

/// `--from-ops`: a profile for the options' GPU fitted from measured operator tables over `base`
/// (which supplies the step and per-sequence overheads and the request latency).
pub fn fit_op_tables(
    o: &FitOptions,
    ops: &OpsOptions,
    base: &Profile,
    tables: &[OpsTable],
) -> Result<OpsCalibration> {
    let target = ops_target(&o.hardware)?;
    let sources = OpsSources {
        compute_gpu: ops
            .compute_gpu
            .clone()
            .unwrap_or_else(|| target.name.clone()),
        memory_gpu: ops
            .memory_gpu
            .clone()
            .unwrap_or_else(|| target.name.clone()),
    };
    let mut rows = Vec::new();
    let mut inputs = Vec::new();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    for f in tables {
        let t = read_op_table(&f.name, &f.text)?;
        inputs.push(format!("{} ({} operator rows)", f.file_name, t.rows.len()));
        for (k, v) in t.skipped {
            *skipped.entry(k).or_insert(0) += v;
        }
        rows.extend(t.rows);
    }
    let fits = fit_ops(
        &rows,
        &|gpu| HardwareSpec::preset(gpu),
        &base.expert_tile_rows,
    )
    .map_err(|e| anyhow!(e))?;
    let (mut p, used) =
        profile_from_ops(base, &fits, &sources).map_err(|e| anyhow!("--from-ops: {e}"))?;
    p.name = o.name.clone();
    p.hardware = target.name.clone();
    p.source = format!(
        "fitted from {} measured operator tables (compute-bound terms from {}, bandwidth-bound from {}); step and per-sequence overheads, request latency from {}",
        tables.len(),
        sources.compute_gpu,
        sources.memory_gpu,
        base.name
    );
    p.fit = Some(ops_record(o, ops, &used, inputs));
    if let Some(b) = &ops.band {
        let [compute, memory, overhead] = b[..] else {
            bail!(
                "--band: expected three numbers (compute, bandwidth, overheads), got {}",
                b.len()
            );
        };
        p.band = Some(Band {
            compute,
            memory,
            overhead,
        });
    }
    p.check().map_err(|e| anyhow!("fitted profile: {e}"))?;
    Ok(OpsCalibration {
        profile: p,
        fits,
        used,
        skipped,
    })
}

/// The fit record of a profile from operator tables: each class used, and the median of their
/// held-out errors.
fn ops_record(
    o: &FitOptions,
    ops: &OpsOptions,
    used: &[UsedFit],
    inputs: Vec<String>,
) -> FitRecord {
    let classes: Vec<OpClassRecord> = used
        .iter()
        .map(|(field, f)| OpClassRecord {
            class: f.class.label().to_string(),
            field: field.to_string(),
            gpu: f.gpu.clone(),
            value: f.value,
            rows_fitted: f.fitted,
            rows_held_out: f.held_out,
            held_out_median_error: f.held_out_median_error,
            held_out_median_ape: f.held_out_median_ape,
        })
        .collect();
    let mut held: Vec<f64> = classes
        .iter()
        .filter_map(|c| c.held_out_median_ape)
        .collect();
    held.sort_by(f64::total_cmp);
    FitRecord {
        method: "operator tables: per class, the median over rows of ideal time / measured time"
            .into(),
        inputs,
        model: "operator shapes (not one model)".into(),
        measured_on: ops.measured_on.clone(),
        fitted_at: o.fitted_at.clone(),
        held_out_median_ape: held.get(held.len() / 2).copied(),
        notes: o.notes.clone(),
        op_classes: classes,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_step(distinct: Option<u64>, seconds: f64) -> StepSample {
        StepSample {
            prefill: vec![],
            decode: vec![28_700; 4],
            decode_kv_distinct: distinct,
            seconds,
        }
    }

    /// Repetitions of one shape give their median; a shared and a distinct batch of the same contexts
    /// are different shapes.
    #[test]
    fn medians_keep_shared_and_distinct_batches_apart() {
        let m = medians(&[
            decode_step(Some(53_360), 0.012),
            decode_step(None, 0.015),
            decode_step(Some(53_360), 0.010),
            decode_step(Some(53_360), 0.011),
        ]);
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].decode_kv_distinct, m[0].seconds),
            (Some(53_360), 0.011)
        );
        assert_eq!((m[1].decode_kv_distinct, m[1].seconds), (None, 0.015));
    }

    fn options() -> FitOptions {
        FitOptions {
            model: "qwen3-8b".into(),
            hardware: "h200".into(),
            base_profile: "h200-datasheet".into(),
            name: "derived".into(),
            attention_tile: 128,
            fitted_at: "2026-01-01T00:00:00Z".into(),
            ..FitOptions::default()
        }
    }

    /// A derived profile takes the new GPU's name and the source's provenance; an unknown GPU and an
    /// unknown fit target are refused, naming their flags.
    #[test]
    fn derive_names_the_gpu_and_refuses_an_unknown_one() {
        let source = Profile::preset("h200-datasheet").unwrap();
        let o = FitOptions {
            hardware: "l40".into(),
            ..options()
        };
        let p = derive(&o, &source).unwrap();
        assert_eq!((p.name.as_str(), p.hardware.as_str()), ("derived", "l40"));
        assert_eq!(p.derived_from(), Some("h200-datasheet"));
        assert_eq!(source.derived_from(), None, "a preset of its own");
        let fit = p.fit.unwrap();
        assert_eq!(fit.fitted_at, "2026-01-01T00:00:00Z");
        assert!(fit.method.contains("for l40"), "{}", fit.method);
        let bad = FitOptions {
            hardware: "no-such-gpu".into(),
            ..options()
        };
        assert!(format!("{:#}", derive(&bad, &source).unwrap_err()).contains("--hardware"));
        assert!(format!("{:#}", parse_target("cpu").unwrap_err()).contains("--target"));
    }

    /// `--from-moe-probes` refuses a base profile of another GPU, naming both; on its own GPU, the
    /// fitted profile records the probes' provenance, where they were measured and when.
    #[test]
    fn a_moe_fit_checks_its_base_profile_and_records_the_probes() {
        let moe = FitOptions {
            model: concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/fixtures/hf/qwen3-30b-a3b.json"
            )
            .into(),
            base_profile: "h200-qwen3-8b-vllm".into(),
            name: "moe".into(),
            ..options()
        };
        let other_gpu = FitOptions {
            hardware: "l40".into(),
            ..moe.clone()
        };
        let e = format!("{:#}", moe_target(&other_gpu).unwrap_err());
        assert!(
            e.starts_with("--base-profile: h200-qwen3-8b-vllm describes h200, not --hardware l40"),
            "{e}"
        );
        let t = moe_target(&moe).unwrap();
        let text = include_str!("../../results/h200-vllm-moe/moe_probe.json");
        let (decode, prefill) = crate::parse_moe_file("moe_probe.json", text).unwrap();
        let runs = MoeProbeRuns {
            decode: vec![decode],
            prefill: vec![prefill],
            inputs: vec!["moe_probe.json".into()],
        };
        let m = MoeOptions {
            engine: LogEngine::default(),
            prefill_chunk: 8192,
            measured_on: "a test".into(),
        };
        let fit = fit_moe_probes(&moe, &t, &m, runs).unwrap();
        let record = fit.profile.fit.unwrap();
        assert_eq!(fit.profile.name, "moe");
        assert_eq!(record.inputs, ["moe_probe.json"]);
        assert_eq!(
            (record.measured_on.as_str(), record.fitted_at.as_str()),
            ("a test", "2026-01-01T00:00:00Z")
        );
        assert!(
            record.method.ends_with("over profile h200-qwen3-8b-vllm"),
            "{}",
            record.method
        );
    }
}
