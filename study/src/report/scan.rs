//! `workload scan`'s renderings: the table of what each seed offers an infinitely fast server, and
//! scan.csv. Pure: a `SeedScan` in, text out.

use super::summary::thousands;
use crate::SeedScan;
use std::fmt::Write as _;

/// What the scan covered, for the table's first line.
pub struct Scanned<'a> {
    /// The deployment whose prices value the tokens.
    pub deployment: &'a str,
    /// Lanes.
    pub concurrency: u32,
    /// The window, seconds.
    pub window_s: f64,
    /// How long the scan took, seconds (the caller's clock).
    pub elapsed_s: f64,
}

/// The table as printed: a line per seed, then the quantiles of the value offered.
pub fn text(scan: &SeedScan, s: &Scanned<'_>) -> String {
    let (offers, q) = (&scan.offers, &scan.value);
    let mut t = format!(
        "workload scan — {} seeds, c = {}, window {} s, prices of {} (an infinitely fast server)\n\n",
        offers.len(),
        s.concurrency,
        s.window_s,
        s.deployment
    );
    let _ = writeln!(
        t,
        "  {:>6}  {:>10}  {:>14}  {:>12}  {:>10}  {:>6}",
        "seed", "requests", "input tok", "output tok", "value $", "trees"
    );
    for o in offers {
        let _ = writeln!(
            t,
            "  {:>6}  {:>10}  {:>14}  {:>12}  {:>10.4}  {:>6}",
            o.seed,
            o.requests,
            thousands(o.input_tokens),
            thousands(o.output_tokens),
            o.value,
            o.trees
        );
    }
    let _ = writeln!(
        t,
        "\n  value offered: mean ${:.4}  p50 ${:.4}  p90 ${:.4}  max ${:.4} per window (computed in {:.2} s)",
        q.mean, q.p50, q.p90, q.max, s.elapsed_s
    );
    t
}

/// scan.csv: a row per seed, every digit.
pub fn csv(scan: &SeedScan) -> String {
    let mut t = String::from("seed,requests,input_tokens,output_tokens,value_dollars,trees\n");
    for o in &scan.offers {
        let _ = writeln!(
            t,
            "{},{},{},{},{},{}",
            o.seed, o.requests, o.input_tokens, o.output_tokens, o.value, o.trees
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan_seeds;
    use serverbench_sim::Deployment;
    use serverbench_workloads::Workload;

    #[test]
    fn a_line_and_a_row_per_seed() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let scan = scan_seeds(&w, &d, &[0, 1], 4, 60.0, 10.0).unwrap();
        let s = Scanned {
            deployment: &d.name,
            concurrency: 4,
            window_s: 60.0,
            elapsed_s: 0.5,
        };
        let t = text(&scan, &s);
        assert!(t.starts_with("workload scan — 2 seeds, c = 4, window 60 s, prices of qwen3-8b-1xh200 (an infinitely fast server)\n\n    seed    requests"), "{t}");
        assert!(t.ends_with("per window (computed in 0.50 s)\n"), "{t}");
        let csv = csv(&scan);
        assert_eq!(csv.lines().count(), 3);
        assert!(csv.lines().nth(2).unwrap().starts_with("1,"), "{csv}");
    }
}
