//! The text `workload fit` and `workload stats` print: a fit's quantiles and KS distances per quantity,
//! the aim's rounds against published targets, and a stream's statistics. Pure: a report in, text out.

use crate::aim::{AimReport, Stat};
use crate::fit::{FitReport, HOLD_OUT_EVERY};
use crate::fit_corpus::FittedCorpus;
use crate::{Quantiles, WorkloadStats};
use std::fmt::Write as _;

/// What `workload fit` prints about a fit: its table, the sessions left out and, when aimed, the aim.
pub fn fitted_text(f: &FittedCorpus) -> String {
    let mut out = fit_text(&f.report);
    for (name, why) in &f.left_out {
        let _ = writeln!(out, "  left out of the fit: {name}: {why}");
    }
    if let Some(r) = &f.aimed {
        out.push_str(&aim_text(r));
    }
    out
}

/// The aim's table: each target, the fitted and the aimed value, and whether a move touched it.
pub fn aim_text(r: &AimReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\naimed at {} — {} rounds of moves, {} sessions generated (seed 0)\n",
        r.targets, r.rounds, r.sessions
    );
    let _ = writeln!(
        out,
        "  {:<30} {:<14} {:>12} {:>12} {:>12} {:>9}  moved",
        "quantity", "statistic", "published", "fitted", "aimed", "error"
    );
    for row in &r.rows {
        let t = &row.target;
        let stat = match (t.stat, t.above) {
            (Stat::ShareAbove, Some(a)) => format!("share > {a}"),
            (s, _) => format!("{s:?}").to_lowercase(),
        };
        let err = match t.stat {
            Stat::Value | Stat::ShareAbove => {
                format!("{:+.3}", row.error)
            }
            _ => format!("{:+.1} %", 100.0 * row.error),
        };
        let _ = writeln!(
            out,
            "  {:<30} {:<14} {:>12.4} {:>12.4} {:>12.4} {:>9}  {}",
            format!("{:?} ({})", t.quantity, t.quantity.unit()),
            stat,
            t.value,
            row.fitted,
            row.aimed,
            err,
            if row.moved { "yes" } else { "" }
        );
    }
    out
}

/// The fit's table: per quantity, the fitted, held-out, generated (and checked) quantiles and KS distances.
pub fn fit_text(r: &FitReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "workload fit — fitted on {} sessions, {} held out (every {}th), against {} generated\n",
        r.fitted_sessions, r.held_out_sessions, HOLD_OUT_EVERY, r.generated_sessions
    );
    let _ = writeln!(
        out,
        "  {:<28} {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}  {:>5}",
        "quantity", "", "mean", "p10", "p50", "p90", "p99", "KS"
    );
    for row in &r.rows {
        let mut lines = vec![
            ("fitted on", &row.fitted_on, None),
            ("held out", &row.held_out, None),
            ("generator", &row.generator, Some(row.ks)),
        ];
        if let Some(c) = &row.check {
            lines.push(("check", c, row.check_ks));
        }
        for (label, q, ks) in lines {
            let name = if label == "fitted on" {
                format!("{} ({})", row.quantity, row.unit)
            } else {
                String::new()
            };
            let ks = ks.map_or(String::new(), |k| format!("{k:.3}"));
            let _ = writeln!(
                out,
                "  {:<28} {:<10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}  {:>5}",
                name, label, q.mean, q.p10, q.p50, q.p90, q.p99, ks
            );
        }
    }
    let _ = writeln!(
        out,
        "\n  tokens per session, generator against held out: p50 {:+.1} %, p90 {:+.1} %",
        100.0 * r.session_tokens_error_p50,
        100.0 * r.session_tokens_error_p90
    );
    if let Some([p50, p90]) = r.check_tokens_error {
        let _ = writeln!(
        out,
            "  tokens per session, generator against the {} check sessions: p50 {:+.1} %, p90 {:+.1} %",
            r.checked_sessions,
            100.0 * p50,
            100.0 * p90
        );
    }
    let _ = writeln!(
        out,
        "  sub-agents per session {:.3}; nested below another sub-agent: {} (the generator spawns from the root only)",
        r.subagents_per_session,
        r.nested_subagents
    );
    for (name, k) in [("resumed", &r.resumed), ("fresh", &r.fresh)] {
        let _ = writeln!(
            out,
            "  {name} sessions: {} of {} (first prompt past the prefix p50 {:.0}, p90 {:.0} tokens; root turns p50 {:.0}, p90 {:.0})",
            k.sessions,
            r.resumed.sessions + r.fresh.sessions,
            k.first_prompt[0],
            k.first_prompt[1],
            k.root_turns[0],
            k.root_turns[1]
        );
    }
    out
}

/// What `workload stats` summarised, for its first line: the trace's file or folder, or the
/// generator's first `trees` trees of `seed` drawn from `spec` (a built-in spec's name or a file; the
/// default spec when `None`).
pub fn stats_source(
    trace: Option<&std::path::Path>,
    spec: Option<&std::path::Path>,
    seed: u64,
    trees: u64,
) -> String {
    match trace {
        Some(p) => format!("trace {}", p.display()),
        None => format!(
            "{} generator, seed {seed}, first {trees} trees",
            spec.map_or(crate::DEFAULT_WORKLOAD.into(), |s| s.display().to_string())
        ),
    }
}

/// `workload stats`' text about `what` (a trace, or the generator's trees).
pub fn stats_text(what: &str, s: &WorkloadStats) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "workload stats — {what}\n");
    let _ = writeln!(
        out,
        "  trees {} · requests {} · sub-agents {} ({} in the background) · compactions {}",
        s.trees, s.requests, s.subagents, s.background_subagents, s.compactions
    );
    out.push_str(&q_row("root turns per tree", &s.root_turns, ""));
    out.push_str(&q_row("requests per tree", &s.requests_per_tree, ""));
    out.push_str(&q_row("input tokens", &s.input_tokens, "tok"));
    out.push_str(&q_row("output tokens", &s.output_tokens, "tok"));
    out.push_str(&q_row("think time (uncapped)", &s.think_time_s, "s"));
    out.push_str(&q_row("uncached prompt", &s.uncached_tokens, "tok"));
    let _ = writeln!(
        out,
        "  prefix reuse with an infinite cache: {:.1} % of prompt tokens",
        s.prefix_reuse_ratio * 100.0
    );
    out
}

/// One quantity's line of `workload stats`.
fn q_row(name: &str, q: &Quantiles, unit: &str) -> String {
    format!("  {name:<22}mean {:>10.1}  p50 {:>10.1}  p90 {:>10.1}  p99 {:>10.1}  max {:>10.1} {unit}\n", q.mean, q.p50, q.p90, q.p99, q.max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit_corpus::{fit_corpus, FitRequest};
    use crate::{workload_stats, Generator, Imported, TraceFormat, TreeSource, WorkloadSpec};

    fn generator() -> Generator {
        Generator::new(WorkloadSpec::preset("synthetic-v1").unwrap(), 3, 40_960).unwrap()
    }

    #[test]
    fn a_fit_prints_three_lines_per_quantity_and_its_token_errors() {
        let g = generator();
        let imported = Imported {
            format: TraceFormat::NATIVE,
            trees: (0..20).map(|k| g.generate(k)).collect(),
            reduced: None,
            unread: Vec::new(),
        };
        let files = ["a.jsonl".to_string()];
        let f = fit_corpus(FitRequest {
            imported,
            files: &files,
            check: &[],
            targets: None,
            generated: 100,
            context_limit: 40_960,
            name: None,
            options: Default::default(),
        })
        .unwrap();
        let text = fitted_text(&f);
        let first = format!(
            "workload fit — fitted on {} sessions, {} held out (every {HOLD_OUT_EVERY}th), against {} generated\n\n",
            f.report.fitted_sessions, f.report.held_out_sessions, f.report.generated_sessions
        );
        assert!(text.starts_with(&first), "{text}");
        let labelled = |label: &str| text.lines().filter(|l| l.contains(label)).count();
        assert_eq!(labelled(" fitted on  "), f.report.rows.len(), "{text}");
        assert_eq!(labelled(" generator  "), f.report.rows.len(), "{text}");
        assert!(
            text.contains("\n  tokens per session, generator against held out: p50 "),
            "{text}"
        );
        assert!(!text.contains("aimed at"), "{text}");
        // The per-session token errors are the tokens-per-session row's, wherever it sits.
        let tokens = f
            .report
            .rows
            .iter()
            .find(|r| r.quantity == "tokens per session")
            .unwrap();
        let p50 = tokens.generator.p50 / tokens.held_out.p50 - 1.0;
        assert!((f.report.session_tokens_error_p50 - p50).abs() < 1e-12);
    }

    /// The first line names the trace, or the generator's seed and tree count.
    #[test]
    fn stats_name_what_they_summarise() {
        let trace = std::path::Path::new("t.jsonl");
        assert_eq!(stats_source(Some(trace), None, 3, 10), "trace t.jsonl");
        assert_eq!(
            stats_source(None, None, 3, 10),
            "agentic-coding generator, seed 3, first 10 trees"
        );
        let spec = std::path::Path::new("agentx-062126");
        assert_eq!(
            stats_source(None, Some(spec), 0, 5),
            "agentx-062126 generator, seed 0, first 5 trees"
        );
    }

    #[test]
    fn stats_print_a_line_per_quantity() {
        let g = generator();
        let s = workload_stats((0..10).map(|k| g.tree(k)));
        let text = stats_text("the generator", &s);
        assert!(
            text.starts_with("workload stats — the generator\n\n  trees 10 · requests "),
            "{text}"
        );
        assert_eq!(
            text.lines().filter(|l| l.contains("mean ")).count(),
            6,
            "{text}"
        );
        assert!(text.ends_with(" % of prompt tokens\n"), "{text}");
    }
}
