//! `serverbench sweep`: a concurrency × seeds grid run in parallel, summarised per concurrency.

use crate::cli::SweepArgs;
use crate::inputs;
use crate::output::{write_file, write_json};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;
use serverbench_workloads::{quantile, TreeSource};
use std::io::Write;
use std::sync::Arc;

/// One replay of the grid.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub concurrency: u32,
    pub seed: u64,
    pub d: f64,
    pub g: f64,
    pub f: f64,
    pub ttft_p90_s: f64,
    pub tpot_p90_s: f64,
    pub requests: usize,
    pub valid: bool,
}

/// Mean, spread and extremes of one metric over seeds.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub std: f64,
    pub p10: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Spread {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread { mean, min: sorted[0], max: sorted[sorted.len() - 1], std: var.sqrt(), p10: quantile(&sorted, 0.1) }
    }
}

/// Per-concurrency statistics over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct Level {
    pub concurrency: u32,
    pub d: Spread,
    pub g: Spread,
    pub f: Spread,
    pub ttft_p90_s: Spread,
    pub tpot_p90_s: Spread,
    pub all_valid: bool,
}

/// The sweep's result.
#[derive(Clone, Debug, Serialize)]
pub struct SweepResult {
    pub deployment: String,
    pub window_s: f64,
    pub seeds: Vec<u64>,
    pub levels: Vec<Level>,
    pub best_mean: u32,
    pub best_robust: u32,
    pub cells: Vec<Cell>,
}

/// Runs the grid; the output never depends on the number of threads.
pub fn grid(a: &SweepArgs, progress: bool) -> Result<SweepResult> {
    let (d, cost) = inputs::resolved(&a.deployment)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let trace = inputs::trace(&a.workload)?.map(Arc::new);
    let spec = inputs::spec(&a.workload)?;
    let mut jobs = Vec::new();
    for &c in &a.concurrency {
        for &s in &seeds {
            jobs.push(inputs::run_config(&a.replay, c, s)?);
        }
    }
    let bar = if progress { ProgressBar::new(jobs.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(ProgressStyle::with_template("  {bar:40} {pos}/{len} replays  {elapsed} elapsed, ETA {eta}").expect("valid template"));
    let run = |cfg: &serverbench_sim::RunConfig| -> Result<Cell> {
        let source: Arc<dyn TreeSource> = match &trace {
            Some(t) => t.clone(),
            None => Arc::new(serverbench_workloads::Generator::new(spec.clone(), cfg.seed, d.context_limit).map_err(|e| anyhow::anyhow!("workload spec: {e}"))?),
        };
        let out = serverbench_sim::simulate(&d, &cost, source.as_ref(), cfg)?;
        bar.inc(1);
        let s = &out.summary;
        Ok(Cell { concurrency: cfg.concurrency, seed: cfg.seed, d: s.score.d, g: s.score.g, f: s.score.f, ttft_p90_s: s.ttft_s.p90, tpot_p90_s: s.tpot_s.p90, requests: s.requests, valid: s.valid })
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(a.threads.unwrap_or(0)).build().context("cannot start worker threads")?;
    let cells: Vec<Cell> = pool.install(|| jobs.par_iter().map(run).collect::<Result<_>>())?;
    bar.finish_and_clear();
    let levels: Vec<Level> = a
        .concurrency
        .iter()
        .map(|&c| {
            let mine: Vec<&Cell> = cells.iter().filter(|x| x.concurrency == c).collect();
            let col = |f: fn(&Cell) -> f64| Spread::of(&mine.iter().map(|x| f(x)).collect::<Vec<_>>());
            Level { concurrency: c, d: col(|x| x.d), g: col(|x| x.g), f: col(|x| x.f), ttft_p90_s: col(|x| x.ttft_p90_s), tpot_p90_s: col(|x| x.tpot_p90_s), all_valid: mine.iter().all(|x| x.valid) }
        })
        .collect();
    let best = |key: fn(&Level) -> f64| levels.iter().fold(&levels[0], |b, l| if key(l) > key(b) { l } else { b }).concurrency;
    Ok(SweepResult { deployment: d.name.clone(), window_s: a.replay.window, seeds, best_mean: best(|l| l.d.mean), best_robust: best(|l| l.d.p10), levels, cells })
}

pub fn run(a: SweepArgs) -> Result<()> {
    let (d, _) = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let seeds = inputs::seeds(&a.seeds)?;
    println!(
        "serverbench sweep — {} ({} GPU × {}, ${:.2}/GPU-h), {} concurrency levels × {} seeds, window {} s, {} start\n",
        d.name,
        d.gpus(),
        d.hardware,
        d.gpu_hour_dollars,
        a.concurrency.len(),
        seeds.len(),
        a.replay.window,
        a.replay.start
    );
    let started = std::time::Instant::now();
    let r = grid(&a, true)?;
    print!("{}", table(&r, &d));
    println!("\n  {} replays of {} s simulated in {:.1} s", r.cells.len(), r.window_s, started.elapsed().as_secs_f64());
    if let Some(dir) = &a.out {
        write_file(dir, "sweep.csv", |w| write_csv(w, &r))?;
        write_json(dir, "sweep.json", &r)?;
        println!("  wrote {}/sweep.csv and sweep.json", dir.display());
    }
    Ok(())
}

fn table(r: &SweepResult, d: &serverbench_sim::Deployment) -> String {
    let mut t = String::new();
    t.push_str(&format!("  {:>5}  {:>16}  {:>12}  {:>7}  {:>7}  {:>13}  {:>13}\n", "c", "D mean ± std", "D min..max", "G", "f", "p90 TTFT (s)", "p90 TPOT (ms)"));
    for l in &r.levels {
        let mark = match (l.concurrency == r.best_mean, l.concurrency == r.best_robust) {
            (true, true) => " ◀ best mean D, best robust D",
            (true, false) => " ◀ best mean D",
            (false, true) => " ◀ best robust D",
            _ => "",
        };
        t.push_str(&format!(
            "  {:>5}  {:>8.3} ± {:<5.3}  {:>5.2}..{:<5.2}  {:>7.3}  {:>6.1}%  {:>13.3}  {:>13.2}{}{}\n",
            l.concurrency,
            l.d.mean,
            l.d.std,
            l.d.min,
            l.d.max,
            l.g.mean,
            l.f.mean * 100.0,
            l.ttft_p90_s.mean,
            l.tpot_p90_s.mean * 1e3,
            if l.all_valid { "" } else { " (invalid: context overflow)" },
            mark
        ));
    }
    t.push_str(&format!(
        "\n  D = qualified value / GPU cost ($ of tokens that met TTFT ≤ {:.2} s and TPOT ≤ {:.1} ms, per $ of GPU time); G = all value / GPU cost; f = D / G.\n",
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    ));
    let robust = r.levels.iter().find(|l| l.concurrency == r.best_robust).expect("robust level exists");
    let best = r.levels.iter().find(|l| l.concurrency == r.best_mean).expect("best level exists");
    t.push_str(&format!(
        "  Recommendation: accept {} concurrent sessions (mean D {:.3}); the robust choice is {} (its worst 10 % of seeds still give D ≥ {:.3}).\n",
        best.concurrency, best.d.mean, robust.concurrency, robust.d.p10
    ));
    t
}

fn write_csv(w: &mut dyn Write, r: &SweepResult) -> std::io::Result<()> {
    writeln!(w, "concurrency,d_mean,d_min,d_max,d_std,d_p10,g_mean,g_min,g_max,g_std,f_mean,f_min,f_max,f_std,ttft_p90_mean_s,tpot_p90_mean_s,all_valid")?;
    for l in &r.levels {
        writeln!(
            w,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            l.concurrency, l.d.mean, l.d.min, l.d.max, l.d.std, l.d.p10, l.g.mean, l.g.min, l.g.max, l.g.std, l.f.mean, l.f.min, l.f.max, l.f.std, l.ttft_p90_s.mean, l.tpot_p90_s.mean, l.all_valid
        )?;
    }
    Ok(())
}
