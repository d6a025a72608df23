//! `serverbench workload stats | export | scan`.

use crate::cli::{
    WorkloadCommand, WorkloadExportArgs, WorkloadFitArgs, WorkloadScanArgs, WorkloadStatsArgs,
};
use crate::inputs;
use crate::output::{write_file, write_json, write_path};
use anyhow::{Context, Result};
use serverbench_study::report::scan::{self as render_scan, Scanned};
use serverbench_workloads::fit_corpus::{fit_corpus, FitRequest};
use serverbench_workloads::{
    workload_stats, write_corpus, write_native, Quantiles, Session, SessionTree,
};
use std::sync::Arc;

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
    let paths: Vec<&std::path::Path> = a.corpus.iter().map(|p| p.as_path()).collect();
    let imported = inputs::import(&paths, a.trace_format, a.keep_going)?;
    let generated = inputs::trees(a.trees)?;
    let targets = match &a.targets {
        Some(t) => Some(serverbench_workloads::read_targets(t)?),
        None => None,
    };
    let check = if a.check.is_empty() {
        Vec::new()
    } else {
        let paths: Vec<&std::path::Path> = a.check.iter().map(|p| p.as_path()).collect();
        inputs::import(&paths, None, true)?.trees
    };
    let files: Vec<String> = a.corpus.iter().map(|p| p.display().to_string()).collect();
    let f = fit_corpus(FitRequest {
        imported,
        files: &files,
        check: &check,
        targets: targets.as_ref(),
        generated,
        context_limit: a.context_limit,
        name: a.name.clone(),
    })?;
    if let Some(path) = &a.held_out {
        write_out(Some(path), |w| write_corpus(&f.held_out, w))?;
    }
    print_fit(&f.report)?;
    for (name, why) in &f.left_out {
        outln!("  left out of the fit: {name}: {why}")?;
    }
    if let Some(r) = &f.aimed {
        print_aim(r)?;
    }
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

fn print_aim(r: &serverbench_workloads::aim::AimReport) -> Result<()> {
    outln!(
        "\naimed at {} — {} rounds of moves, {} sessions generated (seed 0)\n",
        r.targets,
        r.rounds,
        r.sessions
    )?;
    outln!(
        "  {:<30} {:<14} {:>12} {:>12} {:>12} {:>9}  moved",
        "quantity",
        "statistic",
        "published",
        "fitted",
        "aimed",
        "error"
    )?;
    for row in &r.rows {
        let t = &row.target;
        let stat = match (t.stat, t.above) {
            (serverbench_workloads::aim::Stat::ShareAbove, Some(a)) => format!("share > {a}"),
            (s, _) => format!("{s:?}").to_lowercase(),
        };
        let err = match t.stat {
            serverbench_workloads::aim::Stat::Value
            | serverbench_workloads::aim::Stat::ShareAbove => {
                format!("{:+.3}", row.error)
            }
            _ => format!("{:+.1} %", 100.0 * row.error),
        };
        outln!(
            "  {:<30} {:<14} {:>12.4} {:>12.4} {:>12.4} {:>9}  {}",
            format!("{:?} ({})", t.quantity, t.quantity.unit()),
            stat,
            t.value,
            row.fitted,
            row.aimed,
            err,
            if row.moved { "yes" } else { "" }
        )?;
    }
    Ok(())
}

fn print_fit(r: &serverbench_workloads::fit::FitReport) -> Result<()> {
    outln!(
        "workload fit — fitted on {} sessions, {} held out (every {}th), against {} generated\n",
        r.fitted_sessions,
        r.held_out_sessions,
        serverbench_workloads::fit::HOLD_OUT_EVERY,
        r.generated_sessions
    )?;
    outln!(
        "  {:<28} {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}  {:>5}",
        "quantity",
        "",
        "mean",
        "p10",
        "p50",
        "p90",
        "p99",
        "KS"
    )?;
    for row in &r.rows {
        let mut lines = vec![
            ("fitted on", &row.fitted_on, None),
            ("held out", &row.held_out, None),
            ("generator", &row.generator, Some(row.ks)),
        ];
        if let Some(c) = &row.check {
            lines.push(("check", c, row.check_ks));
        }
        for (label, q, ks) in lines {
            let name = if label == "fitted on" {
                format!("{} ({})", row.quantity, row.unit)
            } else {
                String::new()
            };
            let ks = ks.map_or(String::new(), |k| format!("{k:.3}"));
            outln!(
                "  {:<28} {:<10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}  {:>5}",
                name,
                label,
                q.mean,
                q.p10,
                q.p50,
                q.p90,
                q.p99,
                ks
            )?;
        }
    }
    outln!(
        "\n  tokens per session, generator against held out: p50 {:+.1} %, p90 {:+.1} %",
        100.0 * r.session_tokens_error_p50,
        100.0 * r.session_tokens_error_p90
    )?;
    if let Some([p50, p90]) = r.check_tokens_error {
        outln!(
            "  tokens per session, generator against the {} check sessions: p50 {:+.1} %, p90 {:+.1} %",
            r.checked_sessions,
            100.0 * p50,
            100.0 * p90
        )?;
    }
    outln!(
        "  sub-agents per session {:.3}; nested below another sub-agent: {} (the generator spawns from the root only)",
        r.subagents_per_session,
        r.nested_subagents
    )?;
    Ok(())
}

/// The trees a stats/export command covers, one at a time: a whole trace, or `n` generated trees.
fn trees(
    w: &crate::cli::WorkloadArgs,
    seed: u64,
    n: u64,
    context_limit: u32,
) -> Result<Box<dyn Iterator<Item = Arc<SessionTree>>>> {
    if let Some(t) = inputs::trace(w)? {
        return Ok(Box::new(t.trees().to_vec().into_iter()));
    }
    let n = inputs::trees(n)?;
    let source = inputs::source_at(w, seed, context_limit)?;
    Ok(Box::new((0..n).map(move |k| source.tree(k))))
}

fn q_row(name: &str, q: &Quantiles, unit: &str) -> String {
    format!("  {name:<22}mean {:>10.1}  p50 {:>10.1}  p90 {:>10.1}  p99 {:>10.1}  max {:>10.1} {unit}\n", q.mean, q.p50, q.p90, q.p99, q.max)
}

fn stats(a: WorkloadStatsArgs) -> Result<()> {
    let trees = trees(&a.workload, a.seed, a.trees, a.context_limit)?;
    let s = workload_stats(trees);
    let what = match &a.workload.trace {
        Some(p) => format!("trace {}", p.display()),
        None => format!(
            "agentic-coding generator, seed {}, first {} trees",
            a.seed, a.trees
        ),
    };
    outln!("workload stats — {what}\n")?;
    outln!(
        "  trees {} · requests {} · sub-agents {} ({} in the background) · compactions {}",
        s.trees,
        s.requests,
        s.subagents,
        s.background_subagents,
        s.compactions
    )?;
    out!("{}", q_row("root turns per tree", &s.root_turns, ""))?;
    out!("{}", q_row("requests per tree", &s.requests_per_tree, ""))?;
    out!("{}", q_row("input tokens", &s.input_tokens, "tok"))?;
    out!("{}", q_row("output tokens", &s.output_tokens, "tok"))?;
    out!("{}", q_row("think time (uncapped)", &s.think_time_s, "s"))?;
    out!("{}", q_row("uncached prompt", &s.uncached_tokens, "tok"))?;
    outln!(
        "  prefix reuse with an infinite cache: {:.1} % of prompt tokens",
        s.prefix_reuse_ratio * 100.0
    )?;
    Ok(())
}

fn export(a: WorkloadExportArgs) -> Result<()> {
    if a.format == "corpus" {
        let (sessions, origins) = corpus_sessions(&a)?;
        if let Some(path) = &a.origins {
            write_out(Some(path), |w| {
                for (s, files) in sessions.iter().zip(&origins) {
                    serde_json::to_writer(
                        &mut *w,
                        &serde_json::json!({"id": s.id, "files": files}),
                    )?;
                    w.write_all(b"\n")?;
                }
                Ok(())
            })?;
        }
        return write_out(a.out.as_deref(), |w| write_corpus(&sessions, w));
    }
    let trees = trees(&a.workload, a.seed, a.trees, a.context_limit)?;
    let write = |w: &mut dyn std::io::Write| match a.format.as_str() {
        "native" => write_native(trees, w),
        "aiperf" => serverbench_workloads::write_aiperf(trees, w),
        "weka" => serverbench_workloads::write_weka(trees, w),
        _ => unreachable!("clap accepts native, aiperf, weka or corpus"),
    };
    write_out(a.out.as_deref(), write)
}

/// Writes to the file, or to standard output.
fn write_out(
    out: Option<&std::path::Path>,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<()> {
    match out {
        // Whole or not at all: a failed or interrupted write leaves no half file.
        Some(path) => write_path(path, write),
        None => write(&mut std::io::stdout().lock()).context("cannot write to standard output"),
    }
}

/// The sessions `export --format corpus` writes, with the files each was read from: a trace's (as
/// `Imported::into_corpus` gives them), or the generated trees'.
fn corpus_sessions(a: &WorkloadExportArgs) -> Result<(Vec<Session>, Vec<Vec<String>>)> {
    if let Some(path) = &a.workload.trace {
        let i = inputs::import(&[path.as_path()], a.workload.trace_format, a.keep_going)?;
        return Ok(i.into_corpus());
    }
    let trees = trees(&a.workload, a.seed, a.trees, a.context_limit)?;
    let sessions: Vec<Session> = trees.map(|t| Session::from_tree(&t, "generator")).collect();
    let n = sessions.len();
    Ok((sessions, vec![Vec::new(); n]))
}

fn scan(a: WorkloadScanArgs) -> Result<()> {
    let d = inputs::deployment(&a.deployment)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let workload = inputs::fitted_workload(&a.deployment, &a.workload, &d)?;
    inputs::checked(serverbench_sim::RunConfig {
        idle_gap_cap_s: a.idle_gap_cap,
        ..serverbench_sim::RunConfig::new(a.concurrency, 0, a.window)
    })?;
    let started = std::time::Instant::now();
    let scan = serverbench_study::scan_seeds(
        &workload,
        &d,
        &seeds,
        a.concurrency,
        a.window,
        a.idle_gap_cap,
    )?;
    let scanned = Scanned {
        deployment: &d.name,
        concurrency: a.concurrency,
        window_s: a.window,
        elapsed_s: started.elapsed().as_secs_f64(),
    };
    out!("{}", render_scan::text(&scan, &scanned))?;
    if let Some(dir) = &a.out {
        write_file(dir, "scan.csv", |w| {
            w.write_all(render_scan::csv(&scan).as_bytes())
        })?;
        write_json(dir, "scan.json", &crate::meta::now(Some(&d)), &scan.offers)?;
    }
    Ok(())
}
