//! `serverbench sweep`: one `serverbench_study::run_sweep` (or `sweep_rates_until`); this prints its table, the
//! window sensitivity, and writes sweep.csv, sweep.json and sweep.svg — those of the replays that
//! finished, marked partial, when SIGINT or SIGTERM stops it.

use crate::cli::SweepArgs;
use crate::inputs;
use crate::output::{prepare_out, replays_bar, write_file, write_json};
use crate::report::Report;
use crate::signals::{StudyStop, INTERRUPTED};
use anyhow::{bail, Result};
use serverbench_sim::Deployment;
use serverbench_study::{
    rate_sweep_plot, sweep_plot, BandPicks, Level, RateSweep, SweepReport, SweepResult, UnderError,
};
use std::io::Write;

/// The files a sweep writes in `--out`.
const FILES: [&str; 3] = ["sweep.csv", "sweep.json", "sweep.svg"];

/// Makes `--out` ready once the flags are read, before any replay: a folder that cannot be written is
/// found now, not after the sweep, and no file of an earlier sweep is left in it.
fn prepare(a: &SweepArgs) -> Result<()> {
    match &a.out {
        Some(dir) => prepare_out(dir, &FILES),
        None => Ok(()),
    }
}

/// How a partial result is announced above its table.
fn partial_line(stop: &StudyStop, finished: Option<usize>, all: usize) -> String {
    let done = finished.map_or(String::new(), |n| format!("{n} of "));
    format!(
        "  PARTIAL: stopped by {} after {done}{all} replays; the table is of those that finished\n\n",
        stop.why().unwrap_or_else(|| "a signal".into())
    )
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
    let d = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let stop = StudyStop::install()?;
    if let Some(rates) = &a.rates {
        return rates_run(&a, &d, rates, &stop);
    }
    if a.replay.arrivals != "closed" {
        bail!("--arrivals: sweep varies concurrency in the closed loop; for an open-loop sweep give --rates R1,R2,… (Poisson trees per second), and replay a trace once with simulate --arrivals trace");
    }
    let seeds = inputs::seeds(&a.seeds)?;
    prepare(&a)?;
    let started = std::time::Instant::now();
    let mut study = inputs::study(&a.deployment, &a.workload, &a.replay)?;
    study.threads = inputs::threads(a.threads)?;
    let windows = match &a.windows {
        Some(w) => inputs::windows(w)?,
        None => Vec::new(),
    };
    let report =
        serverbench_study::run_sweep(study, &a.concurrency, &seeds, &windows, &stop.executor())?;
    let (r, all) = (&report.result, report.planned_runs);
    if r.levels.is_empty() {
        return write_nothing_finished(&a, &d, r, &stop, all);
    }
    outln!(
        "serverbench sweep — {} ({} × {} GPU, ${:.2}/GPU-h), {} concurrency levels × {} seeds, window {} s, protocol {}\n",
        d.name,
        d.gpus(),
        d.hardware.name,
        d.gpu_hour_dollars,
        a.concurrency.len(),
        seeds.len(),
        r.window_s,
        a.replay.protocol()
    )?;
    if let Some(note) = crate::output::unfitted_profile_note(&d) {
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
        printed: &printed,
        csv: &|w| write_csv(w, r),
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
) -> Result<Printed> {
    let r = &report.result;
    let mut printed = table(r, d);
    if let Some(u) = &report.under_model_error {
        printed.notes.push_str(&under_error_note(u, d));
    }
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
        printed.extra.push_str(&format!("\n{}", band_text(d, b)));
    }
    if a.windows.is_some() {
        printed.extra.push_str(&format!("\n{}", window_table(r)));
    }
    Ok(printed)
}

/// The lines under the recommendation: the level that is best in the worst case of the profile's
/// band, and, where it is not the nominal one, what the nominal one's score hangs on.
fn under_error_note(u: &UnderError, d: &Deployment) -> String {
    let band = format!(
        "compute ±{:.0} %, bandwidth ±{:.0} %, host ±{:.0} %",
        100.0 * u.compute,
        100.0 * u.memory,
        100.0 * u.overhead
    );
    let whose = match u.stated {
        true => format!("profile {}'s stated error: {band}", d.profile.name),
        false => format!(
            "a default error, {band}: profile {} states none",
            d.profile.name
        ),
    };
    let w = u.level(u.best_worst_case).expect("the pick is a level");
    let mut t = format!(
        "  Under the cost model's error ({whose}): accept {} (mean D ≥ {:.3} at both ends).\n",
        u.best_worst_case, w.d_worst
    );
    if let (Some((metric, near)), Some(n)) = (u.hangs_on(), u.level(u.best_nominal)) {
        t.push_str(&format!(
            "  At {} the score hangs on a {metric} within {:.0} % of its target (mean D {:.3}, {:.3} at the slow end, {:.3} at the fast end).\n",
            u.best_nominal,
            100.0 * near,
            n.d_nominal,
            n.d_slow,
            n.d_fast
        ));
    }
    t
}

/// A sweep stopped before any replay finished: sweep.json (partial, no level) and sweep.csv's header,
/// and no plot.
fn write_nothing_finished(
    a: &SweepArgs,
    d: &Deployment,
    r: &SweepResult,
    stop: &StudyStop,
    all: usize,
) -> Result<()> {
    outln!("  PARTIAL: stopped before any of the {all} replays finished")?;
    if let Some(dir) = &a.out {
        write_file(dir, "sweep.csv", |w| write_csv(w, r))?;
        write_json(dir, "sweep.json", &crate::meta::Meta::now(Some(d)), r)?;
    }
    Err(stopped(stop, Some(0), all))
}

/// What a sweep prints, in parts, so that a report shows the table of levels as a table: its rows
/// (cells padded as printed, so that the columns line up), the lines after it, and what `--band` and
/// `--windows` add.
struct Printed {
    /// A line above the table (a stopped sweep's `PARTIAL: …`), or nothing.
    head: String,
    /// The load column's name and width.
    axis: (&'static str, usize),
    rows: Vec<Vec<String>>,
    notes: String,
    extra: String,
}

impl Printed {
    /// As the terminal shows it.
    fn text(&self) -> String {
        let (axis, width) = self.axis;
        let mut t = String::new();
        for cells in std::iter::once(&level_header(axis)).chain(&self.rows) {
            let c = cells;
            t.push_str(&format!(
                "  {:>width$}  {:>16}  {:>12}  {:>7}  {:>7}  {:>13}  {:>13}{}\n",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
            ));
        }
        format!("{}{t}{}{}", self.head, self.notes, self.extra)
    }

    /// As a report shows it: the levels as an HTML table, the notes as paragraphs and the extras
    /// as printed.
    fn report(&self, r: &mut Report) {
        let trim = |cells: &Vec<String>| cells.iter().map(|c| c.trim().to_string()).collect();
        let header: Vec<String> = trim(&level_header(self.axis.0));
        let rows: Vec<Vec<String>> = self.rows.iter().map(trim).collect();
        r.paragraphs(&self.head);
        r.table("", &header, &rows);
        r.paragraphs(&self.notes);
        if !self.extra.trim().is_empty() {
            r.text(self.extra.trim_matches('\n'));
        }
    }
}

/// What a sweep writes: its printed table, CSV and plot, to `--out` and `--report`.
struct Outputs<'a> {
    printed: &'a Printed,
    csv: &'a dyn Fn(&mut dyn Write) -> std::io::Result<()>,
    svg: &'a dyn Fn() -> Result<String>,
}

impl Outputs<'_> {
    fn write<T: serde::Serialize>(&self, a: &SweepArgs, d: &Deployment, result: &T) -> Result<()> {
        if let Some(dir) = &a.out {
            write_file(dir, "sweep.csv", |w| (self.csv)(w))?;
            write_json(dir, "sweep.json", &crate::meta::Meta::now(Some(d)), result)?;
            let svg = (self.svg)()?;
            write_file(dir, "sweep.svg", |w| w.write_all(svg.as_bytes()))?;
            outln!(
                "  wrote {}, sweep.json and sweep.svg",
                dir.join("sweep.csv").display()
            )?;
        }
        if let Some(path) = &a.report {
            let mut csv = Vec::new();
            (self.csv)(&mut csv)?;
            let title = format!("serverbench sweep — {}", d.name);
            let mut r = Report::new(&title, crate::meta::Meta::now(Some(d)));
            r.section("Result", "The table the command printed.");
            self.printed.report(&mut r);
            r.svg(
                    "D, G and f against the load: mean over seeds, band min..max; green where mean f reaches 90 %; red line: the recommended level",
                    &(self.svg)()?,
                )
                .section("Every level", "sweep.csv's columns (fractions to four significant digits).")
                .csv_table("", &String::from_utf8_lossy(&csv));
            r.write(path)?;
            outln!("  wrote the report {}", path.display())?;
        }
        Ok(())
    }
}

fn table(r: &SweepResult, d: &Deployment) -> Printed {
    let rows = r.levels.iter().map(|l| {
        let c = l.concurrency;
        level_cells(c.to_string(), l, c == r.best_mean, c == r.best_robust)
    });
    let mut t = definitions(d);
    let robust = r.robust_level().expect("robust level exists");
    let best = r.best_level().expect("best level exists");
    t.push_str(&format!(
        "  Recommendation: accept {} concurrent sessions (mean D {:.3}); the robust choice is {} (its worst 10 % of seeds still give D ≥ {:.3}).\n",
        best.concurrency, best.d.mean, robust.concurrency, robust.d.p10
    ));
    Printed {
        head: String::new(),
        axis: ("c", 5),
        rows: rows.collect(),
        notes: t,
        extra: String::new(),
    }
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
    for win in r.levels.first().map_or(&[][..], |l| &l.windows) {
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

/// `sweep --rates`: one open-loop Poisson level per rate. Stopped by a signal, it waits for the
/// replays under way and writes the rates that have one, marked partial.
fn rates_run(a: &SweepArgs, d: &Deployment, rates: &[f64], stop: &StudyStop) -> Result<()> {
    inputs::check_rates(rates)?;
    let mut replay = a.replay.clone();
    replay.arrivals = format!("poisson:{}", rates[0]);
    let mut study = inputs::study(&a.deployment, &a.workload, &replay)?;
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
            write_file(dir, "sweep.csv", |w| write_rate_csv(w, &r))?;
            write_json(dir, "sweep.json", &crate::meta::Meta::now(Some(d)), &r)?;
        }
        return Err(stopped(stop, Some(0), all));
    }
    outln!(
        "serverbench sweep — {} ({} × {} GPU, ${:.2}/GPU-h), {} Poisson arrival rates × {} seeds, window {} s, open loop (at most {} trees open)\n",
        d.name,
        d.gpus(),
        d.hardware.name,
        d.gpu_hour_dollars,
        rates.len(),
        seeds.len(),
        r.window_s,
        r.max_open
    )?;
    let mut printed = rate_table(&r, d);
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
        printed: &printed,
        csv: &|w| write_rate_csv(w, &r),
        svg: &svg,
    };
    outputs.write(a, d, &r)?;
    if r.partial {
        return Err(stopped(stop, None, all));
    }
    Ok(())
}

fn rate_table(r: &RateSweep, d: &Deployment) -> Printed {
    let rows = r.levels.iter().map(|rl| {
        let best = (rl.rate == r.best_mean, rl.rate == r.best_robust);
        level_cells(rl.rate.to_string(), &rl.level, best.0, best.1)
    });
    let mut t = definitions(d);
    t.push_str("  Open loop: the rate is offered load; the closed-loop sweep (without --rates) is what the benchmark scores.\n");
    Printed {
        head: String::new(),
        axis: ("trees/s", 8),
        rows: rows.collect(),
        notes: t,
        extra: String::new(),
    }
}

/// The header of the table of levels; `axis` names the load.
fn level_header(axis: &str) -> Vec<String> {
    [
        axis,
        "D mean ± std",
        "D min..max",
        "G",
        "f",
        "p90 TTFT (s)",
        "p90 TPOT (ms)",
        "",
    ]
    .map(String::from)
    .to_vec()
}

/// One level's cells, padded inside as printed (the mean and spread around `±` and `..`); the level
/// with the best mean and the best robust D are marked in the last cell.
fn level_cells(label: String, l: &Level, best_mean: bool, best_robust: bool) -> Vec<String> {
    let mark = match (best_mean, best_robust) {
        (true, true) => " ◀ best mean D, best robust D",
        (true, false) => " ◀ best mean D",
        (false, true) => " ◀ best robust D",
        _ => "",
    };
    let invalid = if l.all_valid {
        String::new()
    } else {
        format!(
            " ({} runs invalid: their summaries say why)",
            l.invalid_runs
        )
    };
    vec![
        label,
        format!("{:>8.3} ± {:<5.3}", l.d.mean, l.d.std),
        format!("{:>5.2}..{:<5.2}", l.d.min, l.d.max),
        format!("{:.3}", l.g.mean),
        format!("{:>6.1}%", l.f.mean * 100.0),
        format!("{:.3}", l.ttft_p90_s.mean),
        format!("{:.2}", l.tpot_p90_s.mean * 1e3),
        format!("{invalid}{mark}"),
    ]
}

/// What D, G and f mean under the deployment's targets.
fn definitions(d: &Deployment) -> String {
    format!(
        "\n  D = value of requests that met TTFT ≤ {:.2} s and TPOT ≤ {:.1} ms, per $ of GPU time; G = value of all requests per $; f = D / G.\n",
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    )
}

fn write_rate_csv(w: &mut dyn Write, r: &RateSweep) -> std::io::Result<()> {
    writeln!(w, "rate_per_s,d_mean,d_min,d_max,d_std,d_p10,g_mean,f_mean,ttft_p90_mean_s,tpot_p90_mean_s,all_valid")?;
    for rl in &r.levels {
        let l = &rl.level;
        writeln!(
            w,
            "{},{},{},{},{},{},{},{},{},{},{}",
            rl.rate,
            l.d.mean,
            l.d.min,
            l.d.max,
            l.d.std,
            l.d.p10,
            l.g.mean,
            l.f.mean,
            l.ttft_p90_s.mean,
            l.tpot_p90_s.mean,
            l.all_valid
        )?;
    }
    Ok(())
}

/// `sweep --band`: the recommendation at both ends of the profile's band, and whether it moves.
fn band_text(d: &Deployment, b: &BandPicks) -> String {
    let mut t = format!(
        "  band of profile {} (compute efficiencies ±{:.0} %, bandwidth ±{:.0} %, host overheads ±{:.0} %):\n",
        d.profile.name,
        100.0 * b.band.compute,
        100.0 * b.band.memory,
        100.0 * b.band.overhead
    );
    for (label, p) in b.ends() {
        t.push_str(&format!(
            "    {label:<9} best mean D at c = {} (D {:.3}), robust c = {}\n",
            p.best_mean, p.best_mean_d, p.best_robust
        ));
    }
    t.push_str(&match b.moves() {
        false => "  The recommended concurrency does not move within the band.\n".to_string(),
        true => format!(
            "  The recommendation moves within the band: best mean c = {} / {} / {} (slow / nominal / fast).\n",
            b.slow.best_mean, b.nominal.best_mean, b.fast.best_mean
        ),
    });
    t
}
