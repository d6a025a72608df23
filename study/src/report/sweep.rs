//! `sweep`'s renderings: the table of levels (concurrency or arrival rate) with the recommendation, the
//! recommendation under the cost model's error, `--band`'s picks and `--windows`' table; sweep.csv; and
//! the HTML page. Pure: a sweep's result in, text out.

use super::meta::Meta;
use super::page::Report;
use super::OutFiles;
use crate::{BandPicks, Level, RateSweep, SweepReport, SweepResult, UnderError};
use serverbench_sim::Deployment;
use std::fmt::Write as _;
use std::path::Path;

/// The first line of a sweep's output: the deployment, the grid and the protocol.
pub fn header(
    d: &Deployment,
    levels: usize,
    seeds: usize,
    window_s: f64,
    protocol: &str,
) -> String {
    format!(
        "serverbench sweep — {} ({} × {} GPU, ${:.2}/GPU-h), {levels} concurrency levels × {seeds} seeds, window {window_s} s, protocol {protocol}\n",
        d.name,
        d.gpus(),
        d.hardware.name,
        d.gpu_hour_dollars,
    )
}

/// The first line of `sweep --rates`' output.
pub fn rates_header(d: &Deployment, r: &RateSweep, rates: usize, seeds: usize) -> String {
    format!(
        "serverbench sweep — {} ({} × {} GPU, ${:.2}/GPU-h), {rates} Poisson arrival rates × {seeds} seeds, window {} s, open loop (at most {} trees open)\n",
        d.name,
        d.gpus(),
        d.hardware.name,
        d.gpu_hour_dollars,
        r.window_s,
        r.max_open
    )
}

/// How a partial result is announced above its table; `why` names the signal.
pub fn partial_line(why: &str, finished: Option<usize>, all: usize) -> String {
    let done = finished.map_or(String::new(), |n| format!("{n} of "));
    format!(
        "  PARTIAL: stopped by {why} after {done}{all} replays; the table is of those that finished\n\n"
    )
}

/// The error a stopped sweep ends with, after writing what finished: `why` names the signal (`None`:
/// "interrupted"), `finished` counts the replays that did (`None`: a rate sweep keeps no count).
pub fn partial_error(why: Option<&str>, finished: Option<usize>, all: usize) -> String {
    let done = match finished {
        Some(n) => format!("the {n} of {all} replays"),
        None => format!("those of the {all} replays"),
    };
    let why = why.unwrap_or("interrupted");
    format!("{why}: wrote {done} that finished, marked partial")
}

/// A finished (or stopped) sweep as the command renders it: the concurrency grid's report, or the
/// open-loop levels of `--rates`.
pub enum Swept {
    /// `sweep`: concurrency levels × seeds.
    Levels(Box<SweepReport>),
    /// `sweep --rates`: Poisson arrival rates × seeds.
    Rates(RateSweep),
}

impl Swept {
    /// Whether no level has a finished replay (stopped before any finished).
    pub fn is_empty(&self) -> bool {
        match self {
            Swept::Levels(r) => r.result.levels.is_empty(),
            Swept::Rates(r) => r.levels.is_empty(),
        }
    }

    /// Whether a stop request left replays unfinished.
    pub fn partial(&self) -> bool {
        match self {
            Swept::Levels(r) => r.result.partial,
            Swept::Rates(r) => r.partial,
        }
    }

    /// The replays that finished, as a stopped sweep's messages count them (a rate sweep keeps no
    /// count of its own: `None`).
    pub fn finished(&self) -> Option<usize> {
        match self {
            Swept::Levels(r) => Some(r.result.cells.len()),
            Swept::Rates(_) => None,
        }
    }

    /// The runs' window, seconds.
    pub fn window_s(&self) -> f64 {
        match self {
            Swept::Levels(r) => r.result.window_s,
            Swept::Rates(r) => r.window_s,
        }
    }

    /// The header printed above the table (with the profile's note, when it was not fitted), for
    /// `levels` planned levels (or rates) × `seeds` and the replay's `protocol`.
    pub fn header(&self, d: &Deployment, levels: usize, seeds: usize, protocol: &str) -> String {
        match self {
            Swept::Levels(r) => {
                let mut h = header(d, levels, seeds, r.result.window_s, protocol);
                if let Some(note) = super::summary::unfitted_profile_note(d) {
                    h = format!(
                        "{h}
{note}"
                    );
                }
                h
            }
            Swept::Rates(r) => rates_header(d, r, levels, seeds),
        }
    }

    /// The table printed: the levels with the recommendation, what `band` (`--band`'s picks) and
    /// `windows` (`--windows`' table) add, and above it the line of a sweep `why` stopped (of `all`
    /// planned replays). `--band` on a profile that states no band is an error.
    pub fn table(
        &self,
        d: &Deployment,
        (band, windows): (bool, bool),
        stopped: Option<(&str, usize)>,
    ) -> Result<SweepTable, String> {
        let mut t = match self {
            Swept::Levels(report) => {
                let mut t = SweepTable::levels(report, d);
                if let (true, Some(_)) = (band, &report.under_model_error) {
                    let Some(b) = &report.band else {
                        return Err(format!("--band: profile {} states no band (a `band:` of compute, memory and overhead half-widths)", d.profile.name));
                    };
                    t.add_band(d, b);
                }
                if windows {
                    t.add_windows(&report.result);
                }
                t
            }
            Swept::Rates(r) => SweepTable::rates(r, d),
        };
        if let (true, Some((why, all))) = (self.partial(), stopped) {
            t.head = partial_line(why, self.finished(), all);
        }
        Ok(t)
    }

    /// sweep.csv.
    pub fn csv(&self) -> String {
        match self {
            Swept::Levels(r) => csv(&r.result),
            Swept::Rates(r) => rate_csv(r),
        }
    }

    /// sweep.json's text, with `meta`.
    pub fn json(&self, meta: &Meta) -> serde_json::Result<String> {
        match self {
            Swept::Levels(r) => meta.json(r),
            Swept::Rates(r) => meta.json(r),
        }
    }

    /// sweep.svg.
    pub fn svg(&self, d: &Deployment) -> Result<String, crate::plot::PlotError> {
        match self {
            Swept::Levels(r) => crate::sweep_plot(r, d),
            Swept::Rates(r) => crate::rate_sweep_plot(r, d),
        }
    }

    /// What `--out dir` holds: sweep.csv, sweep.json (headed by `meta`) and sweep.svg.
    pub fn files(&self, d: &Deployment, dir: &Path, meta: &Meta) -> anyhow::Result<OutFiles> {
        Ok(OutFiles {
            files: vec![
                ("sweep.csv", self.csv()),
                ("sweep.json", self.json(meta)?),
                ("sweep.svg", self.svg(d)?),
            ],
            line: format!(
                "  wrote {}, sweep.json and sweep.svg",
                dir.join("sweep.csv").display()
            ),
        })
    }
}

/// What a sweep prints, in parts, so that a page shows the table of levels as a table: its rows
/// (cells padded as printed, so that the columns line up), the lines after it, and what `--band` and
/// `--windows` add.
pub struct SweepTable {
    /// A line above the table (a stopped sweep's `PARTIAL: …`), or nothing.
    pub head: String,
    /// The load column's name and width.
    axis: (&'static str, usize),
    rows: Vec<Vec<String>>,
    notes: String,
    extra: String,
}

impl SweepTable {
    /// The levels of a closed-loop sweep, its recommendation and, when the sweep has it, the
    /// recommendation under the cost model's error.
    pub fn levels(report: &SweepReport, d: &Deployment) -> SweepTable {
        let r = &report.result;
        let robust = r.robust_level().expect("robust level exists");
        let best = r.best_level().expect("best level exists");
        // No level is marked best where none scores.
        let scores = best.d.mean > 0.0;
        let rows = r.levels.iter().map(|l| {
            let c = l.concurrency;
            let (mean, robust) = (c == r.best_mean && scores, c == r.best_robust && scores);
            level_cells(c.to_string(), l, mean, robust)
        });
        let mut notes = definitions(d);
        notes.push_str(&if scores {
            format!(
                "  Recommendation: accept {} concurrent sessions (mean D {:.3}); the robust choice is {} (its worst 10 % of seeds still give D ≥ {:.3}).\n",
                best.concurrency, best.d.mean, robust.concurrency, robust.d.p10
            )
        } else {
            "  Recommendation: none — no request met both targets at any level swept (D = 0 everywhere): fewer sessions, a faster deployment or other targets.\n".to_string()
        });
        if let Some(u) = &report.under_model_error {
            notes.push_str(&under_error_note(u, d));
        }
        SweepTable {
            head: String::new(),
            axis: ("c", 5),
            rows: rows.collect(),
            notes,
            extra: String::new(),
        }
    }

    /// The levels of a rate sweep (open loop).
    pub fn rates(r: &RateSweep, d: &Deployment) -> SweepTable {
        let rows = r.levels.iter().map(|rl| {
            let best = (rl.rate == r.best_mean, rl.rate == r.best_robust);
            level_cells(rl.rate.to_string(), &rl.level, best.0, best.1)
        });
        let mut notes = definitions(d);
        notes.push_str("  Open loop: the rate is offered load; the closed-loop sweep (without --rates) is what the benchmark scores.\n");
        SweepTable {
            head: String::new(),
            axis: ("trees/s", 8),
            rows: rows.collect(),
            notes,
            extra: String::new(),
        }
    }

    /// Adds `--band`'s picks.
    pub fn add_band(&mut self, d: &Deployment, b: &BandPicks) {
        self.extra.push_str(&format!("\n{}", band_text(d, b)));
    }

    /// Adds `--windows`' table.
    pub fn add_windows(&mut self, r: &SweepResult) {
        self.extra.push_str(&format!("\n{}", window_table(r)));
    }

    /// As the terminal shows it.
    pub fn text(&self) -> String {
        let (axis, width) = self.axis;
        let mut t = String::new();
        for c in std::iter::once(&level_header(axis)).chain(&self.rows) {
            let _ = writeln!(
                t,
                "  {:>width$}  {:>16}  {:>12}  {:>7}  {:>7}  {:>13}  {:>13}{}",
                c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
            );
        }
        format!("{}{t}{}{}", self.head, self.notes, self.extra)
    }

    /// As a page shows it: the levels as an HTML table, the notes as paragraphs and the extras
    /// as printed.
    fn fill(&self, r: &mut Report) {
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

/// The sweep's HTML page: the printed table, the plot and sweep.csv's rows.
pub fn page(d: &Deployment, meta: Meta, table: &SweepTable, svg: &str, csv: &str) -> Report {
    let title = format!("serverbench sweep — {}", d.name);
    let mut r = Report::new(&title, meta);
    r.section("Result", "The table the command printed.");
    table.fill(&mut r);
    r.svg(
        "D, G and f against the load: mean over seeds, band min..max; green where mean f reaches 90 %; red line: the recommended level",
        svg,
    )
    .section("Every level", "sweep.csv's columns (fractions to four significant digits).")
    .csv_table("", csv);
    r
}

/// The lines under the recommendation: the level of least worst-case regret over the profile's band,
/// where planning for the slow end alone would differ, and, where the pick is not the nominal one,
/// what the nominal one's score hangs on.
fn under_error_note(u: &UnderError, d: &Deployment) -> String {
    let band = format!(
        "compute ±{:.0} %, bandwidth ±{:.0} %, host ±{:.0} %",
        100.0 * u.compute,
        100.0 * u.memory,
        100.0 * u.overhead
    );
    let whose = match (u.stated, d.profile.derived_from()) {
        (true, Some(source)) => format!(
            "profile {}'s stated error, measured for {source}, which it was derived from, not on this GPU: {band}",
            d.profile.name
        ),
        (true, None) => format!("profile {}'s stated error: {band}", d.profile.name),
        (false, _) => format!(
            "a default error, {band}: profile {} states none",
            d.profile.name
        ),
    };
    if u.nothing_scores() {
        return format!(
            "  Under the cost model's error ({whose}): no level scores above 0 anywhere in the band.\n"
        );
    }
    let p = u.level(u.least_regret).expect("the pick is a level");
    let mut t = format!(
        "  Under the cost model's error ({whose}): accept {}: wherever in the band the server lies, it gives up at most {:.0} % of the best level's mean D (mean D {:.3}, {:.3} at the slow end, {:.3} at the fast end).\n",
        u.least_regret,
        100.0 * p.regret_worst,
        p.d_nominal,
        p.d_slow,
        p.d_fast
    );
    if u.best_worst_case != u.least_regret {
        let w = u.level(u.best_worst_case).expect("a level");
        t.push_str(&format!(
            "  Planning for the slow end alone would accept {} (mean D ≥ {:.3} at both ends, up to {:.0} % below the best).\n",
            u.best_worst_case,
            w.d_worst,
            100.0 * w.regret_worst
        ));
    }
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

/// `--windows`: each prefix window's mean D per level, and its ratio to the longest's.
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

/// sweep.csv: one row per concurrency, every digit.
pub fn csv(r: &SweepResult) -> String {
    let mut w = String::from("concurrency,d_mean,d_min,d_max,d_std,d_p10,g_mean,g_min,g_max,g_std,f_mean,f_min,f_max,f_std,ttft_p90_mean_s,tpot_p90_mean_s,all_valid");
    for win in r.levels.first().map_or(&[][..], |l| &l.windows) {
        let _ = write!(w, ",d_mean_w{}", win.window_s);
    }
    w.push('\n');
    for l in &r.levels {
        let _ = write!(
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
        );
        for win in &l.windows {
            let _ = write!(w, ",{}", win.d_mean);
        }
        w.push('\n');
    }
    w
}

/// `sweep --rates`' sweep.csv: one row per rate.
pub fn rate_csv(r: &RateSweep) -> String {
    let mut w = String::from("rate_per_s,d_mean,d_min,d_max,d_std,d_p10,g_mean,f_mean,ttft_p90_mean_s,tpot_p90_mean_s,all_valid\n");
    for rl in &r.levels {
        let l = &rl.level;
        let _ = writeln!(
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
        );
    }
    w
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{run_sweep, Inline, LevelUnderError, Study};
    use serverbench_sim::RunConfig;
    use serverbench_workloads::Workload;

    fn report(windows: &[f64]) -> (SweepReport, Deployment) {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let study = Study::new(d.clone(), w, RunConfig::new(1, 0, 120.0));
        let r = run_sweep(study, &[1, 8], &[0], windows, &Inline(&|| {})).unwrap();
        (r, d)
    }

    #[test]
    fn a_swept_grid_renders_as_its_parts_do() {
        let (r, d) = report(&[60.0, 120.0]);
        let whole = SweepTable::levels(&r, &d).text();
        let csv_text = csv(&r.result);
        let swept = Swept::Levels(Box::new(r));
        assert!(!swept.is_empty() && !swept.partial());
        assert_eq!(swept.finished(), Some(2));
        let t = swept
            .table(&d, (false, false), Some(("SIGINT", 2)))
            .unwrap();
        assert_eq!(t.text(), whole);
        let with_windows = swept.table(&d, (false, true), None).unwrap().text();
        assert!(with_windows.starts_with(&whole) && with_windows.len() > whole.len());
        assert_eq!(swept.csv(), csv_text);
        let header = swept.header(&d, 2, 1, "cold");
        assert!(
            header.starts_with("serverbench sweep — qwen3-8b-1xh200"),
            "{header}"
        );
        let json = swept.json(&super::super::meta::test_meta()).unwrap();
        assert!(json.contains("\"meta\"") && json.contains("\"levels\""));
    }

    /// `--out`'s three files, as the sweep's parts render them, and the line naming them; a stopped
    /// sweep's error counts what finished (a rate sweep cannot).
    #[test]
    fn a_sweep_writes_its_three_files_and_a_stopped_one_says_what_it_kept() {
        let (r, d) = report(&[]);
        let swept = Swept::Levels(Box::new(r));
        let meta = super::super::meta::test_meta();
        let f = swept.files(&d, Path::new("out"), &meta).unwrap();
        let names: Vec<&str> = f.files.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["sweep.csv", "sweep.json", "sweep.svg"]);
        assert_eq!(f.files[0].1, swept.csv());
        assert_eq!(f.files[1].1, swept.json(&meta).unwrap());
        assert!(f.files[2].1.starts_with("<svg"), "{}", f.files[2].1);
        let csv = Path::new("out").join("sweep.csv");
        assert_eq!(
            f.line,
            format!("  wrote {}, sweep.json and sweep.svg", csv.display())
        );
        assert_eq!(
            partial_error(Some("SIGTERM"), Some(3), 8),
            "SIGTERM: wrote the 3 of 8 replays that finished, marked partial"
        );
        assert_eq!(
            partial_error(None, None, 8),
            "interrupted: wrote those of the 8 replays that finished, marked partial"
        );
    }

    /// The note under the error, from the simulated D of the MoE replays on vLLM (regret.md,
    /// moe-syn-cold): 16 is the pick of least worst-case regret, 8 the slow end's.
    #[test]
    fn the_note_under_the_error_gives_the_pick_its_worst_regret_and_the_slow_end_s_plan() {
        let (r, d) = report(&[]);
        let mut u = r.under_model_error.unwrap();
        let level = |concurrency, (d_nominal, d_slow, d_fast): (f64, f64, f64)| LevelUnderError {
            concurrency,
            d_nominal,
            d_slow,
            d_fast,
            d_worst: f64::min(d_nominal, f64::min(d_slow, d_fast)),
            regret_worst: 0.0,
            ttft_to_target: 0.5,
            tpot_to_target: 0.89,
        };
        u.levels = vec![
            level(4, (2.32, 2.12, 2.43)),
            level(8, (3.44, 2.89, 3.70)),
            level(16, (3.90, 2.47, 4.81)),
        ];
        u.least_regret = crate::robust::set_regrets(&mut u.levels);
        (u.best_worst_case, u.best_nominal) = (8, 16);
        let note = under_error_note(&u, &d);
        assert!(note.contains("): accept 16: wherever in the band the server lies, it gives up at most 15 % of the best level's mean D (mean D 3.900, 2.470 at the slow end, 4.810 at the fast end).\n"), "{note}");
        assert!(note.contains("  Planning for the slow end alone would accept 8 (mean D ≥ 2.890 at both ends, up to 23 % below the best).\n"), "{note}");
        assert!(
            !note.contains("hangs on"),
            "the pick is the nominal one: {note}"
        );
        // A nominal pick that does not survive: what its score hangs on.
        u.best_nominal = 8;
        let note = under_error_note(&u, &d);
        assert!(note.contains("  At 8 the score hangs on a TPOT within 11 % of its target (mean D 3.440, 2.890 at the slow end, 3.700 at the fast end).\n"), "{note}");
        for l in &mut u.levels {
            (l.d_nominal, l.d_slow, l.d_fast) = (0.0, 0.0, 0.0);
        }
        assert!(
            under_error_note(&u, &d).ends_with("no level scores above 0 anywhere in the band.\n")
        );
    }

    #[test]
    fn the_table_marks_the_pick_and_says_what_the_error_does() {
        let (r, d) = report(&[60.0, 120.0]);
        let mut t = SweepTable::levels(&r, &d);
        t.add_windows(&r.result);
        let text = t.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "      c      D mean ± std    D min..max        G        f   p90 TTFT (s)  p90 TPOT (ms)"
        );
        assert!(text.contains("◀ best mean D"), "{text}");
        assert!(text.contains("  Recommendation: accept "), "{text}");
        assert!(text.contains("  Under the cost model's error (a default error, compute ±10 %, bandwidth ±10 %, host ±25 %: profile"), "{text}");
        assert!(
            text.contains("  window sensitivity: mean D of each prefix window"),
            "{text}"
        );
        assert!(
            text.contains("W = 60 s") && text.contains("(1.00)"),
            "{text}"
        );
    }

    #[test]
    fn the_csv_has_a_row_per_level_and_a_column_per_window() {
        let (r, d) = report(&[60.0, 120.0]);
        let csv = csv(&r.result);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(
            lines[0].ends_with(",all_valid,d_mean_w60,d_mean_w120"),
            "{csv}"
        );
        assert!(
            lines[1].starts_with("1,") && lines[2].starts_with("8,"),
            "{csv}"
        );
        let html = page(
            &d,
            crate::report::meta::test_meta(),
            &SweepTable::levels(&r, &d),
            "<svg></svg>",
            &csv,
        )
        .html();
        assert!(
            html.contains("<th>D mean ± std</th>") && html.contains("<figure>\n<svg></svg>"),
            "{html}"
        );
    }

    #[test]
    fn a_rate_sweep_prints_a_row_per_rate() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let open = RunConfig {
            arrivals: serverbench_sim::Arrivals::Poisson { rate: 0.1 },
            ..RunConfig::new(serverbench_sim::MAX_CONCURRENCY, 0, 120.0)
        };
        let study = Study::new(d.clone(), w, open);
        let r = crate::sweep_rates(&study, &[0.1, 0.2], &[0], &|| {}).unwrap();
        let text = SweepTable::rates(&r, &d).text();
        assert!(text.starts_with("   trees/s      D mean ± std"), "{text}");
        assert!(
            text.contains("  Open loop: the rate is offered load"),
            "{text}"
        );
        let csv = rate_csv(&r);
        assert_eq!(csv.lines().count(), 3);
        assert!(csv.lines().nth(1).unwrap().starts_with("0.1,"), "{csv}");
        assert!(rates_header(&d, &r, 2, 1)
            .starts_with("serverbench sweep — qwen3-8b-1xh200 (1 × h200 GPU, $"));
        assert!(header(&d, 2, 1, 120.0, "cold")
            .ends_with("2 concurrency levels × 1 seeds, window 120 s, protocol cold\n"));
    }

    #[test]
    fn a_partial_sweep_says_how_far_it_got() {
        assert_eq!(
            partial_line("SIGTERM", Some(3), 8),
            "  PARTIAL: stopped by SIGTERM after 3 of 8 replays; the table is of those that finished\n\n"
        );
    }
}
