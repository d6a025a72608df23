//! `serverbench replay` (against a real server) and `serverbench serve` (the emulated server).

use crate::cli::{ReplayRealArgs, ServeArgs};
use crate::inputs;
use crate::output::write_json;
use crate::signals;
use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serverbench_backends::engine_choice::{cuda_serve, ReplayTarget};
use serverbench_backends::inputs::{self as choose, ClientChoice, ServeChoice};
use serverbench_backends::real_replay::{self, Hooks, RealReplay, Replayed};
use serverbench_backends::report::{replay_header, replay_text, serve_banner, Shown};
use serverbench_backends::{serve_blocking, Interrupt, NotCounted};
use serverbench_sim::Deployment;

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
    let cuda = a.engine.engine == "cuda";
    let banner = |at| eprintln!("{}", serve_banner(&d, &model, cuda, a.time_scale, at));
    let (stop, drain) = (Interrupt::new(), a.drain_timeout);
    let (first, again) = (stop.clone(), stop.clone());
    signals::on_stop(
        move |name| {
            eprintln!("{name}: refusing new connections; open requests have {drain} s to finish (again: end them now)");
            first.request(name);
        },
        move |name| {
            eprintln!("{name} again: ending the open requests now");
            again.request(name);
        },
    )?;
    serve_blocking(&addr, cfg, &stop, banner)
}

/// `replay`'s client flags.
fn client_choice(a: &ReplayRealArgs, agentx: bool) -> ClientChoice<'_> {
    ClientChoice {
        api: &a.client.api,
        protocol: a.run.replay.protocol(),
        agentx,
        server: &a.client.server,
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
    let (run, source) = inputs::one_run(&a.run, &a.one, &d)?;
    let model = a
        .client
        .model
        .clone()
        .unwrap_or_else(|| d.model.name.clone());
    let target = ReplayTarget {
        url: a.url.as_deref(),
        engine: a.engine.choice(),
        client: client_choice(&a, run.protocol.is_agentx()),
        key_env: &a.api_key_env,
        model: &model,
    };
    let flags = RealReplay {
        vocab: a.vocab,
        prompt_salt: a.prompt_salt,
        time_scale: a.time_scale,
        no_probe: a.no_probe,
        out: a.out.as_deref(),
    };
    // SIGINT and SIGTERM from here on end the run (the model check, the probe or the replay) with a
    // summary that says so.
    let stop = signals::interrupt("stopping the replay; writing what was measured")?;
    let bar = ProgressBar::new(run.window_s as u64);
    bar.set_style(
        ProgressStyle::with_template("  {bar:40} {pos}/{len} s of window  {elapsed} elapsed")
            .expect("valid template"),
    );
    let hooks = Hooks {
        note: &|n| eprintln!("{n}"),
        connected: &|url| outln!("{}", replay_header(&d, url, &run, a.time_scale)),
        progress: &|s| bar.set_position(s as u64),
    };
    let r = real_replay::replay(&d, source.as_ref(), run, &target, &flags, &stop, &hooks)?;
    bar.finish_and_clear();
    let shown = Shown {
        protocol: a.run.replay.protocol(),
        api: &a.client.api,
        output_tokenizer: a.output_tokenizer.is_some(),
    };
    out!("{}", replay_text(&r.output, &d, r.probe.as_ref(), &shown))?;
    let written = write_summary(&a, &d, &model, &r);
    if let Some(e) = &r.output.client.write_error {
        // The table above scores what was measured; the records file holds every record before the
        // one it could not take, whole.
        bail!(
            "{e}; the summary above scores the {} requests measured",
            r.output.summary.requests
        );
    }
    written?;
    // The process's verdict on the run: interrupted (exit 130) or invalid (exit 3) after writing what
    // was measured; otherwise success.
    match r.output.not_counted() {
        Some(NotCounted::Interrupted(why)) => Err(crate::exit(signals::INTERRUPTED, why)),
        Some(NotCounted::Invalid(why)) => Err(crate::exit(3, why)),
        None => Ok(()),
    }
}

/// Writes summary.json (with `--out`).
fn write_summary(a: &ReplayRealArgs, d: &Deployment, model: &str, r: &Replayed) -> Result<()> {
    if let Some(dir) = &a.out {
        let meta = crate::meta::now(Some(d)).with_server(a.url.as_deref(), model);
        write_json(dir, "summary.json", &meta, &r.summary_json())?;
        outln!(
            "\n  wrote {} and summary.json",
            dir.join("records.jsonl").display()
        )?;
    }
    Ok(())
}
