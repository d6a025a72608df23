//! `serverbench what-if`: each serving knob changed alone from the deployment, at a few concurrencies.

use crate::cli::WhatIfArgs;
use crate::inputs::{self, Workload};
use crate::sweep::{run_all, Spread};
use anyhow::Result;
use serverbench_sim::Deployment;

/// A knob: its label, the YAML that changes it, and the mechanism it acts through.
pub const KNOBS: &[(&str, &str)] = &[
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

/// One row: a knob at one concurrency.
pub struct Row {
    pub knob: &'static str,
    pub d: Spread,
    pub g: Spread,
    pub f: Spread,
    pub error: Option<String>,
}

pub fn rows(a: &WhatIfArgs) -> Result<Vec<Row>> {
    let (base, _) = inputs::resolved(&a.deployment)?;
    let workload = Workload::from_args(&a.workload)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let mut jobs = Vec::new();
    for (k, _) in KNOBS.iter().enumerate() {
        for &c in &a.concurrency {
            for &s in &seeds {
                let mut cfg = inputs::run_config(&a.replay, c, s)?;
                cfg.audit = false;
                jobs.push((k, cfg));
            }
        }
    }
    let variant = |k: usize| -> Result<Deployment, String> {
        let (_, yaml) = KNOBS[k];
        if yaml.is_empty() {
            return Ok(base.clone());
        }
        base.clone()
            .with_overrides(KNOBS[k].0, yaml)
            .map_err(|e| e.to_string())
    };
    let results = run_all(&jobs, None, true, |(knob, cfg)| {
        let d = match variant(*knob) {
            Ok(d) => d,
            Err(e) => return Ok(Err(e)),
        };
        let cost = d.cost_model();
        match inputs::replay(&d, &cost, &workload, cfg) {
            Ok(out) => Ok(Ok(out.summary.score)),
            Err(e) => Ok(Err(format!("{e:#}"))),
        }
    })?;
    let mut rows = Vec::new();
    for (k, (knob, _)) in KNOBS.iter().enumerate() {
        for &c in &a.concurrency {
            let mine: Vec<&Result<serverbench_sim::Score, String>> = jobs
                .iter()
                .zip(&results)
                .filter(|(j, _)| j.0 == k && j.1.concurrency == c)
                .map(|(_, r)| r)
                .collect();
            let error = mine.iter().find_map(|r| r.as_ref().err().cloned());
            let ok: Vec<serverbench_sim::Score> = mine
                .iter()
                .filter_map(|r| r.as_ref().ok().copied())
                .collect();
            let col = |f: fn(&serverbench_sim::Score) -> f64| {
                if ok.is_empty() {
                    Spread::default()
                } else {
                    Spread::of(&ok.iter().map(f).collect::<Vec<_>>())
                }
            };
            rows.push(Row {
                knob,
                d: col(|s| s.d),
                g: col(|s| s.g),
                f: col(|s| s.f),
                error,
            });
        }
    }
    Ok(rows)
}

pub fn run(a: WhatIfArgs) -> Result<()> {
    let (d, _) = inputs::resolved(&a.deployment)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let rows = rows(&a)?;
    println!("serverbench what-if — {} ({} × {} GPU), each knob alone, mean over {} seeds, window {} s\n", d.name, d.gpus(), d.hardware.name, seeds.len(), a.replay.window);
    let mut header = String::from("| knob |");
    let mut rule = String::from("|---|");
    for c in &a.concurrency {
        header.push_str(&format!(" D (c={c}) | G (c={c}) | f (c={c}) |"));
        rule.push_str("---:|---:|---:|");
    }
    println!("{header}\n{rule}");
    for knob in KNOBS.iter().map(|k| k.0) {
        let mut line = format!("| {knob} |");
        for r in rows.iter().filter(|r| r.knob == knob) {
            match &r.error {
                Some(e) => line.push_str(&format!(
                    " cannot run: {} | | |",
                    e.split(" (").next().unwrap_or(e).replace('|', "/")
                )),
                None => line.push_str(&format!(
                    " {:.3} | {:.3} | {:.1} % |",
                    r.d.mean,
                    r.g.mean,
                    r.f.mean * 100.0
                )),
            }
        }
        println!("{line}");
    }
    Ok(())
}
