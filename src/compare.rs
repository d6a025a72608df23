//! `serverbench compare`: the same runs in the simulator and against a real backend, side by side.
//! Real runs are `serverbench replay` child processes (a fresh engine and cache for each run); the
//! simulated ones run in this process.

use crate::cli::CompareArgs;
use crate::inputs;
use crate::output::{write_file, write_json};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serverbench_sim::Summary;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A compared metric: its name and how to read it from a summary.
type Metric = (&'static str, fn(&Summary) -> f64);

/// The metrics compared, in table order.
const METRICS: [Metric; 9] = [
    ("D", |s| s.score.d),
    ("G", |s| s.score.g),
    ("f", |s| s.score.f),
    ("TTFT p50 s", |s| s.ttft_s.p50),
    ("TTFT p90 s", |s| s.ttft_s.p90),
    ("TTFT p99 s", |s| s.ttft_s.p99),
    ("TPOT p50 ms", |s| s.tpot_s.p50 * 1e3),
    ("TPOT p90 ms", |s| s.tpot_s.p90 * 1e3),
    ("TPOT p99 ms", |s| s.tpot_s.p99 * 1e3),
];

/// One metric of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Pair {
    /// Metric name.
    pub metric: &'static str,
    /// Simulated value.
    pub sim: f64,
    /// Measured value.
    pub real: f64,
    /// `(sim − real) / real`; `None` when the measured value is 0 and the simulated one is not.
    pub rel_error: Option<f64>,
}

/// One (concurrency, seed) run in both worlds.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Lanes.
    pub concurrency: u32,
    /// Workload seed.
    pub seed: u64,
    /// Completed requests (simulated, measured).
    pub completed: (usize, usize),
    /// The metrics.
    pub metrics: Vec<Pair>,
}

/// Rank agreement of per-seed D at one concurrency.
#[derive(Clone, Debug, Serialize)]
pub struct SeedRanking {
    /// Lanes.
    pub concurrency: u32,
    /// Seeds compared.
    pub seeds: usize,
    /// Spearman rank correlation of per-seed D, simulator against measured.
    pub spearman_d: f64,
}

/// Runs the command.
pub fn run(a: CompareArgs) -> Result<()> {
    let (d, cost) = inputs::resolved(&a.deployment)?;
    if a.engine.step_log.is_some() {
        bail!(
            "--step-log: compare writes each run's step log to OUT/real/cC_sS/steps.jsonl itself"
        );
    }
    if a.concurrency.is_empty() || a.seeds.is_empty() {
        bail!("--concurrency and --seeds: give at least one value each");
    }
    let workload = inputs::Workload::from_args(&a.workload)?;
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("{}: cannot create directory", a.out.display()))?;
    let mut rows = Vec::new();
    for &c in &a.concurrency {
        for &seed in &a.seeds {
            let dir = a.out.join("real").join(format!("c{c}_s{seed}"));
            let real = measured(&a, &dir, c, seed)?;
            let cfg = inputs::run_config(&a.replay, c, seed)?;
            let source = workload.source(seed, d.context_limit)?;
            let sim = serverbench_sim::simulate(&d, &cost, source.as_ref(), &cfg)?.summary;
            rows.push(row(c, seed, &sim, &real));
        }
    }
    let rankings = rankings(&rows);
    let table = markdown(&d.name, &a, &rows, &rankings);
    print!("{table}");
    write_file(&a.out, "compare.md", |w| w.write_all(table.as_bytes()))?;
    write_json(
        &a.out,
        "compare.json",
        &serde_json::json!({ "deployment": d.name, "profile": d.profile, "window_s": a.replay.window,
            "start": a.replay.start, "rows": rows, "seed_rankings": rankings }),
    )?;
    let svg = crate::plot::compare_svg(
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
    println!(
        "\n  wrote {}/compare.md, compare.json and compare.svg",
        a.out.display()
    );
    Ok(())
}

/// The measured summary of one run: read from `dir` when reusing, else measured by a child replay.
fn measured(a: &CompareArgs, dir: &Path, c: u32, seed: u64) -> Result<Summary> {
    let file = dir.join("summary.json");
    if !(a.reuse && file.exists()) {
        replay_child(a, dir, c, seed)?;
    }
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("{}: cannot read the measured run", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))?;
    serde_json::from_value(v.get("summary").cloned().unwrap_or(v))
        .with_context(|| format!("{}: no replay summary in it", file.display()))
}

/// `serverbench replay` for one run, in a child process so every run gets a fresh server state.
fn replay_child(a: &CompareArgs, dir: &Path, c: u32, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    let mut cmd = Command::new(std::env::current_exe().context("cannot find this executable")?);
    cmd.arg("replay");
    match (&a.url, a.engine.engine.as_str()) {
        (Some(url), "emulated") => {
            cmd.args(["--url", url]);
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
    cmd.args(["-w", &a.replay.window.to_string()])
        .args(["--idle-gap-cap", &a.replay.idle_gap_cap.to_string()])
        .args(["--start", &a.replay.start])
        .args(["-c", &c.to_string(), "-s", &seed.to_string(), "--no-probe"])
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

fn add_path(cmd: &mut Command, flag: &str, p: &Option<PathBuf>) {
    if let Some(p) = p {
        cmd.arg(flag).arg(p);
    }
}

fn row(concurrency: u32, seed: u64, sim: &Summary, real: &Summary) -> Row {
    Row {
        concurrency,
        seed,
        completed: (sim.completed, real.completed),
        metrics: METRICS
            .iter()
            .map(|(metric, get)| {
                let (s, r) = (get(sim), get(real));
                Pair {
                    metric,
                    sim: s,
                    real: r,
                    rel_error: rel_error(s, r),
                }
            })
            .collect(),
    }
}

/// `(sim − real) / real`, 0 when both are 0, `None` when only the measured value is 0.
pub fn rel_error(sim: f64, real: f64) -> Option<f64> {
    if real != 0.0 {
        Some((sim - real) / real)
    } else if sim == 0.0 {
        Some(0.0)
    } else {
        None
    }
}

fn rankings(rows: &[Row]) -> Vec<SeedRanking> {
    let mut levels: Vec<u32> = rows.iter().map(|r| r.concurrency).collect();
    levels.dedup();
    levels
        .into_iter()
        .filter_map(|c| {
            let at: Vec<&Row> = rows.iter().filter(|r| r.concurrency == c).collect();
            let (sim, real): (Vec<f64>, Vec<f64>) = at
                .iter()
                .map(|r| (r.metrics[0].sim, r.metrics[0].real))
                .unzip();
            (at.len() >= 3).then(|| SeedRanking {
                concurrency: c,
                seeds: at.len(),
                spearman_d: spearman(&sim, &real),
            })
        })
        .collect()
}

/// Spearman rank correlation (Pearson correlation of average ranks; ties share their mean rank).
/// 0 when either side has no spread.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = ra.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    if va == 0.0 || vb == 0.0 {
        0.0
    } else {
        cov / (va * vb).sqrt()
    }
}

fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut out = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        for &k in &order[i..=j] {
            out[k] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    out
}

fn fmt_err(e: Option<f64>) -> String {
    e.map_or("n/a".into(), |e| format!("{:+.1} %", 100.0 * e))
}

fn markdown(name: &str, a: &CompareArgs, rows: &[Row], rankings: &[SeedRanking]) -> String {
    let mut s = format!(
        "serverbench compare — {name}, window {} s, start {}; each cell: simulated / measured (error)\n\n",
        a.replay.window, a.replay.start
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
    fn spearman_uses_average_ranks_and_spots_order() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
        assert_eq!(ranks(&[5.0, 1.0, 5.0, 0.0]), vec![3.5, 2.0, 3.5, 1.0]);
        // x = [1,2,3,4], y ranks [1,3,2,4]: 1 − 6·Σd²/(n(n²−1)) = 1 − 6·2/60 = 0.8
        assert!((spearman(&[1.0, 2.0, 3.0, 4.0], &[1.0, 3.0, 2.0, 4.0]) - 0.8).abs() < 1e-12);
        assert_eq!(
            spearman(&[1.0, 1.0], &[1.0, 2.0]),
            0.0,
            "no spread on one side"
        );
    }

    #[test]
    fn relative_errors_handle_zero_measurements() {
        assert_eq!(rel_error(1.1, 1.0).map(|e| (e * 1e9).round()), Some(1e8));
        assert_eq!(rel_error(0.0, 0.0), Some(0.0));
        assert_eq!(rel_error(0.2, 0.0), None);
        assert_eq!(fmt_err(None), "n/a");
        assert_eq!(fmt_err(Some(-0.0432)), "-4.3 %");
    }
}
