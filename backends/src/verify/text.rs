//! What `verify` prints: the gates' table, each held-out run's score and the verdict. Pure: a
//! `Verification` in, text out.

use super::Verification;
use std::fmt::Write as _;

/// The gates' table, each run's score and the verdict.
pub fn text(v: &Verification) -> String {
    let mut t = String::new();
    let f = &v.frozen;
    let _ = writeln!(
        t,
        "serverbench verify — {} at c = {}, {} s, held-out seeds {:?}, against {}\n",
        v.deployment.name, f.concurrency, f.window_s, f.held_out_seeds, v.url
    );
    let _ = writeln!(t, "  {:<28} {:<6} detail", "gate", "");
    for gate in &v.gates {
        let _ = writeln!(
            t,
            "  {:<28} {:<6} {}",
            gate.name,
            if gate.passed { "pass" } else { "FAIL" },
            gate.detail
        );
    }
    let _ = writeln!(t);
    for r in &v.runs {
        let _ = writeln!(
            t,
            "  seed {:>8}: D = {:.3}  G = {:.3}  f = {:.1} %  ({} requests, {} completed)",
            r.seed,
            r.summary.score.d,
            r.summary.score.g,
            100.0 * r.summary.score.f,
            r.summary.requests,
            r.summary.completed
        );
    }
    let (dd, g, ff) = v.measured;
    if v.passed && v.rehearsal {
        let _ = writeln!(t, "\n  REHEARSED (--unsigned: the file's signature was not checked, so this is not a verification). The held-out runs measured D = {dd:.3}, G = {g:.3}, f = {:.1} %", 100.0 * ff);
    } else if v.passed {
        let _ = writeln!(t, "\n  VERIFIED. Final score over the held-out seeds: D = {dd:.3}, G = {g:.3}, f = {:.1} %", 100.0 * ff);
    } else {
        let reasons: Vec<&str> = v
            .gates
            .iter()
            .filter(|g| !g.passed)
            .map(|g| g.name)
            .collect();
        let _ = writeln!(
            t,
            "\n  FAILED: {} (the held-out runs measured D = {dd:.3}, which does not count)",
            reasons.join(", ")
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{Frozen, Gate, Gates, Server};
    use serverbench_sim::Deployment;

    fn verification(passed: bool) -> Verification {
        let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
        let frozen = Frozen {
            deployment_yaml: d.to_yaml(),
            deployment_sha256: String::new(),
            slo: d.slo,
            concurrency: 2,
            window_s: 60.0,
            protocol: "cold".into(),
            dev_seeds: vec![0],
            held_out_seeds: vec![1_000_007],
            server: Server {
                url: "http://h:1".into(),
                kind: "vllm".into(),
                api: "tokens".into(),
                model: "m".into(),
            },
            gates: Gates::default(),
        };
        let gate = |name, passed| Gate {
            name,
            passed,
            detail: "measured".into(),
        };
        Verification {
            frozen,
            deployment: d,
            url: "http://h:1".into(),
            runs: Vec::new(),
            fidelity: None,
            gates: vec![
                gate("runs valid", true),
                gate("exact output length", passed),
            ],
            passed,
            rehearsal: false,
            measured: (1.5, 2.0, 0.75),
        }
    }

    #[test]
    fn the_verdict_names_the_gates_that_failed() {
        let ok = text(&verification(true));
        assert!(ok.starts_with("serverbench verify — gemma4-e4b-1xl40 at c = 2, 60 s, held-out seeds [1000007], against http://h:1\n\n  gate                         "), "{ok}");
        assert!(
            ok.contains("  runs valid                   pass   measured\n"),
            "{ok}"
        );
        assert!(ok.ends_with("  VERIFIED. Final score over the held-out seeds: D = 1.500, G = 2.000, f = 75.0 %\n"), "{ok}");
        let failed = text(&verification(false));
        assert!(
            failed.contains("  exact output length          FAIL   measured\n"),
            "{failed}"
        );
        assert!(failed.ends_with("  FAILED: exact output length (the held-out runs measured D = 1.500, which does not count)\n"), "{failed}");
    }
}
