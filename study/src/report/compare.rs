//! `compare`'s renderings: the Markdown table of simulated against measured runs (compare.md, which
//! docs/fidelity.md quotes), the plot's points and the HTML page. Pure: rows in, text out.

use super::meta::Meta;
use super::page::Report;
use super::OutFiles;
use crate::compare::{Row, SeedRanking, METRICS};
use crate::plot::{compare_svg, PlotError};
use std::path::Path;

/// What the runs replayed, for the table's first line.
pub struct Setting<'a> {
    /// The deployment's name.
    pub deployment: &'a str,
    /// The window, seconds.
    pub window_s: f64,
    /// `--arrivals` (`closed` or an open mode).
    pub arrivals: &'a str,
    /// The protocol's name (shown for the closed loop).
    pub protocol: &'a str,
    /// The simulator's profile (compare.json names it).
    pub profile: &'a str,
}

/// compare.md: a line per run, each cell simulated / measured (relative error), then the Spearman
/// correlation of per-seed D at each level with enough seeds.
pub fn markdown(s: &Setting<'_>, rows: &[Row], rankings: &[SeedRanking]) -> String {
    let mut t = format!(
        "serverbench compare — {}, window {} s, {}; each cell: simulated / measured (error)\n\n",
        s.deployment,
        s.window_s,
        match s.arrivals {
            "closed" => format!("protocol {}", s.protocol),
            open => format!("arrivals {open}"),
        }
    );
    t.push_str("| c | seed | completed |");
    for (m, _) in METRICS {
        t.push_str(&format!(" {m} |"));
    }
    t.push_str("\n|---|---|---|");
    t.push_str(&"---|".repeat(METRICS.len()));
    t.push('\n');
    for r in rows {
        t.push_str(&format!(
            "| {} | {} | {} / {} |",
            r.concurrency, r.seed, r.completed.0, r.completed.1
        ));
        for p in &r.metrics {
            t.push_str(&format!(
                " {} / {} ({}) |",
                short(p.sim),
                short(p.real),
                fmt_err(p.rel_error)
            ));
        }
        t.push('\n');
    }
    t.push_str(&same_requests_table(rows));
    for k in rankings {
        t.push_str(&format!(
            "\nSeed ranking at c = {}: Spearman correlation of per-seed D over {} seeds = {:.3}\n",
            k.concurrency, k.seeds, k.spearman_d
        ));
    }
    t
}

/// The requests both sides completed, per run whose measured records were at hand (none: empty).
fn same_requests_table(rows: &[Row]) -> String {
    let matched: Vec<_> = rows
        .iter()
        .filter_map(|r| r.same_requests.as_ref().map(|m| (r, m)))
        .collect();
    if matched.is_empty() {
        return String::new();
    }
    let mut t = String::from(
        "\nThe same requests (tree and request) on both sides, more than one token each: how many both \
         completed in the window, how many only one side did, and the median of each shared request's \
         TPOT and TTFT errors. The quantiles above are over each side's own requests.\n\n\
         | c | seed | both | only simulated | only measured | TPOT error of each, median | TTFT error of each, median |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for (r, m) in matched {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.concurrency,
            r.seed,
            m.both,
            m.only_simulated,
            m.only_measured,
            fmt_err(m.tpot_rel_error),
            fmt_err(m.ttft_rel_error)
        ));
    }
    t
}

/// compare.svg: a panel per metric, one point per run (measured, simulated), with y = x.
pub fn plot(deployment: &str, rows: &[Row]) -> Result<String, PlotError> {
    let panels: Vec<(&str, Vec<(f64, f64)>)> = METRICS
        .iter()
        .enumerate()
        .map(|(i, (name, _))| {
            let points = rows
                .iter()
                .map(|r| (r.metrics[i].real, r.metrics[i].sim))
                .collect();
            (*name, points)
        })
        .collect();
    compare_svg(
        &format!("{deployment}: simulated against measured, one point per run"),
        &panels,
    )
}

/// What `--out dir` holds beside the measured runs: compare.md (`table`, from [`markdown`]),
/// compare.json (the rows and rankings, headed by `meta`) and compare.svg ([`plot`]).
pub fn files(
    dir: &Path,
    s: &Setting<'_>,
    rows: &[Row],
    rankings: &[SeedRanking],
    table: &str,
    meta: &Meta,
) -> anyhow::Result<OutFiles> {
    let json = serde_json::json!({ "deployment": s.deployment, "profile": s.profile, "window_s": s.window_s,
        "protocol": s.protocol, "rows": rows, "seed_rankings": rankings });
    Ok(OutFiles {
        files: vec![
            ("compare.md", table.to_string()),
            ("compare.json", meta.json(&json)?),
            ("compare.svg", plot(s.deployment, rows)?),
        ],
        line: format!(
            "\n  wrote {}/compare.md, compare.json and compare.svg",
            dir.display()
        ),
    })
}

/// The HTML page: compare.md's tables and the plot.
pub fn page(deployment: &str, meta: Meta, table: &str, svg: &str) -> Report {
    let mut r = Report::new(&format!("serverbench compare — {deployment}"), meta);
    r.markdown(table).svg(
        "simulated (y) against measured (x), one point per run; the line is y = x",
        svg,
    );
    r
}

/// A relative error with its sign, or `n/a`.
fn fmt_err(e: Option<f64>) -> String {
    e.map_or("n/a".into(), |e| format!("{:+.1} %", 100.0 * e))
}

/// A value to three significant digits or so, as the table shows it.
fn short(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_errors_print_with_a_sign_or_as_n_a() {
        assert_eq!(fmt_err(None), "n/a");
        assert_eq!(fmt_err(Some(-0.0432)), "-4.3 %");
    }

    #[test]
    fn values_keep_about_three_digits() {
        assert_eq!(short(0.0), "0");
        assert_eq!(short(123.4), "123");
        assert_eq!(short(6.666), "6.67");
        assert_eq!(short(0.1234), "0.123");
    }

    fn setting() -> Setting<'static> {
        Setting {
            deployment: "x",
            window_s: 35.0,
            arrivals: "closed",
            protocol: "steady",
            profile: "p",
        }
    }

    fn ranking() -> SeedRanking {
        SeedRanking {
            concurrency: 4,
            seeds: 8,
            spearman_d: 0.976,
        }
    }

    #[test]
    fn the_table_has_a_column_per_metric_and_a_line_per_ranking() {
        let (s, ranking) = (setting(), ranking());
        let t = markdown(&s, &[], &[ranking]);
        assert_eq!(
            t,
            "serverbench compare — x, window 35 s, protocol steady; each cell: simulated / measured (error)\n\n\
             | c | seed | completed | D | G | f | TTFT p50 s | TTFT p90 s | TTFT p99 s | TPOT p50 ms | TPOT p90 ms | TPOT p99 ms |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n\
             \nSeed ranking at c = 4: Spearman correlation of per-seed D over 8 seeds = 0.976\n"
        );
        let open = Setting {
            arrivals: "poisson:1",
            ..s
        };
        assert!(markdown(&open, &[], &[]).contains("window 35 s, arrivals poisson:1;"));
    }

    #[test]
    fn the_same_requests_follow_the_table_where_the_records_were_at_hand() {
        let s = setting();
        let mut row = Row {
            concurrency: 8,
            seed: 0,
            completed: (73, 65),
            metrics: Vec::new(),
            same_requests: None,
        };
        assert!(!markdown(&s, std::slice::from_ref(&row), &[]).contains("The same requests"));
        row.same_requests = Some(crate::compare::SameRequests {
            both: 57,
            only_simulated: 7,
            only_measured: 0,
            tpot_rel_error: Some(-0.0371),
            ttft_rel_error: Some(0.1),
        });
        let t = markdown(&s, &[row], &[]);
        assert!(
            t.ends_with(
                "| c | seed | both | only simulated | only measured | TPOT error of each, median | TTFT error of each, median |\n\
                 |---|---|---|---|---|---|---|\n\
                 | 8 | 0 | 57 | 7 | 0 | -3.7 % | +10.0 % |\n"
            ),
            "{t}"
        );
    }

    /// compare.md is the table printed; compare.json holds the setting, the rows and the rankings under
    /// the metadata; compare.svg the plot.
    #[test]
    fn compare_writes_its_table_its_rows_and_its_plot() {
        let (s, ranking) = (setting(), ranking());
        let (meta, rankings) = (crate::report::meta::test_meta(), [ranking]);
        let table = markdown(&s, &[], &rankings);
        let f = files(Path::new("out"), &s, &[], &rankings, &table, &meta).unwrap();
        let names: Vec<&str> = f.files.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["compare.md", "compare.json", "compare.svg"]);
        assert_eq!(f.files[0].1, table);
        let json: serde_json::Value = serde_json::from_str(&f.files[1].1).unwrap();
        assert_eq!(
            (&json["deployment"], &json["profile"], &json["window_s"]),
            (&"x".into(), &"p".into(), &35.0.into())
        );
        assert_eq!(json["seed_rankings"][0]["spearman_d"], 0.976);
        assert!(json["meta"].is_object() && json["rows"].as_array().unwrap().is_empty());
        assert_eq!(f.files[2].1, plot("x", &[]).unwrap());
        let dir = Path::new("out");
        assert_eq!(
            f.line,
            format!(
                "\n  wrote {}/compare.md, compare.json and compare.svg",
                dir.display()
            )
        );
    }
}
