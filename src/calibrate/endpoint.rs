//! `serverbench calibrate --endpoint`: probes a black-box OpenAI-compatible server (backends::probe) and
//! fits what the probes can inform with the step-log fit.

use crate::cli::CalibrateArgs;
use anyhow::{anyhow, Context, Result};
use serverbench_backends::{probe, Api, ClientConfig, HttpClient, ProbePlan};
use serverbench_calibration::{FitTarget, ModelSpec, StepSample};
use serverbench_workloads::tokens::Vocab;
use std::sync::Arc;
use std::time::Duration;

/// Probes `url` and writes a profile.
pub fn calibrate(a: &CalibrateArgs, url: &str) -> Result<()> {
    let model = ModelSpec::preset(&a.model)
        .ok_or_else(|| anyhow!("--model: no model preset {:?}", a.model))?;
    let client = Arc::new(
        HttpClient::new(ClientConfig {
            base_url: url.trim_end_matches('/').to_string(),
            api: Api::CompletionsTokens,
            model: a.served_model.clone().unwrap_or_else(|| a.model.clone()),
            timeout: Duration::from_secs(300),
            api_key: std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
            affinity_header: None,
            headers: vec![],
            key_over_plain_http: false,
        })
        .map_err(|e| anyhow!(e))?,
    );
    let vocab = Vocab::new(100, model.vocab)
        .ok_or_else(|| anyhow!("the model's vocabulary is too small"))?;
    let plan = ProbePlan::standard(vocab, a.probe_seed);
    let rt = serverbench_backends::Runtime::new().context("cannot start the async runtime")?;
    eprintln!(
        "probing {url} (TTFT against prompt length, over a cached prefix; TPOT against streams)"
    );
    let steps = rt
        .block_on(probe(&client, &plan))
        .map_err(|e| anyhow!("{url}: {e}"))?;
    for s in &steps {
        eprintln!("  {:<40} {:>9.2} ms", s.what, s.step.seconds * 1e3);
    }
    let samples: Vec<StepSample> = steps.into_iter().map(|s| s.step).collect();
    let inputs = vec![format!(
        "{} probes of {url}: TTFT of fresh prompts {:?}, of suffixes {:?} over {} cached tokens; TPOT of {:?} streams",
        samples.len(),
        plan.prompt_lengths,
        plan.suffixes,
        plan.cached_prefix,
        plan.streams
    )];
    let fit = super::fit::fit_steps(
        a,
        &samples,
        inputs,
        "endpoint probes least squares",
        Some(FitTarget::Wall),
        &super::fit::measured_on(a, format!("the server at {url} (black box)")),
    )?;
    super::fit::report(&fit);
    super::fit::write_profile(&fit.profile, a.out.as_deref())
}
