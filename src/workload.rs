//! `serverbench workload stats | export | scan | fit`: each one library call, its text rendered by
//! `serverbench_workloads::report` and `serverbench_study::report::scan`.

use crate::cli::{
    WorkloadCommand, WorkloadExportArgs, WorkloadFitArgs, WorkloadScanArgs, WorkloadStatsArgs,
};
use crate::inputs;
use crate::output::{write_json, write_path, write_text};
use crate::signals::INTERRUPTED;
use anyhow::{Context, Result};
use serverbench_config::write_lines;
use serverbench_study::inputs::CorpusFitChoice;
use serverbench_study::report::scan::{self as render_scan, Scanned};
use serverbench_study::scan_seeds;
use serverbench_workloads::corpus::write_origins;
use serverbench_workloads::report::{stats_source, stats_text};
use serverbench_workloads::{workload_stats, write_corpus, write_trees};

pub fn run(c: WorkloadCommand) -> Result<()> {
    match c {
        WorkloadCommand::Stats(a) => stats(a),
        WorkloadCommand::Export(a) => export(a),
        WorkloadCommand::Scan(a) => scan(a),
        WorkloadCommand::Fit(a) => fit(a),
    }
}

fn fit(a: WorkloadFitArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let f = inputs::fit_corpus(&CorpusFitChoice {
        corpus: &a.corpus,
        trace_format: a.trace_format,
        keep_going: a.keep_going,
        check: &a.check,
        targets: a.targets.as_deref(),
        trees: a.trees,
        context_limit: a.context_limit,
        name: a.name.clone(),
        options: serverbench_workloads::fit::FitOptions {
            session_speed: a.session_speed,
            app_prefixes: a.app_prefixes,
            compact_typical: a.compact_typical,
            turn_in_carry: a.turn_in_carry,
            early_growth: a.early_growth,
            fold: a.fold.map(usize::from),
        },
        note: inputs::note,
    })?;
    if let Some(path) = &a.held_out {
        write_path(path, |w| write_corpus(&f.held_out, w))?;
    }
    out!("{}", serverbench_workloads::report::fitted_text(&f))?;
    outln!("\n  fitted in {:.1} s", started.elapsed().as_secs_f64())?;
    if let Some(path) = &a.out {
        let text = f.spec_yaml().context("the fitted spec as YAML")?;
        write_path(path, |w| w.write_all(text.as_bytes()))?;
    }
    if let Some(path) = &a.report {
        let text = serde_json::to_string_pretty(&f.report)?;
        write_path(path, |w| w.write_all(text.as_bytes()))?;
    }
    Ok(())
}

fn stats(a: WorkloadStatsArgs) -> Result<()> {
    let w = inputs::workload_choice(&a.workload);
    let trees = inputs::trees_of(&w, a.seed, a.trees, a.context_limit)?;
    let s = workload_stats(trees);
    let spec = a.workload.workload.as_deref();
    let what = stats_source(a.workload.trace.as_deref(), spec, a.seed, a.trees);
    out!("{}", stats_text(&what, &s))?;
    Ok(())
}

fn export(a: WorkloadExportArgs) -> Result<()> {
    let stop =
        crate::signals::interrupt("stopping the export; the records written so far stay whole")?;
    let w = inputs::workload_choice(&a.workload);
    let out = a.out.as_deref();
    if a.format == "corpus" {
        let (seed, n, limit) = (a.seed, a.trees, a.context_limit);
        let (sessions, origins) = inputs::corpus_sessions(&w, seed, n, limit, a.keep_going)?;
        if let Some(path) = &a.origins {
            write_path(path, |w| write_origins(&sessions, &origins, w))?;
        }
        return write_out(out, &stop, |w| write_corpus(&sessions, w));
    }
    let trees = inputs::trees_of(&w, a.seed, a.trees, a.context_limit)?;
    write_out(out, &stop, |w| write_trees(&a.format, trees, w))
}

/// Writes JSON lines to the file, or to standard output, until a signal: standard output keeps the
/// lines written before it whole, a file is not written at all (exit 130 either way).
fn write_out(
    out: Option<&std::path::Path>,
    stop: &serverbench_backends::Interrupt,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<()> {
    let written = write_lines(out, || stop.count() > 0, write);
    let Some(why) = stop.why() else {
        return Ok(written?);
    };
    let what = out.map_or(
        "standard output kept the lines written before it".into(),
        |p| format!("{} not written", p.display()),
    );
    Err(crate::exit(
        INTERRUPTED,
        format!("{why}: export stopped; {what}"),
    ))
}

fn scan(a: WorkloadScanArgs) -> Result<()> {
    let d = inputs::deployment(&a.deployment)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let workload = inputs::fitted_workload(
        &a.deployment,
        &inputs::workload_choice(&a.workload),
        &d,
        false,
    )?;
    inputs::check_scan(a.concurrency, a.window, a.idle_gap_cap)?;
    let started = std::time::Instant::now();
    let (c, window, cap) = (a.concurrency, a.window, a.idle_gap_cap);
    let scan = scan_seeds(&workload, &d, &seeds, c, window, cap)?;
    let scanned = Scanned {
        deployment: &d.name,
        concurrency: a.concurrency,
        window_s: a.window,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    out!("{}", render_scan::text(&scan, &scanned))?;
    if let Some(dir) = &a.out {
        write_text(dir, "scan.csv", &render_scan::csv(&scan))?;
        write_json(dir, "scan.json", &crate::meta::now(Some(&d)), &scan.offers)?;
    }
    Ok(())
}
