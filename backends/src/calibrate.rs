//! `calibrate --endpoint`'s probing: the probe plan its flags describe (checked before anything is
//! built or sent), the probe log written one line per probe as it is measured, and the run of the
//! plan against a server until it is done, a probe log cannot be written, or a stop is requested;
//! `probe_endpoint`, the whole of it from the command's flags.
//! It fits nothing (`serverbench_calibration::calibrate` does) and prints nothing.

use crate::client::{check_model, ServerFlags};
use crate::probe::probe_each;
use crate::{
    unless_interrupted, ClientConfig, HttpClient, Interrupt, MixedProbe, ProbePlan, ProbeStep,
    RaggedProbe, Runtime, SharedProbe,
};
use anyhow::{anyhow, bail, Context, Result};
use serverbench_calibration::{ModelSpec, StepSample};
use serverbench_workloads::tokens::Vocab;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// The probe shapes `calibrate --endpoint` is given (its `--probe-*` flags).
#[derive(Clone, Debug, Default)]
pub struct ProbeOptions {
    /// Fresh prompt lengths probed for TTFT.
    pub prompts: Vec<u32>,
    /// Numbers of concurrent streams decoding over a long prompt.
    pub long_streams: Vec<u32>,
    /// Prompt length of the long-context streams.
    pub long_context: u32,
    /// Lengths of the cached prefixes suffixes are probed over.
    pub cached_prefixes: Vec<u32>,
    /// Mixed steps, each `STREAMS:CONTEXT:NEW:CACHED`.
    pub mixed: Vec<String>,
    /// Ragged batches, each `STREAMS:SHORT:LONG`.
    pub ragged: Vec<String>,
    /// Shared-prefix batches, each `STREAMS:SHARED:OWN`.
    pub shared: Vec<String>,
    /// Seed of the probe prompts.
    pub seed: u64,
}

/// The probe plan the options describe, checked before anything is built or sent.
pub fn probe_plan(a: &ProbeOptions, vocab: Vocab) -> Result<ProbePlan> {
    let mut plan = ProbePlan::standard(vocab, a.seed);
    if a.prompts.is_empty() || a.prompts.contains(&0) {
        bail!("--probe-prompts: give prompt lengths of at least one token");
    }
    if a.long_streams.contains(&0) || a.long_streams.iter().any(|&n| n > 1024) {
        bail!("--probe-long-streams: give between 1 and 1024 streams");
    }
    if a.cached_prefixes.is_empty() || a.cached_prefixes.contains(&0) {
        bail!("--probe-cached-prefixes: give prefix lengths of at least one token");
    }
    plan.prompt_lengths = a.prompts.clone();
    plan.long_streams = a.long_streams.clone();
    plan.long_context = a.long_context.max(1);
    plan.cached_prefixes = a.cached_prefixes.clone();
    plan.mixed = a
        .mixed
        .iter()
        .map(|m| mixed_probe(m))
        .collect::<Result<_>>()?;
    plan.ragged = a
        .ragged
        .iter()
        .map(|r| ragged_probe(r))
        .collect::<Result<_>>()?;
    plan.shared = a
        .shared
        .iter()
        .map(|s| shared_probe(s))
        .collect::<Result<_>>()?;
    check_sizes(&plan)?;
    Ok(plan)
}

/// The most tokens one probe's prompts may hold together (256 MiB of token ids): a probe's prompts are
/// built in memory before they are sent, so its size, not the numbers on the command line, sets the
/// memory it takes.
const PROBE_TOKENS: u64 = 1 << 26;

/// Refuses a plan whose prompt is longer than any deployment's context, or one of whose probes holds more
/// than [`PROBE_TOKENS`] prompt tokens: before anything is built or sent.
fn check_sizes(plan: &ProbePlan) -> Result<()> {
    use serverbench_sim::deployment::MAX_CONTEXT;
    let limit = MAX_CONTEXT as u64;
    let long = |flag: &str, what: String, prompt: u64| -> Result<()> {
        if prompt > limit {
            bail!("{flag}: {what}: a prompt of {prompt} tokens is longer than any deployment's context ({limit} tokens)");
        }
        Ok(())
    };
    let total = |flag: &str, what: String, tokens: u64| -> Result<()> {
        if tokens > PROBE_TOKENS {
            bail!("{flag}: {what}: one probe of {tokens} prompt tokens in all, more than {PROBE_TOKENS}");
        }
        Ok(())
    };
    for &n in &plan.prompt_lengths {
        long("--probe-prompts", n.to_string(), n as u64)?;
    }
    for &n in &plan.cached_prefixes {
        long("--probe-cached-prefixes", n.to_string(), n as u64 + 8192)?;
    }
    long(
        "--probe-long-context",
        plan.long_context.to_string(),
        plan.long_context as u64,
    )?;
    for &n in &plan.long_streams {
        let what = format!("{n} streams of {}", plan.long_context);
        total(
            "--probe-long-streams",
            what,
            n as u64 * plan.long_context as u64,
        )?;
    }
    for m in &plan.mixed {
        let what = format!("{}:{}:{}:{}", m.streams, m.context, m.new, m.cached);
        let prompt = (m.new as u64 + m.cached as u64).max(m.context as u64);
        long("--probe-mixed", what.clone(), prompt)?;
        let tokens = m.streams as u64 * m.context as u64 + m.new as u64 + m.cached as u64;
        total("--probe-mixed", what, tokens)?;
    }
    for r in &plan.ragged {
        let what = format!("{}:{}:{}", r.streams, r.short, r.long);
        long("--probe-ragged", what.clone(), r.long as u64)?;
        total("--probe-ragged", what, r.streams as u64 * r.long as u64)?;
    }
    for sh in &plan.shared {
        let what = format!("{}:{}:{}", sh.streams, sh.shared, sh.own);
        long(
            "--probe-shared",
            what.clone(),
            sh.shared as u64 + sh.own as u64,
        )?;
        let tokens = sh.shared as u64 + sh.streams as u64 * sh.own as u64;
        total("--probe-shared", what, tokens)?;
    }
    Ok(())
}

/// One `--probe-shared` entry, `STREAMS:SHARED:OWN`.
fn shared_probe(text: &str) -> Result<SharedProbe> {
    let [streams, shared, own] = shape_numbers("--probe-shared", "STREAMS:SHARED:OWN", text)?;
    if !(2..=1024).contains(&streams) || shared == 0 || own == 0 {
        bail!(
            "--probe-shared: {text:?}: give 2 to 1024 streams, and a shared prefix and own prompts of at least one token"
        );
    }
    Ok(SharedProbe {
        streams,
        shared,
        own,
    })
}

/// One `--probe-ragged` entry, `STREAMS:SHORT:LONG`.
fn ragged_probe(text: &str) -> Result<RaggedProbe> {
    let [streams, short, long] = shape_numbers("--probe-ragged", "STREAMS:SHORT:LONG", text)?;
    if !(1..=1024).contains(&streams) || short == 0 || long < short {
        bail!(
            "--probe-ragged: {text:?}: give 1 to 1024 streams and prompt lengths with 1 ≤ SHORT ≤ LONG"
        );
    }
    Ok(RaggedProbe {
        streams,
        short,
        long,
    })
}

/// One `--probe-mixed` entry, `STREAMS:CONTEXT:NEW:CACHED`.
fn mixed_probe(text: &str) -> Result<MixedProbe> {
    let [streams, context, new, cached] =
        shape_numbers("--probe-mixed", "STREAMS:CONTEXT:NEW:CACHED", text)?;
    if !(1..=1024).contains(&streams) || context == 0 || new == 0 {
        bail!(
            "--probe-mixed: {text:?}: give 1 to 1024 streams, and contexts and prefills of at least one token"
        );
    }
    Ok(MixedProbe {
        streams,
        context,
        new,
        cached,
    })
}

/// The `N` colon-separated whole numbers of a probe shape given to `flag` (`shape` names them).
fn shape_numbers<const N: usize>(flag: &str, shape: &str, text: &str) -> Result<[u32; N]> {
    let numbers: Vec<u32> = text
        .split(':')
        .map(|p| p.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow!("{flag}: {text:?} is not {shape} of whole numbers"))?;
    let count = ["one", "two", "three", "four"]
        .get(N.wrapping_sub(1))
        .map_or_else(|| N.to_string(), |w| w.to_string());
    numbers
        .try_into()
        .map_err(|_| anyhow!("{flag}: {text:?} is not {shape} ({count} numbers)"))
}

/// A probe log being written: a step log (`wall_ms` and `gpu_ms` both the probe's time), one line per
/// probe as it is measured.
pub struct ProbeLog {
    path: std::path::PathBuf,
    file: std::fs::File,
    lines: usize,
}

impl ProbeLog {
    /// A new log at `path` (an existing file is replaced).
    pub fn create(path: &Path) -> Result<ProbeLog> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("{}: cannot write", path.display()))?;
        Ok(ProbeLog {
            path: path.to_path_buf(),
            file,
            lines: 0,
        })
    }

    /// Appends one probe (`at_s`, not fitted: seconds from the start of probing to its end).
    pub fn append(&mut self, s: &ProbeStep, at_s: Option<f64>) -> Result<()> {
        let ms = s.step.seconds * 1e3;
        let mut line = serde_json::json!({"probe": s.what, "wall_ms": ms, "gpu_ms": ms,
            "prefill": s.step.prefill, "decode": s.step.decode});
        if let Some(d) = s.step.decode_kv_distinct {
            line["decode_kv_distinct"] = d.into();
        }
        if let Some(g) = s.decode_gaps {
            // not fitted: what the decodes' steps took before the prefill and while it was taken in
            line["decode_gap_before_ms"] = (g.before_s * 1e3).into();
            line["decode_gap_taking_in_ms"] = (g.taking_in_s * 1e3).into();
        }
        if let Some(t) = at_s {
            line["at_s"] = ((t * 1e3).round() / 1e3).into();
        }
        let mut text = serde_json::to_vec(&line)?;
        text.push(b'\n');
        self.file
            .write_all(&text)
            .with_context(|| format!("{}: cannot write", self.path.display()))?;
        self.lines += 1;
        Ok(())
    }

    /// What was written: `wrote PATH (N probes)`.
    pub fn summary(&self) -> String {
        format!("wrote {} ({} probes)", self.path.display(), self.lines)
    }
}

/// What a run of the probe plan measured: the probes in order, and the failures (each naming its
/// probe); `stopped` when a stop was requested before the plan ended.
#[derive(Debug, Default)]
pub struct ProbeRun {
    /// The probes measured.
    pub steps: Vec<ProbeStep>,
    /// The probes that failed, each with its error.
    pub failed: Vec<String>,
    /// Why the run stopped early (a signal's name), if it did.
    pub stopped: Option<String>,
}

/// Runs `plan` against `client` until it ends or `stop` is requested, appending each probe to `log`
/// as it is measured and handing it (or its failure) to `seen` at once; a failed probe does not end
/// the plan, a probe log that cannot be written does (its error is returned).
pub fn run_probes(
    rt: &Runtime,
    client: &Arc<HttpClient>,
    plan: &ProbePlan,
    stop: &Interrupt,
    mut log: Option<&mut ProbeLog>,
    seen: &mut dyn FnMut(&std::result::Result<ProbeStep, String>),
) -> Result<ProbeRun> {
    let mut run = ProbeRun::default();
    let mut log_error = None;
    let started = std::time::Instant::now();
    rt.block_on(unless_interrupted(
        stop,
        probe_each(client, plan, |r| {
            seen(&r);
            match r {
                Ok(s) => {
                    if let Some(l) = log.as_deref_mut() {
                        if let Err(e) = l.append(&s, Some(started.elapsed().as_secs_f64())) {
                            log_error = Some(e);
                            return false;
                        }
                    }
                    run.steps.push(s);
                }
                Err(e) => run.failed.push(e),
            }
            true
        }),
    ));
    if let Some(e) = log_error {
        return Err(e);
    }
    run.stopped = stop.why();
    Ok(run)
}

/// `calibrate --endpoint`'s flags: the server, the model, the client's and the probes'.
#[derive(Clone, Debug)]
pub struct EndpointChoice<'a> {
    /// `--endpoint`: the server's base URL.
    pub url: &'a str,
    /// `--model`: the model preset whose vocabulary the prompts are drawn from.
    pub model: &'a str,
    /// `--served-model`: the model name to send, when not `--model`.
    pub served_model: Option<&'a str>,
    /// `--api`.
    pub api: &'a str,
    /// `--server`.
    pub server: &'a str,
    /// `--timeout`, seconds.
    pub timeout: f64,
    /// The API key (the caller reads it from the environment).
    pub api_key: Option<String>,
    /// The `--probe-*` flags.
    pub probes: ProbeOptions,
    /// `--probe-log`.
    pub probe_log: Option<&'a Path>,
}

/// What probing an endpoint came to.
#[derive(Debug)]
pub enum Probed {
    /// Every probe measured: the steps, and the line that describes them for the profile's inputs.
    Measured(Vec<StepSample>, String),
    /// A stop request ended the probing: why, and what was kept (nothing is fitted).
    Stopped(String),
}

/// Probes the server `c` names: checks that it serves the model, then runs the plan, handing `note`
/// each probe as it is measured (or fails) and the probe log's summary. A failed probe fails the
/// whole (after the plan ran: the probe log keeps the others).
pub fn probe_endpoint(
    c: &EndpointChoice<'_>,
    stop: &Interrupt,
    note: &(dyn Fn(&str) + Sync),
) -> Result<Probed> {
    let model = ModelSpec::preset(c.model)
        .ok_or_else(|| anyhow!("--model: no model preset {:?}", c.model))?;
    let timeout = serverbench_study::inputs::timeout("timeout", c.timeout)?;
    let served = c.served_model.unwrap_or(c.model).to_string();
    let client = Arc::new(
        HttpClient::new(ClientConfig {
            api_key: c.api_key.clone(),
            ..ClientConfig::new(
                c.url.trim_end_matches('/'),
                crate::inputs::api(c.api)?,
                crate::inputs::server(c.server)?,
                served.clone(),
                timeout,
            )
        })
        .map_err(|e| anyhow!(e))?,
    );
    let vocab = Vocab::new(100, model.vocab)
        .ok_or_else(|| anyhow!("the model's vocabulary is too small"))?;
    let plan = probe_plan(&c.probes, vocab)?;
    let rt = Runtime::new().context("cannot start the async runtime")?;
    let model_flag = match c.served_model {
        Some(_) => "--served-model",
        None => "--model",
    };
    let flags = ServerFlags {
        url: c.url,
        url_flag: "--endpoint",
        model_flag,
    };
    let warn = |w: String| note(&w);
    let checked = check_model(&client, &flags, &served, c.timeout, &warn);
    if let Some(checked) = rt.block_on(unless_interrupted(stop, checked)) {
        checked?;
    }
    note(&format!(
        "probing {} (TTFT against prompt length, over a cached prefix; TPOT against streams)",
        c.url
    ));
    // Each probe is handed on and logged as it is measured, so that a long plan cut short by a
    // deadline, a signal or a failing probe keeps what came before; a failed probe is reported and the
    // plan goes on.
    let mut log = c.probe_log.map(ProbeLog::create).transpose()?;
    let run = run_probes(&rt, &client, &plan, stop, log.as_mut(), &mut |r| match r {
        Ok(s) => note(&format!(
            "  {:<64} {:>9.2} ms",
            s.what,
            s.step.seconds * 1e3
        )),
        Err(e) => note(&format!("  failed: {e}")),
    })?;
    if let Some(l) = &log {
        note(&l.summary());
    }
    let kept = match &log {
        Some(_) => " (the probe log keeps them: `calibrate --from-probes` fits them)",
        None => "",
    };
    if let Some(why) = &run.stopped {
        let n = run.steps.len();
        return Ok(Probed::Stopped(format!(
            "{why}: stopped after {n} probes{kept}; nothing was fitted"
        )));
    }
    if !run.failed.is_empty() {
        bail!(
            "{}: {} of {} probes failed, the first: {}{}",
            c.url,
            run.failed.len(),
            run.failed.len() + run.steps.len(),
            run.failed[0],
            if log.is_some() {
                " (the probe log keeps the others: `calibrate --from-probes` fits them)"
            } else {
                ""
            }
        );
    }
    let samples: Vec<StepSample> = run.steps.into_iter().map(|s| s.step).collect();
    let described = plan.describe(c.url, samples.len());
    Ok(Probed::Measured(samples, described))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serverbench_calibration::{parse_step_log, FitTarget};

    /// Stopped before it began, probing sends nothing and says that nothing was fitted; an unknown
    /// model is refused before anything is built.
    #[test]
    fn a_stopped_probing_fits_nothing_and_an_unknown_model_is_refused() {
        let stop = Interrupt::new();
        stop.request("SIGINT");
        let choice = EndpointChoice {
            url: "http://127.0.0.1:9",
            model: "qwen3-8b",
            served_model: None,
            api: "tokens",
            server: "vllm",
            timeout: 5.0,
            api_key: None,
            probes: ProbeOptions {
                prompts: vec![64],
                long_context: 8192,
                cached_prefixes: vec![8192],
                ..ProbeOptions::default()
            },
            probe_log: None,
        };
        let notes = std::sync::Mutex::new(Vec::<String>::new());
        let note = |n: &str| notes.lock().unwrap().push(n.to_string());
        match probe_endpoint(&choice, &stop, &note).unwrap() {
            Probed::Stopped(why) => {
                assert_eq!(why, "SIGINT: stopped after 0 probes; nothing was fitted")
            }
            other => panic!("{other:?}"),
        }
        let unknown = EndpointChoice {
            model: "nope",
            ..choice
        };
        let e = probe_endpoint(&unknown, &stop, &note).unwrap_err();
        assert_eq!(e.to_string(), "--model: no model preset \"nope\"");
    }

    fn decode_step(distinct: Option<u64>, seconds: f64) -> StepSample {
        StepSample {
            prefill: vec![],
            decode: vec![28_700; 4],
            decode_kv_distinct: distinct,
            seconds,
        }
    }

    /// A shared-prefix probe's distinct KV count survives the probe log, so `--from-probes` fits the
    /// same shared reads as `--endpoint` did.
    #[test]
    fn the_probe_log_keeps_a_shared_probes_distinct_kv() {
        let path = std::env::temp_dir().join(format!("sb-probe-log-{}.jsonl", std::process::id()));
        let steps = vec![
            ProbeStep {
                what: "shared".into(),
                step: decode_step(Some(20_480 + 4 * 8_220), 0.012),
                decode_gaps: None,
            },
            ProbeStep {
                what: "distinct".into(),
                step: decode_step(None, 0.015),
                decode_gaps: None,
            },
        ];
        let mut log = ProbeLog::create(&path).unwrap();
        for s in &steps {
            log.append(s, None).unwrap();
        }
        assert!(log.summary().ends_with("(2 probes)"));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).ok();
        let read = parse_step_log("log", &text, FitTarget::Wall).unwrap();
        assert_eq!(read[0].decode_kv_distinct, Some(53_360));
        assert_eq!(read[1].decode_kv_distinct, None);
        assert_eq!(read[0].decode, vec![28_700; 4]);
    }

    /// Probe shapes are checked before anything is sent, each error naming its flag.
    #[test]
    fn probe_shapes_are_checked_naming_their_flags() {
        let vocab = Vocab::new(100, 1000).unwrap();
        let good = ProbeOptions {
            prompts: vec![64],
            long_context: 8192,
            cached_prefixes: vec![8192],
            ..ProbeOptions::default()
        };
        assert!(probe_plan(&good, vocab).is_ok());
        for (o, flag) in [
            (
                ProbeOptions {
                    prompts: vec![0],
                    ..good.clone()
                },
                "--probe-prompts",
            ),
            (
                ProbeOptions {
                    mixed: vec!["1:2:3".into()],
                    ..good.clone()
                },
                "--probe-mixed",
            ),
            (
                ProbeOptions {
                    ragged: vec!["2:9:3".into()],
                    ..good.clone()
                },
                "--probe-ragged",
            ),
            (
                ProbeOptions {
                    shared: vec!["1:64:8".into()],
                    ..good.clone()
                },
                "--probe-shared",
            ),
            (
                ProbeOptions {
                    long_streams: vec![2000],
                    ..good.clone()
                },
                "--probe-long-streams",
            ),
        ] {
            let e = format!("{:#}", probe_plan(&o, vocab).unwrap_err());
            assert!(e.starts_with(flag), "{e}");
        }
    }
}
