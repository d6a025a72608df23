//! What a replay against a real server prints: its summary as a client sees it and the behaviour checks
//! (output lengths, streams against usage, output fields, prompt lengths, the natural-stop probe,
//! errors, dispatch drift), and what `verify` prints: the gates' table, each held-out run's score and
//! the verdict. Pure: a result in, text out.

use crate::verify::{FrozenFile, Verification};
use crate::{NaturalStop, RealOutput, NATURAL_STOP_TOKENS};
use serverbench_sim::{Deployment, RunConfig};
use serverbench_study::report::summary::{load_label, summary_table, SeenBy};
use std::fmt::Write as _;
use std::path::Path;

/// What the replay was asked for, as far as its text says.
pub struct Shown<'a> {
    /// The protocol's name.
    pub protocol: &'a str,
    /// `--api`.
    pub api: &'a str,
    /// Whether `--output-tokenizer` counted the streams' text.
    pub output_tokenizer: bool,
}

/// What `freeze` says once it wrote the sealed file `file` to `out`: the deployment, its hash, the
/// declared load and the held-out seeds, and a line more when the file is unsigned.
pub fn frozen_text(deployment: &str, file: &FrozenFile, out: &Path) -> String {
    let f = &file.frozen;
    let mut t = format!(
        "froze {deployment} (sha256 {}…) at c = {}, {} s; held-out seeds {:?}; wrote {}\n",
        &f.deployment_sha256[..12],
        f.concurrency,
        f.window_s,
        f.held_out_seeds,
        out.display()
    );
    if file.signature.is_none() {
        t += "  unsigned (no --key): `verify --unsigned` rehearses it; only a signed file can be VERIFIED\n";
    }
    t
}

/// What `keygen` says once it wrote the private key to `key` and the public one to `public`.
pub fn keygen_text(key: &Path, public: &Path, hex: &str) -> String {
    format!(
        "wrote {} (private: `freeze --key`; keep it from candidates) and {} (public: `verify --public-key`)\npublic key {hex}\n",
        key.display(),
        public.display()
    )
}

/// The line `serve` says once it listens at `at`: the engine (`cuda`, else the emulated one at
/// `time_scale` × real time), the deployment and the model it serves.
pub fn serve_banner(
    d: &Deployment,
    model: &str,
    cuda: bool,
    time_scale: f64,
    at: std::net::SocketAddr,
) -> String {
    let (name, stops) = (&d.name, "(Ctrl-C or SIGTERM stops)");
    match cuda {
        true => format!("serverbench serve — CUDA engine, {name} ({model}) on http://{at}  {stops}"),
        false => format!("serverbench serve — emulating {name} ({model}) at {time_scale} × real time on http://{at}  {stops}"),
    }
}

/// The line above a replay's output: the deployment, the server, the load, the seed, the window and the
/// time compression (`time_scale`, when not 1).
pub fn replay_header(d: &Deployment, url: &str, run: &RunConfig, time_scale: f64) -> String {
    let compressed = match time_scale != 1.0 {
        true => format!(" (time compressed {time_scale}×)"),
        false => String::new(),
    };
    format!(
        "serverbench replay — {} at {url}, {}, seed {}, window {} s{compressed}\n",
        d.name,
        load_label(run),
        run.seed,
        run.window_s,
    )
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
    let _ = writeln!(t, "    stream vs usage       {} without a usage block, {} whose usage counts fewer tokens than the output chunks (the chunks are what counts), {} with several tokens in a chunk (the usage counts, up to a token a byte of their text){}", c.usage_missing, c.chunk_usage_mismatches, c.coalesced_streams, if shown.output_tokenizer { format!("; the text of {} of them backs the usage", c.coalesced_streams - c.coalesced_unconfirmed) } else { String::new() });
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

/// The gates' table, each run's score and the verdict.
pub fn verification_text(v: &Verification) -> String {
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
    use crate::{Interrupt, RealConfig};
    use serverbench_workloads::tokens::Vocab;

    /// `freeze` names the deployment, the start of its hash, the load, the held-out seeds and the file,
    /// and says when the file is unsigned; `keygen` names both keys' files and the public key.
    #[test]
    fn freeze_and_keygen_say_what_they_wrote() {
        use crate::verify::Frozen;
        let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
        let frozen = Frozen {
            deployment_sha256: "0123456789abcdef".into(),
            ..crate::verify::test_frozen(d.slo, vec![7, 8])
        };
        let mut file = FrozenFile {
            frozen,
            frozen_sha256: String::new(),
            signature: None,
        };
        let out = Path::new("frozen.json");
        let text = frozen_text("x", &file, out);
        assert_eq!(
            text.lines().next().unwrap(),
            "froze x (sha256 0123456789ab…) at c = 2, 60 s; held-out seeds [7, 8]; wrote frozen.json"
        );
        assert!(text.contains("unsigned (no --key)"), "{text}");
        file.signature = Some("s".into());
        assert_eq!(frozen_text("x", &file, out).lines().count(), 1);
        let k = keygen_text(Path::new("e.key"), Path::new("e.pub"), "ab");
        assert!(
            k.starts_with("wrote e.key (private") && k.ends_with("\npublic key ab\n"),
            "{k}"
        );
    }

    #[test]
    fn the_serve_banner_names_the_engine_and_the_address() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let at = "127.0.0.1:8000".parse().unwrap();
        assert_eq!(
            serve_banner(&d, "m", false, 2.0, at),
            format!("serverbench serve — emulating {} (m) at 2 × real time on http://127.0.0.1:8000  (Ctrl-C or SIGTERM stops)", d.name)
        );
        let cuda = serve_banner(&d, "m", true, 2.0, at);
        assert!(
            cuda.starts_with("serverbench serve — CUDA engine, "),
            "{cuda}"
        );
        assert!(!cuda.contains("real time"), "{cuda}");
    }

    #[test]
    fn a_replay_header_names_the_server_and_a_compression() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let run = RunConfig::new(4, 2, 60.0);
        let plain = replay_header(&d, "http://h:1", &run, 1.0);
        assert_eq!(
            plain,
            format!(
                "serverbench replay — {} at http://h:1, c = 4, seed 2, window 60 s\n",
                d.name
            )
        );
        assert!(replay_header(&d, "u", &run, 20.0).ends_with("window 60 s (time compressed 20×)\n"));
    }

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

#[cfg(test)]
mod verification_tests {
    use super::*;
    use crate::verify::{Frozen, Gate, Gates, Server};

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
        let ok = verification_text(&verification(true));
        assert!(ok.starts_with("serverbench verify — gemma4-e4b-1xl40 at c = 2, 60 s, held-out seeds [1000007], against http://h:1\n\n  gate                         "), "{ok}");
        assert!(
            ok.contains("  runs valid                   pass   measured\n"),
            "{ok}"
        );
        assert!(ok.ends_with("  VERIFIED. Final score over the held-out seeds: D = 1.500, G = 2.000, f = 75.0 %\n"), "{ok}");
        let failed = verification_text(&verification(false));
        assert!(
            failed.contains("  exact output length          FAIL   measured\n"),
            "{failed}"
        );
        assert!(failed.ends_with("  FAILED: exact output length (the held-out runs measured D = 1.500, which does not count)\n"), "{failed}");
    }
}
