//! `serverbench simulate`.

use crate::cli::SimulateArgs;
use crate::inputs;
use crate::output::{prepare_out, summary_rows, write_file, write_json};
use crate::report::Report;
use anyhow::{bail, Result};
use serverbench_sim::{Deployment, RunConfig, RunOutput};
use serverbench_study::plot::{timeline_svg, Timeline};

pub fn run(a: SimulateArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    let cost = d.cost_model();
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    if a.timeline && a.out.is_none() && a.report.is_none() {
        bail!("--timeline: give --out DIR (timeline.csv, timeline.svg) or --report FILE (the plot), or both");
    }
    let mut cfg = inputs::run_config(&a.replay, a.concurrency, a.seed)?;
    cfg.timeline = a.timeline;
    let source = inputs::source(
        &a.deployment.deployment,
        &a.workload,
        a.seed,
        &d,
        cfg.protocol,
    )?;
    if let Some(dir) = &a.out {
        // No timeline of an earlier run may stand beside this run's files.
        prepare_out(
            dir,
            &[
                "records.jsonl",
                "summary.json",
                "timeline.csv",
                "timeline.svg",
                "agentx_lanes.json",
            ],
        )?;
    }
    let started = std::time::Instant::now();
    let out = serverbench_sim::simulate(&d, &cost, source.as_ref(), &cfg)?;
    let elapsed = started.elapsed();
    outln!(
        "serverbench simulate — {}, {}, seed {}, window {} s\n",
        d.name,
        crate::output::load_label(&cfg),
        cfg.seed,
        cfg.window_s
    )?;
    if let Some(note) = crate::output::unfitted_profile_note(&d) {
        outln!("{note}")?;
    }
    let rows = summary_rows(
        &out.summary,
        d.gpus(),
        d.gpu_hour_dollars,
        a.replay.protocol(),
        crate::output::SeenBy::Engine,
    );
    for (k, v) in &rows {
        outln!("  {k:<13}{v}")?;
    }
    outln!(
        "\n  simulated {:.0} s in {:.1} ms of wall time",
        cfg.window_s,
        elapsed.as_secs_f64() * 1e3
    )?;
    if let Some(dir) = &a.out {
        write_file(dir, "records.jsonl", |w| {
            for r in &out.records {
                serde_json::to_writer(&mut *w, r)?;
                w.write_all(b"\n")?;
            }
            Ok(())
        })?;
        write_json(
            dir,
            "summary.json",
            &crate::meta::Meta::now(Some(&d)),
            &serde_json::json!({ "summary": out.summary }),
        )?;
        outln!(
            "  wrote {} and summary.json",
            dir.join("records.jsonl").display()
        )?;
        if let Some(a) = &out.agentx {
            write_json(
                dir,
                "agentx_lanes.json",
                &crate::meta::Meta::now(Some(&d)),
                &serde_json::json!({ "lanes": a.lanes }),
            )?;
            outln!(
                "  wrote {} (each lane's row, start point, live streams and primers)",
                dir.join("agentx_lanes.json").display()
            )?;
        }
        if let Some(steps) = &out.timeline {
            write_file(dir, "timeline.csv", |w| {
                writeln!(
                    w,
                    "start_s,step_ms,running,waiting,prefill_tokens,decode_seqs,kv_occupancy"
                )?;
                for s in steps {
                    writeln!(
                        w,
                        "{},{},{},{},{},{},{}",
                        s.start_ns as f64 / 1e9,
                        s.step_ns as f64 / 1e6,
                        s.running,
                        s.waiting,
                        s.prefill_tokens,
                        s.decode_seqs,
                        s.kv_occupancy
                    )?;
                }
                Ok(())
            })?;
            let svg = timeline(&d, &cfg, &out)?.unwrap_or_default();
            write_file(dir, "timeline.svg", |w| w.write_all(svg.as_bytes()))?;
            outln!(
                "  wrote {} and timeline.svg",
                dir.join("timeline.csv").display()
            )?;
        }
    }
    if let Some(path) = &a.report {
        let title = format!(
            "serverbench simulate — {}, {}, seed {}, window {} s",
            d.name,
            crate::output::load_label(&cfg),
            cfg.seed,
            cfg.window_s
        );
        let mut r = Report::new(&title, crate::meta::Meta::now(Some(&d)));
        r.section("Summary", "").labelled(&rows);
        if let Some(svg) = timeline(&d, &cfg, &out)? {
            r.section(
                "Timeline",
                "Sequences running and waiting, KV occupancy, and each request's TTFT and TPOT at its send time.",
            )
            .svg("load, KV and latency over the window", &svg);
        }
        r.write(path)?;
        outln!("  wrote the report {}", path.display())?;
    }
    Ok(())
}

/// The timeline plot of a run simulated with its timeline (`None` without one).
fn timeline(d: &Deployment, cfg: &RunConfig, out: &RunOutput) -> Result<Option<String>> {
    let Some(steps) = &out.timeline else {
        return Ok(None);
    };
    let t = Timeline {
        title: &format!(
            "{} at c = {}, seed {}: load, KV and latency over time",
            d.name, cfg.concurrency, cfg.seed
        ),
        steps: bucket_max(steps, cfg.window_s, 1500),
        ttft: out
            .records
            .iter()
            .filter_map(|r| r.ttft_s().map(|t| (r.send_ns as f64 / 1e9, t)))
            .collect(),
        ttft_target: d.slo.ttft_s,
        tpot: out
            .records
            .iter()
            .filter(|r| r.output_tokens > 1)
            .filter_map(|r| r.tpot_s().map(|t| (r.send_ns as f64 / 1e9, t)))
            .collect(),
        tpot_target: d.slo.tpot_s,
        window_s: cfg.window_s,
    };
    Ok(Some(timeline_svg(&t)?))
}

/// At most `buckets` points: the largest running, waiting and occupancy of the steps in each time bucket
/// (so the SVG stays small and no peak is lost).
fn bucket_max(
    steps: &[serverbench_sim::StepSample],
    window_s: f64,
    buckets: usize,
) -> Vec<(f64, f64, f64, f64)> {
    let width = window_s / buckets as f64;
    let mut out: Vec<(f64, f64, f64, f64)> = Vec::new();
    for s in steps {
        let t = s.start_ns as f64 / 1e9;
        let x = (t / width).floor() * width;
        match out.last_mut() {
            Some(p) if p.0 == x => {
                p.1 = p.1.max(s.running as f64);
                p.2 = p.2.max(s.waiting as f64);
                p.3 = p.3.max(s.kv_occupancy);
            }
            _ => out.push((x, s.running as f64, s.waiting as f64, s.kv_occupancy)),
        }
    }
    out
}
