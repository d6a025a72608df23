//! `serverbench screen`: the ranking comes from `serverbench_study::run_screen`; this prints it and writes
//! screen.csv, screen.json and screen.svg — of the seeds that finished, marked partial, when SIGINT
//! or SIGTERM stops it.

use crate::cli::ScreenArgs;
use crate::inputs;
use crate::output::{prepare_out, write_file, write_json};
use crate::report::Report;
use crate::signals::{StudyStop, INTERRUPTED};
use anyhow::Result;

pub fn run(a: ScreenArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let all = inputs::seeds(&a.seeds)?.len();
    if let Some(dir) = &a.out {
        // Before any replay: a folder that cannot be written is found now, not after the screen.
        prepare_out(dir, &["screen.csv", "screen.json", "screen.svg"])?;
    }
    let stop = StudyStop::install()?;
    let started = std::time::Instant::now();
    let mut study = inputs::study(&a.deployment, &a.workload, &a.replay)?;
    study.threads = inputs::threads(a.threads)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let r = serverbench_study::run_screen(study, a.concurrency, &seeds, &stop.executor())?;
    if r.partial {
        outln!(
            "  PARTIAL: stopped by {} after {} of {all} seeds; the ranking is of those that finished\n",
            stop.why().unwrap_or_else(|| "a signal".into()),
            r.seeds.len()
        )?;
    }
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
    let svg = || serverbench_study::screen_plot(&r);
    if let Some(dir) = &a.out {
        write_file(dir, "screen.csv", |w| w.write_all(csv().as_bytes()))?;
        write_json(dir, "screen.json", &crate::meta::Meta::now(Some(&d)), &r)?;
        if !r.seeds.is_empty() {
            let svg = svg()?;
            write_file(dir, "screen.svg", |w| w.write_all(svg.as_bytes()))?;
        }
        outln!(
            "  wrote {}, screen.json and screen.svg",
            dir.join("screen.csv").display()
        )?;
    }
    // A histogram needs a seed: a screen stopped before any finished writes no report.
    if let Some(path) = a.report.as_ref().filter(|_| !r.seeds.is_empty()) {
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
    if r.partial {
        return Err(crate::Exit::new(
            INTERRUPTED,
            format!(
                "{}: wrote the {} of {all} seeds that finished, marked partial",
                stop.why().unwrap_or_else(|| "interrupted".into()),
                r.seeds.len()
            ),
        )
        .into());
    }
    Ok(())
}
