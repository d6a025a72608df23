//! What-if: each serving knob changed alone from the deployment, at a few concurrencies and seeds,
//! against the deployment as it is.

use crate::{run_all, Spread, Study, StudyError};
use serverbench_sim::{Deployment, Score};

/// A knob: its label and the YAML (deployment fields) that changes it; empty YAML is the deployment as
/// it is.
pub type Knob = (&'static str, &'static str);

/// The knobs `what-if` tries, in table order.
pub const KNOBS: &[Knob] = &[
    ("default", ""),
    ("policy: sglang", "engine: {policy: sglang}"),
    (
        "speculative: MTP head, k = 3, α = 0.7",
        "engine: {speculative: {method: mtp, k: 3, acceptance: 0.7}}",
    ),
    (
        "speculative: draft model, k = 4, α = 0.8",
        "engine: {speculative: {method: draft, k: 4, acceptance: 0.8}}",
    ),
    (
        "speculative: n-gram, k = 4, α = 0.5",
        "engine: {speculative: {method: ngram, k: 4, acceptance: 0.5}}",
    ),
    ("weights: int4 (W4A16)", "weights: int4"),
    ("weights: fp8", "weights: fp8"),
    ("linear-attention state: fp32", "state_dtype: fp32"),
    (
        "tp 1 × dp 2, session affinity",
        "tp: 1\ndp: 2\nrouter: session_affinity",
    ),
    ("dp 2, round robin", "dp: 2\nrouter: round_robin"),
    ("dp 2, least loaded", "dp: 2\nrouter: least_loaded"),
    ("dp 2, session affinity", "dp: 2\nrouter: session_affinity"),
    ("dp 2, prefix aware", "dp: 2\nrouter: prefix_aware"),
    ("prefix caching off", "engine: {prefix_caching: false}"),
    (
        "max_num_batched_tokens: 2048",
        "engine: {max_num_batched_tokens: 2048}",
    ),
    ("max_num_seqs: 4", "engine: {max_num_seqs: 4}"),
    ("preemption: swap", "engine: {preemption: swap}"),
    (
        "gpu_memory_utilization: 0.75",
        "engine: {gpu_memory_utilization: 0.75}",
    ),
    ("block_size: 64", "engine: {block_size: 64}"),
];

/// One row: a knob at one concurrency, over the seeds.
#[derive(Clone, Debug)]
pub struct KnobRow {
    /// The knob's label.
    pub knob: &'static str,
    /// Lanes.
    pub concurrency: u32,
    /// D over seeds.
    pub d: Spread,
    /// G over seeds.
    pub g: Spread,
    /// f over seeds.
    pub f: Spread,
    /// Why the knob cannot run on this deployment, if it cannot (the spreads are then zero).
    pub error: Option<String>,
}

/// What `what-if` answers: every knob at every level, over the seeds.
#[derive(Clone, Debug)]
pub struct WhatIf {
    /// Deployment name.
    pub deployment: String,
    /// The levels, in the order given.
    pub concurrency: Vec<u32>,
    /// The seeds every row is over.
    pub seeds: Vec<u64>,
    /// The runs' window, seconds.
    pub window_s: f64,
    /// Knob by knob (in the order given), level by level.
    pub rows: Vec<KnobRow>,
}

impl WhatIf {
    /// Each knob's rows, one per level, knobs in the order given.
    pub fn knobs(&self) -> std::slice::Chunks<'_, KnobRow> {
        self.rows.chunks(self.concurrency.len())
    }
}

/// Every knob of `knobs` at every concurrency, each over `seeds`.
pub fn what_if(
    study: &Study,
    knobs: &[Knob],
    concurrency: &[u32],
    seeds: &[u64],
    progress: &(dyn Fn() + Sync),
) -> Result<WhatIf, StudyError> {
    if concurrency.is_empty() || seeds.is_empty() {
        return Err(StudyError::NothingToRun);
    }
    let variants: Vec<Result<Study, String>> = knobs
        .iter()
        .map(|(label, yaml)| variant(study, label, yaml))
        .collect();
    let mut jobs = Vec::new();
    for k in 0..knobs.len() {
        for &c in concurrency {
            for &s in seeds {
                jobs.push((k, study.config(c, s)));
            }
        }
    }
    let results = run_all(&jobs, study.threads, progress, |(k, cfg)| {
        Ok(match &variants[*k] {
            Ok(v) => v
                .run(cfg)
                .map(|out| out.summary.score)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.clone()),
        })
    })?;
    let mut rows = Vec::new();
    for (k, (knob, _)) in knobs.iter().enumerate() {
        for &c in concurrency {
            let mine: Vec<&Result<Score, String>> = jobs
                .iter()
                .zip(&results)
                .filter(|(j, _)| j.0 == k && j.1.concurrency == c)
                .map(|(_, r)| r)
                .collect();
            let error = mine.iter().find_map(|r| r.as_ref().err().cloned());
            let ok: Vec<Score> = mine
                .iter()
                .filter_map(|r| r.as_ref().ok().copied())
                .collect();
            let col = |f: fn(&Score) -> f64| Spread::of(&ok.iter().map(f).collect::<Vec<_>>());
            rows.push(KnobRow {
                knob,
                concurrency: c,
                d: col(|s| s.d),
                g: col(|s| s.g),
                f: col(|s| s.f),
                error,
            });
        }
    }
    Ok(WhatIf {
        deployment: study.deployment.name.clone(),
        concurrency: concurrency.to_vec(),
        seeds: seeds.to_vec(),
        window_s: study.replay.window_s,
        rows,
    })
}

/// The study with one knob changed; the error says why the knob cannot apply.
fn variant(study: &Study, label: &str, yaml: &str) -> Result<Study, String> {
    if yaml.is_empty() {
        return Ok(study.clone());
    }
    let d: Deployment = study
        .deployment
        .clone()
        .with_overrides(label, yaml)
        .map_err(|e| match e.field.is_empty() {
            true => e.reason,
            false => format!("{}: {}", e.field, e.reason),
        })?;
    Ok(study.with_deployment(d))
}
