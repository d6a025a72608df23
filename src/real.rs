//! `serverbench replay` (against a real server) and `serverbench serve` (the emulated server).

use crate::cli::{ReplayRealArgs, ServeArgs};
use crate::inputs::{self, replay_choice, workload_choice};
use crate::output::{prepare_out, write_json};
use crate::signals;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serverbench_backends::engine_choice::{connect, cuda_serve, model_vocab};
use serverbench_backends::engine_choice::{Connection, ReplayTarget};
use serverbench_backends::inputs::{self as choose, ClientChoice, ServeChoice};
use serverbench_backends::report::{replay_header, replay_text, Shown};
use serverbench_backends::{
    natural_stop_probe, run_real, serve_until_interrupted, unless_interrupted, Interrupt,
    NaturalStop, NotCounted, RealConfig, RealOutput, RecordSink, Runtime,
};

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
    let cuda = cuda_serve(&a.engine.choice(), &model)?;
    let flags = ServeChoice {
        time_scale: a.time_scale,
        max_connections: a.max_connections,
        timeouts: [a.header_timeout, a.body_timeout, a.drain_timeout],
        model_seed: a.model_seed,
        fault: &a.fault,
        tokenizer: a.tokenizer.as_deref(),
    };
    let cfg = choose::serve_config(&d, &model, cuda, &flags)?;
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
    let run = inputs::run_config(&replay_choice(&a.run.replay), a.one.concurrency, a.one.seed)?;
    let source = inputs::source(
        &a.run.deployment.deployment,
        &workload_choice(&a.run.workload),
        a.one.seed,
        &d,
        run.protocol,
    )?;
    let model = a.model.clone().unwrap_or_else(|| d.model.name.clone());
    let (model_vocab, vocab_of) = model_vocab(&a.engine.choice(), &d, &model)?;
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
    let target = ReplayTarget {
        url: a.url.as_deref(),
        engine: a.engine.choice(),
        client: client_choice(&a, run.protocol.is_agentx()),
        key_env: &a.api_key_env,
        model: &model,
    };
    // Interrupted during the model check, the probe and the run below stop at once and write a
    // summary that says so.
    let Connection { url, local, client } =
        connect(&target, &d, &rt, &stop, &|n| eprintln!("{n}"))?;
    if let Some(dir) = &a.out {
        // records.jsonl is truncated as it is opened below; summary.json is written at the end.
        prepare_out(dir, &["summary.json"])?;
    }
    let mut sink = RecordSink::in_dir(a.out.as_deref())?;
    let cfg = RealConfig {
        run,
        time_scale: a.time_scale,
        vocab,
        stop: stop.clone(),
    };
    outln!("{}", replay_header(&d, &url, &run, a.time_scale))?;
    let probe = if a.no_probe {
        Some(None)
    } else {
        rt.block_on(unless_interrupted(
            &stop,
            natural_stop_probe(&client, a.one.seed, vocab),
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

/// The process's verdict on the run: interrupted (exit 130) or invalid (exit 3) after writing what was
/// measured; otherwise success.
fn verdict(out: &RealOutput) -> Result<()> {
    match out.not_counted() {
        Some(NotCounted::Interrupted(why)) => {
            Err(crate::Exit::new(signals::INTERRUPTED, why).into())
        }
        Some(NotCounted::Invalid(why)) => Err(crate::Exit::new(3, why).into()),
        None => Ok(()),
    }
}
