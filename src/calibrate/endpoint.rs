//! `serverbench calibrate --endpoint`: the client and the stop signal for probing a black-box
//! OpenAI-compatible server (`serverbench_backends::calibrate`), each probe printed as it is measured,
//! and the fit of the probes (`serverbench_calibration::calibrate::fit_probes`) reported and written.
//! `--from-probes` redoes the fit from a probe log, without the server.

use super::fit::{measured_on, options, report, write_profile};
use crate::cli::CalibrateArgs;
use anyhow::{anyhow, Context, Result};
use serverbench_backends::calibrate::{probe_plan, run_probes, ProbeLog, ProbeOptions};
use serverbench_backends::client::{check_model, ServerFlags};
use serverbench_backends::{unless_interrupted, ClientConfig, HttpClient, Interrupt};
use serverbench_calibration::calibrate::fit_probes;
use serverbench_calibration::report::probe_fit_text;
use serverbench_calibration::sources::step_log as read_step_log;
use serverbench_calibration::{FitTarget, ModelSpec, StepSample};
use serverbench_workloads::tokens::Vocab;
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
            api: serverbench_backends::inputs::api(&a.api)?,
            server: serverbench_backends::inputs::server(&a.server)?,
            model: served.clone(),
            timeout,
            api_key: std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
            affinity_header: None,
            headers: vec![],
            key_over_plain_http: false,
            words: None,
            output_counter: None,
        })
        .map_err(|e| anyhow!(e))?,
    );
    let vocab = Vocab::new(100, model.vocab)
        .ok_or_else(|| anyhow!("the model's vocabulary is too small"))?;
    let plan = probe_plan(&probe_options(a), vocab)?;
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
    let server = ServerFlags {
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
        check_model(&client, &server, &served, a.timeout, &|w| eprintln!("{w}")),
    )) {
        checked?;
    }
    eprintln!(
        "probing {url} (TTFT against prompt length, over a cached prefix; TPOT against streams)"
    );
    // Each probe is printed and logged as it is measured, so that a long plan cut short by a deadline,
    // a signal or a failing probe keeps what came before; a failed probe is reported and the plan goes on.
    let mut log = a.probe_log.as_deref().map(ProbeLog::create).transpose()?;
    let run = run_probes(&rt, &client, &plan, &stop, log.as_mut(), &mut |r| match r {
        Ok(s) => eprintln!("  {:<64} {:>9.2} ms", s.what, s.step.seconds * 1e3),
        Err(e) => eprintln!("  failed: {e}"),
    })?;
    if let Some(l) = &log {
        eprintln!("{}", l.summary());
    }
    let kept = if log.is_some() {
        " (the probe log keeps them: `calibrate --from-probes` fits them)"
    } else {
        ""
    };
    if let Some(why) = &run.stopped {
        return Err(crate::Exit::new(
            crate::signals::INTERRUPTED,
            format!(
                "{why}: stopped after {} probes{kept}; nothing was fitted",
                run.steps.len(),
            ),
        )
        .into());
    }
    if !run.failed.is_empty() {
        anyhow::bail!(
            "{url}: {} of {} probes failed, the first: {}{}",
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
    let inputs = vec![plan.describe(url, samples.len())];
    let on = measured_on(a, format!("the server at {url} (black box)"));
    fit_and_write(a, &samples, inputs, &on)
}

/// `--from-probes`: the fit of `calibrate --endpoint` on a probe log it wrote.
pub fn from_probe_log(a: &CalibrateArgs, path: &Path) -> Result<()> {
    let samples = read_step_log(path, FitTarget::Wall)?;
    let inputs = vec![format!("{} probes in {}", samples.len(), path.display())];
    let on = measured_on(a, format!("the server probed into {}", path.display()));
    fit_and_write(a, &samples, inputs, &on)
}

/// The `--probe-*` flags.
fn probe_options(a: &CalibrateArgs) -> ProbeOptions {
    ProbeOptions {
        prompts: a.probe_prompts.clone(),
        long_streams: a.probe_long_streams.clone(),
        long_context: a.probe_long_context,
        cached_prefixes: a.probe_cached_prefixes.clone(),
        mixed: a.probe_mixed.clone(),
        ragged: a.probe_ragged.clone(),
        shared: a.probe_shared.clone(),
        seed: a.probe_seed,
    }
}

/// Fits the probes with both attention layouts, says how each did, and writes the one kept.
fn fit_and_write(
    a: &CalibrateArgs,
    samples: &[StepSample],
    inputs: Vec<String>,
    measured_on: &str,
) -> Result<()> {
    let probes = fit_probes(&options(a), samples, inputs, measured_on)?;
    eprint!("{}", probe_fit_text(&probes, a.fit_frontend));
    report(&probes.fit);
    write_profile(&probes.fit.profile, a.out.as_deref())
}
