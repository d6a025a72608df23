//! `serverbench replay` (against a real server) and `serverbench serve` (the emulated server).

use crate::cli::{ReplayRealArgs, ServeArgs};
use crate::inputs;
use crate::output::{summary_table, write_json};
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serverbench_backends::{
    natural_stop_probe, run_real, serve_until_interrupted, Api, ClientConfig, HttpClient,
    RealConfig, RecordSink, Runtime, ServeConfig, ServeLimits,
};
use serverbench_workloads::tokens::{prompt_tokens, Vocab};
use std::sync::Arc;
use std::time::Duration;

/// `serve`'s limits on its clients, from the flags.
fn limits(a: &ServeArgs) -> Result<ServeLimits> {
    let secs = |flag: &str, v: f64| -> Result<Duration> {
        if !(v > 0.0 && v <= MAX_TIMEOUT_S) {
            bail!(
                "--{flag}: must be a positive number of seconds, at most {MAX_TIMEOUT_S}, got {v}"
            );
        }
        Ok(Duration::from_secs_f64(v))
    };
    if a.max_connections == 0 || a.max_connections > 1 << 20 {
        bail!("--max-connections: must be between 1 and {}", 1 << 20);
    }
    Ok(ServeLimits {
        max_connections: a.max_connections,
        header_timeout: secs("header-timeout", a.header_timeout)?,
        body_timeout: secs("body-timeout", a.body_timeout)?,
        drain_timeout: secs("drain-timeout", a.drain_timeout)?,
    })
}

/// Longest per-request timeout, seconds.
const MAX_TIMEOUT_S: f64 = 86_400.0;

/// The async runtime of the commands that talk HTTP.
pub fn runtime() -> Result<Runtime> {
    Runtime::new().context("cannot start the async runtime")
}

pub fn serve(a: ServeArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    let cost = d.cost_model();
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    inputs::time_scale(a.time_scale)?;
    d.replica(serverbench_sim::ReplicaOptions::default())?;
    let model = a.model.clone().unwrap_or_else(|| d.model.name.clone());
    let cuda = crate::cuda::serve_setup(&a.engine, &model)?;
    let vocab = cuda
        .as_ref()
        .map_or(d.model_spec().vocab, |c| c.model.vocab_size);
    let cfg = ServeConfig {
        deployment: d.clone(),
        cost,
        time_scale: a.time_scale,
        model_name: model.clone(),
        vocab,
        cuda,
        limits: limits(&a)?,
    };
    let addr = format!("{}:{}", a.host, a.port);
    let banner = |at: std::net::SocketAddr| {
        if a.engine.engine == "cuda" {
            eprintln!(
                "serverbench serve — CUDA engine, {} ({}) on http://{at}  (Ctrl-C stops)",
                d.name, model
            );
        } else {
            eprintln!("serverbench serve — emulating {} ({}) at {} × real time on http://{at}  (Ctrl-C stops)", d.name, model, a.time_scale);
        }
    };
    runtime()?
        .block_on(serve_until_interrupted(&addr, cfg, banner))
        .context("the server stopped")
}

fn client_config(a: &ReplayRealArgs, url: &str, model: String) -> Result<ClientConfig> {
    let api = Api::parse(&a.api)
        .ok_or_else(|| anyhow!("--api: expected tokens, text or chat, got {:?}", a.api))?;
    if !(a.timeout > 0.0 && a.timeout <= MAX_TIMEOUT_S) {
        bail!(
            "--timeout: must be a positive number of seconds, at most {MAX_TIMEOUT_S} (a day), got {}",
            a.timeout
        );
    }
    let headers = a
        .headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| anyhow!("--header: expected NAME:VALUE, got {h:?}"))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ClientConfig {
        base_url: url.to_string(),
        api,
        model,
        timeout: Duration::from_secs_f64(a.timeout),
        api_key: std::env::var(&a.api_key_env).ok().filter(|k| !k.is_empty()),
        affinity_header: a.affinity_header.clone(),
        headers,
    })
}

pub fn replay(a: ReplayRealArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    inputs::time_scale(a.time_scale)?;
    let run = inputs::run_config(&a.replay, a.concurrency, a.seed)?;
    let source = inputs::source(&a.workload, a.seed, d.context_limit)?;
    let model = a.model.clone().unwrap_or_else(|| d.model.name.clone());
    let rt = runtime()?;
    let mut local = None;
    let url = match (&a.url, a.engine.engine.as_str()) {
        (Some(u), "emulated") => u.clone(),
        (None, "cuda") => {
            let cuda = crate::cuda::serve_setup(&a.engine, &model)?;
            let cfg = ServeConfig {
                deployment: d.clone(),
                cost: d.cost_model(),
                time_scale: 1.0,
                model_name: model.clone(),
                vocab: cuda
                    .as_ref()
                    .map_or(d.model_spec().vocab, |c| c.model.vocab_size),
                cuda,
                limits: ServeLimits::default(),
            };
            let server = rt
                .block_on(serverbench_backends::spawn_local_server(cfg))
                .context("cannot start the CUDA engine")?;
            let url = server.url.clone();
            local = Some(server);
            url
        }
        (None, "emulated") => bail!(
            "--url: required (or --engine cuda to replay against the CUDA engine in this process)"
        ),
        (Some(_), "cuda") => bail!("--url and --engine cuda exclude each other"),
        (_, other) => bail!("--engine: expected emulated or cuda, got {other:?}"),
    };
    let vocab_default = if a.engine.engine == "cuda" {
        crate::cuda::model_config(&a.engine, &model)?.vocab_size
    } else {
        d.model_spec().vocab
    };
    let vocab = Vocab::new(100, a.vocab.unwrap_or(vocab_default))
        .ok_or_else(|| anyhow!("--vocab: must be above 100"))?;
    let client =
        Arc::new(HttpClient::new(client_config(&a, &url, model)?).map_err(|e| anyhow!(e))?);
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    }
    let records_path = a.out.as_ref().map(|d| d.join("records.jsonl"));
    let mut sink =
        RecordSink::new(records_path.as_deref()).with_context(|| "cannot create records.jsonl")?;
    let cfg = RealConfig {
        run,
        time_scale: a.time_scale,
        vocab,
    };
    outln!(
        "serverbench replay — {} at {}, c = {}, seed {}, window {} s{}\n",
        d.name,
        url,
        run.concurrency,
        run.seed,
        run.window_s,
        if a.time_scale != 1.0 {
            format!(" (time compressed {}×)", a.time_scale)
        } else {
            String::new()
        }
    )?;
    let probe = if a.no_probe {
        None
    } else {
        let t = source.tree(0);
        let prompt = prompt_tokens(0, &t.requests()[0], t.block_size, vocab);
        Some(rt.block_on(natural_stop_probe(&client, &prompt, 256)))
    };
    let bar = ProgressBar::new(run.window_s as u64);
    bar.set_style(
        ProgressStyle::with_template("  {bar:40} {pos}/{len} s of window  {elapsed} elapsed")
            .expect("valid template"),
    );
    let out = rt.block_on(run_real(
        &d,
        source.as_ref(),
        client.clone(),
        &cfg,
        &mut sink,
        &|s| bar.set_position(s as u64),
    ))?;
    bar.finish_and_clear();
    if let Some(server) = local {
        // End the engine thread (and release the GPU, flush the step log) before the process exits.
        rt.block_on(server.stop());
    }
    if out.client.interrupted {
        outln!(
            "  interrupted: scored the {:.0} s measured so far\n",
            out.summary.window_s
        )?;
    }
    out!(
        "{}",
        summary_table(&out.summary, d.gpus(), d.gpu_hour_dollars, &a.replay.start)
    )?;
    let c = &out.client;
    outln!("\n  behaviour checks")?;
    outln!(
        "    exact output length   {} of {} completed requests differ from the requested length",
        c.length_mismatches,
        out.summary.completed
    )?;
    outln!("    stream vs usage       {} without a usage block, {} with more output chunks than usage tokens", c.usage_missing, c.chunk_usage_mismatches)?;
    match &probe {
        Some((reason, tokens, None)) => {
            let ok = reason.as_deref() == Some("stop") && *tokens < 256;
            outln!("    natural stop          {} (finish_reason {:?} after {tokens} of 256 tokens without ignore_eos)", if ok { "ok" } else { "NOT honoured" }, reason.as_deref().unwrap_or("none"))?;
        }
        Some((_, _, Some(e))) => outln!("    natural stop          probe failed: {e}")?,
        None => outln!("    natural stop          skipped")?,
    }
    let errors: Vec<String> = c
        .errors_by_kind
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    outln!(
        "    errors by kind        {}",
        if errors.is_empty() {
            "none".into()
        } else {
            errors.join(", ")
        }
    )?;
    outln!("    dispatch drift        p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (send time after the intended time)", c.dispatch_drift_ms.p50, c.dispatch_drift_ms.p99, c.dispatch_drift_ms.max)?;
    if let Some(dir) = &a.out {
        write_json(
            dir,
            "summary.json",
            &serde_json::json!({ "summary": out.summary, "client": out.client, "natural_stop_probe": probe.map(|(r, t, e)| serde_json::json!({"finish_reason": r, "tokens": t, "error": e})) }),
        )?;
        outln!("\n  wrote {}/records.jsonl and summary.json", dir.display())?;
    }
    Ok(())
}
