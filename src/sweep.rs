//! `serverbench sweep`: one `serverbench_study::run_sweep` (or `sweep_rates_until`), rendered by
//! `serverbench_study::report::sweep::Swept`; this prints its table and writes sweep.csv, sweep.json and
//! sweep.svg — those of the replays that finished, marked partial, when SIGINT or SIGTERM stops it.

use crate::cli::SweepArgs;
use crate::inputs;
use crate::output::{prepare_out, replays_bar, write_report, write_text};
use crate::signals::{StudyStop, INTERRUPTED};
use anyhow::{anyhow, bail, Result};
use serverbench_study::report::sweep::{self as render, Swept};

/// The files a sweep writes in `--out`.
const FILES: [&str; 3] = ["sweep.csv", "sweep.json", "sweep.svg"];

/// The exit of a sweep that a signal stopped, after its files were written.
fn stopped(stop: &StudyStop, finished: Option<usize>, all: usize) -> anyhow::Error {
    let done = match finished {
        Some(n) => format!("the {n} of {all} replays"),
        None => format!("those of the {all} replays"),
    };
    let why = stop.why().unwrap_or_else(|| "interrupted".into());
    crate::Exit::new(
        INTERRUPTED,
        format!("{why}: wrote {done} that finished, marked partial"),
    )
    .into()
}

pub fn run(a: SweepArgs) -> Result<()> {
    let d = inputs::resolved(&a.run.deployment)?;
    if inputs::print_config(&a.run.deployment, &d)? {
        return Ok(());
    }
    let stop = StudyStop::install()?;
    // Each way checks its flags in its own order, and makes `--out` ready before any replay: a folder
    // that cannot be written is found now, not after the sweep, and no file of an earlier sweep is
    // left in it.
    let prepare = || {
        a.out
            .as_ref()
            .map_or(Ok(()), |dir| prepare_out(dir, &FILES))
    };
    let (swept, levels, seeds, started) = if let Some(rates) = &a.rates {
        inputs::check_rates(rates)?;
        let mut run = a.run.clone();
        run.replay.arrivals = format!("poisson:{}", rates[0]);
        let mut study = inputs::study(&run)?;
        study.threads = inputs::threads(a.threads)?;
        let seeds = inputs::seeds(&a.seeds)?;
        prepare()?;
        let started = std::time::Instant::now();
        let bar = replays_bar(rates.len() * seeds.len(), true);
        let r = serverbench_study::sweep_rates_until(&study, rates, &seeds, stop.flag(), &|| {
            bar.inc(1)
        })?;
        bar.finish_and_clear();
        (Swept::Rates(r), rates.len(), seeds.len(), started)
    } else {
        if a.run.replay.arrivals != "closed" {
            bail!("--arrivals: sweep varies concurrency in the closed loop; for an open-loop sweep give --rates R1,R2,… (Poisson trees per second), and replay a trace once with simulate --arrivals trace");
        }
        let seeds = inputs::seeds(&a.seeds)?;
        prepare()?;
        let started = std::time::Instant::now();
        let mut study = inputs::study(&a.run)?;
        study.threads = inputs::threads(a.threads)?;
        let windows = a
            .windows
            .as_deref()
            .map_or(Ok(Vec::new()), inputs::windows)?;
        let levels = &a.concurrency;
        let r = serverbench_study::run_sweep(study, levels, &seeds, &windows, &stop.executor())?;
        (
            Swept::Levels(Box::new(r)),
            levels.len(),
            seeds.len(),
            started,
        )
    };
    let all = levels * seeds;
    let meta = || crate::meta::now(Some(&d));
    if swept.is_empty() {
        outln!("  PARTIAL: stopped before any of the {all} replays finished")?;
        if let Some(dir) = &a.out {
            write_text(dir, "sweep.csv", &swept.csv())?;
            write_text(dir, "sweep.json", &swept.json(&meta())?)?;
        }
        return Err(stopped(&stop, Some(0), all));
    }
    outln!(
        "{}",
        swept.header(&d, levels, seeds, a.run.replay.protocol())
    )?;
    let why = stop.why().unwrap_or_else(|| "a signal".into());
    let flags = (a.band, a.windows.is_some());
    let table = swept
        .table(&d, flags, Some((&why, all)))
        .map_err(|e| anyhow!(e))?;
    out!("{}", table.text())?;
    let ran = swept.finished().unwrap_or(all);
    let (window, elapsed) = (swept.window_s(), started.elapsed().as_secs_f64());
    outln!("\n  {ran} replays of {window} s simulated in {elapsed:.1} s")?;
    let csv = swept.csv();
    if let Some(dir) = &a.out {
        write_text(dir, "sweep.csv", &csv)?;
        write_text(dir, "sweep.json", &swept.json(&meta())?)?;
        write_text(dir, "sweep.svg", &swept.svg(&d)?)?;
        let csv_path = dir.join("sweep.csv");
        outln!("  wrote {}, sweep.json and sweep.svg", csv_path.display())?;
    }
    if let Some(path) = &a.report {
        let page = render::page(&d, meta(), &table, &swept.svg(&d)?, &csv);
        write_report(&page, path)?;
        outln!("  wrote the report {}", path.display())?;
    }
    if swept.partial() {
        return Err(stopped(&stop, swept.finished(), all));
    }
    Ok(())
}
