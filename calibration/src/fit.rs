//! Fitting a profile's efficiencies to a real engine's step log by bounded least squares.
//! Parses step-log text and does arithmetic; never reads files, never looks at the clock (the caller
//! passes provenance in).

use crate::cost::{BatchShape, CostInputs, CostModel, GraphRule, StepParts};
use crate::model::{HardwareSpec, ModelSpec, WeightDtype};
use crate::profile::{FitRecord, Profile, StepTime, MAX_SHARED_KV_EFFICIENCY};
use crate::splitkv::SharedReads;
use serde::Deserialize;
use serverbench_config::{FieldError, InputError};

/// One measured step: what it computed and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub struct StepSample {
    /// Prefill chunks as (tokens, cached tokens before the chunk).
    pub prefill: Vec<(u32, u32)>,
    /// Decode sequences' contexts.
    pub decode: Vec<u32>,
    /// KV tokens the decode sequences read with each shared block counted once (the log's
    /// `decode_kv_distinct`), if recorded.
    pub decode_kv_distinct: Option<u64>,
    /// Measured duration, seconds.
    pub seconds: f64,
}

impl StepSample {
    /// The step as the cost model sees it.
    pub fn shape(&self, window: Option<u32>) -> BatchShape {
        let mut b = BatchShape::default();
        for &(len, cached) in &self.prefill {
            b.add_prefill(len, cached, window);
        }
        for &ctx in &self.decode {
            b.add_decode(ctx, window);
        }
        // Distinct tokens count whole blocks, so a step without sharing records at least its contexts.
        b.decode_shared = self
            .decode_kv_distinct
            .map_or(0, |d| b.decode_context.saturating_sub(d));
        b
    }
}

/// Which duration of a logged step to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FitTarget {
    /// The whole step as the engine loop saw it (packing, upload, forward, sampling): what clients wait for.
    Wall,
    /// The forward pass alone (CUDA events).
    Gpu,
}

impl FitTarget {
    /// The name written to the profile.
    pub fn name(self) -> &'static str {
        match self {
            FitTarget::Wall => "wall",
            FitTarget::Gpu => "gpu",
        }
    }
}

#[derive(Deserialize)]
struct LogLine {
    gpu_ms: f64,
    wall_ms: f64,
    prefill: Vec<(u32, u32)>,
    decode: Vec<u32>,
    #[serde(default)]
    decode_kv_distinct: Option<u64>,
}

/// Parses a step log (JSON lines as the CUDA engine writes them); the error names the file, line and field.
/// Blank lines are skipped; a line with no work or a non-positive time is an error, never dropped silently.
pub fn parse_step_log(
    file: &str,
    text: &str,
    target: FitTarget,
) -> Result<Vec<StepSample>, InputError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let lineno = i + 1;
        let l: LogLine = serverbench_config::parse_json_line(file, lineno, line)?;
        let (field, ms) = match target {
            FitTarget::Wall => ("wall_ms", l.wall_ms),
            FitTarget::Gpu => ("gpu_ms", l.gpu_ms),
        };
        if !(ms > 0.0 && ms.is_finite()) {
            return Err(InputError::new(
                file,
                lineno,
                field,
                format!("must be a positive number of milliseconds, got {ms}"),
            ));
        }
        if l.prefill.is_empty() && l.decode.is_empty() {
            return Err(InputError::new(
                file,
                lineno,
                "prefill",
                "a step with no prefill chunk and no decode sequence",
            ));
        }
        if let Some(j) = l.prefill.iter().position(|&(len, _)| len == 0) {
            return Err(InputError::new(
                file,
                lineno,
                format!("prefill[{j}]"),
                "a prefill chunk of 0 tokens",
            ));
        }
        out.push(StepSample {
            prefill: l.prefill,
            decode: l.decode,
            decode_kv_distinct: l.decode_kv_distinct,
            seconds: ms / 1e3,
        });
    }
    Ok(out)
}

/// Error of a fit on a set of steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitAccuracy {
    /// Steps measured.
    pub steps: usize,
    /// Median absolute percentage error (a fraction: 0.05 is 5 %).
    pub median_ape: f64,
    /// 90th-percentile absolute percentage error.
    pub p90_ape: f64,
}

/// The result of [`fit_profile`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fit {
    /// The fitted profile (`step_time: kernel_sum`); `fit` filled from the caller's provenance.
    pub profile: Profile,
    /// Error on the steps fitted.
    pub train: FitAccuracy,
    /// Error on the held-out steps (every fifth).
    pub held_out: FitAccuracy,
}

/// What the fit needs besides the steps.
#[derive(Clone, Debug)]
pub struct FitSetup<'a> {
    /// The model the engine ran.
    pub model: &'a ModelSpec,
    /// The GPU it ran on.
    pub hardware: &'a HardwareSpec,
    /// Fields the step log cannot inform (all-reduce, int4/fp8 factors) come from this profile.
    pub base: &'a Profile,
    /// Name of the new profile.
    pub name: String,
    /// Query tokens per tile of the engine's prefill attention kernel (64 for serverbench's CUDA engine).
    pub attention_tile: u32,
    /// Weight-streaming efficiency measured elsewhere (a microbenchmark): fixes it instead of fitting it.
    /// Decode steps of one model cannot tell a fixed step overhead from slow weight streaming.
    pub memory_efficiency: Option<f64>,
    /// The same for steps of exactly one token (an engine's GEMV path). With one of the two fixed, the
    /// other is fitted against it.
    pub single_row_memory_efficiency: Option<f64>,
    /// The samples are probes of a server seen from outside (`calibrate --endpoint`): a step without
    /// decodes is a time to first token, which also holds the server's front end — a latency and a time
    /// per prompt token — and both are fitted, into `request_latency_s` and `frontend_s_per_token`. They
    /// take the places of the prefill attention's sweep and first-round terms, which stay 0: one
    /// request's probe cannot tell a front end's time per prompt token from attention over its span.
    pub front_end: bool,
    /// The steps the engine replays as CUDA graphs, when the base profile gives the host's gaps in
    /// the others (`piecewise_gap_s_per_layer`, `eager_gap_s_per_layer`): each sample's gap, at the
    /// base's figures, is taken off its time before the fit, and the fitted profile keeps the gaps.
    pub graphs: Option<GraphRule>,
    /// Provenance written to the profile; its error fields are filled by the fit.
    pub record: FitRecord,
}

/// Lower and upper bounds of the fitted variables, in the order of [`Row::x`]: step overhead (s),
/// per-sequence overhead (s), 1/gemm_eff, 1/attention_eff, 1/kv_eff, sweep seconds per token per round,
/// first-round seconds per token, 1/single-row memory efficiency, 1/shared-KV efficiency (re-reads may
/// come from cache, faster than memory: efficiency up to [`MAX_SHARED_KV_EFFICIENCY`]).
const BOUNDS: [(f64, f64); N] = [
    (0.0, 1.0),
    (0.0, 0.01),
    (1.0, 100.0),
    (1.0, 100.0),
    (1.0, 100.0),
    (0.0, 1e-3),
    (0.0, 1e-3),
    (1.0, 100.0),
    (1.0 / MAX_SHARED_KV_EFFICIENCY, 100.0),
];

/// Variables fitted by least squares.
const N: usize = 9;

/// One step's regressors with every efficiency at 1 and every overhead at 0.
#[derive(Clone, Copy, Debug)]
struct Row {
    parts: StepParts,
    /// The part of `parts.kv_s` that re-reads blocks another decode of the step reads too.
    shared_kv_s: f64,
    shape: BatchShape,
    /// With [`FitSetup::front_end`]: the prompt tokens of a time-to-first-token probe (0 for others).
    front_end_tokens: Option<f64>,
    y: f64,
}

/// The two shape parameters searched outside the least squares.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    /// Tokens below which streaming weights dominates the GEMMs.
    knee: f64,
    /// Attention tiles (× query heads) the GPU runs at once.
    slots: f64,
}

impl Row {
    /// The regressors at this knee and prefill rounds. A one-token step streams the weights at the
    /// single-row efficiency (last column) instead of `max(weights, GEMM)` at the shared one. Probes
    /// seen from outside put the front end (1 and the prompt's tokens, for a time to first token) in the
    /// sweep's and first round's columns.
    fn x(&self, knee: f64, waves: f64, per_token: f64) -> [f64; N] {
        let gemm_tokens = self.parts.gemm_s / per_token;
        let single_row = self.shape.tokens() == 1;
        let (sweep, first_round) = match self.front_end_tokens {
            None => (
                waves * self.shape.prefill_span_max as f64,
                self.shape.first_round_span(),
            ),
            Some(0.0) => (0.0, 0.0),
            Some(tokens) => (1.0, tokens),
        };
        [
            1.0,
            self.shape.seqs() as f64,
            if single_row {
                0.0
            } else {
                per_token * gemm_tokens.max(knee)
            },
            self.parts.attention_s,
            self.parts.kv_s - self.shared_kv_s,
            sweep,
            first_round,
            if single_row {
                self.parts.weights_s
            } else {
                0.0
            },
            self.shared_kv_s,
        ]
    }
}

/// The prompt tokens of a time-to-first-token probe (a step without decodes): its new tokens and the
/// cached prefix they follow; 0 for a step with decodes.
pub fn front_end_tokens(s: &StepSample) -> f64 {
    if !s.decode.is_empty() {
        return 0.0;
    }
    s.prefill
        .iter()
        .map(|&(new, cached)| new as f64 + cached as f64)
        .sum()
}

/// What a probe's time holds besides its step: the profile's front end, for a time to first token.
pub fn front_end_seconds(p: &Profile, s: &StepSample) -> f64 {
    if s.decode.is_empty() {
        p.request_latency_s + p.frontend_s_per_token * front_end_tokens(s)
    } else {
        0.0
    }
}

fn unit_profile(base: &Profile) -> Profile {
    Profile {
        gemm_efficiency: 1.0,
        gemm_half_tokens: 0.0,
        attention_efficiency: 1.0,
        memory_efficiency: 1.0,
        kv_efficiency: Some(1.0),
        single_row_memory_efficiency: None,
        shared_kv_efficiency: None,
        step_overhead_s: 0.0,
        per_sequence_overhead_s: 0.0,
        attention_sweep_s_per_token: 0.0,
        attention_span_s_per_token: 0.0,
        attention_tile_tokens: 0,
        attention_parallel_tiles: 0.0,
        step_time: StepTime::KernelSum,
        // A mixture of experts' weights stream with the dense ones here: `calibrate --from-moe-probes`
        // fits their own terms.
        moe_layer_s: 0.0,
        expert_memory_efficiency: None,
        expert_gemm_efficiency: None,
        fit: None,
        ..base.clone()
    }
}

/// The cost model of a profile for the engine the step logs come from: bf16 weights, one GPU.
fn engine_cost(model: &ModelSpec, hardware: &HardwareSpec, profile: &Profile) -> CostModel {
    engine_cost_with(model, hardware, profile, LogEngine::default())
}

/// What the engine a step log or probe comes from does that the cost model times apart from the
/// profile's terms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogEngine {
    /// Its decode attention runs FlashAttention 3's split-KV schedule (vLLM on Hopper: [`crate::splitkv`]).
    pub split_kv_decode: bool,
    /// With `split_kv_decode`: the decodes of every pure decode step read the same first this many
    /// tokens (a workload's common system prompt), whose re-reads the GPU's L2 serves
    /// ([`crate::HardwareSpec::l2_reuse`]). `None`: no sharing is known.
    pub shared_prefix: Option<u32>,
    /// The steps it replays as CUDA graphs; the others take at least the profile's eager floor
    /// (`eager_s_per_layer` × layers). `None`: no step pays a floor.
    pub graphs: Option<GraphRule>,
}

/// [`engine_cost`] for the engine the steps come from.
pub(crate) fn engine_cost_with(
    model: &ModelSpec,
    hardware: &HardwareSpec,
    profile: &Profile,
    engine: LogEngine,
) -> CostModel {
    CostModel::new(CostInputs {
        model,
        hardware,
        profile,
        dtype: WeightDtype::Bf16,
        group_size: 128,
        tp: 1,
        draft_params: 0.0,
        graphs: engine.graphs,
        expert_parallel: false,
        routing_skew: 0.0,
        split_kv_decode: engine.split_kv_decode,
    })
}

/// Why a profile cannot be fitted.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CannotFit {
    /// Too few steps to fit and hold out.
    #[error("{0} steps: at least 12 are needed to fit and hold out")]
    TooFewSteps(usize),
    /// A fixed efficiency outside the fit's bounds.
    #[error("the fixed {name} must be in [0.01, 1], got {value}")]
    FixedOutOfRange {
        /// Which efficiency.
        name: &'static str,
        /// The value given.
        value: f64,
    },
    /// No efficiencies inside their bounds explain the steps.
    #[error("no feasible fit: the steps are faster than the hardware's peaks allow")]
    Infeasible,
    /// The fitted profile breaks a rule of profiles.
    #[error("the fitted profile is invalid: {0}")]
    Invalid(#[from] FieldError),
}

/// Fits a `kernel_sum` profile to measured steps: every fifth step is held out, the rest fitted by least
/// squares on relative error with every efficiency in [0.01, 1] and overheads non-negative; the knee where
/// GEMMs turn from weight-streaming to compute bound is searched on a grid and refined by golden section.
pub fn fit_profile(samples: &[StepSample], setup: &FitSetup<'_>) -> Result<Fit, CannotFit> {
    let unit = unit_profile(setup.base);
    let unit_cost = engine_cost(setup.model, setup.hardware, &unit);
    let window = unit_cost.window;
    let read_s_per_token = {
        let (mut a, mut b) = (BatchShape::default(), BatchShape::default());
        a.add_decode(1, None);
        b.add_decode(0, None);
        unit_cost.parts(&a).kv_s - unit_cost.parts(&b).kv_s
    };
    let gaps = setup.graphs.map(|graphs| {
        let engine = LogEngine {
            graphs: Some(graphs),
            ..LogEngine::default()
        };
        engine_cost_with(setup.model, setup.hardware, setup.base, engine)
    });
    let rows: Vec<Row> = samples
        .iter()
        .map(|s| {
            let b = s.shape(window);
            let gap = gaps.as_ref().map_or(0.0, |c| c.host_gap_s(&b));
            let mut parts = unit_cost.parts(&b);
            parts.fixed_s = 0.0;
            Row {
                parts,
                shared_kv_s: b.decode_shared as f64 * read_s_per_token,
                shape: b,
                front_end_tokens: setup.front_end.then(|| front_end_tokens(s)),
                y: s.seconds - gap,
            }
        })
        .collect();
    // Every fifth step is held out.
    let train: Vec<Row> = rows
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 5 != 4)
        .map(|(_, r)| r)
        .collect();
    if train.len() < 10 {
        return Err(CannotFit::TooFewSteps(samples.len()));
    }
    let mut one = BatchShape::default();
    one.add_decode(0, None);
    let per_token = unit_cost.parts(&one).gemm_s;
    let weights = unit_cost.parts(&one).weights_s;
    let waves_at = |slots: f64| -> Vec<f64> {
        let tiled = Profile {
            attention_tile_tokens: setup.attention_tile,
            attention_parallel_tiles: slots,
            ..unit.clone()
        };
        let c = engine_cost(setup.model, setup.hardware, &tiled);
        train.iter().map(|r| c.prefill_waves(&r.shape)).collect()
    };
    for (name, fixed) in [
        ("memory efficiency", setup.memory_efficiency),
        (
            "single-row memory efficiency",
            setup.single_row_memory_efficiency,
        ),
    ] {
        if let Some(e) = fixed.filter(|e| !(0.01..=1.0).contains(e)) {
            return Err(CannotFit::FixedOutOfRange { name, value: e });
        }
    }
    // Without one-token steps the single-row column is empty: pin it (and write no such efficiency).
    let single_rows = train.iter().any(|r| r.shape.tokens() == 1);
    let single_row_fixed = if single_rows {
        setup.single_row_memory_efficiency
    } else {
        Some(1.0)
    };
    // Likewise without shared decode reads (logs that do not record them, or no shared prefixes).
    let shared_reads = train.iter().any(|r| r.shape.decode_shared > 0);
    let (shape, x) = search(
        &train,
        per_token,
        weights,
        (setup.memory_efficiency, single_row_fixed, shared_reads),
        setup.front_end,
        waves_at,
    )
    .ok_or(CannotFit::Infeasible)?;
    let mut profile = Profile {
        name: setup.name.clone(),
        hardware: setup.hardware.name.clone(),
        fitted: true,
        gemm_efficiency: 1.0 / x[2],
        gemm_half_tokens: 0.0,
        attention_efficiency: 1.0 / x[3],
        memory_efficiency: (weights / (shape.knee * per_token * x[2])).min(1.0),
        kv_efficiency: Some(1.0 / x[4]),
        single_row_memory_efficiency: single_rows.then(|| 1.0 / x[7]),
        shared_kv_efficiency: shared_reads.then(|| 1.0 / x[8]),
        attention_sweep_s_per_token: if setup.front_end { 0.0 } else { x[5] },
        attention_span_s_per_token: if setup.front_end { 0.0 } else { x[6] },
        request_latency_s: if setup.front_end {
            x[5]
        } else {
            setup.base.request_latency_s
        },
        frontend_s_per_token: if setup.front_end {
            x[6]
        } else {
            setup.base.frontend_s_per_token
        },
        attention_tile_tokens: setup.attention_tile,
        attention_parallel_tiles: shape.slots,
        step_overhead_s: x[0],
        per_sequence_overhead_s: x[1],
        step_time: StepTime::KernelSum,
        fit: None,
        ..setup.base.clone()
    };
    let fitted = engine_cost(setup.model, setup.hardware, &profile);
    let error = |idx: &mut dyn Iterator<Item = usize>| -> FitAccuracy {
        let ape: Vec<f64> = idx
            .map(|i| {
                let s = &samples[i];
                let front = if setup.front_end {
                    front_end_seconds(&profile, s)
                } else {
                    0.0
                };
                (fitted.step_seconds(&s.shape(window)) + front - s.seconds).abs() / s.seconds
            })
            .collect();
        summarize(ape)
    };
    let train_err = error(&mut (0..samples.len()).filter(|i| i % 5 != 4));
    let held_err = error(&mut (0..samples.len()).filter(|i| i % 5 == 4));
    let mut record = setup.record.clone();
    record.steps_fitted = train_err.steps;
    record.memory_efficiency_fixed = setup.memory_efficiency;
    record.single_row_memory_efficiency_fixed = setup.single_row_memory_efficiency;
    record.steps_held_out = held_err.steps;
    record.held_out_median_ape = Some(held_err.median_ape);
    record.held_out_p90_ape = Some(held_err.p90_ape);
    profile.source = format!(
        "fitted by `serverbench calibrate` ({}) from {}",
        record.method,
        record.inputs.join(", ")
    );
    profile.fit = Some(record);
    profile.check()?;
    Ok(Fit {
        profile,
        train: train_err,
        held_out: held_err,
    })
}

/// How well a profile predicts one class of measured steps.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassError {
    /// The class: decode-only steps, or steps whose prefill chunks add up to a range of new tokens.
    pub class: &'static str,
    /// Steps in the class.
    pub steps: usize,
    /// Median of (predicted − measured) / measured: the bias (negative: the profile is fast).
    pub median_error: f64,
    /// Median and 90th-percentile absolute percentage error.
    pub abs: FitAccuracy,
}

/// Each measured step's time as `profile` predicts it (for `model` on `hardware`, bf16, tp 1), seconds.
pub fn predict_steps(
    samples: &[StepSample],
    model: &ModelSpec,
    hardware: &HardwareSpec,
    profile: &Profile,
) -> Vec<f64> {
    predict_steps_with(samples, model, hardware, profile, false)
}

/// [`predict_steps`] for an engine whose decode attention runs FlashAttention 3's split-KV schedule
/// (`split_kv_decode`, vLLM on Hopper: [`crate::splitkv`]), when the GPU gives its SMs: each decode step
/// pays the excess its sequences' contexts (keys: context + 1) give.
pub fn predict_steps_with(
    samples: &[StepSample],
    model: &ModelSpec,
    hardware: &HardwareSpec,
    profile: &Profile,
    split_kv_decode: bool,
) -> Vec<f64> {
    let engine = LogEngine {
        split_kv_decode,
        shared_prefix: None,
        graphs: None,
    };
    predict_steps_on(samples, model, hardware, profile, engine)
}

/// [`predict_steps`] for the engine the steps come from: its split-KV decode schedule, and the eager
/// floor of the steps it runs without a CUDA graph.
pub fn predict_steps_on(
    samples: &[StepSample],
    model: &ModelSpec,
    hardware: &HardwareSpec,
    profile: &Profile,
    engine: LogEngine,
) -> Vec<f64> {
    let cost = engine_cost_with(model, hardware, profile, engine);
    samples
        .iter()
        .map(|s| {
            let mut b = s.shape(cost.window);
            if let (Some(k), true) = (cost.split_kv(), s.prefill.is_empty()) {
                let keys: Vec<u32> = s.decode.iter().map(|&c| c.saturating_add(1)).collect();
                let shared = match engine.shared_prefix {
                    Some(p) if s.decode.iter().all(|&c| c >= p) => {
                        SharedReads::common_prefix(s.decode.len() as u32, p as u64)
                    }
                    _ => SharedReads::default(),
                };
                let split = k.cost_of(&keys, &shared);
                b.decode_split_excess = split.excess;
                b.decode_l2_saved = split.l2_saved;
            }
            cost.step_seconds(&b)
        })
        .collect()
}

/// The step classes of [`check_profile`], by new prefill tokens in the step (upper bounds, inclusive).
const CLASSES: [(&str, u32); 5] = [
    ("decode only", 0),
    ("prefill 1-512", 512),
    ("prefill 513-2048", 2048),
    ("prefill 2049-8192", 8192),
    ("prefill > 8192", u32::MAX),
];

/// Decode-only steps split by batch size (engines switch kernels with the batch: a GEMV at one row, GEMMs
/// above), each class's largest batch.
const DECODE_BATCHES: [(&str, usize); 4] = [
    ("decode batch 1", 1),
    ("decode batch 2-8", 8),
    ("decode batch 9-32", 32),
    ("decode batch > 32", usize::MAX),
];

/// The error of `predicted` (seconds, one per step, as [`predict_steps`] gives them) on the measured
/// steps, per class of step (decode only, then by decode batch size, then prefill by new tokens) and over
/// all steps (last): a held-out check of a profile against new logs.
pub fn check_profile(samples: &[StepSample], predicted: &[f64]) -> Vec<ClassError> {
    assert_eq!(samples.len(), predicted.len(), "one prediction per step");
    let mut by_class: Vec<Vec<f64>> = vec![Vec::new(); CLASSES.len()];
    let mut by_batch: Vec<Vec<f64>> = vec![Vec::new(); DECODE_BATCHES.len()];
    for (s, &predicted) in samples.iter().zip(predicted) {
        let new_tokens: u32 = s.prefill.iter().map(|&(len, _)| len).sum();
        let class = CLASSES
            .iter()
            .position(|&(_, upper)| new_tokens <= upper)
            .expect("the last class has no upper bound");
        let error = (predicted - s.seconds) / s.seconds;
        by_class[class].push(error);
        if class == 0 {
            let batch = DECODE_BATCHES
                .iter()
                .position(|&(_, upper)| s.decode.len() <= upper)
                .expect("the last batch class has no upper bound");
            by_batch[batch].push(error);
        }
    }
    let all: Vec<f64> = by_class.iter().flatten().copied().collect();
    let mut groups: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut classes = CLASSES.iter().map(|&(c, _)| c).zip(by_class);
    groups.extend(classes.next());
    groups.extend(DECODE_BATCHES.iter().map(|&(c, _)| c).zip(by_batch));
    groups.extend(classes);
    groups.push(("all steps", all));
    groups
        .into_iter()
        .filter(|(_, errors)| !errors.is_empty())
        .map(|(class, mut errors)| {
            errors.sort_by(f64::total_cmp);
            ClassError {
                class,
                steps: errors.len(),
                median_error: errors[(errors.len() - 1) / 2],
                abs: summarize(errors.iter().map(|e| e.abs()).collect()),
            }
        })
        .collect()
}

/// The count, median and p90 of absolute percentage errors (0 for none).
pub(crate) fn summarize(mut ape: Vec<f64>) -> FitAccuracy {
    ape.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if ape.is_empty() {
            0.0
        } else {
            ape[((ape.len() - 1) as f64 * q).round() as usize]
        }
    };
    FitAccuracy {
        steps: ape.len(),
        median_ape: at(0.5),
        p90_ape: at(0.9),
    }
}

/// A coarse grid over the two shape parameters (knee: log-spaced from its physical minimum to 16K tokens;
/// parallel tiles: 65 points log-spaced from 16 to 4096), then alternating golden-section refinement of each
/// around the best point. Returns the shape and the bounded least-squares solution there.
fn search(
    rows: &[Row],
    per_token: f64,
    weights: f64,
    (memory_efficiency, single_row_efficiency, shared_reads): (Option<f64>, Option<f64>, bool),
    front_end: bool,
    waves_at: impl Fn(f64) -> Vec<f64>,
) -> Option<(Shape, [f64; N])> {
    // knee = (weights / memory_eff) / (per_token / gemm_eff) ≥ (weights / per_token) · gemm_eff.
    let min_knee = weights / per_token;
    // Steps with prefill and decode-only steps weigh the same in total: a serving log is mostly decode
    // steps, but time to first token is made of prefill steps.
    let with_prefill = rows
        .iter()
        .filter(|r| r.shape.prefill_seqs > 0)
        .count()
        .max(1) as f64;
    let decode_only = (rows.len() as f64 - with_prefill).max(1.0);
    let class_weight = |r: &Row| {
        let n = if r.shape.prefill_seqs > 0 {
            with_prefill
        } else {
            decode_only
        };
        (rows.len() as f64 / (2.0 * n)).sqrt()
    };
    let solve = |shape: Shape, waves: &[f64]| -> Option<(f64, [f64; N])> {
        let mut bounds = BOUNDS;
        if let Some(m) = memory_efficiency {
            // knee · 1/gemm_eff = min_knee / memory_eff fixes 1/gemm_eff at this knee
            let g = min_knee / (m * shape.knee);
            if !(BOUNDS[2].0..=BOUNDS[2].1).contains(&g) {
                return None;
            }
            bounds[2] = (g, g);
        }
        if let Some(e) = single_row_efficiency {
            bounds[7] = (1.0 / e, 1.0 / e);
        }
        if !shared_reads {
            bounds[8] = (1.0, 1.0);
        }
        if front_end {
            // a latency of up to a second, up to 100 µs per prompt token
            bounds[5] = (0.0, 1.0);
            bounds[6] = (0.0, 1e-4);
        }
        let (x, cost) = weighted_bounded_lsq(
            rows.iter()
                .zip(waves)
                .map(|(r, &w)| (r.x(shape.knee, w, per_token), r.y, class_weight(r))),
            &bounds,
        )?;
        // memory efficiency = min_knee / (knee · 1/gemm_eff) must not exceed 1
        (min_knee <= shape.knee * x[2] * (1.0 + 1e-12)).then_some((cost, x))
    };
    let knees = log_grid(min_knee / BOUNDS[2].1, 16_384.0_f64.max(min_knee * 2.0), 80);
    // Without the span terms the attention slots change nothing: one value is searched.
    let slot_grid = if !front_end {
        log_grid(16.0, 4096.0, 64)
    } else {
        vec![64.0, 64.0]
    };
    let mut best = (
        f64::INFINITY,
        Shape {
            knee: knees[0],
            slots: slot_grid[0],
        },
    );
    for &slots in &slot_grid {
        let waves = waves_at(slots);
        for &knee in &knees {
            let c = solve(Shape { knee, slots }, &waves).map_or(f64::INFINITY, |(c, _)| c);
            if c < best.0 {
                best = (c, Shape { knee, slots });
            }
        }
    }
    if !best.0.is_finite() {
        return None;
    }
    // Alternate golden sections, each over two grid cells either side of the current point, until
    // neither parameter moves (the two interact).
    let (kr, sr) = (knees[1] / knees[0], slot_grid[1] / slot_grid[0]);
    let mut shape = best.1;
    for _ in 0..8 {
        let before = shape;
        let waves = waves_at(shape.slots);
        shape.knee = golden(
            (shape.knee / kr.powi(2), shape.knee * kr.powi(2)),
            shape.knee,
            |k| solve(Shape { knee: k, ..shape }, &waves).map_or(f64::INFINITY, |(c, _)| c),
        );
        let (lo, hi) = (slot_grid[0], slot_grid[slot_grid.len() - 1]);
        let range = (
            (shape.slots / sr.powi(2)).max(lo),
            (shape.slots * sr.powi(2)).min(hi),
        );
        shape.slots = golden(range, shape.slots, |t| {
            solve(Shape { slots: t, ..shape }, &waves_at(t)).map_or(f64::INFINITY, |(c, _)| c)
        });
        if shape == before {
            break;
        }
    }
    let waves = waves_at(shape.slots);
    solve(shape, &waves).map(|(_, x)| (shape, x))
}

fn log_grid(lo: f64, hi: f64, steps: usize) -> Vec<f64> {
    (0..=steps)
        .map(|i| lo * (hi / lo).powf(i as f64 / steps as f64))
        .collect()
}

/// Golden-section search of `f` on `[lo, hi]`; returns the best of the result and `start`.
fn golden((mut lo, mut hi): (f64, f64), start: f64, f: impl Fn(f64) -> f64) -> f64 {
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (hi - g * (hi - lo), lo + g * (hi - lo));
    let (mut fa, mut fb) = (f(a), f(b));
    for _ in 0..60 {
        if fa < fb {
            hi = b;
            (b, fb) = (a, fa);
            a = hi - g * (hi - lo);
            fa = f(a);
        } else {
            lo = a;
            (a, fa) = (b, fb);
            b = lo + g * (hi - lo);
            fb = f(b);
        }
    }
    let found = if fa < fb { a } else { b };
    if f(found) <= f(start) {
        found
    } else {
        start
    }
}

/// Minimises `Σ c² ((x·r − y) / y)²` (`c` a class weight) with every variable inside [`BOUNDS`], exactly.
/// Each assignment of the variables to free, lower or upper bound is a small linear system; they are tried
/// with the fewest bound variables first, and the first whose solution is feasible and satisfies the KKT
/// conditions (the objective rises leaving each bound inwards) is the optimum of this convex problem. If
/// rounding keeps every candidate from passing that test, the best feasible one of all 3⁹ is kept.
fn weighted_bounded_lsq(
    rows: impl Iterator<Item = ([f64; N], f64, f64)>,
    bounds: &[(f64, f64); N],
) -> Option<([f64; N], f64)> {
    let mut gram = [[0.0; N]; N];
    let mut rhs = [0.0; N];
    let mut yy = 0.0;
    for (x, y, class) in rows {
        let w = class / y;
        let x = x.map(|v| v * w);
        let y = y * w;
        for i in 0..N {
            rhs[i] += x[i] * y;
            for j in 0..N {
                gram[i][j] += x[i] * x[j];
            }
        }
        yy += y * y;
    }
    let objective = |x: &[f64; N]| {
        let mut v = yy;
        for i in 0..N {
            v -= 2.0 * rhs[i] * x[i];
            for j in 0..N {
                v += x[i] * gram[i][j] * x[j];
            }
        }
        v
    };
    let mut best: Option<([f64; N], f64)> = None;
    for state in active_sets() {
        let mut x = [0.0; N];
        for i in 0..N {
            x[i] = match state[i] {
                1 => bounds[i].0,
                2 => bounds[i].1,
                _ => 0.0,
            };
        }
        let free: Vec<usize> = (0..N).filter(|&i| state[i] == 0).collect();
        if !free.is_empty() {
            let a: Vec<Vec<f64>> = free
                .iter()
                .map(|&i| free.iter().map(|&j| gram[i][j]).collect())
                .collect();
            let b: Vec<f64> = free
                .iter()
                .map(|&i| {
                    rhs[i]
                        - (0..N)
                            .filter(|j| state[*j] != 0)
                            .map(|j| gram[i][j] * x[j])
                            .sum::<f64>()
                })
                .collect();
            let Some(sol) = solve_linear(a, b) else {
                continue;
            };
            for (k, &i) in free.iter().enumerate() {
                x[i] = sol[k];
            }
        }
        let inside = (0..N).all(|i| x[i] >= bounds[i].0 - 1e-12 && x[i] <= bounds[i].1 + 1e-12);
        if !inside {
            continue;
        }
        // Rounding may leave a free variable a hair outside its bound.
        for i in 0..N {
            x[i] = x[i].clamp(bounds[i].0, bounds[i].1);
        }
        let v = objective(&x);
        if kkt_holds(&gram, &rhs, &x, state) {
            return Some((x, v));
        }
        if best.as_ref().map_or(true, |(_, bv)| v < *bv) {
            best = Some((x, v));
        }
    }
    best
}

/// Every assignment of the variables to free (0), lower bound (1) or upper bound (2), fewest bound first.
fn active_sets() -> impl Iterator<Item = &'static [u8; N]> {
    static SETS: std::sync::OnceLock<Vec<[u8; N]>> = std::sync::OnceLock::new();
    SETS.get_or_init(|| {
        let mut sets: Vec<[u8; N]> = (0..3usize.pow(N as u32))
            .map(|code| {
                let mut state = [0u8; N];
                let mut c = code;
                for s in state.iter_mut() {
                    *s = (c % 3) as u8;
                    c /= 3;
                }
                state
            })
            .collect();
        sets.sort_by_key(|s| s.iter().filter(|&&v| v != 0).count());
        sets
    })
    .iter()
}

/// Whether `x` is optimal: the half-gradient `gram·x − rhs` is (relatively) zero on free variables, not
/// negative at a lower bound and not positive at an upper one.
fn kkt_holds(gram: &[[f64; N]; N], rhs: &[f64; N], x: &[f64; N], state: &[u8; N]) -> bool {
    (0..N).all(|i| {
        let terms = (0..N).map(|j| gram[i][j] * x[j]);
        let scale = rhs[i].abs() + terms.clone().map(f64::abs).sum::<f64>();
        let g = terms.sum::<f64>() - rhs[i];
        let tol = 1e-9 * scale.max(f64::MIN_POSITIVE);
        match state[i] {
            0 => g.abs() <= tol.max(1e-6 * scale),
            1 => g >= -tol,
            _ => g <= tol,
        }
    })
}

/// Solves a symmetric positive semi-definite system (a Gram matrix) by Gaussian elimination with partial
/// pivoting after scaling it to a unit diagonal; `None` when it is (numerically) singular.
fn solve_linear(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    let d: Vec<f64> = (0..n).map(|i| a[i][i].sqrt()).collect();
    if d.iter().any(|&v| !(v > 0.0 && v.is_finite())) {
        return None;
    }
    for i in 0..n {
        for j in 0..n {
            a[i][j] /= d[i] * d[j];
        }
        b[i] /= d[i];
    }
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() <= 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (i, row) in rest.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
            b[col + 1 + i] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x.iter().zip(&d).map(|(v, s)| v / s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup<'a>(m: &'a ModelSpec, h: &'a HardwareSpec, base: &'a Profile) -> FitSetup<'a> {
        FitSetup {
            model: m,
            hardware: h,
            base,
            name: "fitted".into(),
            attention_tile: 64,
            memory_efficiency: None,
            single_row_memory_efficiency: None,
            front_end: false,
            graphs: None,
            record: FitRecord {
                method: "step-log least squares".into(),
                inputs: vec!["synthetic".into()],
                model: m.name.clone(),
                measured_on: "nowhere".into(),
                fitted_at: "2026-11-30T00:00:00Z".into(),
                target: Some("wall".into()),
                ..Default::default()
            },
        }
    }

    /// Steps of every kind an engine runs: decode batches, prefill chunks over cached prefixes, mixtures.
    fn synthetic_shapes(count: usize) -> Vec<StepSample> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as u32
        };
        (0..count)
            .map(|i| {
                let mut s = StepSample {
                    prefill: vec![],
                    decode: vec![],
                    decode_kv_distinct: None,
                    seconds: 0.0,
                };
                if i % 3 != 0 {
                    for _ in 0..1 + next(64) {
                        s.decode.push(50 + next(40_000));
                    }
                    if i % 4 == 1 {
                        // sequences sharing prefixes: up to 60 % of the decode reads repeat a block
                        let sum: u64 = s.decode.iter().map(|&c| c as u64).sum();
                        s.decode_kv_distinct = Some(sum - sum * (i as u64 * 37 % 60) / 100);
                    }
                }
                if i % 3 != 1 {
                    s.prefill.push((1 + next(8192), next(32_768)));
                }
                s
            })
            .collect()
    }

    #[test]
    fn fitting_recovers_known_coefficients_from_synthetic_steps() {
        let (m, h) = (
            ModelSpec::preset("qwen3-8b").unwrap(),
            HardwareSpec::preset("h200").unwrap(),
        );
        let base = Profile::preset("h200-datasheet").unwrap();
        let truth = Profile {
            gemm_efficiency: 0.62,
            gemm_half_tokens: 0.0,
            memory_efficiency: 0.78,
            single_row_memory_efficiency: Some(0.85),
            attention_efficiency: 0.21,
            kv_efficiency: Some(0.45),
            shared_kv_efficiency: Some(3.0),
            attention_sweep_s_per_token: 2.8e-6,
            attention_span_s_per_token: 1.1e-6,
            attention_tile_tokens: 64,
            attention_parallel_tiles: 396.0,
            step_overhead_s: 2.5e-3,
            per_sequence_overhead_s: 40e-6,
            step_time: StepTime::KernelSum,
            ..base.clone()
        };
        let s = setup(&m, &h, &base);
        let cost = engine_cost(s.model, s.hardware, &truth);
        let mut samples = synthetic_shapes(600);
        for x in &mut samples {
            x.seconds = cost.step_seconds(&x.shape(None));
        }
        let fit = fit_profile(&samples, &s).unwrap();
        let c = &fit.profile;
        let close = |name: &str, got: f64, want: f64| {
            assert!(
                (got / want - 1.0).abs() < 0.01,
                "{name}: fitted {got}, true {want}"
            );
        };
        close("gemm_efficiency", c.gemm_efficiency, 0.62);
        close("memory_efficiency", c.memory_efficiency, 0.78);
        close(
            "single_row_memory_efficiency",
            c.single_row_memory_efficiency.unwrap(),
            0.85,
        );
        close("attention_efficiency", c.attention_efficiency, 0.21);
        close("kv_efficiency", c.kv_efficiency.unwrap(), 0.45);
        close("shared_kv_efficiency", c.shared_kv_efficiency.unwrap(), 3.0);
        close("step_overhead_s", c.step_overhead_s, 2.5e-3);
        close("per_sequence_overhead_s", c.per_sequence_overhead_s, 40e-6);
        close(
            "attention_sweep_s_per_token",
            c.attention_sweep_s_per_token,
            2.8e-6,
        );
        close(
            "attention_span_s_per_token",
            c.attention_span_s_per_token,
            1.1e-6,
        );
        assert!(fit.held_out.p90_ape < 1e-3, "{:?}", fit.held_out);
        assert_eq!(fit.held_out.steps, 120);
        let record = fit.profile.fit.as_ref().unwrap();
        assert_eq!((record.steps_fitted, record.steps_held_out), (480, 120));
    }

    #[test]
    fn noisy_steps_still_fit_within_their_noise() {
        let (m, h) = (
            ModelSpec::preset("qwen3-8b").unwrap(),
            HardwareSpec::preset("h200").unwrap(),
        );
        let base = Profile::preset("h200-datasheet").unwrap();
        let truth = Profile {
            step_time: StepTime::KernelSum,
            ..base.clone()
        };
        let s = setup(&m, &h, &base);
        let cost = engine_cost(s.model, s.hardware, &truth);
        let mut samples = synthetic_shapes(500);
        for (i, x) in samples.iter_mut().enumerate() {
            let noise = 1.0 + 0.02 * ((i * 7919 % 101) as f64 / 50.0 - 1.0);
            x.seconds = cost.step_seconds(&x.shape(None)) * noise;
        }
        let fit = fit_profile(&samples, &s).unwrap();
        assert!(fit.held_out.p90_ape < 0.025, "{:?}", fit.held_out);
        assert!((fit.profile.gemm_efficiency / 0.80 - 1.0).abs() < 0.05);
    }

    #[test]
    fn the_fitted_profile_round_trips_through_yaml() {
        let (m, h) = (
            ModelSpec::preset("qwen3-8b").unwrap(),
            HardwareSpec::preset("h200").unwrap(),
        );
        let base = Profile::preset("h200-datasheet").unwrap();
        let s = setup(&m, &h, &base);
        let truth = Profile {
            step_time: StepTime::KernelSum,
            ..base.clone()
        };
        let cost = engine_cost(s.model, s.hardware, &truth);
        let mut samples = synthetic_shapes(100);
        for x in &mut samples {
            x.seconds = cost.step_seconds(&x.shape(None));
        }
        let p = fit_profile(&samples, &s).unwrap().profile;
        let text = serde_yaml::to_string(&p).unwrap();
        assert!(text.contains("step_time: kernel_sum"), "{text}");
        assert_eq!(Profile::from_yaml("fitted.yaml", &text).unwrap(), p);
    }

    #[test]
    fn bounded_least_squares_stops_at_the_constrained_optimum() {
        // Random problems whose unconstrained optimum leaves the box in some coordinates: the answer
        // must be feasible and no step along any coordinate (kept inside the box) may improve it.
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut uniform = move || {
            state = splitmix(state);
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        let bounds: [(f64, f64); N] = [(0.0, 1.0); N];
        for _ in 0..50 {
            let truth: Vec<f64> = (0..N).map(|_| 2.0 * uniform() - 0.5).collect();
            let rows: Vec<([f64; N], f64, f64)> = (0..40)
                .map(|_| {
                    let r: [f64; N] = std::array::from_fn(|_| 0.1 + uniform());
                    let y = r.iter().zip(&truth).map(|(a, b)| a * b).sum::<f64>().abs() + 0.5;
                    (r, y, 1.0)
                })
                .collect();
            let objective = |x: &[f64; N]| -> f64 {
                rows.iter()
                    .map(|(r, y, _)| {
                        let p: f64 = r.iter().zip(x).map(|(a, b)| a * b).sum();
                        ((p - y) / y).powi(2)
                    })
                    .sum()
            };
            let (x, _) = weighted_bounded_lsq(rows.iter().copied(), &bounds).unwrap();
            assert!(x.iter().all(|v| (0.0..=1.0).contains(v)), "{x:?}");
            let best = objective(&x);
            for i in 0..N {
                for step in [-1e-3, 1e-3] {
                    let mut y = x;
                    y[i] = (y[i] + step).clamp(0.0, 1.0);
                    assert!(
                        objective(&y) >= best - 1e-12,
                        "coordinate {i} improves {x:?}"
                    );
                }
            }
        }
    }

    /// SplitMix64's finaliser, for the test's own random numbers.
    fn splitmix(z: u64) -> u64 {
        let z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn malformed_step_logs_name_the_line_and_field() {
        let good = r#"{"step":0,"start_s":0.0,"gpu_ms":6.7,"wall_ms":6.8,"prefill":[[10,0]],"decode":[4096]}"#;
        let parsed =
            parse_step_log("s.jsonl", &format!("{good}\n\n{good}\n"), FitTarget::Wall).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0].seconds, 6.8e-3);
        assert_eq!(parsed[0].prefill, vec![(10, 0)]);
        // Newer logs also carry the distinct KV the decodes read (older logs do not).
        let newer = r#"{"step":0,"start_s":0.0,"gpu_ms":6.7,"wall_ms":6.8,"prefill":[],"decode":[40,50],"decode_kv_distinct":64}"#;
        let parsed = parse_step_log("s.jsonl", newer, FitTarget::Wall).unwrap();
        assert_eq!(parsed[0].decode, vec![40, 50]);
        assert_eq!(parsed[0].decode_kv_distinct, Some(64));
        // 90 context tokens, 64 distinct: 26 are re-reads of a shared block.
        assert_eq!(parsed[0].shape(None).decode_shared, 26);
        assert_eq!(
            parse_step_log("s.jsonl", good, FitTarget::Wall).unwrap()[0].decode_kv_distinct,
            None
        );
        let cases = [
            (
                r#"{"gpu_ms":6.7,"wall_ms":"x","prefill":[],"decode":[1]}"#,
                "wall_ms",
            ),
            (
                r#"{"gpu_ms":6.7,"wall_ms":1,"prefill":[[1]],"decode":[1]}"#,
                "prefill[0]",
            ),
            (
                r#"{"gpu_ms":6.7,"wall_ms":-1,"prefill":[],"decode":[1]}"#,
                "wall_ms",
            ),
            (
                r#"{"gpu_ms":6.7,"wall_ms":1,"prefill":[],"decode":[]}"#,
                "prefill",
            ),
            (
                r#"{"gpu_ms":6.7,"wall_ms":1,"prefill":[[0,5]],"decode":[]}"#,
                "prefill[0]",
            ),
            (r#"{"gpu_ms":6.7,"wall_ms":1,"decode":[3]}"#, ""),
            (r#"{"gpu_ms":6.7,"wall_ms":1,"prefill":[],"decode":[3]"#, ""),
        ];
        for (line, field) in cases {
            let e = parse_step_log("s.jsonl", &format!("{good}\n{line}\n"), FitTarget::Wall)
                .unwrap_err();
            assert_eq!((e.file.as_str(), e.line), ("s.jsonl", 2), "{line}: {e}");
            assert_eq!(e.field, field, "{line}: {e}");
            if field.is_empty() {
                assert!(!e.reason.is_empty());
            }
        }
        let e = parse_step_log(
            "s.jsonl",
            r#"{"gpu_ms":6.7,"wall_ms":1,"decode":[3]}"#,
            FitTarget::Wall,
        )
        .unwrap_err();
        assert!(e.reason.contains("prefill"), "{e}");
    }
}
