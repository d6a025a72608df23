//! `serverbench screen`: the ranking comes from `serverbench_study::screen`; this prints it and writes
//! screen.csv, screen.json and screen.svg.

use crate::cli::ScreenArgs;
use crate::inputs;
use crate::output::{replays_bar, write_file, write_json};
use crate::plot::histogram_svg;
use crate::report::Report;
use anyhow::Result;
use serverbench_study::ScreenResult;

/// Screens the seeds the arguments name, with a progress bar when `progress`.
pub fn screen(a: &ScreenArgs, progress: bool) -> Result<ScreenResult> {
    let mut study = inputs::study(&a.deployment, &a.workload, &a.replay)?;
    study.threads = inputs::threads(a.threads)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let bar = replays_bar(seeds.len(), progress);
    let r = serverbench_study::screen(&study, a.concurrency, &seeds, &|| bar.inc(1))?;
    bar.finish_and_clear();
    Ok(r)
}

pub fn run(a: ScreenArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let r = screen(&a, true)?;
    outln!(
        "serverbench screen — {}, c = {}, {} seeds, window {} s (hardest first)\n",
        r.deployment,
        r.concurrency,
        r.seeds.len(),
        r.window_s
    )?;
    outln!(
        "  {:>4}  {:>6}  {:>8}  {:>8}  {:>7}  {:>13}  flag",
        "rank",
        "seed",
        "D",
        "G",
        "f",
        "offered $"
    )?;
    for s in &r.seeds {
        outln!(
            "  {:>4}  {:>6}  {:>8.3}  {:>8.3}  {:>6.1}%  {:>13.4}  {}",
            s.rank,
            s.seed,
            s.d,
            s.g,
            s.f * 100.0,
            s.offered_value,
            s.flag
        )?;
    }
    outln!("\n  D over seeds: mean {:.3} · p10 {:.3} · p50 {:.3} · p90 {:.3}; flagged: outside [p10, p90]", r.d_mean, r.d_p10, r.d_p50, r.d_p90)?;
    outln!(
        "  representative seeds (D nearest the median): {:?}",
        r.representative
    )?;
    outln!("  hardest seeds (lowest D): {:?}", r.hardest)?;
    outln!(
        "\n  {} replays + workload scans in {:.1} s",
        r.seeds.len(),
        started.elapsed().as_secs_f64()
    )?;
    let csv = || {
        let mut t = String::from("rank,seed,d,g,f,offered_value,flag\n");
        for s in &r.seeds {
            t.push_str(&format!(
                "{},{},{},{},{},{},{}\n",
                s.rank, s.seed, s.d, s.g, s.f, s.offered_value, s.flag
            ));
        }
        t
    };
    let svg = || {
        let ds: Vec<f64> = r.seeds.iter().map(|s| s.d).collect();
        let title = format!(
            "{} at c = {}: D of {} seeds",
            r.deployment,
            r.concurrency,
            ds.len()
        );
        histogram_svg(
            &title,
            "D ($ of qualified value per $ of GPU time)",
            &ds,
            &[("p10", r.d_p10), ("p50", r.d_p50), ("p90", r.d_p90)],
        )
    };
    if let Some(dir) = &a.out {
        write_file(dir, "screen.csv", |w| w.write_all(csv().as_bytes()))?;
        write_json(dir, "screen.json", &crate::meta::Meta::now(Some(&d)), &r)?;
        let svg = svg()?;
        write_file(dir, "screen.svg", |w| w.write_all(svg.as_bytes()))?;
        outln!(
            "  wrote {}, screen.json and screen.svg",
            dir.join("screen.csv").display()
        )?;
    }
    if let Some(path) = &a.report {
        let title = format!(
            "serverbench screen — {}, c = {}, {} seeds",
            r.deployment,
            r.concurrency,
            r.seeds.len()
        );
        let mut rep = Report::new(&title, crate::meta::Meta::now(Some(&d)));
        rep.section(
            "D over seeds",
            &format!(
                "mean {:.3} · p10 {:.3} · p50 {:.3} · p90 {:.3}; representative seeds (D nearest the median) {:?}; hardest seeds (lowest D) {:?}; flagged: outside [p10, p90].",
                r.d_mean, r.d_p10, r.d_p50, r.d_p90, r.representative, r.hardest
            ),
        )
        .svg("how many seeds reach each D, with the p10, p50 and p90 lines", &svg()?)
        .section("Ranking", "Hardest first.")
        .csv_table("", &csv());
        rep.write(path)?;
        outln!("  wrote the report {}", path.display())?;
    }
    Ok(())
}
