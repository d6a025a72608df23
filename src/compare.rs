//! `serverbench compare`: the same runs in the simulator and against a real backend, side by side
//! (`serverbench_backends::compare`), rendered (`serverbench_study::report::compare`) as a Markdown table,
//! JSON, an SVG plot and a report.
//! Each real run it measures is a `serverbench replay` child process (`serverbench_backends::child`).

use crate::cli::CompareArgs;
use crate::inputs;
use crate::output::{write_json, write_report, write_text};
use anyhow::{bail, Result};
use serverbench_backends::child::{self, MeasuredRuns, RunFlags};
use serverbench_backends::compare::Comparison;
use serverbench_study::report::compare::{self as render, Setting};

/// Runs the command.
pub fn run(a: CompareArgs) -> Result<()> {
    let study = inputs::study(&a.run)?;
    let d = &study.deployment;
    if a.engine.step_log.is_some() {
        bail!(
            "--step-log: compare writes each run's step log to OUT/real/cC_sS/steps.jsonl itself"
        );
    }
    if a.concurrency.is_empty() || a.seeds.is_empty() {
        bail!("--concurrency and --seeds: give at least one value each");
    }
    let (runs, exe) = (measured_runs(&a), crate::this_exe()?);
    let Comparison { rows, rankings } = serverbench_backends::compare::compare(
        &study,
        &a.concurrency,
        &a.seeds,
        &a.out,
        a.reuse,
        &mut |dir, c, seed| child::measure(&runs, &exe, (dir, c, seed), &|n| eprintln!("{n}")),
    )?;
    let setting = Setting {
        deployment: &d.name,
        window_s: a.run.replay.window,
        arrivals: &a.run.replay.arrivals,
        protocol: a.run.replay.protocol(),
    };
    let table = render::markdown(&setting, &rows, &rankings);
    out!("{table}")?;
    write_text(&a.out, "compare.md", &table)?;
    let meta = crate::meta::now(Some(d)).with_server(
        a.url.as_deref(),
        &a.model.clone().unwrap_or_else(|| d.model.name.clone()),
    );
    write_json(
        &a.out,
        "compare.json",
        &meta,
        &serde_json::json!({ "deployment": d.name, "profile": d.profile.name, "window_s": a.run.replay.window,
            "protocol": a.run.replay.protocol(), "rows": rows, "seed_rankings": rankings }),
    )?;
    let svg = render::plot(&d.name, &rows)?;
    write_text(&a.out, "compare.svg", &svg)?;
    outln!(
        "\n  wrote {}/compare.md, compare.json and compare.svg",
        a.out.display()
    )?;
    if let Some(path) = &a.report {
        write_report(&render::page(&d.name, meta, &table, &svg), path)?;
        outln!("  wrote the report {}", path.display())?;
    }
    Ok(())
}

/// The flags every measured run is given, from `compare`'s.
fn measured_runs(a: &CompareArgs) -> MeasuredRuns<'_> {
    let (w, r) = (&a.run.workload, &a.run.replay);
    let run = RunFlags {
        deployment: &a.run.deployment.deployment,
        engine_config: a.run.deployment.engine_config.as_deref(),
        workload: w.workload.as_deref(),
        trace: w.trace.as_deref(),
        trace_format: w.trace_format.map(|f| f.name()),
        max_context_length: w.max_context_length,
        trace_repeat: w.trace_repeat.name(),
        window: r.window,
        idle_gap_cap: r.idle_gap_cap,
        protocol: r.protocol(),
        arrivals: &r.arrivals,
        start_ratios: r.start_ratios.as_deref(),
        tree_idle_cap: r.tree_idle_cap,
        warmup_per_lane: r.warmup_per_lane,
        grace: r.grace,
        max_open: r.max_open,
    };
    MeasuredRuns {
        url: a.url.as_deref(),
        api: &a.api,
        server: &a.server,
        timeout: a.timeout,
        model: a.model.as_deref(),
        tokenizer: a.tokenizer.as_deref(),
        engine: &a.engine.engine,
        weights: &a.engine.weights,
        gpu: a.engine.gpu,
        model_dir: a.engine.model_dir.as_deref(),
        run,
    }
}
