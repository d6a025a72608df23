//! `serverbench replay` (against a real server) and `serverbench serve` (the emulated server).

use crate::cli::{ReplayRealArgs, ServeArgs};
use crate::inputs;
use crate::output::{prepare_out, write_json};
use crate::signals;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serverbench_backends::client::{check_model, ServerFlags};
use serverbench_backends::inputs::{self as choose, ClientChoice};
use serverbench_backends::report::{replay_text, Shown};
use serverbench_backends::{
    natural_stop_probe, run_real, serve_until_interrupted, unless_interrupted, Fault, Generation,
    HttpClient, Interrupt, NaturalStop, RealConfig, RealOutput, RecordSink, Runtime, ServeConfig,
};
use serverbench_study::report::summary::load_label;
use std::sync::Arc;

/// The async runtime of the commands that talk HTTP.
pub fn runtime() -> Result<Runtime> {
    Runtime::new().context("cannot start the async runtime")
}

pub fn serve(a: ServeArgs) -> Result<()> {
    let d = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    inputs::time_scale(a.time_scale)?;
    d.replica(serverbench_sim::ReplicaOptions::default())?;
    let model = a.model.clone().unwrap_or_else(|| d.model.name.clone());
    let cuda = crate::cuda::serve_setup(&a.engine, &model)?;
    let words = match &a.tokenizer {
        None => None,
        Some(_) if cuda.is_some() => {
            bail!("--tokenizer: the CUDA engine's server writes its own tokens; the tokenizer is for the emulated engine")
        }
        Some(path) => Some(Arc::new(
            serverbench_backends::Words::from_file(path)
                .map_err(|e| anyhow!("--tokenizer: {e}"))?,
        )),
    };
    let cfg = ServeConfig {
        time_scale: a.time_scale,
        limits: choose::serve_limits(
            a.max_connections,
            a.header_timeout,
            a.body_timeout,
            a.drain_timeout,
        )?,
        generation: Generation {
            model_seed: a.model_seed,
            fault: Fault::parse(&a.fault).map_err(|e| anyhow!("--fault: {e}"))?,
        },
        ..ServeConfig::new(d.clone(), model.clone(), cuda, words)
    };
    let addr = format!("{}:{}", a.host, a.port);
    let banner = |at: std::net::SocketAddr| {
        if a.engine.engine == "cuda" {
            eprintln!(
                "serverbench serve — CUDA engine, {} ({}) on http://{at}  (Ctrl-C or SIGTERM stops)",
                d.name, model
            );
        } else {
            eprintln!("serverbench serve — emulating {} ({}) at {} × real time on http://{at}  (Ctrl-C or SIGTERM stops)", d.name, model, a.time_scale);
        }
    };
    let stop = Interrupt::new();
    let drain = a.drain_timeout;
    signals::on_stop(
        {
            let stop = stop.clone();
            move |name| {
                eprintln!("{name}: refusing new connections; open requests have {drain} s to finish (again: end them now)");
                stop.request(name);
            }
        },
        {
            let stop = stop.clone();
            move |name| {
                eprintln!("{name} again: ending the open requests now");
                stop.request(name);
            }
        },
    )?;
    runtime()?
        .block_on(serve_until_interrupted(&addr, cfg, &stop, banner))
        .context("the server stopped")
}

/// `replay`'s client flags.
fn client_choice(a: &ReplayRealArgs, agentx: bool) -> ClientChoice<'_> {
    ClientChoice {
        api: &a.api,
        protocol: a.run.replay.protocol(),
        agentx,
        server: &a.server,
        timeout: a.timeout,
        api_key: std::env::var(&a.api_key_env).ok().filter(|k| !k.is_empty()),
        affinity_header: a.affinity_header.as_deref(),
        headers: &a.headers,
        key_over_plain_http: a.api_key_over_http,
        tokenizer: a.tokenizer.as_deref(),
        output_tokenizer: a.output_tokenizer.as_deref(),
    }
}

pub fn replay(a: ReplayRealArgs) -> Result<()> {
    let d = inputs::resolved(&a.run.deployment)?;
    if inputs::print_config(&a.run.deployment, &d)? {
        return Ok(());
    }
    inputs::time_scale(a.time_scale)?;
    let run = inputs::run_config(&a.run.replay, a.concurrency, a.seed)?;
    let source = inputs::source(
        &a.run.deployment.deployment,
        &a.run.workload,
        a.seed,
        &d,
        run.protocol,
    )?;
    let model = a.model.clone().unwrap_or_else(|| d.model.name.clone());
    let (model_vocab, vocab_of) = if a.engine.engine == "cuda" {
        let vocab = crate::cuda::vocab_size(&a.engine, &model)?;
        (vocab, format!("the CUDA engine's model {model}"))
    } else {
        (d.model_spec().vocab, format!("model {}", d.model.name))
    };
    let vocab = choose::prompt_vocab(a.vocab, model_vocab, &vocab_of)?.salted(a.prompt_salt);
    // SIGINT and SIGTERM from here on end the run with a summary that says so.
    let stop = Interrupt::new();
    signals::on_stop(
        {
            let stop = stop.clone();
            move |name| {
                eprintln!("\n{name}: stopping the replay; writing what was measured (again: quit at once)");
                stop.request(name);
            }
        },
        signals::exit_now,
    )?;
    let rt = runtime()?;
    let (url, local) = backend(&a, &d, &model, &rt)?;
    let choice = client_choice(&a, run.protocol.is_agentx());
    let config = choose::client_config(&choice, &url, model.clone(), &|n| eprintln!("{n}"))?;
    let client = Arc::new(HttpClient::new(config)?);
    if client.key_withheld() {
        eprintln!(
            "warning: the API key in ${} is not sent: {url} is plain HTTP to another machine (--api-key-over-http sends it anyway)",
            a.api_key_env
        );
    }
    if a.url.is_some() {
        // Interrupted here, the probe and the run below stop at once and write a summary that says so.
        if let Some(checked) = rt.block_on(unless_interrupted(
            &stop,
            check_model(
                &client,
                &ServerFlags {
                    url: &url,
                    url_flag: "--url",
                    model_flag: "--model",
                },
                &model,
                a.timeout,
                &|warning| eprintln!("{warning}"),
            ),
        )) {
            checked?;
        }
    }
    if let Some(dir) = &a.out {
        // records.jsonl is truncated as it is opened below; summary.json is written at the end.
        prepare_out(dir, &["summary.json"])?;
    }
    let records_path = a.out.as_ref().map(|d| d.join("records.jsonl"));
    let mut sink = RecordSink::new(records_path.as_deref()).with_context(|| {
        format!(
            "{}: cannot create",
            records_path
                .as_deref()
                .unwrap_or(std::path::Path::new("records.jsonl"))
                .display()
        )
    })?;
    let cfg = RealConfig {
        run,
        time_scale: a.time_scale,
        vocab,
        stop: stop.clone(),
    };
    outln!(
        "serverbench replay — {} at {}, {}, seed {}, window {} s{}\n",
        d.name,
        url,
        load_label(&run),
        run.seed,
        run.window_s,
        if a.time_scale != 1.0 {
            format!(" (time compressed {}×)", a.time_scale)
        } else {
            String::new()
        }
    )?;
    let probe = if a.no_probe {
        Some(None)
    } else {
        rt.block_on(unless_interrupted(
            &stop,
            natural_stop_probe(&client, a.seed, vocab),
        ))
        .map(Some)
    };
    let out = match probe {
        // Ctrl-C during the probe: no run, but a summary that says so.
        None => RealOutput::interrupted(&d, &cfg),
        Some(_) => {
            let bar = ProgressBar::new(run.window_s as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "  {bar:40} {pos}/{len} s of window  {elapsed} elapsed",
                )
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
            out
        }
    };
    if let Some(server) = local {
        // End the engine thread (and release the GPU, flush the step log) before the process exits.
        rt.block_on(server.stop());
    }
    let probe = probe.flatten();
    let shown = Shown {
        protocol: a.run.replay.protocol(),
        api: &a.api,
        output_tokenizer: a.output_tokenizer.is_some(),
    };
    out!("{}", replay_text(&out, &d, probe.as_ref(), &shown))?;
    let written = write_summary(&a, &d, &model, &out, probe);
    if let Some(e) = &out.client.write_error {
        // The table above scores what was measured; the records file holds every record before the
        // one it could not take, whole.
        bail!(
            "{e}; the summary above scores the {} requests measured",
            out.summary.requests
        );
    }
    written?;
    verdict(&out)
}

/// Writes summary.json (with `--out`).
fn write_summary(
    a: &ReplayRealArgs,
    d: &serverbench_sim::Deployment,
    model: &str,
    out: &RealOutput,
    probe: Option<NaturalStop>,
) -> Result<()> {
    if let Some(dir) = &a.out {
        let meta = crate::meta::now(Some(d)).with_server(a.url.as_deref(), model);
        write_json(
            dir,
            "summary.json",
            &meta,
            &serde_json::json!({ "summary": out.summary, "client": out.client, "natural_stop_probe": probe }),
        )?;
        outln!(
            "\n  wrote {} and summary.json",
            dir.join("records.jsonl").display()
        )?;
    }
    Ok(())
}

/// The server to replay against: `--url`, or the CUDA engine started in this process.
fn backend(
    a: &ReplayRealArgs,
    d: &serverbench_sim::Deployment,
    model: &str,
    rt: &Runtime,
) -> Result<(String, Option<serverbench_backends::LocalServer>)> {
    match (&a.url, a.engine.engine.as_str()) {
        (Some(u), "emulated") => Ok((u.clone(), None)),
        (None, "cuda") => {
            let cuda = crate::cuda::serve_setup(&a.engine, model)?;
            let cfg = ServeConfig::new(d.clone(), model.to_string(), cuda, None);
            let server = rt
                .block_on(serverbench_backends::spawn_local_server(cfg))
                .context("cannot start the CUDA engine")?;
            Ok((server.url.clone(), Some(server)))
        }
        (None, "emulated") => bail!(
            "--url: required (or --engine cuda to replay against the CUDA engine in this process)"
        ),
        (Some(_), "cuda") => bail!("--url and --engine cuda exclude each other"),
        (_, other) => bail!("--engine: expected emulated or cuda, got {other:?}"),
    }
}

/// The process's verdict on the run: interrupted (exit 130) or invalid (exit 3) after writing what was
/// measured; otherwise success.
fn verdict(out: &RealOutput) -> Result<()> {
    if out.client.interrupted {
        return Err(crate::Exit::new(
            signals::INTERRUPTED,
            format!(
                "{}: the summary scores what was measured, and the run is not valid",
                out.summary.ended_early.as_deref().unwrap_or("interrupted")
            ),
        )
        .into());
    }
    let s = &out.summary;
    if !s.valid {
        return Err(crate::Exit::new(
            3,
            format!(
                "the run is invalid: {} of {} requests failed and {} overflowed the context (at most {:.0} % each); its score does not count",
                s.errors,
                s.requests,
                s.context_overflow,
                100.0 * serverbench_sim::MAX_ERROR_RATE
            ),
        )
        .into());
    }
    Ok(())
}
