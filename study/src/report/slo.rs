//! `slo`'s renderings: each reference seed's p90s, the targets frozen from them beside the old ones,
//! and the header of the deployment file it writes. Pure: the frozen targets in, text out.

use super::summary::seed_list;
use crate::{CorpusFreeze, SeedP90, SloReference};
use serverbench_sim::{Deployment, Slo};
use std::fmt::Write as _;

/// The table as printed: the reference, a line per seed, the frozen targets and the old ones.
pub fn text(
    d: &Deployment,
    r: &SloReference,
    rows: &[SeedP90],
    window_s: f64,
    slo: &Slo,
) -> String {
    let mut t = format!(
        "serverbench slo — reference {} at c = {}{}, {} seeds, window {window_s} s\n\n",
        d.name,
        r.concurrency,
        r.arm,
        rows.len()
    );
    p90_table(
        &mut t,
        "seed",
        "",
        rows.iter().map(|r| (r.seed, r.ttft_s, r.tpot_s)),
    );
    t.push('\n');
    frozen_lines(&mut t, d, slo, "the maximum over seeds of each p90");
    t
}

/// A table of p90 TTFT (s) and TPOT (ms) by `label` (seed or corpus draw), `note` after its header.
fn p90_table(t: &mut String, label: &str, note: &str, rows: impl Iterator<Item = (u64, f64, f64)>) {
    let _ = writeln!(
        t,
        "  {label:>6}  {:>13}  {:>14}{note}",
        "p90 TTFT (s)", "p90 TPOT (ms)"
    );
    for (k, ttft_s, tpot_s) in rows {
        let _ = writeln!(t, "  {k:>6}  {ttft_s:>13.5}  {:>14.4}", tpot_s * 1e3);
    }
}

/// The frozen targets (`how` they were taken) and the deployment's old ones.
fn frozen_lines(t: &mut String, d: &Deployment, slo: &Slo, how: &str) {
    let _ = writeln!(
        t,
        "  frozen: τ_first = {:.5} s, τ_token = {:.4} ms ({how})",
        slo.ttft_s,
        slo.tpot_s * 1e3
    );
    let _ = writeln!(
        t,
        "  (was τ_first = {:.5} s, τ_token = {:.4} ms)",
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    );
}

/// The table of a freeze over corpus draws: the reference, a line per draw (its frozen targets, the
/// maximum over its seeds), their spread, the frozen targets (the median over draws) and the old ones.
pub fn text_over_corpora(
    d: &Deployment,
    r: &SloReference,
    draws: &[CorpusFreeze],
    window_s: f64,
    slo: &Slo,
) -> String {
    let seeds = draws.first().map_or(0, |x| x.rows.len());
    let mut t = format!(
        "serverbench slo — reference {} at c = {}{}, {} corpus draws × {seeds} seeds, window {window_s} s

",
        d.name,
        r.concurrency,
        r.arm,
        draws.len(),
    );
    p90_table(
        &mut t,
        "corpus",
        "   (each the maximum over its seeds)",
        draws
            .iter()
            .map(|x| (x.corpus_seed, x.slo.ttft_s, x.slo.tpot_s)),
    );
    let spread = |f: fn(&Slo) -> f64| {
        let v: Vec<f64> = draws.iter().map(|x| f(&x.slo)).collect();
        (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        )
    };
    let (t_lo, t_hi) = spread(|s| s.ttft_s);
    let (o_lo, o_hi) = spread(|s| s.tpot_s);
    let _ = writeln!(
        t,
        "\n  over the draws: p90 TTFT {t_lo:.5}–{t_hi:.5} s, p90 TPOT {:.4}–{:.4} ms",
        o_lo * 1e3,
        o_hi * 1e3
    );
    frozen_lines(&mut t, d, slo, "the median over corpus draws of each");
    t
}

/// The deployment file `slo --out` writes: where the targets came from, then `frozen` as YAML.
pub fn frozen_yaml(
    source: &str,
    frozen: &Deployment,
    c: u32,
    seeds: &[u64],
    window_s: f64,
    corpus_draws: u64,
) -> String {
    let draws = match corpus_draws {
        1 => String::new(),
        n => format!(" on each of {n} corpus draws (the median over draws)"),
    };
    format!(
        "# SLO targets frozen by `serverbench slo` from {source} at c = {c} over {} seeds ({}){draws}, window {window_s} s.\n{}",
        seeds.len(),
        seed_list(seeds),
        frozen.to_yaml()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slo_reference;

    #[test]
    fn a_line_per_seed_and_the_file_says_where_its_targets_came_from() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let r = slo_reference(&d, Some(2), false).unwrap();
        let rows = [SeedP90 {
            seed: 3,
            ttft_s: 0.5,
            tpot_s: 0.02,
        }];
        let text = text(&d, &r, &rows, 60.0, &d.slo);
        assert!(
            text.starts_with(
                "serverbench slo — reference qwen3-8b-1xh200 at c = 2, 1 seeds, window 60 s\n\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("       3        0.50000         20.0000\n"),
            "{text}"
        );
        let yaml = frozen_yaml("x", &d, 2, &[0, 1], 60.0, 1);
        assert!(yaml.starts_with("# SLO targets frozen by `serverbench slo` from x at c = 2 over 2 seeds (0..2), window 60 s.\n"), "{yaml}");
        let yaml = frozen_yaml("x", &d, 2, &[0, 1], 60.0, 5);
        assert!(yaml.starts_with("# SLO targets frozen by `serverbench slo` from x at c = 2 over 2 seeds (0..2) on each of 5 corpus draws (the median over draws), window 60 s.\n"), "{yaml}");
    }

    #[test]
    fn a_line_per_corpus_draw_with_their_spread_and_median() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let r = slo_reference(&d, Some(2), false).unwrap();
        let draw = |corpus_seed, ttft_s, tpot_s| CorpusFreeze {
            corpus_seed,
            rows: vec![SeedP90 {
                seed: 0,
                ttft_s,
                tpot_s,
            }],
            slo: Slo { ttft_s, tpot_s },
        };
        let draws = [draw(0, 0.5, 0.02), draw(1, 2.0, 0.03), draw(2, 1.0, 0.01)];
        let median = Slo {
            ttft_s: 1.0,
            tpot_s: 0.02,
        };
        let text = text_over_corpora(&d, &r, &draws, 60.0, &median);
        assert!(
            text.contains("at c = 2, 3 corpus draws × 1 seeds, window 60 s"),
            "{text}"
        );
        assert!(
            text.contains("       1        2.00000         30.0000\n"),
            "{text}"
        );
        assert!(
            text.contains("p90 TTFT 0.50000–2.00000 s, p90 TPOT 10.0000–30.0000 ms"),
            "{text}"
        );
        assert!(
            text.contains(
                "τ_first = 1.00000 s, τ_token = 20.0000 ms (the median over corpus draws"
            ),
            "{text}"
        );
    }
}
