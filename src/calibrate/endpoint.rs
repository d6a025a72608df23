//! `serverbench calibrate --endpoint`: the stop signal for probing a black-box OpenAI-compatible server
//! (`serverbench_backends::calibrate::probe_endpoint`), each probe printed as it is measured, and the
//! fit of the probes (`serverbench_calibration::calibrate::fit_probes`) reported and written.
//! `--from-probes` redoes the fit from a probe log, without the server.

use super::fit::{measured_on, options, report, write_profile};
use crate::cli::CalibrateArgs;
use anyhow::Result;
use serverbench_backends::calibrate::{probe_endpoint, EndpointChoice, ProbeOptions, Probed};
use serverbench_calibration::calibrate::fit_probes;
use serverbench_calibration::report::probe_fit_text;
use serverbench_calibration::sources::step_log as read_step_log;
use serverbench_calibration::{FitTarget, StepSample};
use std::path::Path;

/// Probes `url` and writes a profile. SIGINT or SIGTERM stops the probing: the probe log keeps what was
/// measured, nothing is fitted, and the command exits 130.
pub fn calibrate(a: &CalibrateArgs, url: &str) -> Result<()> {
    let choice = EndpointChoice {
        url,
        model: &a.model,
        served_model: a.served_model.as_deref(),
        api: &a.api,
        server: &a.server,
        timeout: a.timeout,
        api_key: std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        probes: probe_options(a),
        probe_log: a.probe_log.as_deref(),
    };
    let stop =
        crate::signals::interrupt("stopping the probes; the probe log keeps those measured")?;
    match probe_endpoint(&choice, &stop, &|n| eprintln!("{n}"))? {
        Probed::Stopped(why) => Err(crate::exit(crate::signals::INTERRUPTED, why)),
        Probed::Measured(samples, described) => {
            let on = measured_on(a, format!("the server at {url} (black box)"));
            fit_and_write(a, &samples, vec![described], &on)
        }
    }
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
