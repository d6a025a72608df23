//! `serverbench compare`: the same runs in the simulator and against a real backend, side by side
//! (`serverbench_backends::compare`), rendered (`serverbench_study::report::compare`) as a Markdown table,
//! JSON, an SVG plot and a report.
//! Each real run it measures is a `serverbench replay` child process (a fresh engine and cache).

use crate::cli::CompareArgs;
use crate::inputs;
use crate::output::{write_file, write_json, write_report};
use anyhow::{bail, Context, Result};
use serverbench_backends::compare::{Comparison, RunScenario};
use serverbench_study::report::compare::{self as render, Setting};
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let Comparison { rows, rankings } = serverbench_backends::compare::compare(
        &study,
        &a.concurrency,
        &a.seeds,
        &a.out,
        a.reuse,
        &mut |dir, c, seed| replay_child(&a, dir, c, seed),
    )?;
    let setting = Setting {
        deployment: &d.name,
        window_s: a.run.replay.window,
        arrivals: &a.run.replay.arrivals,
        protocol: a.run.replay.protocol(),
    };
    let table = render::markdown(&setting, &rows, &rankings);
    out!("{table}")?;
    write_file(&a.out, "compare.md", |w| w.write_all(table.as_bytes()))?;
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
    write_file(&a.out, "compare.svg", |w| w.write_all(svg.as_bytes()))?;
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

/// `serverbench replay` for one run, in a child process so every run gets a fresh server state.
fn replay_child(a: &CompareArgs, dir: &Path, c: u32, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    let mut cmd = Command::new(std::env::current_exe().context("cannot find this executable")?);
    cmd.arg("replay");
    match (&a.url, a.engine.engine.as_str()) {
        (Some(url), "emulated") => {
            // The server outlives each run: salted prompts keep one run out of another's cache.
            let salt = run_salt(a, c, seed);
            cmd.args(["--url", url, "--api", &a.api, "--server", &a.server]);
            cmd.args(["--timeout", &a.timeout.to_string()]);
            cmd.args(["--prompt-salt", &salt.to_string()]);
            if let Some(m) = &a.model {
                cmd.args(["--model", m]);
            }
            add_path(&mut cmd, "--tokenizer", &a.tokenizer);
        }
        (None, "cuda") => {
            cmd.args(["--engine", "cuda", "--weights", &a.engine.weights]);
            cmd.args(["--gpu", &a.engine.gpu.to_string()]);
            cmd.arg("--step-log").arg(dir.join("steps.jsonl"));
            if let Some(m) = &a.engine.model_dir {
                cmd.arg("--model-dir").arg(m);
            }
        }
        (None, _) => bail!(
            "{}: no measured run to reuse; give --url or --engine cuda",
            dir.display()
        ),
        (Some(_), _) => bail!("--url and --engine cuda exclude each other"),
    }
    cmd.args(["-d", &a.run.deployment.deployment]);
    if let Some(e) = &a.run.deployment.engine_config {
        cmd.arg("--engine-config").arg(e);
    }
    add_path(&mut cmd, "--workload", &a.run.workload.workload);
    add_path(&mut cmd, "--trace", &a.run.workload.trace);
    if let Some(f) = a.run.workload.trace_format {
        cmd.args(["--trace-format", f.name()]);
    }
    if let Some(n) = a.run.workload.max_context_length {
        cmd.args(["--max-context-length", &n.to_string()]);
    }
    if a.run.workload.trace.is_some() {
        cmd.args(["--trace-repeat", a.run.workload.trace_repeat.name()]);
    }
    cmd.args(["-w", &a.run.replay.window.to_string()])
        .args(["--idle-gap-cap", &a.run.replay.idle_gap_cap.to_string()])
        .args(["--protocol", a.run.replay.protocol()])
        .args(["--arrivals", &a.run.replay.arrivals]);
    crate::inputs::forward_agentx_flags(&mut cmd, &a.run.replay);
    if let Some(n) = a.run.replay.max_open {
        cmd.args(["--max-open", &n.to_string()]);
    }
    cmd.args(["-c", &c.to_string(), "-s", &seed.to_string(), "--no-probe"])
        .arg("--out")
        .arg(dir);
    eprintln!("measuring c = {c}, seed {seed} → {}", dir.display());
    let status = cmd.status().context("cannot start the replay")?;
    if !status.success() {
        if dir.join("summary.json").exists() {
            eprintln!("warning: the replay at c = {c}, seed {seed} exited with {status} after writing its summary; using it");
        } else {
            bail!("the replay at c = {c}, seed {seed} failed ({status})");
        }
    }
    Ok(())
}

/// The prompt salt of one measured run (`serverbench_backends::compare::run_salt`).
fn run_salt(a: &CompareArgs, c: u32, seed: u64) -> u64 {
    let scenario = RunScenario {
        protocol: a.run.replay.protocol(),
        deployment: &a.run.deployment.deployment,
        workload: a.run.workload.workload.as_deref(),
        trace: a.run.workload.trace.as_deref(),
    };
    serverbench_backends::compare::run_salt(&scenario, c, seed)
}

fn add_path(cmd: &mut Command, flag: &str, p: &Option<PathBuf>) {
    if let Some(p) = p {
        cmd.arg(flag).arg(p);
    }
}
