//! `screen`'s renderings: the ranking as printed, screen.csv and the HTML page. Pure: a screen's
//! result in, text out.

use super::meta::Meta;
use super::page::Report;
use super::OutFiles;
use crate::ScreenResult;
use std::fmt::Write as _;
use std::path::Path;

/// How a stopped screen is announced above its ranking; `why` names the signal (`None`: "a
/// signal").
pub fn partial_line(why: Option<&str>, finished: usize, all: usize) -> String {
    let why = why.unwrap_or("a signal");
    format!("  PARTIAL: stopped by {why} after {finished} of {all} seeds; the ranking is of those that finished\n")
}

/// The error a stopped screen ends with, after writing what finished; `why` names the signal
/// (`None`: "interrupted").
pub fn partial_error(why: Option<&str>, finished: usize, all: usize) -> String {
    let why = why.unwrap_or("interrupted");
    format!("{why}: wrote the {finished} of {all} seeds that finished, marked partial")
}

/// What `--out dir` holds: screen.csv, screen.json (headed by `meta`) and, once a seed finished,
/// screen.svg.
pub fn files(r: &ScreenResult, dir: &Path, meta: &Meta) -> anyhow::Result<OutFiles> {
    let mut files = vec![("screen.csv", csv(r)), ("screen.json", meta.json(r)?)];
    if !r.seeds.is_empty() {
        files.push(("screen.svg", crate::screen_plot(r)?));
    }
    let line = format!(
        "  wrote {}, screen.json and screen.svg",
        dir.join("screen.csv").display()
    );
    Ok(OutFiles { files, line })
}

/// The ranking as printed: the header, a line per seed (hardest first), the quantiles of D, the
/// representative and the hardest seeds.
pub fn text(r: &ScreenResult) -> String {
    let mut t = format!(
        "serverbench screen — {}, c = {}, {} seeds, window {} s (hardest first)\n\n",
        r.deployment,
        r.concurrency,
        r.seeds.len(),
        r.window_s
    );
    let _ = writeln!(
        t,
        "  {:>4}  {:>6}  {:>8}  {:>8}  {:>7}  {:>13}  flag",
        "rank", "seed", "D", "G", "f", "offered $"
    );
    for s in &r.seeds {
        let _ = writeln!(
            t,
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
    let _ = writeln!(t, "\n  D over seeds: mean {:.3} · p10 {:.3} · p50 {:.3} · p90 {:.3}; flagged: outside [p10, p90]", r.d_mean, r.d_p10, r.d_p50, r.d_p90);
    let _ = writeln!(
        t,
        "  representative seeds (D nearest the median): {:?}",
        r.representative
    );
    let _ = writeln!(t, "  hardest seeds (lowest D): {:?}", r.hardest);
    t
}

/// screen.csv: one row per seed, hardest first, every digit.
pub fn csv(r: &ScreenResult) -> String {
    let mut t = String::from("rank,seed,d,g,f,offered_value,flag\n");
    for s in &r.seeds {
        let _ = writeln!(
            t,
            "{},{},{},{},{},{},{}",
            s.rank, s.seed, s.d, s.g, s.f, s.offered_value, s.flag
        );
    }
    t
}

/// The screen's HTML page: the quantiles and named seeds, the histogram `svg`, the ranking.
pub fn page(r: &ScreenResult, meta: Meta, svg: &str) -> Report {
    let title = format!(
        "serverbench screen — {}, c = {}, {} seeds",
        r.deployment,
        r.concurrency,
        r.seeds.len()
    );
    let mut rep = Report::new(&title, meta);
    rep.section(
        "D over seeds",
        &format!(
            "mean {:.3} · p10 {:.3} · p50 {:.3} · p90 {:.3}; representative seeds (D nearest the median) {:?}; hardest seeds (lowest D) {:?}; flagged: outside [p10, p90].",
            r.d_mean, r.d_p10, r.d_p50, r.d_p90, r.representative, r.hardest
        ),
    )
    .svg("how many seeds reach each D, with the p10, p50 and p90 lines", svg)
    .section("Ranking", "Hardest first.")
    .csv_table("", &csv(r));
    rep
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{run_screen, Inline, Study};
    use serverbench_sim::{Deployment, RunConfig};
    use serverbench_workloads::Workload;

    #[test]
    fn the_ranking_prints_a_line_per_seed_and_names_the_seeds_to_use() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let study = Study::new(d, w, RunConfig::new(1, 0, 60.0));
        let r = run_screen(study, 4, &[0, 1, 2], &Inline(&|| {})).unwrap();
        let text = text(&r);
        assert!(text.starts_with("serverbench screen — qwen3-8b-1xh200, c = 4, 3 seeds, window 60 s (hardest first)\n\n  rank    seed         D         G        f      offered $  flag\n"), "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("     ")).count(),
            3,
            "{text}"
        );
        assert!(
            text.contains("  representative seeds (D nearest the median): ["),
            "{text}"
        );
        let csv = csv(&r);
        assert_eq!(csv.lines().count(), 4);
        assert!(
            csv.starts_with("rank,seed,d,g,f,offered_value,flag\n1,"),
            "{csv}"
        );
        let html = page(&r, crate::report::meta::test_meta(), "<svg></svg>").html();
        assert!(html.contains("<h2>Ranking</h2>"), "{html}");
        let meta = crate::report::meta::test_meta();
        let f = files(&r, Path::new("out"), &meta).unwrap();
        let names: Vec<&str> = f.files.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["screen.csv", "screen.json", "screen.svg"]);
        assert_eq!(
            (f.files[0].1.as_str(), f.files[1].1.clone()),
            (csv.as_str(), meta.json(&r).unwrap())
        );
        let none = ScreenResult {
            seeds: Vec::new(),
            ..r.clone()
        };
        let f = files(&none, Path::new("out"), &meta).unwrap();
        assert_eq!(f.files.len(), 2, "no seed, no histogram");
        let csv_path = Path::new("out").join("screen.csv");
        assert_eq!(
            f.line,
            format!("  wrote {}, screen.json and screen.svg", csv_path.display())
        );
        assert_eq!(
            partial_line(Some("SIGINT"), 2, 8),
            "  PARTIAL: stopped by SIGINT after 2 of 8 seeds; the ranking is of those that finished\n"
        );
        assert_eq!(
            partial_line(None, 0, 8),
            "  PARTIAL: stopped by a signal after 0 of 8 seeds; the ranking is of those that finished\n"
        );
        assert_eq!(
            partial_error(Some("SIGTERM"), 3, 8),
            "SIGTERM: wrote the 3 of 8 seeds that finished, marked partial"
        );
        assert_eq!(
            partial_error(None, 0, 8),
            "interrupted: wrote the 0 of 8 seeds that finished, marked partial"
        );
    }
}
