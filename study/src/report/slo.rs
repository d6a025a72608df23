//! `slo`'s renderings: each reference seed's p90s, the targets frozen from them beside the old ones,
//! and the header of the deployment file it writes. Pure: the frozen targets in, text out.

use super::summary::seed_list;
use crate::{SeedP90, SloReference};
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
    let _ = writeln!(
        t,
        "  {:>6}  {:>13}  {:>14}",
        "seed", "p90 TTFT (s)", "p90 TPOT (ms)"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "  {:>6}  {:>13.5}  {:>14.4}",
            r.seed,
            r.ttft_s,
            r.tpot_s * 1e3
        );
    }
    let _ = writeln!(
        t,
        "\n  frozen: τ_first = {:.5} s, τ_token = {:.4} ms (the maximum over seeds of each p90)",
        slo.ttft_s,
        slo.tpot_s * 1e3
    );
    let _ = writeln!(
        t,
        "  (was τ_first = {:.5} s, τ_token = {:.4} ms)",
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    );
    t
}

/// The deployment file `slo --out` writes: where the targets came from, then `frozen` as YAML.
pub fn frozen_yaml(
    source: &str,
    frozen: &Deployment,
    c: u32,
    seeds: &[u64],
    window_s: f64,
) -> String {
    format!(
        "# SLO targets frozen by `serverbench slo` from {source} at c = {c} over {} seeds ({}), window {window_s} s.\n{}",
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
        let yaml = frozen_yaml("x", &d, 2, &[0, 1], 60.0);
        assert!(yaml.starts_with("# SLO targets frozen by `serverbench slo` from x at c = 2 over 2 seeds (0..2), window 60 s.\n"), "{yaml}");
    }
}
