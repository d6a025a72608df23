//! Fitting a profile's mixture-of-experts terms (`moe_layer_s`, `expert_memory_efficiency`) to the
//! decode probes of a mixture of experts served by a real engine (`scripts/vllm/moe_probe.py`'s JSON):
//! every other term comes from a base profile. Parses text and does arithmetic; never reads files,
//! never looks at the clock (the caller passes `fitted_at`).

use crate::fit::{predict_steps_with, summarize, FitAccuracy, StepSample};
use crate::model::{HardwareSpec, ModelSpec};
use crate::profile::{FitRecord, Profile};
use serde::Deserialize;
use serverbench_config::{FieldError, InputError};

/// One decode case of a probe file: `batch` streams decoding together over prompts of `context` tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeDecode {
    /// Streams decoding at once.
    pub batch: u32,
    /// Tokens of each stream's prompt (cached before the streams start).
    pub context: u32,
    /// Tokens each stream decodes; the step's mean context is `context + decode_tokens / 2`.
    pub decode_tokens: u32,
    /// Time per output token, the median over streams of each stream's median gap, seconds.
    pub tpot_s: f64,
}

#[derive(Deserialize)]
struct ProbeFile {
    cases: Vec<ProbeCase>,
}

#[derive(Deserialize)]
struct ProbeCase {
    kind: String,
    #[serde(default)]
    batch: Option<u32>,
    #[serde(default)]
    context: Option<u32>,
    #[serde(default)]
    decode_tokens: Option<u32>,
    #[serde(default)]
    tpot_ms: Option<f64>,
}

/// The decode cases of one `moe_probe.py` JSON file (its prefill cases are skipped). The error names
/// the file and the field: a decode case without its batch, context, tokens or a positive time.
pub fn parse_moe_probes(file: &str, text: &str) -> Result<Vec<MoeDecode>, InputError> {
    let probes: ProbeFile = serverbench_config::parse_json_line(file, 0, text)?;
    let mut out = Vec::new();
    for (i, c) in probes.cases.iter().enumerate() {
        if c.kind != "decode" {
            continue;
        }
        let field = |name: &str| format!("cases[{i}].{name}");
        let need = |v: Option<u32>, name: &str| {
            v.filter(|&v| v > 0).ok_or_else(|| {
                InputError::new(file, 0, field(name), "a decode case needs a positive count")
            })
        };
        let tpot_ms = c
            .tpot_ms
            .filter(|t| *t > 0.0 && t.is_finite())
            .ok_or_else(|| {
                InputError::new(
                    file,
                    0,
                    field("tpot_ms"),
                    "a decode case needs a positive time per output token",
                )
            })?;
        out.push(MoeDecode {
            batch: need(c.batch, "batch")?,
            context: need(c.context, "context")?,
            decode_tokens: need(c.decode_tokens, "decode_tokens")?,
            tpot_s: tpot_ms / 1e3,
        });
    }
    if out.is_empty() {
        return Err(InputError::new(
            file,
            0,
            "cases",
            "no decode case (kind: decode) to fit",
        ));
    }
    Ok(out)
}

/// What the MoE fit needs besides the probes.
#[derive(Clone, Debug)]
pub struct MoeFitSetup<'a> {
    /// The mixture of experts the engine served.
    pub model: &'a ModelSpec,
    /// The GPU it ran on.
    pub hardware: &'a HardwareSpec,
    /// Every term but the two fitted comes from this profile (fitted to the same engine on the same GPU).
    pub base: &'a Profile,
    /// Name of the new profile.
    pub name: String,
    /// The engine's decode attention runs FlashAttention 3's split-KV schedule (vLLM on Hopper).
    pub split_kv_decode: bool,
    /// Provenance written to the profile; the fit fills its counts and errors.
    pub record: FitRecord,
}

/// One case of the fit's table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeRow {
    /// Streams decoding at once.
    pub batch: u32,
    /// Prompt tokens of each stream.
    pub context: u32,
    /// Measured time per output token, seconds (the mean over the probe files that have the case).
    pub measured_s: f64,
    /// The base profile's step time, seconds.
    pub base_s: f64,
    /// The fitted profile's step time, seconds.
    pub fitted_s: f64,
    /// Left out of the fit (every second case, in the files' order).
    pub held_out: bool,
}

/// The result of [`fit_moe`].
#[derive(Clone, Debug, PartialEq)]
pub struct MoeFit {
    /// The base profile with `moe_layer_s` and `expert_memory_efficiency` fitted.
    pub profile: Profile,
    /// Every case, in the files' order.
    pub rows: Vec<MoeRow>,
    /// Error of the fitted profile on the cases fitted.
    pub train: FitAccuracy,
    /// Error on the held-out cases.
    pub held_out: FitAccuracy,
}

/// Why the MoE terms cannot be fitted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CannotFitMoe {
    /// The model has no routed experts.
    #[error("model {0} has no routed experts: moe_layer_s and expert_memory_efficiency price mixtures of experts")]
    Dense(String),
    /// Too few distinct cases to fit two terms and hold some out.
    #[error("{0} distinct decode cases: at least 4 are needed to fit two terms and hold half out")]
    TooFewCases(usize),
    /// The fitted profile breaks a rule of profiles.
    #[error("the fitted profile is invalid: {0}")]
    Invalid(#[from] FieldError),
}

/// The distinct cases of several probe files (a repeat of the same probes), in the order first seen,
/// each case's time the mean of the files' times.
pub fn merge_runs(runs: &[Vec<MoeDecode>]) -> Vec<MoeDecode> {
    let mut out: Vec<(MoeDecode, u32)> = Vec::new();
    for case in runs.iter().flatten() {
        let key = (case.batch, case.context, case.decode_tokens);
        match out
            .iter_mut()
            .find(|(c, _)| (c.batch, c.context, c.decode_tokens) == key)
        {
            Some((c, n)) => {
                c.tpot_s += case.tpot_s;
                *n += 1;
            }
            None => out.push((*case, 1)),
        }
    }
    out.into_iter()
        .map(|(c, n)| MoeDecode {
            tpot_s: c.tpot_s / n as f64,
            ..c
        })
        .collect()
}

/// Fits the two MoE terms over the base profile's other terms. A case's step is `batch` decodes at the
/// mean context `context + decode_tokens / 2`; its time is, for the decode steps probed (weights, not
/// GEMMs, bound the linear layers),
///
/// `t = rest + L · moe_layer_s + R / expert_memory_efficiency`,
///
/// `L` the model's routed layers, `R` the time to stream the distinct experts the step reads at the
/// GPU's peak bandwidth, and `rest` the base profile's time of everything else. Least squares on
/// relative error with `moe_layer_s ≥ 0` and the efficiency in (0, 1], over every other case (the first,
/// third, …, in the files' order); the rest are held out. The errors reported are the fitted profile's
/// own step times, not the linear form's.
pub fn fit_moe(cases: &[MoeDecode], setup: &MoeFitSetup<'_>) -> Result<MoeFit, CannotFitMoe> {
    let experts = setup
        .model
        .experts
        .as_ref()
        .ok_or_else(|| CannotFitMoe::Dense(setup.model.name.clone()))?;
    if cases.len() < 4 {
        return Err(CannotFitMoe::TooFewCases(cases.len()));
    }
    let samples: Vec<StepSample> = cases
        .iter()
        .map(|c| StepSample {
            prefill: vec![],
            decode: vec![c.context + c.decode_tokens / 2; c.batch as usize],
            decode_kv_distinct: None,
            seconds: c.tpot_s,
        })
        .collect();
    let predict = |p: &Profile| {
        predict_steps_with(
            &samples,
            setup.model,
            setup.hardware,
            p,
            setup.split_kv_decode,
        )
    };
    let with = |layer_s: f64, efficiency: f64| Profile {
        moe_layer_s: layer_s,
        expert_memory_efficiency: Some(efficiency),
        ..setup.base.clone()
    };
    // The experts at peak bandwidth, and the rest, from the step at two efficiencies.
    let (at_peak, at_half) = (predict(&with(0.0, 1.0)), predict(&with(0.0, 0.5)));
    let layers = experts.layers as f64;
    let rows: Vec<(f64, f64, f64, f64)> = (0..cases.len())
        .filter(|i| i % 2 == 0)
        .map(|i| {
            let r = at_half[i] - at_peak[i];
            (at_peak[i] - r, layers, r, cases[i].tpot_s)
        })
        .collect();
    let (layer_s, inverse) = two_term_lsq(&rows);
    let fitted = Profile {
        name: setup.name.clone(),
        fitted: true,
        source: format!(
            "fitted by `serverbench calibrate --from-moe-probes` ({} decode cases of {}) over profile {}",
            cases.len(),
            setup.model.name,
            setup.base.name
        ),
        ..with(layer_s, 1.0 / inverse)
    };
    fitted.check()?;
    let (base_s, fitted_s) = (predict(setup.base), predict(&fitted));
    let rows: Vec<MoeRow> = cases
        .iter()
        .enumerate()
        .map(|(i, c)| MoeRow {
            batch: c.batch,
            context: c.context,
            measured_s: c.tpot_s,
            base_s: base_s[i],
            fitted_s: fitted_s[i],
            held_out: i % 2 == 1,
        })
        .collect();
    let accuracy = |held_out: bool| {
        summarize(
            rows.iter()
                .filter(|r| r.held_out == held_out)
                .map(|r| (r.fitted_s / r.measured_s - 1.0).abs())
                .collect(),
        )
    };
    let (train, held_out) = (accuracy(false), accuracy(true));
    let mut profile = fitted;
    profile.fit = Some(FitRecord {
        steps_fitted: train.steps,
        steps_held_out: held_out.steps,
        held_out_median_ape: Some(held_out.median_ape),
        held_out_p90_ape: Some(held_out.p90_ape),
        ..setup.record.clone()
    });
    Ok(MoeFit {
        profile,
        rows,
        train,
        held_out,
    })
}

/// `min Σ ((rest + a·l + b·r − y) / y)²` over rows `(rest, l, r, y)`, with `a ≥ 0` and `b ≥ 1`: the
/// unconstrained solution, else the best with one or both on their bound.
fn two_term_lsq(rows: &[(f64, f64, f64, f64)]) -> (f64, f64) {
    // Normal equations of the weighted problem in (a, b) on targets y − rest.
    let (mut ll, mut lr, mut rr, mut ly, mut ry) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(rest, l, r, y) in rows {
        let w = 1.0 / (y * y);
        let t = y - rest;
        ll += w * l * l;
        lr += w * l * r;
        rr += w * r * r;
        ly += w * l * t;
        ry += w * r * t;
    }
    let det = ll * rr - lr * lr;
    if det.abs() > 0.0 {
        let a = (ly * rr - ry * lr) / det;
        let b = (ll * ry - lr * ly) / det;
        if a >= 0.0 && b >= 1.0 {
            return (a, b);
        }
    }
    let cost = |a: f64, b: f64| -> f64 {
        rows.iter()
            .map(|&(rest, l, r, y)| ((rest + a * l + b * r - y) / y).powi(2))
            .sum()
    };
    // One term on its bound, the other fitted to what is left (and kept in its own range).
    let b_alone = if rr > 0.0 { (ry / rr).max(1.0) } else { 1.0 };
    let a_alone = if ll > 0.0 {
        ((ly - lr) / ll).max(0.0)
    } else {
        0.0
    };
    [(0.0, b_alone), (a_alone, 1.0), (0.0, 1.0)]
        .into_iter()
        .min_by(|x, y| cost(x.0, x.1).total_cmp(&cost(y.0, y.1)))
        .expect("three candidates")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3_30b_a3b() -> ModelSpec {
        crate::hf::from_config(
            "qwen3-30b-a3b",
            include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json"),
        )
        .unwrap()
    }

    fn stored_runs() -> Vec<MoeDecode> {
        let runs = [
            (
                "moe_probe.json",
                include_str!("../../results/h200-vllm-moe/moe_probe.json"),
            ),
            (
                "moe_probe_run2.json",
                include_str!("../../results/h200-vllm-moe/moe_probe_run2.json"),
            ),
        ]
        .map(|(f, t)| parse_moe_probes(f, t).unwrap());
        merge_runs(&runs)
    }

    fn setup<'a>(m: &'a ModelSpec, h: &'a HardwareSpec, base: &'a Profile) -> MoeFitSetup<'a> {
        MoeFitSetup {
            model: m,
            hardware: h,
            base,
            name: "h200-qwen3-30b-a3b-vllm".into(),
            split_kv_decode: true,
            record: FitRecord::default(),
        }
    }

    /// The stored probes of vLLM serving Qwen3-30B-A3B on one H200 (two runs, eleven decode cases):
    /// the fitted terms bring every case, fitted or held out, within a few per cent, where the dense
    /// profile they start from misses batch 1 by half; the shipped profile holds these terms.
    #[test]
    fn the_stored_moe_probes_fit_a_floor_and_a_faster_expert_read() {
        let (m, h) = (qwen3_30b_a3b(), HardwareSpec::preset("h200").unwrap());
        let base = Profile::preset("h200-qwen3-8b-vllm").unwrap();
        let cases = stored_runs();
        assert_eq!(cases.len(), 11);
        let fit = fit_moe(&cases, &setup(&m, &h, &base)).unwrap();
        for r in &fit.rows {
            println!(
                "batch {:>3} over {:>6}: measured {:6.2} ms, base {:6.2} ms ({:+5.1} %), fitted {:6.2} ms ({:+5.1} %){}",
                r.batch,
                r.context,
                r.measured_s * 1e3,
                r.base_s * 1e3,
                100.0 * (r.base_s / r.measured_s - 1.0),
                r.fitted_s * 1e3,
                100.0 * (r.fitted_s / r.measured_s - 1.0),
                if r.held_out { "  held out" } else { "" }
            );
        }
        let p = &fit.profile;
        println!(
            "moe_layer_s {:.3} µs, expert_memory_efficiency {:.4}; held-out median {:.1} %, p90 {:.1} %",
            p.moe_layer_s * 1e6,
            p.expert_memory_efficiency.unwrap(),
            100.0 * fit.held_out.median_ape,
            100.0 * fit.held_out.p90_ape
        );
        assert_eq!((fit.train.steps, fit.held_out.steps), (6, 5));
        assert!(fit.held_out.p90_ape < 0.08, "{:?}", fit.held_out);
        assert!(fit.rows[0].base_s < 0.6 * fit.rows[0].measured_s);
        // A routed layer's floor of tens of µs; experts read faster than the dense weights.
        assert!(
            (10e-6..100e-6).contains(&p.moe_layer_s),
            "{}",
            p.moe_layer_s
        );
        assert!(p.expert_memory_efficiency.unwrap() > base.memory_efficiency);
        // The table of docs/models-and-hardware.md is these numbers.
        let docs = include_str!("../../docs/models-and-hardware.md");
        for (label, value) in [
            (
                "| measured ms |",
                (|r: &MoeRow| r.measured_s) as fn(&MoeRow) -> f64,
            ),
            ("| dense profile ms |", |r| r.base_s),
            ("| MoE profile ms |", |r| r.fitted_s),
        ] {
            let row: Vec<String> = fit
                .rows
                .iter()
                .map(|r| format!("{:.2}", value(r) * 1e3))
                .collect();
            let want = format!("{label} {} |", row.join(" | "));
            assert!(
                docs.lines().any(|l| l == want),
                "docs/models-and-hardware.md lacks the row\n{want}"
            );
        }
        let shipped = Profile::preset("h200-qwen3-30b-a3b-vllm").unwrap();
        assert_eq!(shipped.moe_layer_s, p.moe_layer_s);
        assert_eq!(shipped.expert_memory_efficiency, p.expert_memory_efficiency);
        let record = shipped.fit.as_ref().unwrap();
        assert_eq!(record.held_out_median_ape, Some(fit.held_out.median_ape));
        // Everything else is the base's, but the band: the MoE replays' own measured error
        // (results/h200-vllm-moe/replays/, scripts/regret.py), not the dense model's.
        assert_ne!(shipped.band, base.band);
        let back = Profile {
            name: base.name.clone(),
            source: base.source.clone(),
            fit: base.fit.clone(),
            band: base.band,
            moe_layer_s: 0.0,
            expert_memory_efficiency: None,
            ..shipped.clone()
        };
        assert_eq!(back, base);
    }

    /// The two terms leave a dense model's steps as they were, bit for bit, and its fit is refused.
    #[test]
    fn the_moe_terms_leave_dense_models_alone() {
        let (m, h) = (
            ModelSpec::preset("qwen3-8b").unwrap(),
            HardwareSpec::preset("h200").unwrap(),
        );
        let base = Profile::preset("h200-qwen3-8b-vllm").unwrap();
        let moe = Profile {
            moe_layer_s: 5e-5,
            expert_memory_efficiency: Some(0.9),
            ..base.clone()
        };
        let samples: Vec<StepSample> = [1usize, 7, 64]
            .iter()
            .map(|&b| StepSample {
                prefill: vec![(100, 50)],
                decode: vec![3000; b],
                decode_kv_distinct: None,
                seconds: 1.0,
            })
            .collect();
        for split in [false, true] {
            let a = predict_steps_with(&samples, &m, &h, &base, split);
            let b = predict_steps_with(&samples, &m, &h, &moe, split);
            assert_eq!(a, b);
        }
        let cases = [MoeDecode {
            batch: 1,
            context: 10,
            decode_tokens: 2,
            tpot_s: 0.01,
        }; 4];
        let e = fit_moe(&cases, &setup(&m, &h, &base)).unwrap_err();
        assert!(matches!(e, CannotFitMoe::Dense(_)), "{e}");
    }

    #[test]
    fn malformed_probe_files_name_the_field() {
        let e = parse_moe_probes("p.json", r#"{"cases": [{"kind": "prefill"}]}"#).unwrap_err();
        assert_eq!(e.field, "cases");
        let e = parse_moe_probes(
            "p.json",
            r#"{"cases": [{"kind": "decode", "batch": 2, "context": 9, "decode_tokens": 4, "tpot_ms": -1}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.field.as_str()),
            ("p.json", "cases[0].tpot_ms")
        );
        let e = parse_moe_probes(
            "p.json",
            r#"{"cases": [{"kind": "decode", "context": 9, "decode_tokens": 4, "tpot_ms": 3}]}"#,
        )
        .unwrap_err();
        assert_eq!(e.field, "cases[0].batch");
        let e = parse_moe_probes("p.json", r#"{"cases": 3}"#).unwrap_err();
        assert_eq!(e.field, "cases");
    }

    /// The bounded least squares finds exact terms, and keeps each in its range when the data would
    /// push it out.
    #[test]
    fn two_terms_are_recovered_and_bounded() {
        let rows: Vec<_> = [(1.0, 2.0), (1.5, 5.0), (0.5, 9.0)]
            .iter()
            .map(|&(rest, r)| (rest, 48.0, r, rest + 48.0 * 0.01 + 1.25 * r))
            .collect();
        let (a, b) = two_term_lsq(&rows);
        assert!(
            (a - 0.01).abs() < 1e-12 && (b - 1.25).abs() < 1e-12,
            "{a} {b}"
        );
        // Faster than the peak allows: b held at 1.
        let fast: Vec<_> = rows
            .iter()
            .map(|&(rest, l, r, _)| (rest, l, r, rest + 0.5 * r))
            .collect();
        let (a, b) = two_term_lsq(&fast);
        assert!(a >= 0.0 && b == 1.0, "{a} {b}");
    }
}

#[cfg(test)]
mod prefill {
    use super::*;

    /// The fitted terms were fitted to decode steps only. A fresh prompt's time to first token (the
    /// profile's front end plus its prefill steps, 8,192 tokens a step as vLLM ran them) against the
    /// stored probes' is printed for the base and the fitted profile, and bounded loosely: the fixed
    /// routed-layer time moves a short prefill by a few ms, a long one not at all in relative terms.
    #[test]
    fn moe_prefill_is_reported_not_fitted() {
        let m = crate::hf::from_config(
            "qwen3-30b-a3b",
            include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json"),
        )
        .unwrap();
        let h = HardwareSpec::preset("h200").unwrap();
        let base = Profile::preset("h200-qwen3-8b-vllm").unwrap();
        let fitted = Profile::preset("h200-qwen3-30b-a3b-vllm").unwrap();
        let mut errors = Vec::new();
        // (prompt tokens, measured TTFT ms: the mean of the two runs' medians)
        for (tokens, ms) in [(512u32, 28.1), (2048, 91.6), (8192, 168.45), (16384, 418.5)] {
            let steps: Vec<StepSample> = (0..tokens.div_ceil(8192))
                .map(|i| StepSample {
                    prefill: vec![((tokens - i * 8192).min(8192), i * 8192)],
                    decode: vec![],
                    decode_kv_distinct: None,
                    seconds: 1.0,
                })
                .collect();
            let ttft = |p: &Profile| {
                let steps: f64 = predict_steps_with(&steps, &m, &h, p, true).iter().sum();
                (steps + p.request_latency_s + p.frontend_s_per_token * tokens as f64) * 1e3
            };
            let (b, f) = (ttft(&base), ttft(&fitted));
            println!(
                "prefill {tokens:>6}: measured {ms:6.1} ms, base {b:6.1} ({:+5.1} %), fitted {f:6.1} ({:+5.1} %)",
                100.0 * (b / ms - 1.0),
                100.0 * (f / ms - 1.0)
            );
            errors.push(f / ms - 1.0);
        }
        // The 2,048-token prompt ran without CUDA graphs and took 3.3× the 512-token one (results/h200-vllm-moe/README.md): the profile misses it by 60 %.
        assert!(errors.iter().all(|e| e.abs() < 0.65), "{errors:?}");
    }
}
