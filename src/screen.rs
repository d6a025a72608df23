//! `serverbench screen`: many seeds at one configuration, ranked by difficulty.

use crate::cli::ScreenArgs;
use crate::inputs::{self, Workload};
use crate::output::{write_file, write_json};
use crate::plot::histogram_svg;
use crate::sweep::run_all;
use anyhow::Result;
use serde::Serialize;
use serverbench_workloads::quantile;

/// One seed's result.
#[derive(Clone, Debug, Serialize)]
pub struct SeedRow {
    /// 1 = hardest (lowest D).
    pub rank: usize,
    pub seed: u64,
    pub d: f64,
    pub g: f64,
    pub f: f64,
    /// Value an infinitely fast server would be asked for in the window (workload scan), dollars.
    pub offered_value: f64,
    /// "low" below p10 of D, "high" above p90, empty inside.
    pub flag: String,
}

/// The screen's result.
#[derive(Clone, Debug, Serialize)]
pub struct ScreenResult {
    pub deployment: String,
    pub concurrency: u32,
    pub window_s: f64,
    pub d_p10: f64,
    pub d_p50: f64,
    pub d_p90: f64,
    pub d_mean: f64,
    /// Seeds whose D is nearest the median: representative development seeds.
    pub representative: Vec<u64>,
    /// Seeds with the lowest D.
    pub hardest: Vec<u64>,
    /// Hardest first.
    pub seeds: Vec<SeedRow>,
}

/// Screens the seeds; rows come back hardest first, ties broken by seed, so rankings are stable.
pub fn screen(a: &ScreenArgs, progress: bool) -> Result<ScreenResult> {
    let (d, cost) = inputs::resolved(&a.deployment)?;
    let workload = Workload::from_args(&a.workload)?;
    let jobs = inputs::seed_jobs(&a.replay, a.concurrency, &a.seeds)?;
    let mut rows = run_all(&jobs, a.threads, progress, |cfg| {
        let out = inputs::replay(&d, &cost, &workload, cfg)?;
        let source = workload.source(cfg.seed, d.context_limit)?;
        let offer = serverbench_sim::scan(
            source.as_ref(),
            &d.prices,
            cfg.seed,
            cfg.concurrency,
            cfg.window_s,
            cfg.idle_gap_cap_s,
        )?;
        let s = out.summary.score;
        Ok(SeedRow {
            rank: 0,
            seed: cfg.seed,
            d: s.d,
            g: s.g,
            f: s.f,
            offered_value: offer.value,
            flag: String::new(),
        })
    })?;
    rows.sort_by(|x, y| x.d.total_cmp(&y.d).then(x.seed.cmp(&y.seed)));
    let ds: Vec<f64> = rows.iter().map(|r| r.d).collect();
    let (p10, p50, p90) = (quantile(&ds, 0.1), quantile(&ds, 0.5), quantile(&ds, 0.9));
    for (i, r) in rows.iter_mut().enumerate() {
        r.rank = i + 1;
        r.flag = if r.d < p10 {
            "low".into()
        } else if r.d > p90 {
            "high".into()
        } else {
            String::new()
        };
    }
    let mut by_median: Vec<&SeedRow> = rows.iter().collect();
    by_median.sort_by(|x, y| {
        (x.d - p50)
            .abs()
            .total_cmp(&(y.d - p50).abs())
            .then(x.seed.cmp(&y.seed))
    });
    let named = 3.min(rows.len());
    Ok(ScreenResult {
        deployment: d.name.clone(),
        concurrency: a.concurrency,
        window_s: a.replay.window,
        d_p10: p10,
        d_p50: p50,
        d_p90: p90,
        d_mean: ds.iter().sum::<f64>() / ds.len() as f64,
        representative: by_median[..named].iter().map(|r| r.seed).collect(),
        hardest: rows[..named].iter().map(|r| r.seed).collect(),
        seeds: rows,
    })
}

pub fn run(a: ScreenArgs) -> Result<()> {
    let (d, _) = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let r = screen(&a, true)?;
    println!(
        "serverbench screen — {}, c = {}, {} seeds, window {} s (hardest first)\n",
        r.deployment,
        r.concurrency,
        r.seeds.len(),
        r.window_s
    );
    println!(
        "  {:>4}  {:>6}  {:>8}  {:>8}  {:>7}  {:>13}  flag",
        "rank", "seed", "D", "G", "f", "offered $"
    );
    for s in &r.seeds {
        println!(
            "  {:>4}  {:>6}  {:>8.3}  {:>8.3}  {:>6.1}%  {:>13.4}  {}",
            s.rank,
            s.seed,
            s.d,
            s.g,
            s.f * 100.0,
            s.offered_value,
            s.flag
        );
    }
    println!("\n  D over seeds: mean {:.3} · p10 {:.3} · p50 {:.3} · p90 {:.3}; flagged: outside [p10, p90]", r.d_mean, r.d_p10, r.d_p50, r.d_p90);
    println!(
        "  representative seeds (D nearest the median): {:?}",
        r.representative
    );
    println!("  hardest seeds (lowest D): {:?}", r.hardest);
    println!(
        "\n  {} replays + workload scans in {:.1} s",
        r.seeds.len(),
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = &a.out {
        write_file(dir, "screen.csv", |w| {
            writeln!(w, "rank,seed,d,g,f,offered_value,flag")?;
            for s in &r.seeds {
                writeln!(
                    w,
                    "{},{},{},{},{},{},{}",
                    s.rank, s.seed, s.d, s.g, s.f, s.offered_value, s.flag
                )?;
            }
            Ok(())
        })?;
        write_json(dir, "screen.json", &r)?;
        let ds: Vec<f64> = r.seeds.iter().map(|s| s.d).collect();
        let title = format!(
            "{} at c = {}: D of {} seeds",
            r.deployment,
            r.concurrency,
            ds.len()
        );
        let svg = histogram_svg(
            &title,
            "D ($ of qualified value per $ of GPU time)",
            &ds,
            &[("p10", r.d_p10), ("p50", r.d_p50), ("p90", r.d_p90)],
        )?;
        write_file(dir, "screen.svg", |w| w.write_all(svg.as_bytes()))?;
        println!(
            "  wrote {}/screen.csv, screen.json and screen.svg",
            dir.display()
        );
    }
    Ok(())
}
