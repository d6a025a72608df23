//! What a replay against a real server prints: its summary as a client sees it and the behaviour checks
//! (output lengths, streams against usage, output fields, prompt lengths, the natural-stop probe,
//! errors, dispatch drift), and the verdict's words. Pure: a run's output in, text out.

use crate::{NaturalStop, RealOutput, NATURAL_STOP_TOKENS};
use serverbench_sim::Deployment;
use serverbench_study::report::summary::{summary_table, SeenBy};
use std::fmt::Write as _;

/// What the replay was asked for, as far as its text says.
pub struct Shown<'a> {
    /// The protocol's name.
    pub protocol: &'a str,
    /// `--api`.
    pub api: &'a str,
    /// Whether `--output-tokenizer` counted the streams' text.
    pub output_tokenizer: bool,
}

/// The summary table and the behaviour checks of a replay against a real server.
pub fn replay_text(
    out: &RealOutput,
    d: &Deployment,
    probe: Option<&NaturalStop>,
    shown: &Shown<'_>,
) -> String {
    let mut t = String::new();
    if let Some(why) = &out.summary.ended_early {
        let _ = writeln!(
            t,
            "  {why}: scored the {:.0} s measured so far\n",
            out.summary.window_s
        );
    }
    let _ = write!(
        t,
        "{}",
        summary_table(
            &out.summary,
            d.gpus(),
            d.gpu_hour_dollars,
            shown.protocol,
            SeenBy::Client,
        )
    );
    let c = &out.client;
    let _ = writeln!(t, "\n  behaviour checks");
    let _ = writeln!(
        t,
        "    exact output length   {} of {} completed requests differ from the requested length",
        c.length_mismatches, out.summary.completed
    );
    let _ = writeln!(t, "    stream vs usage       {} without a usage block, {} whose usage counts fewer tokens than the output chunks (the chunks are what counts), {} with several tokens in a chunk (the usage counts){}", c.usage_missing, c.chunk_usage_mismatches, c.coalesced_streams, if shown.output_tokenizer { format!("; the text of {} of them backs the usage", c.coalesced_streams - c.coalesced_unconfirmed) } else { String::new() });
    match &c.first_unrecognised_field {
        None => t.push_str(
            "    output fields         every chunk's output was in a field counted as tokens\n",
        ),
        Some(f) => {
            let _ = writeln!(
                t,
                "    output fields         WARNING: {} requests streamed a delta field `{f}` that is not counted as output: TTFT and TPOT are not measured from it",
                c.unrecognised_output_streams
            );
        }
    }
    if shown.api == "chat" || shown.protocol.starts_with("agentx") {
        let _ = writeln!(
            t,
            "    full prompt           not checked (a chat template adds tokens to every prompt)"
        );
    } else {
        let first = c
            .first_prompt_mismatch
            .map_or(String::new(), |(sent, counted)| {
                format!(" (the first: {sent} tokens sent, the server counted {counted})")
            });
        let _ = writeln!(
            t,
            "    full prompt           {} of {} completed requests with usage counted another prompt length than was sent{first}",
            c.prompt_mismatches,
            out.summary.completed.saturating_sub(c.usage_missing)
        );
    }
    match probe {
        Some(p @ NaturalStop { error: None, .. }) => {
            let _ = writeln!(t, "    natural stop          {} (finish_reason {:?} after {} of {NATURAL_STOP_TOKENS} tokens without ignore_eos)", if p.honoured() { "ok" } else { "NOT honoured" }, p.finish_reason.as_deref().unwrap_or("none"), p.tokens);
        }
        Some(NaturalStop { error: Some(e), .. }) => {
            let _ = writeln!(t, "    natural stop          probe failed: {e}");
        }
        None => t.push_str("    natural stop          skipped\n"),
    }
    let errors: Vec<String> = c
        .errors_by_kind
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        t,
        "    errors by kind        {}",
        if errors.is_empty() {
            "none".into()
        } else {
            errors.join(", ")
        }
    );
    if let Some(first) = &c.first_error {
        let _ = writeln!(t, "    first error           {first}");
    }
    if c.warmup_errors > 0 {
        let _ = writeln!(
            t,
            "    warm-up               {} of {} requests failed: {}",
            c.warmup_errors,
            c.warmup_requests,
            c.warmup_error.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(t, "    dispatch drift        p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (send time after the intended time)", c.dispatch_drift_ms.p50, c.dispatch_drift_ms.p99, c.dispatch_drift_ms.max);
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Interrupt, RealConfig};
    use serverbench_sim::RunConfig;
    use serverbench_workloads::tokens::Vocab;

    #[test]
    fn an_interrupted_run_says_so_and_lists_every_check() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let stop = Interrupt::new();
        stop.request("SIGINT");
        let cfg = RealConfig {
            run: RunConfig::new(2, 0, 60.0),
            time_scale: 1.0,
            vocab: Vocab::new(100, 1000).unwrap(),
            stop,
        };
        let out = RealOutput::interrupted(&d, &cfg);
        let shown = Shown {
            protocol: "cold",
            api: "tokens",
            output_tokenizer: false,
        };
        let probe = NaturalStop {
            error: None,
            finish_reason: Some("stop".into()),
            tokens: 3,
        };
        let text = replay_text(&out, &d, Some(&probe), &shown);
        assert!(
            text.starts_with("  interrupted by SIGINT: scored the "),
            "{text}"
        );
        assert!(
            text.contains("  KV cache     not measured by a client\n"),
            "{text}"
        );
        for check in [
            "exact output length",
            "stream vs usage",
            "output fields",
            "full prompt           0 of 0 completed",
            "natural stop          ok (finish_reason \"stop\" after 3 of",
            "errors by kind        none",
            "dispatch drift",
        ] {
            assert!(text.contains(&format!("    {check}")), "{check}: {text}");
        }
        let chat = Shown {
            api: "chat",
            ..shown
        };
        let text = replay_text(&out, &d, None, &chat);
        assert!(
            text.contains("full prompt           not checked")
                && text.contains("natural stop          skipped"),
            "{text}"
        );
    }
}
