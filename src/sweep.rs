//! `serverbench sweep`: a concurrency × seeds grid run in parallel, summarised per concurrency.

use crate::cli::SweepArgs;
use crate::inputs::{self, Workload};
use crate::output::{write_file, write_json};
use crate::plot::{sweep_svg, Band};
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rayon::prelude::*;
use serde::Serialize;
use serverbench_sim::{prefix_window, score, Deployment};
use serverbench_workloads::quantile;
use std::io::Write;

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
    /// D of each prefix window, shortest first (only with --windows).
    pub window_d: Vec<f64>,
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
    pub fn of(values: &[f64]) -> Spread {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread {
            mean,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            std: var.sqrt(),
            p10: quantile(&sorted, 0.1),
        }
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
    /// Mean D of each prefix window and its ratio to the longest window's.
    pub windows: Vec<WindowD>,
}

/// A prefix window's D.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct WindowD {
    pub window_s: f64,
    pub d_mean: f64,
    pub ratio_to_longest: f64,
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

/// Runs every configuration in parallel on `threads` threads (0 = all cores), in job order: the
/// output never depends on the thread count.
pub fn run_all<J: Sync, T: Send>(
    jobs: &[J],
    threads: Option<usize>,
    progress: bool,
    f: impl Fn(&J) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    let bar = if progress {
        ProgressBar::new(jobs.len() as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "  {bar:40} {pos}/{len} replays  {elapsed} elapsed, ETA {eta}",
        )
        .expect("valid template"),
    );
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.unwrap_or(0))
        .build()
        .context("cannot start worker threads")?;
    let out = pool.install(|| {
        jobs.par_iter()
            .map(|cfg| {
                let r = f(cfg);
                bar.inc(1);
                r
            })
            .collect::<Result<Vec<T>>>()
    });
    bar.finish_and_clear();
    out
}

/// Runs the grid.
pub fn grid(a: &SweepArgs, progress: bool) -> Result<SweepResult> {
    let (d, cost) = inputs::resolved(&a.deployment)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let workload = Workload::from_args(&a.workload)?;
    let windows = match &a.windows {
        Some(w) => inputs::windows(w)?,
        None => Vec::new(),
    };
    let mut replay = a.replay.clone();
    if let Some(&longest) = windows.last() {
        replay.window = longest;
    }
    let mut jobs = Vec::new();
    for &c in &a.concurrency {
        for &s in &seeds {
            jobs.push(inputs::run_config(&replay, c, s)?);
        }
    }
    let cells = run_all(&jobs, a.threads, progress, |cfg| {
        let out = inputs::replay(&d, &cost, &workload, cfg)?;
        let s = &out.summary;
        let window_d = windows
            .iter()
            .map(|&w| {
                score(
                    &prefix_window(&out.records, (w * 1e9) as u64),
                    &d.prices,
                    &d.slo,
                    d.cost(w),
                )
                .d
            })
            .collect();
        Ok(Cell {
            concurrency: cfg.concurrency,
            seed: cfg.seed,
            d: s.score.d,
            g: s.score.g,
            f: s.score.f,
            ttft_p90_s: s.ttft_s.p90,
            tpot_p90_s: s.tpot_s.p90,
            requests: s.requests,
            valid: s.valid,
            window_d,
        })
    })?;
    let levels: Vec<Level> = a
        .concurrency
        .iter()
        .map(|&c| level(c, &cells, &windows))
        .collect();
    let best = |key: fn(&Level) -> f64| {
        levels
            .iter()
            .fold(&levels[0], |b, l| if key(l) > key(b) { l } else { b })
            .concurrency
    };
    Ok(SweepResult {
        deployment: d.name.clone(),
        window_s: replay.window,
        seeds,
        best_mean: best(|l| l.d.mean),
        best_robust: best(|l| l.d.p10),
        levels,
        cells,
    })
}

fn level(c: u32, cells: &[Cell], windows: &[f64]) -> Level {
    let mine: Vec<&Cell> = cells.iter().filter(|x| x.concurrency == c).collect();
    let col = |f: &dyn Fn(&Cell) -> f64| Spread::of(&mine.iter().map(|x| f(x)).collect::<Vec<_>>());
    let means: Vec<f64> = (0..windows.len())
        .map(|i| col(&|x| x.window_d[i]).mean)
        .collect();
    let longest = means.last().copied().unwrap_or(0.0);
    let windows = windows
        .iter()
        .zip(&means)
        .map(|(&w, &m)| WindowD {
            window_s: w,
            d_mean: m,
            ratio_to_longest: if longest > 0.0 { m / longest } else { 0.0 },
        })
        .collect();
    Level {
        concurrency: c,
        d: col(&|x| x.d),
        g: col(&|x| x.g),
        f: col(&|x| x.f),
        ttft_p90_s: col(&|x| x.ttft_p90_s),
        tpot_p90_s: col(&|x| x.tpot_p90_s),
        all_valid: mine.iter().all(|x| x.valid),
        windows,
    }
}

pub fn run(a: SweepArgs) -> Result<()> {
    let (d, _) = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let seeds = inputs::seeds(&a.seeds)?;
    let started = std::time::Instant::now();
    let r = grid(&a, true)?;
    println!(
        "serverbench sweep — {} ({} × {} GPU, ${:.2}/GPU-h), {} concurrency levels × {} seeds, window {} s, {} start\n",
        d.name,
        d.gpus(),
        d.hardware.name,
        d.gpu_hour_dollars,
        a.concurrency.len(),
        seeds.len(),
        r.window_s,
        a.replay.start
    );
    print!("{}", table(&r, &d));
    if a.windows.is_some() {
        print!("\n{}", window_table(&r));
    }
    println!(
        "\n  {} replays of {} s simulated in {:.1} s",
        r.cells.len(),
        r.window_s,
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = &a.out {
        write_file(dir, "sweep.csv", |w| write_csv(w, &r))?;
        write_json(dir, "sweep.json", &r)?;
        let svg = plot(&r, &d)?;
        write_file(dir, "sweep.svg", |w| w.write_all(svg.as_bytes()))?;
        println!(
            "  wrote {}/sweep.csv, sweep.json and sweep.svg",
            dir.display()
        );
    }
    Ok(())
}

/// Levels where at least 90 % of the value met the SLO on average are "qualified".
const QUALIFIED_F: f64 = 0.9;

fn plot(r: &SweepResult, d: &Deployment) -> Result<String> {
    let x: Vec<f64> = r.levels.iter().map(|l| l.concurrency as f64).collect();
    let band = |title, unit, f: fn(&Level) -> Spread| {
        let s: Vec<Spread> = r.levels.iter().map(f).collect();
        Band {
            title,
            unit,
            x: &x,
            mean: s.iter().map(|v| v.mean).collect(),
            min: s.iter().map(|v| v.min).collect(),
            max: s.iter().map(|v| v.max).collect(),
        }
    };
    let bands = [
        band("D: qualified value per GPU dollar", "$/$", |l| l.d),
        band("G: gross value per GPU dollar", "$/$", |l| l.g),
        band(
            "f = D / G: value-weighted qualified fraction",
            "fraction",
            |l| l.f,
        ),
    ];
    let qualified: Vec<bool> = r.levels.iter().map(|l| l.f.mean >= QUALIFIED_F).collect();
    let title = format!(
        "{} — {} seeds × {} s; green: f ≥ {:.0} % (TTFT ≤ {:.2} s, TPOT ≤ {:.1} ms)",
        d.name,
        r.seeds.len(),
        r.window_s,
        QUALIFIED_F * 100.0,
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    );
    sweep_svg(&title, &bands, &qualified, r.best_mean as f64)
}

fn table(r: &SweepResult, d: &Deployment) -> String {
    let mut t = String::new();
    t.push_str(&format!(
        "  {:>5}  {:>16}  {:>12}  {:>7}  {:>7}  {:>13}  {:>13}\n",
        "c", "D mean ± std", "D min..max", "G", "f", "p90 TTFT (s)", "p90 TPOT (ms)"
    ));
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
        "\n  D = value of requests that met TTFT ≤ {:.2} s and TPOT ≤ {:.1} ms, per $ of GPU time; G = value of all requests per $; f = D / G.\n",
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    ));
    let robust = r
        .levels
        .iter()
        .find(|l| l.concurrency == r.best_robust)
        .expect("robust level exists");
    let best = r
        .levels
        .iter()
        .find(|l| l.concurrency == r.best_mean)
        .expect("best level exists");
    t.push_str(&format!(
        "  Recommendation: accept {} concurrent sessions (mean D {:.3}); the robust choice is {} (its worst 10 % of seeds still give D ≥ {:.3}).\n",
        best.concurrency, best.d.mean, robust.concurrency, robust.d.p10
    ));
    t
}

fn window_table(r: &SweepResult) -> String {
    let mut t = String::from("  window sensitivity: mean D of each prefix window of the same runs (ratio to the longest)\n");
    t.push_str(&format!("  {:>5}", "c"));
    for w in &r.levels[0].windows {
        t.push_str(&format!("  {:>18}", format!("W = {} s", w.window_s)));
    }
    t.push('\n');
    for l in &r.levels {
        t.push_str(&format!("  {:>5}", l.concurrency));
        for w in &l.windows {
            t.push_str(&format!(
                "  {:>18}",
                format!("{:.3} ({:.2})", w.d_mean, w.ratio_to_longest)
            ));
        }
        t.push('\n');
    }
    t
}

fn write_csv(w: &mut dyn Write, r: &SweepResult) -> std::io::Result<()> {
    write!(w, "concurrency,d_mean,d_min,d_max,d_std,d_p10,g_mean,g_min,g_max,g_std,f_mean,f_min,f_max,f_std,ttft_p90_mean_s,tpot_p90_mean_s,all_valid")?;
    for win in &r.levels[0].windows {
        write!(w, ",d_mean_w{}", win.window_s)?;
    }
    writeln!(w)?;
    for l in &r.levels {
        write!(
            w,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            l.concurrency,
            l.d.mean,
            l.d.min,
            l.d.max,
            l.d.std,
            l.d.p10,
            l.g.mean,
            l.g.min,
            l.g.max,
            l.g.std,
            l.f.mean,
            l.f.min,
            l.f.max,
            l.f.std,
            l.ttft_p90_s.mean,
            l.tpot_p90_s.mean,
            l.all_valid
        )?;
        for win in &l.windows {
            write!(w, ",{}", win.d_mean)?;
        }
        writeln!(w)?;
    }
    Ok(())
}
