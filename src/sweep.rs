//! `serverbench sweep`: one `serverbench_study::run_sweep` (or `sweep_rates_until`); this prints its table, the
//! window sensitivity, and writes sweep.csv, sweep.json and sweep.svg — those of the replays that
//! finished, marked partial, when SIGINT or SIGTERM stops it.

use crate::cli::SweepArgs;
use crate::inputs;
use crate::output::{prepare_out, replays_bar, write_file, write_json, write_report};
use crate::signals::{StudyStop, INTERRUPTED};
use anyhow::{bail, Result};
use serverbench_sim::Deployment;
use serverbench_study::report::summary::unfitted_profile_note;
use serverbench_study::report::sweep::{self as render, SweepTable};
use serverbench_study::{rate_sweep_plot, sweep_plot, SweepReport};

/// The files a sweep writes in `--out`.
const FILES: [&str; 3] = ["sweep.csv", "sweep.json", "sweep.svg"];

/// Makes `--out` ready once the flags are read, before any replay: a folder that cannot be written is
/// found now, not after the sweep, and no file of an earlier sweep is left in it.
fn prepare(a: &SweepArgs) -> Result<()> {
    match &a.out {
        Some(dir) => Ok(prepare_out(dir, &FILES)?),
        None => Ok(()),
    }
}

/// How a partial result is announced above its table.
fn partial_line(stop: &StudyStop, finished: Option<usize>, all: usize) -> String {
    let why = stop.why().unwrap_or_else(|| "a signal".into());
    render::partial_line(&why, finished, all)
}

/// The exit of a sweep that a signal stopped, after its files were written.
fn stopped(stop: &StudyStop, finished: Option<usize>, all: usize) -> anyhow::Error {
    let done = match finished {
        Some(n) => format!("the {n} of {all} replays"),
        None => format!("those of the {all} replays"),
    };
    crate::Exit::new(
        INTERRUPTED,
        format!(
            "{}: wrote {done} that finished, marked partial",
            stop.why().unwrap_or_else(|| "interrupted".into())
        ),
    )
    .into()
}

pub fn run(a: SweepArgs) -> Result<()> {
    let d = inputs::resolved(&a.run.deployment)?;
    if inputs::print_config(&a.run.deployment, &d)? {
        return Ok(());
    }
    let stop = StudyStop::install()?;
    if let Some(rates) = &a.rates {
        return rates_run(&a, &d, rates, &stop);
    }
    if a.run.replay.arrivals != "closed" {
        bail!("--arrivals: sweep varies concurrency in the closed loop; for an open-loop sweep give --rates R1,R2,… (Poisson trees per second), and replay a trace once with simulate --arrivals trace");
    }
    let seeds = inputs::seeds(&a.seeds)?;
    prepare(&a)?;
    let started = std::time::Instant::now();
    let mut study = inputs::study(&a.run)?;
    study.threads = inputs::threads(a.threads)?;
    let windows = match &a.windows {
        Some(w) => inputs::windows(w)?,
        None => Vec::new(),
    };
    let report =
        serverbench_study::run_sweep(study, &a.concurrency, &seeds, &windows, &stop.executor())?;
    let (r, all) = (&report.result, report.planned_runs);
    if r.levels.is_empty() {
        outln!("  PARTIAL: stopped before any of the {all} replays finished")?;
        if let Some(dir) = &a.out {
            write_file(dir, "sweep.csv", |w| w.write_all(render::csv(r).as_bytes()))?;
            write_json(dir, "sweep.json", &crate::meta::now(Some(&d)), r)?;
        }
        return Err(stopped(&stop, Some(0), all));
    }
    let (levels, protocol) = (a.concurrency.len(), a.run.replay.protocol());
    let header = render::header(&d, levels, seeds.len(), r.window_s, protocol);
    outln!("{header}")?;
    if let Some(note) = unfitted_profile_note(&d) {
        outln!("{note}")?;
    }
    let printed = printed(&a, &d, &report, &stop)?;
    out!("{}", printed.text())?;
    outln!(
        "\n  {} replays of {} s simulated in {:.1} s",
        r.cells.len(),
        r.window_s,
        started.elapsed().as_secs_f64()
    )?;
    let outputs = Outputs {
        table: &printed,
        csv: render::csv(r),
        svg: &|| Ok(sweep_plot(&report, &d)?),
    };
    outputs.write(&a, &d, &report)?;
    if r.partial {
        return Err(stopped(&stop, Some(r.cells.len()), all));
    }
    Ok(())
}

/// The table of levels with what the flags add under it: the recommendation under the model's error,
/// `--band`'s picks, `--windows`' table.
fn printed(
    a: &SweepArgs,
    d: &Deployment,
    report: &SweepReport,
    stop: &StudyStop,
) -> Result<SweepTable> {
    let r = &report.result;
    let mut printed = SweepTable::levels(report, d);
    if r.partial {
        printed.head = partial_line(stop, Some(r.cells.len()), report.planned_runs);
    }
    if let (true, Some(_)) = (a.band, &report.under_model_error) {
        let Some(b) = &report.band else {
            bail!(
                "--band: profile {} states no band (a `band:` of compute, memory and overhead half-widths)",
                d.profile.name
            );
        };
        printed.add_band(d, b);
    }
    if a.windows.is_some() {
        printed.add_windows(r);
    }
    Ok(printed)
}

/// What a sweep writes: its printed table, CSV and plot, to `--out` and `--report`.
struct Outputs<'a> {
    table: &'a SweepTable,
    csv: String,
    svg: &'a dyn Fn() -> Result<String>,
}

impl Outputs<'_> {
    fn write<T: serde::Serialize>(&self, a: &SweepArgs, d: &Deployment, result: &T) -> Result<()> {
        if let Some(dir) = &a.out {
            write_file(dir, "sweep.csv", |w| w.write_all(self.csv.as_bytes()))?;
            write_json(dir, "sweep.json", &crate::meta::now(Some(d)), result)?;
            let svg = (self.svg)()?;
            write_file(dir, "sweep.svg", |w| w.write_all(svg.as_bytes()))?;
            outln!(
                "  wrote {}, sweep.json and sweep.svg",
                dir.join("sweep.csv").display()
            )?;
        }
        if let Some(path) = &a.report {
            let meta = crate::meta::now(Some(d));
            let page = render::page(d, meta, self.table, &(self.svg)()?, &self.csv);
            write_report(&page, path)?;
            outln!("  wrote the report {}", path.display())?;
        }
        Ok(())
    }
}

/// `sweep --rates`: one open-loop Poisson level per rate. Stopped by a signal, it waits for the
/// replays under way and writes the rates that have one, marked partial.
fn rates_run(a: &SweepArgs, d: &Deployment, rates: &[f64], stop: &StudyStop) -> Result<()> {
    inputs::check_rates(rates)?;
    let mut run = a.run.clone();
    run.replay.arrivals = format!("poisson:{}", rates[0]);
    let mut study = inputs::study(&run)?;
    study.threads = inputs::threads(a.threads)?;
    let seeds = inputs::seeds(&a.seeds)?;
    prepare(a)?;
    let started = std::time::Instant::now();
    let bar = replays_bar(rates.len() * seeds.len(), true);
    let r =
        serverbench_study::sweep_rates_until(&study, rates, &seeds, stop.flag(), &|| bar.inc(1))?;
    bar.finish_and_clear();
    let all = rates.len() * seeds.len();
    if r.levels.is_empty() {
        outln!("  PARTIAL: stopped before any of the {all} replays finished")?;
        if let Some(dir) = &a.out {
            write_file(dir, "sweep.csv", |w| {
                w.write_all(render::rate_csv(&r).as_bytes())
            })?;
            write_json(dir, "sweep.json", &crate::meta::now(Some(d)), &r)?;
        }
        return Err(stopped(stop, Some(0), all));
    }
    outln!("{}", render::rates_header(d, &r, rates.len(), seeds.len()))?;
    let mut printed = SweepTable::rates(&r, d);
    if r.partial {
        printed.head = partial_line(stop, None, all);
    }
    out!("{}", printed.text())?;
    outln!(
        "\n  {} replays of {} s simulated in {:.1} s",
        rates.len() * seeds.len(),
        r.window_s,
        started.elapsed().as_secs_f64()
    )?;
    let svg = || Ok(rate_sweep_plot(&r, d)?);
    let outputs = Outputs {
        table: &printed,
        csv: render::rate_csv(&r),
        svg: &svg,
    };
    outputs.write(a, d, &r)?;
    if r.partial {
        return Err(stopped(stop, None, all));
    }
    Ok(())
}
