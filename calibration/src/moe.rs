//! Fitting a profile's mixture-of-experts terms (`moe_layer_s`, `expert_memory_efficiency`) to the
//! decode probes of a mixture of experts served by a real engine (`scripts/vllm/moe_probe.py`'s JSON),
//! and, where the engine's CUDA-graph rule is given, its eager floor (`eager_s_per_layer`) to the
//! probes' fresh prefills: every other term comes from a base profile. Parses text and does
//! arithmetic; never reads files, never looks at the clock (the caller passes `fitted_at`).

use crate::fit::{
    predict_steps_on, predict_steps_with, summarize, FitAccuracy, LogEngine, StepSample,
};
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

/// One prefill case of a probe file: `new` fresh tokens after `cached` tokens already in the prefix
/// cache (0: a fresh prompt), sent alone with one output token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoePrefill {
    /// Tokens of the prompt already cached (the `cached` cases' prefix).
    pub cached: u32,
    /// Tokens the engine computes.
    pub new: u32,
    /// Time to first token, the median of the case's timed repeats, seconds.
    pub ttft_s: f64,
}

/// Prompts longer than this are refused: beyond any model's context, and the fit walks their chunks.
const MAX_PROBE_PROMPT: u32 = 10_000_000;

#[derive(Deserialize)]
struct ProbeCase {
    kind: String,
    #[serde(default)]
    new: Option<u32>,
    #[serde(default)]
    prefix: Option<u32>,
    #[serde(default)]
    ttft_ms: Option<f64>,
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    skipped: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    batch: Option<u32>,
    #[serde(default)]
    context: Option<u32>,
    #[serde(default)]
    decode_tokens: Option<u32>,
    #[serde(default)]
    tpot_ms: Option<f64>,
}

/// The decode cases of one `moe_probe.py` JSON file ([`parse_moe_file`]'s first part).
pub fn parse_moe_probes(file: &str, text: &str) -> Result<Vec<MoeDecode>, InputError> {
    Ok(parse_moe_file(file, text)?.0)
}

/// The decode and the prefill cases of one `moe_probe.py` JSON file. The error names the file and the
/// field: a decode case without its batch, context, tokens or a positive time, a prefill case as
/// [`parse_moe_prefills`] says, or a file with no case of any kind.
pub fn parse_moe_file(
    file: &str,
    text: &str,
) -> Result<(Vec<MoeDecode>, Vec<MoePrefill>), InputError> {
    let probes: ProbeFile = serverbench_config::parse_json_line(file, 0, text)?;
    let mut out = Vec::new();
    let prefills = prefill_cases(file, &probes)?;
    for (i, c) in probes.cases.iter().enumerate() {
        if c.kind != "decode" || c.error.is_some() || c.skipped.is_some() {
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
    if out.is_empty() && prefills.is_empty() {
        return Err(InputError::new(
            file,
            0,
            "cases",
            "no decode, prefill or cached case with a time to fit",
        ));
    }
    Ok((out, prefills))
}

/// The prefill cases of one `moe_probe.py` JSON file: `prefill` (a fresh prompt of `new` tokens) and
/// `cached` (`new` tokens after a cached `prefix`), each with its median `ttft_ms`; a case that failed
/// or was skipped (`error`, `skipped`) is left out. The error names the file and the field.
pub fn parse_moe_prefills(file: &str, text: &str) -> Result<Vec<MoePrefill>, InputError> {
    prefill_cases(file, &serverbench_config::parse_json_line(file, 0, text)?)
}

fn prefill_cases(file: &str, probes: &ProbeFile) -> Result<Vec<MoePrefill>, InputError> {
    let mut out = Vec::new();
    for (i, c) in probes.cases.iter().enumerate() {
        let fresh = match c.kind.as_str() {
            "prefill" => true,
            "cached" => false,
            _ => continue,
        };
        if c.error.is_some() || c.skipped.is_some() {
            continue;
        }
        let bad =
            |name: &str, why: &str| InputError::new(file, 0, format!("cases[{i}].{name}"), why);
        let count = |v: Option<u32>, name: &str| {
            v.filter(|&v| (1..=MAX_PROBE_PROMPT).contains(&v))
                .ok_or_else(|| bad(name, "needs a token count from 1 to 10,000,000"))
        };
        let new = count(c.new, "new")?;
        let cached = if fresh { 0 } else { count(c.prefix, "prefix")? };
        if cached > MAX_PROBE_PROMPT - new {
            return Err(bad(
                "new",
                "prefix and new tokens beyond 10,000,000 together",
            ));
        }
        let ttft_ms = c
            .ttft_ms
            .filter(|t| *t > 0.0 && t.is_finite())
            .ok_or_else(|| {
                bad(
                    "ttft_ms",
                    "a prefill case needs a positive time to first token",
                )
            })?;
        out.push(MoePrefill {
            cached,
            new,
            ttft_s: ttft_ms / 1e3,
        });
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
    /// The engine's split-KV decode schedule and CUDA-graph rule. With a graph rule,
    /// `eager_s_per_layer` is fitted to the prefill cases (with a step above the graphs' limit among
    /// them); without, it stays the base's.
    pub engine: LogEngine,
    /// The engine's prefill chunk (tokens a step computes at most: vLLM's `max_num_batched_tokens`).
    pub prefill_chunk: u32,
    /// Provenance written to the profile; the fit fills its counts and errors.
    pub record: FitRecord,
}

/// One prefill case of the fit's table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoePrefillRow {
    /// The case.
    pub case: MoePrefill,
    /// Time to first token with the decode terms fitted and the base's eager floor, seconds.
    pub base_s: f64,
    /// The fitted profile's, seconds.
    pub fitted_s: f64,
    /// The eager floor was fitted to it (a fresh prompt with a chunk the graphs do not cover); the
    /// others (cached prefixes, graphed sizes) are held out.
    pub fitted: bool,
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

/// What `moe_probe.py`'s files hold, file by file, with a provenance line each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MoeProbeRuns {
    /// Each file's decode cases.
    pub decode: Vec<Vec<MoeDecode>>,
    /// Each file's prefill cases (fresh prompts and cached prefixes).
    pub prefill: Vec<Vec<MoePrefill>>,
    /// `PATH (N decode, M prefill cases)` per file.
    pub inputs: Vec<String>,
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
    /// Every prefill case, in the files' order (empty without prefill cases).
    pub prefill_rows: Vec<MoePrefillRow>,
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
    /// A prefill chunk of no tokens.
    #[error("the prefill chunk must be at least one token")]
    NoChunk,
    /// The fitted profile breaks a rule of profiles.
    #[error("the fitted profile is invalid: {0}")]
    Invalid(#[from] FieldError),
}

/// The distinct cases of several probe files (a repeat of the same probes), in the order first seen,
/// each case's time the mean of the files' times.
pub fn merge_runs(runs: &[Vec<MoeDecode>]) -> Vec<MoeDecode> {
    mean_by_case(
        runs,
        |c| (c.batch, c.context, c.decode_tokens),
        |c| &mut c.tpot_s,
    )
}

/// [`merge_runs`] for prefill cases: one per (cached, new), its time to first token the mean.
pub fn merge_prefills(runs: &[Vec<MoePrefill>]) -> Vec<MoePrefill> {
    mean_by_case(runs, |c| (c.cached, c.new), |c| &mut c.ttft_s)
}

/// The distinct cases by `key`, in the order first seen, each one's `time` the mean over the runs.
fn mean_by_case<T: Copy, K: PartialEq>(
    runs: &[Vec<T>],
    key: impl Fn(&T) -> K,
    time: impl Fn(&mut T) -> &mut f64,
) -> Vec<T> {
    let mut out: Vec<(T, u32)> = Vec::new();
    for case in runs.iter().flatten() {
        match out.iter_mut().find(|(c, _)| key(c) == key(case)) {
            Some((c, n)) => {
                let mut other = *case;
                *time(c) += *time(&mut other);
                *n += 1;
            }
            None => out.push((*case, 1)),
        }
    }
    out.into_iter()
        .map(|(mut c, n)| {
            *time(&mut c) /= n as f64;
            c
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
///
/// Then, with the engine's graph rule, the eager floor: a prompt's time to first token is the base's
/// `request_latency_s + frontend_s_per_token × prompt tokens` plus its chunks' steps, and a chunk the
/// graphs do not cover takes at least `layers × eager_s_per_layer` (the host launching it). The floor
/// minimises the squared relative error over the fresh prompts with such a chunk (a scan, then a finer
/// one about the best); the cached-prefix cases and graphed sizes are held out.
pub fn fit_moe(
    cases: &[MoeDecode],
    prefills: &[MoePrefill],
    setup: &MoeFitSetup<'_>,
) -> Result<MoeFit, CannotFitMoe> {
    let experts = setup
        .model
        .experts
        .as_ref()
        .ok_or_else(|| CannotFitMoe::Dense(setup.model.name.clone()))?;
    if cases.len() < 4 {
        return Err(CannotFitMoe::TooFewCases(cases.len()));
    }
    if setup.prefill_chunk == 0 {
        return Err(CannotFitMoe::NoChunk);
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
            setup.engine.split_kv_decode,
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
    let decode_fitted = Profile {
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
    let ttfts = PrefillTimes::new(prefills, &decode_fitted, setup);
    let before = PrefillTerms::of(&decode_fitted);
    let fitted = match ttfts.fit_floor(before) {
        Some(floor) => Profile {
            eager_s_per_layer: floor,
            source: format!(
                "fitted by `serverbench calibrate --from-moe-probes` ({} decode and {} prefill cases of {}) over profile {}",
                cases.len(),
                prefills.len(),
                setup.model.name,
                setup.base.name
            ),
            ..decode_fitted.clone()
        },
        None => decode_fitted.clone(),
    };
    fitted.check()?;
    let prefill_rows = ttfts.rows(before, PrefillTerms::of(&fitted));
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
        prefill_rows,
    })
}

/// The prefill cases' times to first token as functions of the front end's two terms and the eager
/// floor: per case, its prompt tokens, its graphed chunks' time, and each eager chunk's body and
/// fixed time.
struct PrefillTimes {
    cases: Vec<PrefillCase>,
    layers: f64,
}

struct PrefillCase {
    case: MoePrefill,
    prompt: f64,
    graphed_s: f64,
    eager: Vec<(f64, f64)>,
}

/// The front end and eager floor of a prefill fit.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PrefillTerms {
    request_latency_s: f64,
    frontend_s_per_token: f64,
    eager_s_per_layer: f64,
}

impl PrefillTerms {
    fn of(p: &Profile) -> Self {
        PrefillTerms {
            request_latency_s: p.request_latency_s,
            frontend_s_per_token: p.frontend_s_per_token,
            eager_s_per_layer: p.eager_s_per_layer,
        }
    }
}

impl PrefillTimes {
    fn new(prefills: &[MoePrefill], p: &Profile, setup: &MoeFitSetup<'_>) -> Self {
        let engine = setup.engine;
        let layers = setup.model.layers as f64;
        // One second a layer: a floor above any step, so an eager chunk's time is the floor plus its
        // fixed time, and without a floor its body plus that fixed time.
        let at = |floor: f64| Profile {
            eager_s_per_layer: floor,
            ..p.clone()
        };
        let (none, high) = (at(0.0), at(1.0));
        let cases = prefills
            .iter()
            .map(|c| {
                let steps = chunk_steps(c, setup.prefill_chunk);
                let t0 = predict_steps_on(&steps, setup.model, setup.hardware, &none, engine);
                let t1 = predict_steps_on(&steps, setup.model, setup.hardware, &high, engine);
                let mut out = PrefillCase {
                    case: *c,
                    prompt: (c.cached + c.new) as f64,
                    graphed_s: 0.0,
                    eager: Vec::new(),
                };
                for (a, b) in t0.into_iter().zip(t1) {
                    if engine.graphs.is_some() && b > layers * 0.5 {
                        out.eager.push((a - (b - layers), b - layers));
                    } else {
                        out.graphed_s += a;
                    }
                }
                out
            })
            .collect();
        PrefillTimes { cases, layers }
    }

    /// Case `i`'s chunks' time with this eager floor per layer.
    fn steps_s(&self, i: usize, floor: f64) -> f64 {
        let c = &self.cases[i];
        c.graphed_s
            + c.eager
                .iter()
                .map(|&(body, other)| body.max(self.layers * floor) + other)
                .sum::<f64>()
    }

    fn ttft(&self, i: usize, t: PrefillTerms) -> f64 {
        t.request_latency_s
            + t.frontend_s_per_token * self.cases[i].prompt
            + self.steps_s(i, t.eager_s_per_layer)
    }

    /// Whether case `i` informs the floor: a fresh prompt with a chunk the graphs do not cover.
    fn fitted(&self, i: usize) -> bool {
        self.cases[i].case.cached == 0 && !self.cases[i].eager.is_empty()
    }

    /// The eager floor per layer minimising the squared relative error over the fitted cases, the front
    /// end as `terms` has it; `None` without a fitted case.
    fn fit_floor(&self, terms: PrefillTerms) -> Option<f64> {
        let idx: Vec<usize> = (0..self.cases.len()).filter(|&i| self.fitted(i)).collect();
        let hi = idx
            .iter()
            .map(|&i| self.cases[i].case.ttft_s)
            .fold(0.0_f64, f64::max)
            / self.layers;
        if idx.is_empty() || hi <= 0.0 {
            return None;
        }
        let cost = |floor: f64| -> f64 {
            let t = PrefillTerms {
                eager_s_per_layer: floor,
                ..terms
            };
            idx.iter()
                .map(|&i| (self.ttft(i, t) / self.cases[i].case.ttft_s - 1.0).powi(2))
                .sum()
        };
        let best_of = |lo: f64, step: f64, n: u32| {
            (0..=n)
                .map(|k| (lo + step * k as f64).max(0.0))
                .min_by(|a, b| cost(*a).total_cmp(&cost(*b)))
                .expect("a scan of at least one point")
        };
        let coarse = hi / 2000.0;
        let best = best_of(0.0, coarse, 2000);
        Some(best_of(best - coarse, coarse / 500.0, 1000))
    }

    fn rows(&self, before: PrefillTerms, after: PrefillTerms) -> Vec<MoePrefillRow> {
        (0..self.cases.len())
            .map(|i| MoePrefillRow {
                case: self.cases[i].case,
                base_s: self.ttft(i, before),
                fitted_s: self.ttft(i, after),
                fitted: self.fitted(i),
            })
            .collect()
    }
}

/// The steps vLLM computes a prompt in: chunks of at most `chunk` new tokens, each over what is
/// cached and computed before it.
fn chunk_steps(c: &MoePrefill, chunk: u32) -> Vec<StepSample> {
    (0..c.new.div_ceil(chunk))
        .map(|i| StepSample {
            prefill: vec![((c.new - i * chunk).min(chunk), c.cached + i * chunk)],
            decode: vec![],
            decode_kv_distinct: None,
            seconds: 1.0,
        })
        .collect()
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
    use crate::cost::GraphRule;

    fn qwen3_30b_a3b() -> ModelSpec {
        crate::hf::from_config(
            "qwen3-30b-a3b",
            include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json"),
        )
        .unwrap()
    }

    const STORED: [(&str, &str); 3] = [
        (
            "moe_probe.json",
            include_str!("../../results/h200-vllm-moe/moe_probe.json"),
        ),
        (
            "moe_probe_run2.json",
            include_str!("../../results/h200-vllm-moe/moe_probe_run2.json"),
        ),
        (
            "warm/moe-probe/moe_probe.json",
            include_str!("../../results/h200-vllm-moe/warm/moe-probe/moe_probe.json"),
        ),
    ];

    pub(super) fn stored_runs() -> Vec<MoeDecode> {
        merge_runs(&STORED.map(|(f, t)| parse_moe_probes(f, t).unwrap()))
    }

    pub(super) fn stored_prefills() -> Vec<MoePrefill> {
        merge_prefills(&STORED.map(|(f, t)| parse_moe_prefills(f, t).unwrap()))
    }

    /// vLLM's graph rule on these probes: steps of up to 512 tokens replay piecewise graphs.
    pub(super) const VLLM_GRAPHS: GraphRule = GraphRule::mixed(512);

    /// The dense profile the shipped MoE profile was fitted over, as it stood then (kept beside the
    /// MoE's probes: the dense profile has moved on since).
    pub(super) fn moe_base() -> Profile {
        Profile::from_yaml(
            "base-h200-qwen3-8b-vllm.yaml",
            include_str!("../../results/h200-vllm-moe/base-h200-qwen3-8b-vllm.yaml"),
        )
        .unwrap()
    }

    fn setup<'a>(m: &'a ModelSpec, h: &'a HardwareSpec, base: &'a Profile) -> MoeFitSetup<'a> {
        MoeFitSetup {
            model: m,
            hardware: h,
            base,
            name: "h200-qwen3-30b-a3b-vllm".into(),
            engine: LogEngine {
                split_kv_decode: true,
                shared_prefix: None,
                graphs: None,
            },
            prefill_chunk: 8192,
            record: FitRecord::default(),
        }
    }

    /// The stored probes of vLLM serving Qwen3-30B-A3B on one H200 (two runs, eleven decode cases):
    /// the fitted terms bring every case, fitted or held out, within a few per cent, where the dense
    /// profile they start from misses batch 1 by half; the shipped profile holds these terms.
    #[test]
    fn the_stored_moe_probes_fit_a_floor_and_a_faster_expert_read() {
        let (m, h) = (qwen3_30b_a3b(), HardwareSpec::preset("h200").unwrap());
        let base = moe_base();
        let cases = stored_runs();
        assert_eq!(cases.len(), 11);
        let fit = fit_moe(&cases, &[], &setup(&m, &h, &base)).unwrap();
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
        // Without the graph rule the floor stays the base's (none); with it, the shipped one.
        assert_eq!(p.eager_s_per_layer, base.eager_s_per_layer);
        let with_graphs = MoeFitSetup {
            engine: LogEngine {
                split_kv_decode: true,
                shared_prefix: None,
                graphs: Some(VLLM_GRAPHS),
            },
            ..setup(&m, &h, &base)
        };
        let full = fit_moe(&cases, &stored_prefills(), &with_graphs).unwrap();
        assert_eq!(full.profile.eager_s_per_layer, shipped.eager_s_per_layer);
        assert_eq!(
            full.rows, fit.rows,
            "the floor leaves the decode cases alone"
        );
        let record = shipped.fit.as_ref().unwrap();
        assert_eq!(record.held_out_median_ape, Some(fit.held_out.median_ape));
        // Everything else is the base's, but the band (the MoE replays' own measured error:
        // results/h200-vllm-moe/replays/, scripts/regret.py), the experts' GEMM efficiency and the
        // front end (set from vLLM's step traces) and the fused-MoE kernel's tile table.
        assert_ne!(shipped.band, base.band);
        let back = Profile {
            name: base.name.clone(),
            source: base.source.clone(),
            fit: base.fit.clone(),
            band: base.band,
            moe_layer_s: 0.0,
            expert_memory_efficiency: None,
            eager_s_per_layer: base.eager_s_per_layer,
            // Set from vLLM's step traces, not by this fit (the profile's comments say where).
            expert_gemm_efficiency: None,
            // vLLM's own tuned kernel table, read from its wheel (the profile's comments say so).
            expert_tile_rows: Vec::new(),
            request_latency_s: base.request_latency_s,
            frontend_s_per_token: base.frontend_s_per_token,
            // The chat front end, measured on vLLM's replays of one server start, and the kernel
            // compiles of its step traces (2026-12-06).
            tokenize_s_per_token: base.tokenize_s_per_token,
            expert_compile_s: base.expert_compile_s,
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
        let e = fit_moe(&cases, &[], &setup(&m, &h, &base)).unwrap_err();
        assert!(matches!(e, CannotFitMoe::Dense(_)), "{e}");
    }

    #[test]
    fn malformed_probe_files_name_the_field() {
        let e = parse_moe_probes("p.json", r#"{"cases": [{"kind": "prefill"}]}"#).unwrap_err();
        assert_eq!(e.field, "cases[0].new");
        let e = parse_moe_probes("p.json", r#"{"cases": [{"kind": "other"}]}"#).unwrap_err();
        assert_eq!(e.field, "cases");
        // A failed or skipped case is left out; one without a time is an error naming it.
        let ok = r#"{"cases": [{"kind": "prefill", "new": 64, "error": "IndexError"},
            {"kind": "cached", "prefix": 128, "new": 64, "skipped": "no time"},
            {"kind": "cached", "prefix": 128, "new": 64, "ttft_ms": 12.5}]}"#;
        assert_eq!(
            parse_moe_prefills("p.json", ok).unwrap(),
            vec![MoePrefill {
                cached: 128,
                new: 64,
                ttft_s: 0.0125
            }]
        );
        for (case, field) in [
            (
                r#"{"kind": "cached", "new": 64, "ttft_ms": 3}"#,
                "cases[0].prefix",
            ),
            (
                r#"{"kind": "prefill", "new": 64, "ttft_ms": 0}"#,
                "cases[0].ttft_ms",
            ),
            (
                r#"{"kind": "prefill", "new": 4000000000, "ttft_ms": 3}"#,
                "cases[0].new",
            ),
            (
                r#"{"kind": "cached", "prefix": 9999999, "new": 64, "ttft_ms": 3}"#,
                "cases[0].new",
            ),
        ] {
            let e = parse_moe_prefills("p.json", &format!(r#"{{"cases": [{case}]}}"#)).unwrap_err();
            assert_eq!(
                (e.file.as_str(), e.field.as_str()),
                ("p.json", field),
                "{case}"
            );
        }
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
    use super::tests::{moe_base, stored_prefills, stored_runs, VLLM_GRAPHS};
    use super::*;

    /// The eager floor fitted to the stored probes' fresh prompts: steps of 1,024–4,096 tokens, which
    /// vLLM runs without a CUDA graph, go from half their time to within 20 %; a 512-token prompt
    /// (graphed) and the long ones (GPU-bound) do not move; no held-out cached prefix with an eager
    /// chunk gets worse (2,048 over 8,192: −22 % to −4 %; over 16,384 its GPU time is above the floor).
    #[test]
    fn the_eager_floor_brings_the_host_bound_prefills_in() {
        let m = crate::hf::from_config(
            "qwen3-30b-a3b",
            include_str!("../../tests/fixtures/hf/qwen3-30b-a3b.json"),
        )
        .unwrap();
        let h = HardwareSpec::preset("h200").unwrap();
        let base = moe_base();
        let decode = stored_runs();
        let setup = MoeFitSetup {
            model: &m,
            hardware: &h,
            base: &base,
            name: "moe".into(),
            engine: LogEngine {
                split_kv_decode: true,
                shared_prefix: None,
                graphs: Some(VLLM_GRAPHS),
            },
            prefill_chunk: 8192,
            record: FitRecord::default(),
        };
        let fit = fit_moe(&decode, &stored_prefills(), &setup).unwrap();
        let floor_ms = fit.profile.eager_s_per_layer * 1e3 * 48.0;
        assert!((40.0..80.0).contains(&floor_ms), "{floor_ms}");
        let err = |r: &MoePrefillRow, s: f64| s / r.case.ttft_s - 1.0;
        for r in &fit.prefill_rows {
            println!(
                "{:>6} + {:>6}: {:7.1} ms measured, {:+6.1} % before, {:+6.1} % fitted{}",
                r.case.cached,
                r.case.new,
                r.case.ttft_s * 1e3,
                100.0 * err(r, r.base_s),
                100.0 * err(r, r.fitted_s),
                if r.fitted { "" } else { "  held out" }
            );
            let eager = (1024..=4096).contains(&r.case.new);
            if r.case.cached == 0 && eager {
                assert!(
                    err(r, r.base_s) < -0.2 && err(r, r.fitted_s).abs() < 0.2,
                    "{r:?}"
                );
            }
            if r.case.new <= 512 || r.case.new >= 8192 && r.case.cached == 0 {
                assert_eq!(r.base_s, r.fitted_s, "{r:?}");
            }
            if r.case.cached > 0 && eager {
                assert!(err(r, r.fitted_s).abs() <= err(r, r.base_s).abs(), "{r:?}");
            }
        }
        assert_eq!(fit.prefill_rows.iter().filter(|r| r.fitted).count(), 7);
        // Without a chunk the fit is refused.
        let none = MoeFitSetup {
            prefill_chunk: 0,
            ..setup
        };
        assert_eq!(
            fit_moe(&decode, &[], &none).unwrap_err(),
            CannotFitMoe::NoChunk
        );
    }
}
