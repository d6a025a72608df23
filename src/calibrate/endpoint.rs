//! `serverbench calibrate --endpoint`: probes a black-box OpenAI-compatible server (backends::probe) and
//! fits what the probes can inform: the step-log fit, with the request latency estimated from the
//! probes and the attention layout (per sequence or packed) chosen by which explains them better.
//! `--from-probes` redoes the fit from a probe log, without the server.

use super::fit::{base_profile, fit_on_base, measured_on, read_step_log, report, write_profile};
use crate::cli::CalibrateArgs;
use anyhow::{anyhow, Context, Result};
use serverbench_backends::probe::probe_each;
use serverbench_backends::{
    unless_interrupted, ClientConfig, HttpClient, Interrupt, MixedProbe, ProbePlan, ProbeStep,
    RaggedProbe, SharedProbe,
};
use serverbench_calibration::fit::front_end_seconds;
use serverbench_calibration::{
    predict_steps, AttentionLayout, Fit, FitTarget, ModelSpec, Profile, StepSample,
};
use serverbench_workloads::tokens::Vocab;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

/// Probes `url` and writes a profile. SIGINT or SIGTERM stops the probing: the probe log keeps what was
/// measured, nothing is fitted, and the command exits 130.
pub fn calibrate(a: &CalibrateArgs, url: &str) -> Result<()> {
    let model = ModelSpec::preset(&a.model)
        .ok_or_else(|| anyhow!("--model: no model preset {:?}", a.model))?;
    let timeout = crate::inputs::timeout("timeout", a.timeout)?;
    let served = a.served_model.clone().unwrap_or_else(|| a.model.clone());
    let client = Arc::new(
        HttpClient::new(ClientConfig {
            base_url: url.trim_end_matches('/').to_string(),
            api: crate::inputs::api(&a.api)?,
            server: crate::inputs::server(&a.server)?,
            model: served.clone(),
            timeout,
            api_key: std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
            affinity_header: None,
            headers: vec![],
            key_over_plain_http: false,
            words: None,
        })
        .map_err(|e| anyhow!(e))?,
    );
    let vocab = Vocab::new(100, model.vocab)
        .ok_or_else(|| anyhow!("the model's vocabulary is too small"))?;
    let plan = plan(a, vocab)?;
    let stop = Interrupt::new();
    crate::signals::on_stop(
        {
            let stop = stop.clone();
            move |name| {
                eprintln!("\n{name}: stopping the probes; the probe log keeps those measured (again: quit at once)");
                stop.request(name);
            }
        },
        crate::signals::exit_now,
    )?;
    let rt = serverbench_backends::Runtime::new().context("cannot start the async runtime")?;
    let server = crate::real::ServerFlags {
        url,
        url_flag: "--endpoint",
        model_flag: if a.served_model.is_some() {
            "--served-model"
        } else {
            "--model"
        },
    };
    if let Some(checked) = rt.block_on(unless_interrupted(
        &stop,
        crate::real::check_model(&client, &server, &served, a.timeout),
    )) {
        checked?;
    }
    eprintln!(
        "probing {url} (TTFT against prompt length, over a cached prefix; TPOT against streams)"
    );
    // Each probe is printed and logged as it is measured, so that a long plan cut short by a deadline,
    // a signal or a failing probe keeps what came before; a failed probe is reported and the plan goes on.
    let mut log = a.probe_log.as_deref().map(ProbeLog::create).transpose()?;
    let (mut steps, mut failed, mut log_error) = (Vec::new(), Vec::new(), None);
    let started = std::time::Instant::now();
    rt.block_on(unless_interrupted(
        &stop,
        probe_each(&client, &plan, |r| {
            match r {
                Ok(s) => {
                    eprintln!("  {:<64} {:>9.2} ms", s.what, s.step.seconds * 1e3);
                    if let Some(l) = &mut log {
                        if let Err(e) = l.append(&s, Some(started.elapsed().as_secs_f64())) {
                            log_error = Some(e);
                            return false;
                        }
                    }
                    steps.push(s);
                }
                Err(e) => {
                    eprintln!("  failed: {e}");
                    failed.push(e);
                }
            }
            true
        }),
    ));
    if let Some(e) = log_error {
        return Err(e);
    }
    if let Some(l) = &log {
        l.finish();
    }
    if let Some(why) = stop.why() {
        return Err(crate::Exit::new(
            crate::signals::INTERRUPTED,
            format!(
                "{why}: stopped after {} probes{}; nothing was fitted",
                steps.len(),
                if log.is_some() {
                    " (the probe log keeps them: `calibrate --from-probes` fits them)"
                } else {
                    ""
                }
            ),
        )
        .into());
    }
    if !failed.is_empty() {
        anyhow::bail!(
            "{url}: {} of {} probes failed, the first: {}{}",
            failed.len(),
            failed.len() + steps.len(),
            failed[0],
            if log.is_some() {
                " (the probe log keeps the others: `calibrate --from-probes` fits them)"
            } else {
                ""
            }
        );
    }
    let samples: Vec<StepSample> = steps.into_iter().map(|s| s.step).collect();
    let inputs = vec![format!(
        "{} probes of {url}: TTFT of fresh prompts {:?}, of suffixes {:?} over {:?} cached tokens; TPOT of {:?} streams over {} tokens and {:?} over {}; {} mixed steps; {} ragged and {} shared-prefix batches",
        samples.len(),
        plan.prompt_lengths,
        plan.suffixes,
        plan.cached_prefixes,
        plan.streams,
        plan.decode_prompt,
        plan.long_streams,
        plan.long_context,
        plan.mixed.len(),
        plan.ragged.len(),
        plan.shared.len()
    )];
    let on = measured_on(a, format!("the server at {url} (black box)"));
    fit_probes(a, &samples, inputs, &on)
}

/// `--from-probes`: the fit of `calibrate --endpoint` on a probe log it wrote.
pub fn from_probe_log(a: &CalibrateArgs, path: &Path) -> Result<()> {
    let samples = read_step_log(path, FitTarget::Wall)?;
    let inputs = vec![format!("{} probes in {}", samples.len(), path.display())];
    let on = measured_on(a, format!("the server probed into {}", path.display()));
    fit_probes(a, &samples, inputs, &on)
}

/// The probe plan of the arguments.
fn plan(a: &CalibrateArgs, vocab: Vocab) -> Result<ProbePlan> {
    let mut plan = ProbePlan::standard(vocab, a.probe_seed);
    if a.probe_prompts.is_empty() || a.probe_prompts.contains(&0) {
        anyhow::bail!("--probe-prompts: give prompt lengths of at least one token");
    }
    if a.probe_long_streams.contains(&0) || a.probe_long_streams.iter().any(|&n| n > 1024) {
        anyhow::bail!("--probe-long-streams: give between 1 and 1024 streams");
    }
    if a.probe_cached_prefixes.is_empty() || a.probe_cached_prefixes.contains(&0) {
        anyhow::bail!("--probe-cached-prefixes: give prefix lengths of at least one token");
    }
    plan.prompt_lengths = a.probe_prompts.clone();
    plan.long_streams = a.probe_long_streams.clone();
    plan.long_context = a.probe_long_context.max(1);
    plan.cached_prefixes = a.probe_cached_prefixes.clone();
    plan.mixed = a
        .probe_mixed
        .iter()
        .map(|m| mixed_probe(m))
        .collect::<Result<_>>()?;
    plan.ragged = a
        .probe_ragged
        .iter()
        .map(|r| ragged_probe(r))
        .collect::<Result<_>>()?;
    plan.shared = a
        .probe_shared
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
            anyhow::bail!("{flag}: {what}: a prompt of {prompt} tokens is longer than any deployment's context ({limit} tokens)");
        }
        Ok(())
    };
    let total = |flag: &str, what: String, tokens: u64| -> Result<()> {
        if tokens > PROBE_TOKENS {
            anyhow::bail!("{flag}: {what}: one probe of {tokens} prompt tokens in all, more than {PROBE_TOKENS}");
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
        anyhow::bail!(
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
        anyhow::bail!(
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
        anyhow::bail!(
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
struct ProbeLog {
    path: std::path::PathBuf,
    file: std::fs::File,
    lines: usize,
}

impl ProbeLog {
    fn create(path: &Path) -> Result<ProbeLog> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("{}: cannot write", path.display()))?;
        Ok(ProbeLog {
            path: path.to_path_buf(),
            file,
            lines: 0,
        })
    }

    /// Appends one probe (`at_s`, not fitted: seconds from the start of probing to its end).
    fn append(&mut self, s: &ProbeStep, at_s: Option<f64>) -> Result<()> {
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

    fn finish(&self) {
        eprintln!("wrote {} ({} probes)", self.path.display(), self.lines);
    }
}

/// Writes the probes as a step log at once.
#[cfg(test)]
fn write_probe_log(path: &Path, steps: &[ProbeStep]) -> Result<()> {
    let mut log = ProbeLog::create(path)?;
    for s in steps {
        log.append(s, None)?;
    }
    log.finish();
    Ok(())
}

/// One sample per probed shape: the median time of its repetitions (a server's first request of a new
/// shape can be much slower: allocations, kernel selection), in the order the shapes first appear.
fn medians(samples: &[StepSample]) -> Vec<StepSample> {
    let mut groups: Vec<(StepSample, Vec<f64>)> = Vec::new();
    for s in samples {
        match groups.iter_mut().find(|(g, _)| {
            g.prefill == s.prefill
                && g.decode == s.decode
                && g.decode_kv_distinct == s.decode_kv_distinct
        }) {
            Some((_, times)) => times.push(s.seconds),
            None => groups.push((s.clone(), vec![s.seconds])),
        }
    }
    groups
        .into_iter()
        .map(|(mut s, mut times)| {
            times.sort_by(f64::total_cmp);
            s.seconds = times[times.len() / 2];
            s
        })
        .collect()
}

/// True for a TTFT probe (a prefill step alone, whose time includes the request's latency).
fn is_ttft(s: &StepSample) -> bool {
    s.decode.is_empty()
}

/// Fits both attention layouts, each with its request latency, keeps the one whose squared relative
/// error over all probes is smaller, and writes it.
fn fit_probes(
    a: &CalibrateArgs,
    samples: &[StepSample],
    inputs: Vec<String>,
    measured_on: &str,
) -> Result<()> {
    let base = base_profile(a)?;
    let samples = &medians(samples);
    let mut best: Option<(f64, Fit)> = None;
    for layout in [AttentionLayout::PerSequence, AttentionLayout::Packed] {
        let base = Profile {
            attention_layout: layout,
            ..base.clone()
        };
        let fit = fit_with_latency(a, &base, samples, &inputs, measured_on)?;
        let error = probe_error(a, &fit.profile, samples)?;
        eprintln!(
            "attention {layout:?}: request latency {:.2} ms{}, RMS error over the probes {:.2} %",
            fit.profile.request_latency_s * 1e3,
            if a.fit_frontend {
                format!(
                    " + {:.3} µs per prompt token",
                    fit.profile.frontend_s_per_token * 1e6
                )
            } else {
                String::new()
            },
            100.0 * error.sqrt()
        );
        if !matches!(&best, Some((e, _)) if *e <= error) {
            best = Some((error, fit));
        }
    }
    let (_, fit) = best.expect("two layouts were fitted");
    eprintln!("kept attention {:?}", fit.profile.attention_layout);
    report(&fit);
    write_profile(&fit.profile, a.out.as_deref())
}

/// The fit with the request latency estimated (unless `--request-latency-ms` gives it): TTFT probes
/// minus the latency are fitted with the decode probes, then the latency is moved by the TTFT probes'
/// median residual, a few times over (the decode probes pin the step overhead the latency would
/// otherwise hide in). With `--fit-frontend` the latency and the front end's time per prompt token are
/// variables of the one least-squares fit instead (`FitSetup::front_end`).
fn fit_with_latency(
    a: &CalibrateArgs,
    base: &Profile,
    samples: &[StepSample],
    inputs: &[String],
    measured_on: &str,
) -> Result<Fit> {
    let method = "endpoint probes least squares";
    if a.fit_frontend {
        if a.request_latency_ms.is_some() {
            anyhow::bail!("--request-latency-ms: --fit-frontend fits the request latency itself");
        }
        let inputs = inputs.to_vec();
        return fit_on_base(
            a,
            base,
            samples,
            inputs,
            method,
            Some(FitTarget::Wall),
            measured_on,
            0.0,
        );
    }
    let fixed = a.request_latency_ms.map(|ms| ms / 1e3);
    let mut latency = fixed.unwrap_or(0.0);
    let rounds = if fixed.is_some() { 1 } else { 6 };
    let mut fit = None;
    for _ in 0..rounds {
        let shifted = less_latency(samples, latency);
        let f = fit_on_base(
            a,
            base,
            &shifted,
            inputs.to_vec(),
            method,
            Some(FitTarget::Wall),
            measured_on,
            latency,
        )?;
        if fixed.is_none() {
            let (model, hardware) = super::fit::model_and_hardware(a)?;
            let predicted = predict_steps(samples, &model, &hardware, &f.profile);
            let mut residuals: Vec<f64> = samples
                .iter()
                .zip(&predicted)
                .filter(|(s, _)| is_ttft(s))
                .map(|(s, p)| s.seconds - p)
                .collect();
            if !residuals.is_empty() {
                residuals.sort_by(f64::total_cmp);
                let next = residuals[residuals.len() / 2].max(0.0);
                let settled = (next - latency).abs() < 1e-5;
                latency = next;
                if settled {
                    fit = Some(f);
                    break;
                }
            }
        }
        fit = Some(f);
    }
    let mut fit = fit.expect("at least one round");
    fit.profile.request_latency_s = latency;
    Ok(fit)
}

/// The TTFT probes less `latency` (never below a tenth of their time).
fn less_latency(samples: &[StepSample], latency: f64) -> Vec<StepSample> {
    samples
        .iter()
        .map(|s| {
            let mut s = s.clone();
            if is_ttft(&s) {
                s.seconds = (s.seconds - latency).max(s.seconds / 10.0);
            }
            s
        })
        .collect()
}

/// Mean squared relative error of a profile over the probes (TTFT probes with its request latency).
fn probe_error(a: &CalibrateArgs, p: &Profile, samples: &[StepSample]) -> Result<f64> {
    let (model, hardware) = super::fit::model_and_hardware(a)?;
    let predicted = predict_steps(samples, &model, &hardware, p);
    let sum: f64 = samples
        .iter()
        .zip(&predicted)
        .map(|(s, &t)| {
            let t = if is_ttft(s) {
                t + front_end_seconds(p, s)
            } else {
                t
            };
            ((t - s.seconds) / s.seconds).powi(2)
        })
        .sum();
    Ok(sum / samples.len().max(1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        write_probe_log(&path, &steps).unwrap();
        let read = read_step_log(&path, FitTarget::Wall).unwrap();
        std::fs::remove_file(&path).ok();
        assert_eq!(read[0].decode_kv_distinct, Some(53_360));
        assert_eq!(read[1].decode_kv_distinct, None);
        assert_eq!(read[0].decode, vec![28_700; 4]);
    }

    /// Repetitions of one shape give their median; a shared and a distinct batch of the same contexts
    /// are different shapes.
    #[test]
    fn medians_keep_shared_and_distinct_batches_apart() {
        let m = medians(&[
            decode_step(Some(53_360), 0.012),
            decode_step(None, 0.015),
            decode_step(Some(53_360), 0.010),
            decode_step(Some(53_360), 0.011),
        ]);
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].decode_kv_distinct, m[0].seconds),
            (Some(53_360), 0.011)
        );
        assert_eq!((m[1].decode_kv_distinct, m[1].seconds), (None, 0.015));
    }
}
