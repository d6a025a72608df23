//! The behaviour gates of `verify`: each held-out run's counts and scores against the frozen
//! thresholds, one pass or fail with its reason per gate. Pure: it never reads files or talks to servers.

use super::fidelity::{FidelityGates, FidelityReport};
use crate::fidelity;
use serde::{Deserialize, Serialize};
use serverbench_sim::Summary;

/// Thresholds of the behaviour gates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gates {
    /// Most requests that may fail at the server, as a fraction.
    pub max_error_rate: f64,
    /// Most requests that may overflow the context, as a fraction.
    pub max_overflow_rate: f64,
    /// Most completed requests whose `usage.prompt_tokens` may differ from the prompt sent.
    pub max_prompt_mismatches: usize,
    /// Most completed requests whose output length may differ from the one asked for.
    pub max_length_mismatches: usize,
    /// Most requests whose usage count differs from the output chunks streamed, or without usage.
    pub max_stream_usage_mismatches: usize,
    /// The natural-stop probe must end with `finish_reason: "stop"` (the server still honours
    /// end-of-sequence when not told to ignore it).
    pub require_natural_stop: bool,
    /// Every lane must complete at least one request in every held-out run (no session stalled).
    pub require_every_lane_progress: bool,
    /// Generation fidelity against a reference server.
    #[serde(default)]
    pub fidelity: FidelityGates,
}

impl Default for Gates {
    fn default() -> Gates {
        Gates {
            max_error_rate: 0.01,
            max_overflow_rate: 0.01,
            max_prompt_mismatches: 0,
            max_length_mismatches: 0,
            max_stream_usage_mismatches: 0,
            require_natural_stop: true,
            require_every_lane_progress: true,
            fidelity: FidelityGates::default(),
        }
    }
}

/// One held-out run's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    /// The held-out seed.
    pub seed: u64,
    /// Its replay's summary.
    pub summary: Summary,
    /// The client's counts (`summary.json`'s `client`).
    pub client: serde_json::Value,
    /// How the natural-stop probe ended (`finish_reason`), when it ran.
    pub natural_stop: Option<String>,
    /// Lanes that completed no request where the frozen deployment's simulated server completes some.
    pub lanes_without_progress: Vec<u32>,
}

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
            "not checked for chat completions (--api chat, or the AgentX protocols: a chat template adds tokens)".into(),
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
    // a usage below the chunks does, unless the streamed text, tokenized with the served model's
    // tokenizer (`--output-tokenizer`), backs the usage (vLLM merges the deltas a client has not read
    // yet, and cannot be told not to).
    // A summary without the confirmed count (an older client) confirms none.
    let unconfirmed: usize = runs
        .iter()
        .map(|r| {
            let c = &r.client;
            c.get("coalesced_unconfirmed")
                .or_else(|| c.get("coalesced_streams"))
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0) as usize
        })
        .sum();
    let stream = sum("usage_missing")
        + sum("chunk_usage_mismatches")
        + unconfirmed
        + sum("unrecognised_output_streams");
    let confirmed = sum("coalesced_streams").saturating_sub(unconfirmed);
    gate(
        "stream agrees with usage",
        stream <= t.max_stream_usage_mismatches,
        format!("{stream} requests without usage, with a usage count other than the output chunks streamed and no text to back it, or streaming an uncounted field (at most {}); {confirmed} with several tokens in a chunk whose text backs the usage", t.max_stream_usage_mismatches),
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
            "every lane completed requests in every run where the frozen deployment's simulated server completes some".into()
        } else {
            format!("lanes that completed nothing where the frozen deployment's simulated server completes requests: {}", stalled.join("; "))
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

/// The generation-fidelity gates.
pub(super) fn fidelity_gates(
    t: &FidelityGates,
    measured: &Option<std::result::Result<FidelityReport, String>>,
) -> Vec<Gate> {
    let one = |passed, detail: String| {
        vec![Gate {
            name: "generation fidelity",
            passed,
            detail,
        }]
    };
    let r = match measured {
        None if !t.required => {
            return one(
                true,
                "not required (frozen with --no-fidelity)".into(),
            )
        }
        None => {
            return one(
                false,
                "no --reference given: the score counts only after the candidate's generation is checked against a reference".into(),
            )
        }
        Some(Err(e)) => return one(false, format!("the check could not run: {e}")),
        Some(Ok(r)) => r,
    };
    let tokens: usize = r.prompts.iter().map(|p| p.continuation_tokens).sum();
    let agreed: usize = r.prompts.iter().map(|p| p.agreed_tokens).sum();
    let agreement = agreed as f64 / tokens.max(1) as f64;
    let identical = r.prompts.iter().filter(|p| !p.suspicious()).count();
    let worst = r
        .prompts
        .iter()
        .filter(|p| p.suspicious())
        .map(|p| p.mean_regret)
        .fold(0.0, f64::max);
    let mut g = vec![
        Gate {
            name: "greedy agreement",
            passed: agreement >= t.min_greedy_agreement,
            detail: format!(
                "{:.1} % of continuation tokens agree before the first difference; {identical} of {} continuations identical (at least {:.1} %)",
                100.0 * agreement,
                r.prompts.len(),
                100.0 * t.min_greedy_agreement
            ),
        },
        Gate {
            name: "teacher-forced regret",
            passed: worst <= t.max_regret,
            detail: format!(
                "{} continuations differ; worst mean per-token regret under the reference {worst:.2} nats (at most {})",
                r.prompts.len() - identical,
                t.max_regret
            ),
        },
    ];
    g.push(match r.answers {
        None => Gate {
            name: "answer tests",
            passed: true,
            detail: "no question set given (--answers)".into(),
        },
        Some(c) => Gate {
            name: "answer tests",
            passed: fidelity::answers_pass(c.candidate, c.reference, c.questions),
            detail: format!(
                "candidate {} of {}, reference {} (at least max(0, {} − {}))",
                c.candidate,
                c.questions,
                c.reference,
                c.reference,
                c.questions / 10
            ),
        },
    });
    g
}

#[cfg(test)]
mod tests {
    use super::super::fidelity::AnswerCounts;
    use super::*;
    use crate::fidelity::PromptFidelity;
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

    /// Streams with several tokens in a chunk fail the stream gate unless their text backs the usage
    /// (the client's confirmed count), and a summary without that count confirms none.
    #[test]
    fn coalesced_streams_pass_only_when_their_text_backs_the_usage() {
        let t = Gates::default();
        let stream_gate = |client: serde_json::Value| {
            let mut r = healthy();
            r.client = client;
            gates(&t, &[r], "tokens")
                .into_iter()
                .find(|g| g.name == "stream agrees with usage")
                .unwrap()
        };
        let ok =
            stream_gate(serde_json::json!({"coalesced_streams": 63, "coalesced_unconfirmed": 0}));
        assert!(
            ok.passed && ok.detail.contains("63 with several tokens"),
            "{}",
            ok.detail
        );
        assert!(
            !stream_gate(serde_json::json!({"coalesced_streams": 63, "coalesced_unconfirmed": 1}))
                .passed
        );
        assert!(!stream_gate(serde_json::json!({"coalesced_streams": 2})).passed);
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

    fn report(agreed: usize, regret: f64, answers: Option<(usize, usize)>) -> FidelityReport {
        let p = PromptFidelity {
            prompt_tokens: 100,
            continuation_tokens: 32,
            agreed_tokens: agreed,
            mean_regret: regret,
            max_regret: regret,
        };
        FidelityReport {
            reference: "r".into(),
            prompts: vec![
                p.clone(),
                PromptFidelity {
                    agreed_tokens: 32,
                    mean_regret: 0.0,
                    ..p
                },
            ],
            answers: answers.map(|(candidate, reference)| AnswerCounts {
                questions: 10,
                candidate,
                reference,
            }),
        }
    }

    fn failed(
        t: &FidelityGates,
        m: Option<std::result::Result<FidelityReport, String>>,
    ) -> Vec<&'static str> {
        fidelity_gates(t, &m)
            .into_iter()
            .filter(|g| !g.passed)
            .map(|g| g.name)
            .collect()
    }

    /// Each fidelity gate passes on a faithful candidate and fails, alone, for its own reason; a
    /// missing reference fails unless the frozen file does not require one.
    #[test]
    fn every_fidelity_gate_fails_for_its_own_reason() {
        let t = FidelityGates {
            min_greedy_agreement: 0.5,
            ..FidelityGates::default()
        };
        let none: Vec<&str> = vec![];
        assert_eq!(failed(&t, Some(Ok(report(32, 0.0, Some((10, 10)))))), none);
        assert_eq!(failed(&t, Some(Ok(report(20, 3.9, Some((9, 10)))))), none);
        assert_eq!(
            failed(&t, Some(Ok(report(20, 4.1, None)))),
            ["teacher-forced regret"]
        );
        // 32 + 0 of 64 tokens agree: exactly the threshold passes, one fewer fails.
        assert_eq!(failed(&t, Some(Ok(report(0, 0.5, None)))), none);
        let strict = FidelityGates {
            min_greedy_agreement: 0.6,
            ..t.clone()
        };
        assert_eq!(
            failed(&strict, Some(Ok(report(0, 0.5, None)))),
            ["greedy agreement"]
        );
        assert_eq!(
            failed(&t, Some(Ok(report(32, 0.0, Some((8, 10)))))),
            ["answer tests"]
        );
        assert_eq!(failed(&t, None), ["generation fidelity"]);
        assert_eq!(
            failed(&t, Some(Err("reference: HTTP 400".into()))),
            ["generation fidelity"]
        );
        let optional = FidelityGates {
            required: false,
            ..t
        };
        assert_eq!(failed(&optional, None), none);
    }
}
