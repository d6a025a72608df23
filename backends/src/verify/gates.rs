//! The behaviour gates of `verify`: each held-out run's counts and scores against the frozen
//! thresholds, one pass or fail with its reason per gate. Pure: it never reads files or talks to servers.

use super::{Gates, Run};
use serde::Serialize;
use serverbench_sim::Summary;

/// One gate's result.
#[derive(Clone, Debug, Serialize)]
pub struct Gate {
    /// What the gate checks.
    pub name: &'static str,
    /// Whether it passed.
    pub passed: bool,
    /// What was measured against what was allowed.
    pub detail: String,
}

/// Every gate over every held-out run.
pub(super) fn gates(t: &Gates, runs: &[Run], api: &str) -> Vec<Gate> {
    let sum = |key: &str| -> usize {
        runs.iter()
            .map(|r| r.client[key].as_u64().unwrap_or(0) as usize)
            .sum()
    };
    let worst = |x: fn(&Summary) -> f64| runs.iter().map(|r| x(&r.summary)).fold(0.0, f64::max);
    let mut g = Vec::new();
    let mut gate = |name, passed, detail: String| {
        g.push(Gate {
            name,
            passed,
            detail,
        })
    };
    let prompts = sum("prompt_mismatches");
    if api == "chat" {
        gate(
            "full prompt",
            true,
            "not checked with --api chat (a chat template adds tokens)".into(),
        );
    } else {
        gate(
            "full prompt",
            prompts <= t.max_prompt_mismatches,
            format!("{prompts} completed requests whose usage.prompt_tokens differs from the prompt sent (at most {})", t.max_prompt_mismatches),
        );
    }
    let lengths = sum("length_mismatches");
    gate(
        "exact output length",
        lengths <= t.max_length_mismatches,
        format!(
            "{lengths} completed requests of another length than asked for (at most {})",
            t.max_length_mismatches
        ),
    );
    // A candidate's usage is not taken on trust here: several tokens in a chunk count against it as
    // a usage below the chunks does (a candidate streams each token; set its engine to).
    let stream = sum("usage_missing")
        + sum("chunk_usage_mismatches")
        + sum("coalesced_streams")
        + sum("unrecognised_output_streams");
    gate(
        "stream agrees with usage",
        stream <= t.max_stream_usage_mismatches,
        format!("{stream} requests without usage, with a usage count other than the output chunks streamed, or streaming an uncounted field (at most {})", t.max_stream_usage_mismatches),
    );
    let probe = runs.iter().find_map(|r| r.natural_stop.clone());
    gate(
        "natural stop",
        !t.require_natural_stop || probe.as_deref() == Some("stop"),
        format!(
            "the probe without ignore_eos ended with finish_reason {}",
            probe.as_deref().unwrap_or("(none)")
        ),
    );
    let stalled: Vec<String> = runs
        .iter()
        .filter(|r| !r.lanes_without_progress.is_empty())
        .map(|r| format!("seed {}: lanes {:?}", r.seed, r.lanes_without_progress))
        .collect();
    gate(
        "every session progresses",
        !t.require_every_lane_progress || stalled.is_empty(),
        if stalled.is_empty() {
            "every lane completed requests in every run".into()
        } else {
            format!("lanes that completed nothing: {}", stalled.join("; "))
        },
    );
    let not_finite: Vec<u64> = runs
        .iter()
        .filter(|r| {
            let s = &r.summary;
            ![
                s.score.d,
                s.score.g,
                s.score.f,
                s.error_rate,
                s.overflow_rate,
            ]
            .iter()
            .all(|x| x.is_finite())
        })
        .map(|r| r.seed)
        .collect();
    gate(
        "finite scores",
        !runs.is_empty() && not_finite.is_empty(),
        if runs.is_empty() {
            "no held-out run was scored".into()
        } else if not_finite.is_empty() {
            format!(
                "D, G, f and the rates of all {} runs are numbers",
                runs.len()
            )
        } else {
            format!("seeds {not_finite:?} scored something that is not a number")
        },
    );
    let errors = worst(|s| s.error_rate);
    gate(
        "error rate",
        errors <= t.max_error_rate,
        format!(
            "worst run {:.2} % of requests failed (at most {:.2} %)",
            100.0 * errors,
            100.0 * t.max_error_rate
        ),
    );
    let overflow = worst(|s| s.overflow_rate);
    gate(
        "context overflow rate",
        overflow <= t.max_overflow_rate,
        format!(
            "worst run {:.2} % overflowed the context (at most {:.2} %)",
            100.0 * overflow,
            100.0 * t.max_overflow_rate
        ),
    );
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use serverbench_sim::Deployment;

    fn healthy() -> Run {
        let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
        Run {
            seed: 1,
            summary: serverbench_sim::summarise(&[], &d, 60.0).1,
            client: serde_json::json!({"prompt_mismatches": 0, "length_mismatches": 0}),
            natural_stop: Some("stop".into()),
            lanes_without_progress: vec![],
        }
    }

    /// Each gate passes on a healthy run and fails, alone, on a run broken its way.
    #[test]
    fn every_gate_fails_for_its_own_reason() {
        let t = Gates::default();
        assert!(gates(&t, &[healthy()], "tokens").iter().all(|g| g.passed));
        type Breaks = fn(&mut Run);
        let broken: [(&str, Breaks); 8] = [
            ("full prompt", |r| r.client["prompt_mismatches"] = 3.into()),
            ("finite scores", |r| r.summary.score.d = f64::NAN),
            ("exact output length", |r| {
                r.client["length_mismatches"] = 1.into()
            }),
            ("stream agrees with usage", |r| {
                r.client["unrecognised_output_streams"] = 2.into()
            }),
            ("natural stop", |r| r.natural_stop = Some("length".into())),
            ("every session progresses", |r| {
                r.lanes_without_progress = vec![1]
            }),
            ("error rate", |r| r.summary.error_rate = 0.02),
            ("context overflow rate", |r| r.summary.overflow_rate = 0.05),
        ];
        for (name, breaks) in broken {
            let mut run = healthy();
            breaks(&mut run);
            // The probe runs with the first seed only: the broken run comes first.
            let failed: Vec<&str> = gates(&t, &[run, healthy()], "tokens")
                .iter()
                .filter(|g| !g.passed)
                .map(|g| g.name)
                .collect();
            assert_eq!(failed, [name]);
        }
        let mut chat = healthy();
        chat.client["prompt_mismatches"] = 9.into();
        assert!(
            gates(&t, &[chat], "chat").iter().all(|g| g.passed),
            "a chat template adds tokens"
        );
    }
}
