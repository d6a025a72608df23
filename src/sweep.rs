//! `serverbench sweep`: one `serverbench_study::run_sweep` (or `sweep_rates_until`), rendered by
//! `serverbench_study::report::sweep::Swept`; this prints its table and writes sweep.csv, sweep.json and
//! sweep.svg — those of the replays that finished, marked partial, when SIGINT or SIGTERM stops it.

use crate::cli::SweepArgs;
use crate::inputs;
use crate::output::{prepare_out, replays_bar, write_files, write_report, write_text};
use crate::signals::{study_stop, Stoppable, INTERRUPTED};
use anyhow::{anyhow, Result};
use serverbench_study::report::sweep::{self as render, Swept};
use serverbench_study::{run_sweep, sweep_rates_until};

/// The files a sweep writes in `--out`.
const FILES: [&str; 3] = ["sweep.csv", "sweep.json", "sweep.svg"];

pub fn run(a: SweepArgs) -> Result<()> {
    let d = inputs::resolved(&a.run.deployment)?;
    if inputs::print_config(&a.run.deployment, &d)? {
        return Ok(());
    }
    let stop = study_stop()?;
    // Each way checks its flags in its own order, and makes `--out` ready before any replay: a folder
    // that cannot be written is found now, not after the sweep, and no file of an earlier sweep is
    // left in it.
    let prepare = || {
        a.out
            .as_ref()
            .map_or(Ok(()), |dir| prepare_out(dir, &FILES))
    };
    let (swept, levels, seeds, started) = if let Some(rates) = &a.rates {
        let (deployment, workload, replay) = inputs::choices(&a.run);
        let mut study = inputs::rate_sweep_study(&deployment, &workload, &replay, rates)?;
        study.threads = inputs::threads(a.threads)?;
        let seeds = inputs::seeds(&a.seeds)?;
        prepare()?;
        let started = std::time::Instant::now();
        let bar = replays_bar(rates.len() * seeds.len(), true);
        let r = sweep_rates_until(&study, rates, &seeds, stop.flag(), &|| bar.inc(1))?;
        bar.finish_and_clear();
        (Swept::Rates(r), rates.len(), seeds.len(), started)
    } else {
        inputs::check_closed_sweep(&inputs::replay_choice(&a.run.replay))?;
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
        let r = run_sweep(study, levels, &seeds, &windows, &Stoppable(&stop))?;
        let r = Swept::Levels(Box::new(r));
        (r, levels.len(), seeds.len(), started)
    };
    let all = levels * seeds;
    let meta = || crate::meta::now(Some(&d));
    if swept.is_empty() {
        outln!("  PARTIAL: stopped before any of the {all} replays finished")?;
        if let Some(dir) = &a.out {
            write_text(dir, "sweep.csv", &swept.csv())?;
            write_text(dir, "sweep.json", &swept.json(&meta())?)?;
        }
        let message = render::partial_error(stop.why().as_deref(), Some(0), all);
        return Err(crate::exit(INTERRUPTED, message));
    }
    let header = swept.header(&d, levels, seeds, a.run.replay.protocol());
    outln!("{header}")?;
    let why = stop.why().unwrap_or_else(|| "a signal".into());
    let flags = (a.band, a.windows.is_some());
    let table = swept
        .table(&d, flags, Some((&why, all)))
        .map_err(|e| anyhow!(e))?;
    out!("{}", table.text())?;
    let ran = swept.finished().unwrap_or(all);
    let (window, elapsed) = (swept.window_s(), started.elapsed().as_secs_f64());
    outln!("\n  {ran} replays of {window} s simulated in {elapsed:.1} s")?;
    if let Some(dir) = &a.out {
        write_files(dir, &[swept.files(&d, dir, &meta())?])?;
    }
    if let Some(path) = &a.report {
        let page = render::page(&d, meta(), &table, &swept.svg(&d)?, &swept.csv());
        write_report(&page, path)?;
    }
    if swept.partial() {
        let message = render::partial_error(stop.why().as_deref(), swept.finished(), all);
        return Err(crate::exit(INTERRUPTED, message));
    }
    Ok(())
}
