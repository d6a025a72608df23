//! `serverbench replay` from the values of its flags to its result: the prompts' vocabulary, the server
//! found or started and the client connected (`engine_choice::connect`), `--out` made ready, the
//! natural-stop probe, the run in real time (`run_real`) and a CUDA engine started for it stopped again,
//! on a runtime of its own. It installs no signal handler, draws no progress bar, prints nothing and
//! picks no exit code: the caller's [`Hooks`] hear what happens, and `RealOutput::not_counted` says
//! how the run ended.

use crate::driver::{run_real, unless_interrupted, RealConfig, RealOutput, RecordSink};
use crate::engine_choice::{connect, model_vocab, Connection, ReplayTarget};
use crate::inputs::prompt_vocab;
use crate::natural_stop::{natural_stop_probe, NaturalStop};
use crate::{Interrupt, Runtime};
use anyhow::{Context, Result};
use serverbench_sim::{Deployment, RunConfig};
use serverbench_workloads::TreeSource;
use std::path::Path;

/// `replay`'s flags beside its deployment, workload, run and target, as given.
#[derive(Clone, Copy, Debug)]
pub struct RealReplay<'a> {
    /// `--vocab`.
    pub vocab: Option<u32>,
    /// `--prompt-salt`.
    pub prompt_salt: u64,
    /// `--time-scale`.
    pub time_scale: f64,
    /// `--no-probe`.
    pub no_probe: bool,
    /// `--out`: records.jsonl is written there as requests end (summary.json is the caller's).
    pub out: Option<&'a Path>,
}

/// What the caller hears while a replay runs.
pub struct Hooks<'a> {
    /// The client's notes and warnings.
    pub note: &'a (dyn Fn(&str) + Sync),
    /// The server's URL, once connected and before the probe (the caller prints its header).
    pub connected: &'a dyn Fn(&str) -> std::io::Result<()>,
    /// Seconds of the window replayed so far.
    pub progress: &'a (dyn Fn(f64) + Sync),
}

/// A finished (or stopped) replay.
pub struct Replayed {
    /// The server's base URL.
    pub url: String,
    /// What was measured.
    pub output: RealOutput,
    /// The natural-stop probe's result (`None` when skipped or stopped).
    pub probe: Option<NaturalStop>,
}

impl Replayed {
    /// summary.json's content (without its metadata): the summary, the client's figures and the probe.
    pub fn summary_json(&self) -> serde_json::Value {
        serde_json::json!({ "summary": self.output.summary, "client": self.output.client, "natural_stop_probe": self.probe })
    }
}

/// Replays `source` as `run` against `target`'s server. `stop` ends it early at any point (the model
/// check, the probe, the run), with what was measured so far, marked so.
pub fn replay(
    d: &Deployment,
    source: &dyn TreeSource,
    run: RunConfig,
    target: &ReplayTarget<'_>,
    r: &RealReplay<'_>,
    stop: &Interrupt,
    hooks: &Hooks<'_>,
) -> Result<Replayed> {
    let (model_vocab, vocab_of) = model_vocab(&target.engine, d, target.model)?;
    let vocab = prompt_vocab(r.vocab, model_vocab, &vocab_of)?.salted(r.prompt_salt);
    let rt = Runtime::new().context("cannot start the async runtime")?;
    let Connection { url, local, client } = connect(target, d, &rt, stop, hooks.note)?;
    if let Some(dir) = r.out {
        // records.jsonl is truncated as it is opened below; summary.json is written at the end.
        serverbench_config::prepare_out(dir, &["summary.json"])?;
    }
    let mut sink = RecordSink::in_dir(r.out)?;
    let cfg = RealConfig {
        run,
        time_scale: r.time_scale,
        vocab,
        stop: stop.clone(),
    };
    (hooks.connected)(&url)?;
    let probe = match r.no_probe {
        true => Some(None),
        false => rt
            .block_on(unless_interrupted(
                stop,
                natural_stop_probe(&client, run.seed, vocab),
            ))
            .map(Some),
    };
    let output = match probe {
        // Stopped during the probe: no run, but a summary that says so.
        None => RealOutput::interrupted(d, &cfg),
        Some(_) => rt.block_on(run_real(
            d,
            source,
            client.clone(),
            &cfg,
            &mut sink,
            hooks.progress,
        ))?,
    };
    if let Some(server) = local {
        // End the engine thread (and release the GPU, flush the step log) before the process exits.
        rt.block_on(server.stop());
    }
    let probe = probe.flatten();
    Ok(Replayed { url, output, probe })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_choice::EngineChoice;
    use crate::inputs::ClientChoice;
    use crate::{spawn_local, NotCounted, ServeConfig};
    use serverbench_workloads::{Generator, WorkloadSpec};
    use std::sync::Mutex;

    fn target<'a>(url: &'a str, client: ClientChoice<'a>) -> ReplayTarget<'a> {
        let engine = EngineChoice {
            engine: "emulated",
            model_dir: None,
            weights: "random",
            gpu: 0,
            step_log: None,
            vars: |_| None,
        };
        ReplayTarget {
            url: Some(url),
            engine,
            client,
            key_env: "OPENAI_API_KEY",
            model: "m",
        }
    }

    fn client() -> ClientChoice<'static> {
        ClientChoice {
            api: "tokens",
            protocol: "cold",
            agentx: false,
            server: "vllm",
            timeout: 30.0,
            api_key: None,
            affinity_header: None,
            headers: &[],
            key_over_plain_http: false,
            tokenizer: None,
            output_tokenizer: None,
        }
    }

    fn flags(time_scale: f64) -> RealReplay<'static> {
        RealReplay {
            vocab: None,
            prompt_salt: 0,
            time_scale,
            no_probe: false,
            out: None,
        }
    }

    fn source() -> Generator {
        Generator::new(WorkloadSpec::default(), 0, 1_048_576).unwrap()
    }

    /// Stopped before it starts, a replay sends nothing, yet returns a summary that says it was
    /// interrupted and by what; the caller still hears the URL (its header comes first).
    #[test]
    fn a_replay_stopped_before_it_starts_sends_nothing_and_says_so() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let source = source();
        let stop = Interrupt::new();
        stop.request("SIGTERM");
        let heard = Mutex::new(Vec::<String>::new());
        let connected = |u: &str| {
            heard.lock().unwrap().push(u.to_string());
            Ok(())
        };
        let hooks = Hooks {
            note: &|_| {},
            connected: &connected,
            progress: &|_| {},
        };
        let t = target("http://10.1.2.3:9", client());
        let r = replay(
            &d,
            &source,
            RunConfig::new(2, 0, 60.0),
            &t,
            &flags(1.0),
            &stop,
            &hooks,
        )
        .unwrap();
        assert_eq!(*heard.lock().unwrap(), ["http://10.1.2.3:9"]);
        assert!(r.probe.is_none());
        assert_eq!(r.output.summary.requests, 0);
        assert!(matches!(
            r.output.not_counted(),
            Some(NotCounted::Interrupted(why)) if why.contains("SIGTERM")
        ));
    }

    /// Against an emulated server, a replay probes the natural stop, then replays its window with
    /// progress reported, and its summary holds what the client measured.
    #[test]
    fn a_replay_probes_then_runs_its_window_against_the_server() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let rt = Runtime::new().unwrap();
        let scale = 50.0;
        let cfg = ServeConfig {
            time_scale: scale,
            ..ServeConfig::new(d.clone(), "m".into(), None, None)
        };
        let url = rt.block_on(spawn_local(cfg)).unwrap();
        let source = source();
        let seen = Mutex::new(0.0f64);
        let progress = |s: f64| *seen.lock().unwrap() = s;
        let hooks = Hooks {
            note: &|_| {},
            connected: &|_| Ok(()),
            progress: &progress,
        };
        let t = target(&url, client());
        let run = RunConfig::new(2, 0, 60.0);
        let r = replay(
            &d,
            &source,
            run,
            &t,
            &flags(scale),
            &Interrupt::new(),
            &hooks,
        )
        .unwrap();
        assert_eq!(r.url, url);
        assert!(r.probe.is_some());
        assert!(r.output.summary.requests > 0, "{:?}", r.output.summary);
        assert!(*seen.lock().unwrap() > 0.0);
        let json = r.summary_json();
        assert!(json["natural_stop_probe"].is_object() && json["summary"].is_object());
    }
}
