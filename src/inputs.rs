//! Turning command-line arguments into deployments, cost models and workload sources (all file IO lives here).

use crate::cli::{DeploymentArgs, ReplayArgs, WorkloadArgs};
use anyhow::{anyhow, bail, Result};
use serverbench_calibration::{InputError, Profile};
use serverbench_sim::{
    AgentxParams, Arrivals, Deployment, Protocol, Referenced, RunConfig, MAX_CONCURRENCY,
};
use serverbench_study::Study;
use serverbench_workloads::{read_spec, Imported, Trace, TreeSource, Workload, WorkloadSpec};
use std::path::Path;
use std::sync::Arc;

/// A deployment from a preset name or a YAML file.
pub fn deployment(name_or_file: &str) -> Result<Deployment> {
    deployment_with(name_or_file, None)
}

/// A deployment from a preset name or a YAML file, its profile replaced by `profile` (the file it was
/// read from, and the profile) before it is checked.
fn deployment_with(name_or_file: &str, profile: Option<(&str, &Profile)>) -> Result<Deployment> {
    if let Some(mut d) = Deployment::preset(name_or_file) {
        if let Some((file, p)) = profile {
            d.profile = p.clone();
            d.check().map_err(|e| anyhow!("{file}: {e}"))?;
        }
        return Ok(d);
    }
    let path = Path::new(name_or_file);
    if !path.exists() {
        bail!(
            "unknown deployment {name_or_file:?}: not a preset ({}) and no such file",
            Deployment::preset_names()
        );
    }
    let text = config_text(path)?;
    let beside = |name: &str| profile_beside(path, name);
    let model_beside = |name: &str| {
        let at = path.parent().unwrap_or(Path::new("")).join(name);
        model_file(&at)
    };
    let refs = Referenced {
        profile_file: &beside,
        profile,
        model_file: &model_beside,
    };
    Ok(Deployment::from_yaml_with(
        &path.display().to_string(),
        &text,
        &refs,
    )?)
}

/// The profile file a deployment file names (`profile: my-fit.yaml`), its path read from the
/// deployment file's folder; `None` when there is no such file.
fn profile_beside(deployment: &Path, name: &str) -> Result<Option<Profile>, InputError> {
    let path = deployment.parent().unwrap_or(Path::new("")).join(name);
    if !path.is_file() {
        return Ok(None);
    }
    let text = serverbench_config::read_text(&path, serverbench_config::MAX_CONFIG_BYTES)?;
    Profile::from_yaml(&path.display().to_string(), &text).map(Some)
}

/// The model a Hugging Face `config.json` describes, given as the file or a folder holding one (named
/// by the folder); `None` when there is no such file.
pub fn model_file(path: &Path) -> Result<Option<serverbench_calibration::ModelSpec>, InputError> {
    let file = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    };
    if !file.is_file() {
        return Ok(None);
    }
    let named = if path.is_dir() { path } else { &file };
    let name = named
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let name = if name == "config" {
        file.parent()
            .and_then(|p| p.file_name())
            .map_or(name, |p| p.to_string_lossy().into_owned())
    } else {
        name
    };
    let shown = file.display().to_string();
    let text = serverbench_config::read_text(&file, serverbench_config::MAX_CONFIG_BYTES)?;
    serverbench_calibration::hf::from_config(&name, &text)
        .map(Some)
        .map_err(|e| InputError::new(&shown, 0, e.field, e.reason))
}

/// A model preset by name, or the model of a `config.json` (the file or its folder).
pub fn model(name_or_path: &str) -> Result<serverbench_calibration::ModelSpec> {
    if let Some(m) = serverbench_calibration::ModelSpec::preset(name_or_path) {
        return Ok(m);
    }
    model_file(Path::new(name_or_path))?.ok_or_else(|| {
        anyhow!(
            "unknown model {name_or_path:?}: not a preset ({}) and no config.json there (read: {})",
            serverbench_calibration::ModelSpec::preset_names(),
            serverbench_calibration::hf::architectures()
        )
    })
}

/// A configuration file's text (at most `MAX_CONFIG_BYTES`).
pub fn config_text(path: &Path) -> Result<String> {
    Ok(serverbench_config::read_text(
        path,
        serverbench_config::MAX_CONFIG_BYTES,
    )?)
}

/// The deployment the arguments describe: the preset or file, `--profile` replacing its profile
/// before it is checked (so that a file changing the GPU can take a profile of that GPU), then
/// `--engine-config`.
pub fn resolved(args: &DeploymentArgs) -> Result<Deployment> {
    let profile = match &args.profile {
        Some(path) => {
            let file = path.display().to_string();
            let p = Profile::from_yaml(&file, &config_text(path)?)?;
            Some((file, p))
        }
        None => None,
    };
    let mut d = deployment_with(
        &args.deployment,
        profile.as_ref().map(|(f, p)| (f.as_str(), p)),
    )?;
    if let Some(path) = &args.engine_config {
        d = with_engine(d, path)?;
    }
    Ok(d)
}

/// `--engine-config`: an engine preset's defaults for this deployment (`vllm`, `sglang`), or a YAML
/// file of engine fields overriding the deployment's.
fn with_engine(mut d: Deployment, path: &Path) -> Result<Deployment> {
    let name = path.to_string_lossy();
    if let Some(engine) = serverbench_sim::engine_preset(&name, &d) {
        d.engine = engine;
        d.check()
            .map_err(|e| anyhow!("--engine-config {name}: {e}"))?;
        return Ok(d);
    }
    if !path.exists() {
        bail!(
            "--engine-config {name}: not an engine preset ({}) and no such file",
            serverbench_sim::ENGINE_PRESETS.join(", ")
        );
    }
    let text = config_text(path)?;
    Ok(d.with_engine_yaml(&path.display().to_string(), &text)?)
}

/// The replay protocol the deployment `name_or_file` names for itself, if it loads and names one.
pub fn deployment_protocol(name_or_file: &str) -> Option<String> {
    deployment(name_or_file)
        .ok()?
        .protocol
        .map(|p| p.name().to_string())
}

/// The study the arguments describe: deployment, workload and the replay options of every run.
pub fn study(d_args: &DeploymentArgs, w: &WorkloadArgs, r: &ReplayArgs) -> Result<Study> {
    study_on(resolved(d_args)?, d_args, w, r)
}

/// The study of deployment `d` (resolved from `d_args`, perhaps changed since) with the arguments'
/// workload and replay options.
pub fn study_on(
    d: Deployment,
    d_args: &DeploymentArgs,
    w: &WorkloadArgs,
    r: &ReplayArgs,
) -> Result<Study> {
    let w = fitted_workload(&d_args.deployment, w, &d)?;
    Ok(Study::new(d, w, run_config(r, 1, 0)?))
}

/// Prints the effective deployment when asked; returns true if it did (the command should stop).
pub fn print_config(args: &DeploymentArgs, d: &Deployment) -> Result<bool> {
    if args.print_config {
        out!("{}", d.to_yaml())?;
    }
    Ok(args.print_config)
}

/// The workload the arguments name for deployment `d`: a trace, or the generator with a spec.
pub fn workload(args: &WorkloadArgs, d: &Deployment) -> Result<Workload> {
    workload_or(args, d.workload.as_deref())
}

/// A trace, or the generator with the spec `--workload` names, else `default_spec`, else the default.
fn workload_or(args: &WorkloadArgs, default_spec: Option<&str>) -> Result<Workload> {
    Ok(match trace(args)? {
        Some(t) => Workload::trace(t, args.trace_repeat),
        None => Workload::Generated(Arc::new(spec(args, default_spec)?)),
    })
}

/// The workload the arguments name for deployment `d` (read from `deployment`, the `-d` argument),
/// checked against its context limit: a spec whose sessions cannot fit is refused, naming the
/// deployment file's line and `context_limit` when that file sets the limit, else the spec.
pub fn fitted_workload(deployment: &str, args: &WorkloadArgs, d: &Deployment) -> Result<Workload> {
    let w = workload(args, d)?;
    if let Workload::Generated(spec) = &w {
        if let Err(e) = spec.check_context(d.context_limit) {
            let spec_name = workload_name(args, &w);
            return Err(match context_limit_line(deployment)? {
                Some((file, line)) => InputError::new(
                    &file,
                    line,
                    "context_limit",
                    format!("too small for {spec_name}: {}", e.reason),
                )
                .into(),
                None => anyhow!("{spec_name}: {e}"),
            });
        }
    }
    Ok(w)
}

/// The deployment file and the line of it that sets `context_limit`, when `deployment` is a file
/// that sets it (not a preset).
fn context_limit_line(deployment: &str) -> Result<Option<(String, usize)>> {
    let path = Path::new(deployment);
    if Deployment::preset(deployment).is_some() || !path.exists() {
        return Ok(None);
    }
    let text = config_text(path)?;
    let line = serverbench_config::line_of(&text, "context_limit");
    Ok((line > 0).then(|| (path.display().to_string(), line)))
}

/// A source of trees for deployment `d` (the `-d` argument `deployment`): the generator for `seed`,
/// or a trace (its rows in order under the AgentX protocols).
pub fn source(
    deployment: &str,
    args: &WorkloadArgs,
    seed: u64,
    d: &Deployment,
    protocol: serverbench_sim::Protocol,
) -> Result<Arc<dyn TreeSource>> {
    let w = fitted_workload(deployment, args, d)?;
    w.source_for(seed, d.context_limit, protocol.is_agentx())
        .map_err(|e| anyhow!("{}: {e}", workload_name(args, &w)))
}

/// A source of trees for a context limit alone (no deployment: the default spec unless one is named).
pub fn source_at(
    args: &WorkloadArgs,
    seed: u64,
    context_limit: u32,
) -> Result<Arc<dyn TreeSource>> {
    let w = workload_or(args, None)?;
    w.source(seed, context_limit)
        .map_err(|e| anyhow!("{}: {e}", workload_name(args, &w)))
}

/// How errors name the workload: the spec's name or file, or the trace.
fn workload_name(args: &WorkloadArgs, w: &Workload) -> String {
    match (w, &args.workload) {
        (Workload::Generated(s), None) => format!(
            "workload spec {}",
            s.name
                .as_deref()
                .unwrap_or(serverbench_workloads::DEFAULT_WORKLOAD)
        ),
        (_, Some(p)) => format!("workload spec {}", p.display()),
        (Workload::Trace { .. }, None) => "trace".into(),
    }
}

/// The workload spec: the one `--workload` names (a built-in spec or a file), else the deployment's
/// own (`deployment_default`), else the default.
pub fn spec(args: &WorkloadArgs, deployment_default: Option<&str>) -> Result<WorkloadSpec> {
    let Some(path) = &args.workload else {
        return Ok(deployment_default
            .and_then(WorkloadSpec::preset)
            .unwrap_or_default());
    };
    if let Some(s) = WorkloadSpec::preset(&path.to_string_lossy()) {
        return Ok(s);
    }
    if !path.exists() {
        bail!(
            "--workload {}: not a built-in spec ({}) and no such file",
            path.display(),
            WorkloadSpec::preset_names()
        );
    }
    Ok(read_spec(path)?)
}

/// The trace, if one was given.
pub fn trace(args: &WorkloadArgs) -> Result<Option<Trace>> {
    match imported(args)? {
        Some(i) => Ok(Some(i.trace()?)),
        None => Ok(None),
    }
}

/// The trace's inputs as read, with what was left out (said on standard error), if one was given.
pub fn imported(args: &WorkloadArgs) -> Result<Option<Imported>> {
    let Some(path) = &args.trace else {
        return Ok(None);
    };
    let files = serverbench_workloads::source_files(&[path.as_path()])?;
    let mut i = serverbench_workloads::import_files(files, args.trace_format, false)?;
    if let Some(limit) = args.max_context_length {
        i.keep_within(limit)?;
    }
    report_skips(&i);
    Ok(Some(i))
}

/// Reads inputs of one format (`lenient`: sessions that cannot be reduced are left out and
/// counted), saying on standard error what was left out.
pub fn import(
    paths: &[&Path],
    format: Option<serverbench_workloads::TraceFormat>,
    lenient: bool,
) -> Result<Imported> {
    let files = serverbench_workloads::source_files(paths)?;
    let i = serverbench_workloads::import_files(files, format, lenient)?;
    report_skips(&i);
    Ok(i)
}

/// Says on standard error what an import left out, grouped by reason (nothing when nothing was).
pub fn report_skips(i: &Imported) {
    let mut lines: Vec<(usize, String)> = i
        .reduced
        .as_ref()
        .map(|r| r.skip_counts())
        .unwrap_or_default();
    if !i.unread.is_empty() {
        lines.push((i.unread.len(), format!("{} (unread)", i.unread[0].what)));
    }
    for (n, what) in lines {
        eprintln!("note: {} {n} × {what}", i.format.name());
    }
}

/// Most seeds one command takes.
pub const MAX_SEEDS: u64 = 100_000;
/// Most worker threads.
pub const MAX_THREADS: usize = 1024;
/// Most trees `workload stats` and `workload export` read from the generator (20,000 trees are about
/// 2.4 million requests; the statistics keep every block id seen, about 1 GB at this size).
pub const MAX_TREES: u64 = 20_000;

/// Window lengths from a comma-separated list (seconds, ascending after sorting).
pub fn windows(text: &str) -> Result<Vec<f64>> {
    let mut w = Vec::new();
    for part in text.split(',') {
        let v: f64 = part
            .trim()
            .parse()
            .map_err(|_| anyhow!("--windows: {part:?} is not a number of seconds"))?;
        if !(v > 0.0 && v <= serverbench_sim::MAX_WINDOW_S) {
            bail!(
                "--windows: {v} is not a positive number of seconds at most {}",
                serverbench_sim::MAX_WINDOW_S
            );
        }
        w.push(v);
    }
    w.sort_by(f64::total_cmp);
    w.dedup();
    Ok(w)
}

/// Seeds from `N` (= 0..N) or `A..B`, at most [`MAX_SEEDS`] of them.
pub fn seeds(text: &str) -> Result<Vec<u64>> {
    let bad = || anyhow!("--seeds: expected a count N or a range A..B, got {text:?}");
    let (a, b) = match text.split_once("..") {
        Some((a, b)) => (
            a.trim().parse::<u64>().map_err(|_| bad())?,
            b.trim().parse::<u64>().map_err(|_| bad())?,
        ),
        None => (0, text.trim().parse::<u64>().map_err(|_| bad())?),
    };
    if b <= a {
        bail!("--seeds: the range {text:?} is empty");
    }
    if b - a > MAX_SEEDS {
        bail!(
            "--seeds: {text:?} is {} seeds; at most {MAX_SEEDS} at a time",
            b - a
        );
    }
    Ok((a..b).collect())
}

/// `--threads`, if given: 1 to [`MAX_THREADS`].
pub fn threads(t: Option<usize>) -> Result<Option<usize>> {
    match t {
        Some(n) if n == 0 || n > MAX_THREADS => {
            bail!("--threads: must be between 1 and {MAX_THREADS}, got {n}")
        }
        t => Ok(t),
    }
}

/// `--trees`: 1 to [`MAX_TREES`].
pub fn trees(n: u64) -> Result<u64> {
    if n == 0 || n > MAX_TREES {
        bail!("--trees: must be between 1 and {MAX_TREES}, got {n}");
    }
    Ok(n)
}

/// A time scale (`--time-scale`): above 0, at most 1,000.
/// The longest a request may be waited for (a day): `--timeout` and `serve`'s timeouts.
pub const MAX_TIMEOUT_S: f64 = 86_400.0;

/// A timeout flag's seconds as a duration: positive and at most [`MAX_TIMEOUT_S`].
pub fn timeout(flag: &str, seconds: f64) -> Result<std::time::Duration> {
    if !(seconds > 0.0 && seconds <= MAX_TIMEOUT_S) {
        anyhow::bail!(
            "--{flag}: must be a positive number of seconds, at most {MAX_TIMEOUT_S} (a day), got {seconds}"
        );
    }
    Ok(std::time::Duration::from_secs_f64(seconds))
}

pub fn time_scale(x: f64) -> Result<f64> {
    if !(x > 0.0 && x <= 1000.0) {
        bail!("--time-scale: must be a number above 0 and at most 1000, got {x}");
    }
    Ok(x)
}

/// The run configuration for one replay; a bad option names its flag.
pub fn run_config(r: &ReplayArgs, concurrency: u32, seed: u64) -> Result<RunConfig> {
    let protocol = Protocol::parse(r.protocol()).ok_or_else(|| {
        anyhow!(
            "--protocol: expected one of {}, got {:?}",
            Protocol::NAMES.join(", "),
            r.protocol()
        )
    })?;
    let agentx = agentx_params(r, protocol)?;
    let arrivals = Arrivals::parse(&r.arrivals).map_err(|e| anyhow!("--arrivals: {e}"))?;
    let concurrency = match (arrivals, r.max_open) {
        (Arrivals::Closed, None) => concurrency,
        (Arrivals::Closed, Some(_)) => bail!("--max-open: only the open loop (--arrivals trace or poisson) takes it; the closed loop has -c lanes"),
        (_, Some(n)) if n == 0 || n > MAX_CONCURRENCY => {
            bail!("--max-open: must be between 1 and {MAX_CONCURRENCY} trees, got {n}")
        }
        (_, cap) => cap.unwrap_or(MAX_CONCURRENCY),
    };
    let cfg = RunConfig {
        concurrency,
        arrivals,
        seed,
        window_s: r.window,
        idle_gap_cap_s: r.idle_gap_cap,
        protocol,
        agentx,
        timeline: false,
        audit: false,
        step_by_step: false,
    };
    checked(cfg)
}

/// The AgentX protocols' parameters: the scenario's defaults with the flags that change them; the
/// flags are refused under the other protocols (which would silently ignore them).
pub fn agentx_params(r: &ReplayArgs, protocol: Protocol) -> Result<AgentxParams> {
    let given = [
        ("--start-ratios", r.start_ratios.is_some()),
        ("--tree-idle-cap", r.tree_idle_cap.is_some()),
        ("--warmup-per-lane", r.warmup_per_lane.is_some()),
        ("--grace", r.grace.is_some()),
    ];
    let Some(mut p) = protocol.agentx_defaults() else {
        if let Some((flag, _)) = given.iter().find(|g| g.1) {
            bail!(
                "{flag}: only the agentx and agentx-mvp protocols take it (this run is --protocol {})",
                protocol.name()
            );
        }
        return Ok(AgentxParams::agentx());
    };
    if let Some(text) = &r.start_ratios {
        let parts: Vec<&str> = text.split(',').map(str::trim).collect();
        let (lo, hi) = match parts[..] {
            [lo, hi] => (lo.parse::<f64>(), hi.parse::<f64>()),
            _ => bail!("--start-ratios: expected LO,HI (two shares of the session), got {text:?}"),
        };
        let (Ok(lo), Ok(hi)) = (lo, hi) else {
            bail!("--start-ratios: expected two numbers LO,HI, got {text:?}");
        };
        p.start_min = lo;
        p.start_max = hi;
    }
    let seconds = |flag: &str, x: f64| -> Result<u64> {
        if !(0.0..=86_400.0).contains(&x) {
            bail!("{flag}: must be between 0 and 86400 seconds, got {x}");
        }
        Ok(serverbench_sim::Time::from_secs(x).0)
    };
    if let Some(x) = r.tree_idle_cap {
        p.tree_idle_cap_ns = Some(seconds("--tree-idle-cap", x)?).filter(|&ns| ns > 0);
    }
    if let Some(n) = r.warmup_per_lane {
        p.warmup_per_lane = (n > 0).then_some(n);
    }
    if let Some(x) = r.grace {
        p.grace_ns = seconds("--grace", x)?;
    }
    p.check()
        .map_err(|(field, why)| anyhow!("--{}: {why}", field.replace('_', "-")))?;
    Ok(p)
}

/// Passes the AgentX protocols' flags a user gave on to a child `replay` process.
pub fn forward_agentx_flags(cmd: &mut std::process::Command, r: &ReplayArgs) {
    if let Some(x) = &r.start_ratios {
        cmd.args(["--start-ratios", x]);
    }
    if let Some(x) = r.tree_idle_cap {
        cmd.args(["--tree-idle-cap", &x.to_string()]);
    }
    if let Some(x) = r.warmup_per_lane {
        cmd.args(["--warmup-per-lane", &x.to_string()]);
    }
    if let Some(x) = r.grace {
        cmd.args(["--grace", &x.to_string()]);
    }
}

/// `cfg` if its options are in range, else an error naming the flag.
pub fn checked(cfg: RunConfig) -> Result<RunConfig> {
    cfg.check()
        .map_err(|e| anyhow!("--{}: {}", e.field.replace('_', "-"), e.reason))?;
    Ok(cfg)
}

/// `--api`: `tokens`, `text` or `chat`.
pub fn api(s: &str) -> Result<serverbench_backends::Api> {
    serverbench_backends::Api::parse(s)
        .ok_or_else(|| anyhow!("--api: expected tokens, text or chat, got {s:?}"))
}

/// `--server`: a server kind.
pub fn server(s: &str) -> Result<serverbench_backends::Server> {
    serverbench_backends::Server::parse(s).ok_or_else(|| {
        anyhow!(
            "--server: expected one of {}, got {s:?}",
            serverbench_backends::Server::names()
        )
    })
}
