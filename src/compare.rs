//! `serverbench compare`: the same runs in the simulator and against a real backend, side by side
//! (`serverbench_backends::compare`), rendered as a Markdown table, JSON, an SVG plot and a report.
//! Each real run it measures is a `serverbench replay` child process (a fresh engine and cache).

use crate::cli::CompareArgs;
use crate::inputs;
use crate::output::{write_file, write_json};
use anyhow::{bail, Context, Result};
use serverbench_backends::compare::Comparison;
use serverbench_study::compare::{Row, SeedRanking, METRICS};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the command.
pub fn run(a: CompareArgs) -> Result<()> {
    let study = inputs::study(&a.deployment, &a.workload, &a.replay)?;
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
    let table = markdown(&d.name, &a, &rows, &rankings);
    out!("{table}")?;
    write_file(&a.out, "compare.md", |w| w.write_all(table.as_bytes()))?;
    let meta = crate::meta::Meta::now(Some(d)).with_server(
        a.url.as_deref(),
        &a.model.clone().unwrap_or_else(|| d.model.name.clone()),
    );
    write_json(
        &a.out,
        "compare.json",
        &meta,
        &serde_json::json!({ "deployment": d.name, "profile": d.profile.name, "window_s": a.replay.window,
            "protocol": a.replay.protocol(), "rows": rows, "seed_rankings": rankings }),
    )?;
    let svg = serverbench_study::plot::compare_svg(
        &format!("{}: simulated against measured, one point per run", d.name),
        &METRICS
            .iter()
            .enumerate()
            .map(|(i, (name, _))| {
                (
                    *name,
                    rows.iter()
                        .map(|r| (r.metrics[i].real, r.metrics[i].sim))
                        .collect(),
                )
            })
            .collect::<Vec<_>>(),
    )?;
    write_file(&a.out, "compare.svg", |w| w.write_all(svg.as_bytes()))?;
    outln!(
        "\n  wrote {}/compare.md, compare.json and compare.svg",
        a.out.display()
    )?;
    if let Some(path) = &a.report {
        let mut r = crate::report::Report::new(&format!("serverbench compare — {}", d.name), meta);
        r.markdown(&table).svg(
            "simulated (y) against measured (x), one point per run; the line is y = x",
            &svg,
        );
        r.write(path)?;
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
    cmd.args(["-d", &a.deployment.deployment]);
    if let Some(e) = &a.deployment.engine_config {
        cmd.arg("--engine-config").arg(e);
    }
    add_path(&mut cmd, "--workload", &a.workload.workload);
    add_path(&mut cmd, "--trace", &a.workload.trace);
    if let Some(f) = a.workload.trace_format {
        cmd.args(["--trace-format", f.name()]);
    }
    if let Some(n) = a.workload.max_context_length {
        cmd.args(["--max-context-length", &n.to_string()]);
    }
    if a.workload.trace.is_some() {
        cmd.args(["--trace-repeat", a.workload.trace_repeat.name()]);
    }
    cmd.args(["-w", &a.replay.window.to_string()])
        .args(["--idle-gap-cap", &a.replay.idle_gap_cap.to_string()])
        .args(["--protocol", a.replay.protocol()])
        .args(["--arrivals", &a.replay.arrivals]);
    crate::inputs::forward_agentx_flags(&mut cmd, &a.replay);
    if let Some(n) = a.replay.max_open {
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

/// The prompt salt of one measured run: its level and seed, and (from 2026-12-02) its start mode,
/// deployment and workload, so that a cold run finds nothing that a steady run of the same level and
/// seed left in the server's cache. A run of the steady start on the deployment's own workload keeps
/// the salt the stored sets were measured with, `1 + c × 10⁶ + seed`.
fn run_salt(a: &CompareArgs, c: u32, seed: u64) -> u64 {
    let base = 1 + c as u64 * 1_000_000 + seed;
    let workload = [&a.workload.workload, &a.workload.trace].map(|p| {
        p.as_ref()
            .map_or(String::new(), |p| p.display().to_string())
    });
    let what = format!(
        "{}|{}|{}|{}",
        a.replay.protocol(),
        a.deployment.deployment,
        workload[0],
        workload[1]
    );
    if a.replay.protocol() == "steady" && workload.iter().all(|w| w.is_empty()) {
        return base;
    }
    let h = what.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    base ^ (h << 32)
}

fn add_path(cmd: &mut Command, flag: &str, p: &Option<PathBuf>) {
    if let Some(p) = p {
        cmd.arg(flag).arg(p);
    }
}

fn fmt_err(e: Option<f64>) -> String {
    e.map_or("n/a".into(), |e| format!("{:+.1} %", 100.0 * e))
}

fn markdown(name: &str, a: &CompareArgs, rows: &[Row], rankings: &[SeedRanking]) -> String {
    let mut s = format!(
        "serverbench compare — {name}, window {} s, {}; each cell: simulated / measured (error)\n\n",
        a.replay.window,
        match a.replay.arrivals.as_str() {
            "closed" => format!("protocol {}", a.replay.protocol()),
            open => format!("arrivals {open}"),
        }
    );
    s.push_str("| c | seed | completed |");
    for (m, _) in METRICS {
        s.push_str(&format!(" {m} |"));
    }
    s.push_str("\n|---|---|---|");
    s.push_str(&"---|".repeat(METRICS.len()));
    s.push('\n');
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} / {} |",
            r.concurrency, r.seed, r.completed.0, r.completed.1
        ));
        for p in &r.metrics {
            s.push_str(&format!(
                " {} / {} ({}) |",
                short(p.sim),
                short(p.real),
                fmt_err(p.rel_error)
            ));
        }
        s.push('\n');
    }
    for k in rankings {
        s.push_str(&format!(
            "\nSeed ranking at c = {}: Spearman correlation of per-seed D over {} seeds = {:.3}\n",
            k.concurrency, k.seeds, k.spearman_d
        ));
    }
    s
}

fn short(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_errors_print_with_a_sign_or_as_n_a() {
        assert_eq!(fmt_err(None), "n/a");
        assert_eq!(fmt_err(Some(-0.0432)), "-4.3 %");
    }
}
