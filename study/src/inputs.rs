//! A command's inputs resolved: the deployment (a preset or file, `--profile`, `--engine-config`), the
//! model, the workload (a spec or a trace, checked against the deployment's context), the replay
//! options of every run, and the ranges every count and time must fall in; errors name the flag, or
//! the file, line and field. The one module of this crate that reads files (the ones a user names,
//! through `serverbench_config::read_text` and the importers); it never prints (what an import left
//! out goes to the workload choice's `note`).

use crate::report::summary::thousands;
use crate::Study;
use anyhow::{anyhow, bail, Result};
use serverbench_calibration::{InputError, Profile};
use serverbench_sim::{
    AgentxParams, Arrivals, Deployment, Protocol, Referenced, RunConfig, MAX_CONCURRENCY,
};
use serverbench_workloads::compact::{compact_trace, Compacted, CompactionRule};
use serverbench_workloads::fit_corpus::{fit_corpus as fitted, FitRequest, FittedCorpus};
use serverbench_workloads::{
    read_spec, Imported, Session, SessionTree, Trace, TraceFormat, TraceRepeat, TreeSource,
    Workload, WorkloadSpec,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the deployment comes from and how it is modified (`-d`, `--engine-config`, `--profile`).
#[derive(Clone, Debug, Default)]
pub struct DeploymentChoice {
    /// A deployment preset name or YAML file.
    pub deployment: String,
    /// An engine preset name or an engine YAML file.
    pub engine_config: Option<PathBuf>,
    /// A profile YAML file replacing the deployment's profile.
    pub profile: Option<PathBuf>,
    /// A model (a `config.json`, a folder holding one, or a preset) replacing the deployment's.
    pub model: Option<PathBuf>,
}

/// Where session trees come from (`--workload`, `--trace` and its options).
#[derive(Clone, Debug)]
pub struct WorkloadChoice {
    /// A built-in spec's name or a spec file.
    pub workload: Option<PathBuf>,
    /// A trace file or folder.
    pub trace: Option<PathBuf>,
    /// The trace's format (`None`: detected).
    pub trace_format: Option<TraceFormat>,
    /// Leave out traces with a longer request.
    pub max_context_length: Option<u32>,
    /// What a replay needing more trees than the trace has replays.
    pub trace_repeat: TraceRepeat,
    /// Replay the trace's prompts as recorded, not compacted at the deployment's context.
    pub trace_as_recorded: bool,
    /// The spec whose agents' compaction rule compacts a trace at the deployment's context (a
    /// built-in spec's name or a spec file; `None`: the default spec's).
    pub compact_as: Option<PathBuf>,
    /// A corpus's first rows as recorded (a trace file of any format), before the spec's rows under
    /// the AgentX protocols.
    pub first_rows: Option<PathBuf>,
    /// Hears what an import left out, one line each.
    pub note: fn(&str),
}

/// The replay options of every run (the `ReplayArgs` flags).
#[derive(Clone, Debug)]
pub struct ReplayChoice {
    /// Window, seconds.
    pub window: f64,
    /// Cap on think times, seconds.
    pub idle_gap_cap: f64,
    /// The protocol's name (`None`: cold).
    pub protocol: Option<String>,
    /// AgentX: `LO,HI` start ratios.
    pub start_ratios: Option<String>,
    /// AgentX: tree idle cap, seconds.
    pub tree_idle_cap: Option<f64>,
    /// AgentX: warm-up requests per lane.
    pub warmup_per_lane: Option<u32>,
    /// AgentX: grace after the window, seconds.
    pub grace: Option<f64>,
    /// `closed`, `trace[:SPEEDUP]` or `poisson:RATE`.
    pub arrivals: String,
    /// Open loop: most trees open at once.
    pub max_open: Option<u32>,
    /// The server compiled every kernel variant before the runs ([`RunConfig::kernels_warm`]).
    pub kernels_warm: bool,
}

impl ReplayChoice {
    /// The protocol's name: as given, else cold.
    pub fn protocol(&self) -> &str {
        self.protocol.as_deref().unwrap_or("cold")
    }
}

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

pub use serverbench_calibration::model_source::{model, model_file};

/// A configuration file's text (at most `MAX_CONFIG_BYTES`).
pub fn config_text(path: &Path) -> Result<String> {
    Ok(serverbench_config::read_text(
        path,
        serverbench_config::MAX_CONFIG_BYTES,
    )?)
}

/// The deployment the arguments describe: the preset or file, `--profile` replacing its profile
/// before it is checked (so that a file changing the GPU can take a profile of that GPU), then
/// `--model-config` replacing its model, then `--engine-config` (an engine preset's defaults depend on
/// the model).
pub fn resolved(args: &DeploymentChoice) -> Result<Deployment> {
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
    if let Some(path) = &args.model {
        d = with_model(d, path)?;
    }
    if let Some(path) = &args.engine_config {
        d = with_engine(d, path)?;
    }
    Ok(d)
}

/// `--model-config`: the deployment serving another model (read as `model` is in a deployment file),
/// checked again (its heads against `tp`, its weights against the GPUs' memory).
fn with_model(mut d: Deployment, path: &Path) -> Result<Deployment> {
    let name = path.display().to_string();
    d.model = model(&name).map_err(|e| anyhow!("--model-config {name}: {e}"))?;
    d.check()
        .map_err(|e| anyhow!("--model-config {name}: {e}"))?;
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

/// Whether `--arrivals` makes a run open-loop (anything other than closed, which is also the
/// default, empty).
pub fn open_loop(arrivals: &str) -> bool {
    !arrivals.is_empty() && arrivals != "closed"
}

/// The protocol a run replays: `given` (`--protocol`), else the deployment's own (`protocol_of`
/// reads it from the deployment's name or file; `None`, as for a file that does not load, leaves
/// cold, and the command reports the file). An open-loop run (`open`: `--arrivals` other than
/// closed, or `sweep --rates`) is not a lane protocol: the deployment's own protocol, a
/// closed-loop one, does not apply to it, so it keeps `given`.
pub fn settled_protocol(
    given: Option<String>,
    open: bool,
    deployment: &str,
    protocol_of: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    if given.is_none() && !open {
        protocol_of(deployment)
    } else {
        given
    }
}

/// The study the arguments describe: deployment, workload and the replay options of every run.
pub fn study(d_args: &DeploymentChoice, w: &WorkloadChoice, r: &ReplayChoice) -> Result<Study> {
    study_on(resolved(d_args)?, d_args, w, r)
}

/// The study of deployment `d` (resolved from `d_args`, perhaps changed since) with the arguments'
/// workload and replay options.
pub fn study_on(
    d: Deployment,
    d_args: &DeploymentChoice,
    w: &WorkloadChoice,
    r: &ReplayChoice,
) -> Result<Study> {
    let agentx = Protocol::parse(r.protocol()).is_some_and(|p| p.is_agentx());
    let w = fitted_workload(&d_args.deployment, w, &d, agentx)?;
    Ok(Study::new(d, w, run_config(r, 1, 0)?))
}

/// The workload the arguments name for deployment `d`: a trace, or the generator with a spec.
pub fn workload(args: &WorkloadChoice, d: &Deployment) -> Result<Workload> {
    workload_or(args, d.workload.as_deref())
}

/// A trace, or the generator with the spec `--workload` names, else `default_spec`, else the default.
fn workload_or(args: &WorkloadChoice, default_spec: Option<&str>) -> Result<Workload> {
    Ok(match trace(args)? {
        Some(t) => Workload::trace(t, args.trace_repeat),
        None => Workload::generated(spec(args, default_spec)?),
    })
}

/// The workload the arguments name for deployment `d` (read from `deployment`, the `-d` argument),
/// checked against its context limit: a spec whose sessions cannot fit is refused, naming the
/// deployment file's line and `context_limit` when that file sets the limit, else the spec.
pub fn fitted_workload(
    deployment: &str,
    args: &WorkloadChoice,
    d: &Deployment,
    agentx: bool,
) -> Result<Workload> {
    if let (Some(rows), Some(_)) = (&args.first_rows, &args.trace) {
        bail!(
            "--first-rows {}: goes with a spec, not --trace (a trace is its own corpus)",
            rows.display()
        );
    }
    let w = workload(args, d)?;
    if let Workload::Trace { trace, repeat, .. } = &w {
        if agentx || args.trace_as_recorded {
            return Ok(w);
        }
        let (spec, spec_name) = match &args.compact_as {
            Some(path) => (
                named_spec("--compact-as", path)?,
                path.display().to_string(),
            ),
            None => (
                WorkloadSpec::default(),
                serverbench_workloads::DEFAULT_WORKLOAD.to_string(),
            ),
        };
        let rule = CompactionRule::forced_by(&spec, d.context_limit);
        let (compacted, counts) = compact_trace(trace, &rule);
        if counts.sessions == 0 {
            return Ok(w);
        }
        (args.note)(&compaction_note(
            trace.trees().len(),
            &rule,
            &spec_name,
            counts,
        ));
        return Ok(Workload::trace(compacted, *repeat));
    }
    if let Workload::Generated(spec, _, _) = &w {
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
        let name = workload_name(args, &w);
        if agentx && d.context_limit < serverbench_workloads::rows::RECORDED_CONTEXT {
            (args.note)(&rows_note(&name, spec, d.context_limit));
        } else if let Some(c) = spec.context_cuts(d.context_limit) {
            (args.note)(&context_note(&name, d.context_limit, c));
        }
    }
    match &args.first_rows {
        Some(path) => with_first_rows(&w, path, args, d.context_limit, agentx),
        None => Ok(w),
    }
}

/// The spec's workload `w` with its corpus starting with the first rows read from `path`.
fn with_first_rows(
    w: &Workload,
    path: &Path,
    args: &WorkloadChoice,
    context_limit: u32,
    agentx: bool,
) -> Result<Workload> {
    if !agentx {
        bail!(
            "--first-rows {}: a corpus's rows are read in order under AgentX's protocols only (--protocol agentx or agentx-mvp)",
            path.display()
        );
    }
    let first = import(&[path], None, false, args.note)?.trace()?;
    let trees = first.trees().to_vec();
    let fit = trees
        .iter()
        .filter(|t| serverbench_workloads::rows::fits(t, context_limit))
        .count();
    (args.note)(&format!(
        "note: first rows from {}: {fit} of its {} rows fit the {}-token context whole and run as rows 0 … {}, the spec's rows after them",
        path.display(),
        trees.len(),
        thousands(context_limit as u64),
        fit.saturating_sub(1)
    ));
    w.with_first_rows(trees)
        .ok_or_else(|| anyhow!("--first-rows {}: goes with a spec", path.display()))
}

/// The note a trace compacted at a deployment's context gets.
fn compaction_note(
    sessions: usize,
    rule: &CompactionRule,
    spec_name: &str,
    c: Compacted,
) -> String {
    format!(
        "note: trace on a {}-token context: {} of {sessions} sessions compact where a prompt would pass {} tokens, as the {} spec's agents do ({} compaction requests of {}-token summaries inserted, each followed by the files its agents read again, drawn from its carried_tokens; cut to fit: {} first prompts of an agent, {} later ones that could not be compacted); --trace-as-recorded replays them as recorded",
        thousands(rule.context_limit as u64),
        c.sessions,
        thousands(rule.threshold as u64),
        spec_name,
        c.compactions,
        thousands(rule.summary_tokens as u64),
        c.first_cut,
        c.cut,
    )
}

/// Sessions counted for the note on a spec's rows under AgentX.
const ROWS_NOTE_SESSIONS: u64 = 200;

/// The note a deployment whose context is shorter than the spec's sessions ran in gets under AgentX's
/// protocols: whole sessions are left out, and how many of the first ones fit.
fn rows_note(spec_name: &str, spec: &WorkloadSpec, context_limit: u32) -> String {
    let fit = serverbench_workloads::rows::fitting_among(
        spec,
        serverbench_workloads::CORPUS_SEED,
        ROWS_NOTE_SESSIONS,
        context_limit,
    )
    .unwrap_or(0);
    format!(
        "note: {spec_name} on a {}-token context under AgentX's protocol: its sessions run as recorded, and those with a request longer than the context (prompt plus output) are left out whole, as --max-context-length leaves a corpus's traces out; {fit} of its first {ROWS_NOTE_SESSIONS} sessions fit",
        thousands(context_limit as u64)
    )
}

/// The note a deployment gets when its context cuts the spec's measured session shapes.
fn context_note(spec: &str, context_limit: u32, c: serverbench_workloads::ContextCuts) -> String {
    let mut cuts = Vec::new();
    if c.later > 0 {
        cuts.push(format!(
            "{} compacted later than that in their corpus",
            c.later
        ));
    }
    if c.longer > 0 {
        cuts.push(format!(
            "{} began with a longer first prompt (cut to fit)",
            c.longer
        ));
    }
    format!(
        "note: {spec} on a {}-token context: sessions compact at {} tokens at most; of the spec's {} measured session shapes, {}",
        thousands(context_limit as u64),
        thousands(c.compact_at as u64),
        c.shapes,
        cuts.join(" and ")
    )
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
    args: &WorkloadChoice,
    seed: u64,
    d: &Deployment,
    protocol: serverbench_sim::Protocol,
) -> Result<Arc<dyn TreeSource>> {
    let w = fitted_workload(deployment, args, d, protocol.is_agentx())?;
    w.source_for(seed, d.context_limit, protocol.is_agentx())
        .map_err(|e| anyhow!("{}: {e}", workload_name(args, &w)))
}

/// A source of trees for a context limit alone (no deployment: the default spec unless one is named).
pub fn source_at(
    args: &WorkloadChoice,
    seed: u64,
    context_limit: u32,
) -> Result<Arc<dyn TreeSource>> {
    let w = workload_or(args, None)?;
    w.source(seed, context_limit)
        .map_err(|e| anyhow!("{}: {e}", workload_name(args, &w)))
}

/// The trees `workload stats` and `export` cover, one at a time: a trace's, whole, or the first `n`
/// trees of the generator's stream for `seed` (`n` checked as `--trees`).
pub fn trees_of(
    args: &WorkloadChoice,
    seed: u64,
    n: u64,
    context_limit: u32,
) -> Result<Box<dyn Iterator<Item = Arc<SessionTree>>>> {
    refuse_replay_only(args)?;
    if let Some(t) = trace(args)? {
        return Ok(Box::new(t.trees().to_vec().into_iter()));
    }
    let n = trees(n)?;
    let source = source_at(args, seed, context_limit)?;
    Ok(Box::new((0..n).map(move |k| source.tree(k))))
}

/// `--first-rows` and `--compact-as` change what a replay reads (a corpus's rows in order, a trace
/// compacted at a deployment's context); `workload stats` and `export` read the spec's stream and the
/// trace as they are, so either is refused there rather than ignored.
fn refuse_replay_only(args: &WorkloadChoice) -> Result<()> {
    if let Some(p) = &args.first_rows {
        bail!(
            "--first-rows {}: only a replay reads a corpus's rows in order (simulate, sweep, slo, …); this command reads the spec's stream",
            p.display()
        );
    }
    if let Some(p) = &args.compact_as {
        bail!(
            "--compact-as {}: only a replay compacts a trace at a deployment's context; this command reads the trace as it is",
            p.display()
        );
    }
    Ok(())
}

/// The sessions `workload export --format corpus` writes, with the files each was read from: a
/// trace's (as `Imported::into_corpus` gives them; `lenient` leaves out what cannot be reduced), or the
/// generated trees' (from no file).
pub fn corpus_sessions(
    args: &WorkloadChoice,
    seed: u64,
    n: u64,
    context_limit: u32,
    lenient: bool,
) -> Result<(Vec<Session>, Vec<Vec<String>>)> {
    refuse_replay_only(args)?;
    if let Some(path) = &args.trace {
        let i = import(&[path.as_path()], args.trace_format, lenient, args.note)?;
        return Ok(i.into_corpus());
    }
    let trees = trees_of(args, seed, n, context_limit)?;
    let sessions: Vec<Session> = trees.map(|t| Session::from_tree(&t, "generator")).collect();
    let n = sessions.len();
    Ok((sessions, vec![Vec::new(); n]))
}

/// How errors name the workload: the spec's name or file, or the trace.
fn workload_name(args: &WorkloadChoice, w: &Workload) -> String {
    match (w, &args.workload) {
        (Workload::Generated(s, _, _), None) => format!(
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
pub fn spec(args: &WorkloadChoice, deployment_default: Option<&str>) -> Result<WorkloadSpec> {
    let Some(path) = &args.workload else {
        return Ok(deployment_default
            .and_then(WorkloadSpec::preset)
            .unwrap_or_default());
    };
    named_spec("--workload", path)
}

/// A built-in spec by name, else the spec file at `path`; the error names the `flag` that gave it.
fn named_spec(flag: &str, path: &Path) -> Result<WorkloadSpec> {
    if let Some(s) = WorkloadSpec::preset(&path.to_string_lossy()) {
        return Ok(s);
    }
    if !path.exists() {
        bail!(
            "{flag} {}: not a built-in spec ({}) and no such file",
            path.display(),
            WorkloadSpec::preset_names()
        );
    }
    Ok(read_spec(path)?)
}

/// The trace, if one was given.
pub fn trace(args: &WorkloadChoice) -> Result<Option<Trace>> {
    match imported(args)? {
        Some(i) => Ok(Some(i.trace()?)),
        None => Ok(None),
    }
}

/// The trace's inputs as read, with what was left out (told to the choice's `note`), if one was given.
pub fn imported(args: &WorkloadChoice) -> Result<Option<Imported>> {
    let Some(path) = &args.trace else {
        return Ok(None);
    };
    let files = serverbench_workloads::source_files(&[path.as_path()])?;
    let mut i = serverbench_workloads::import_files(files, args.trace_format, false)?;
    if let Some(limit) = args.max_context_length {
        i.keep_within(limit)?;
    }
    for line in skip_notes(&i) {
        (args.note)(&line);
    }
    Ok(Some(i))
}

/// Reads inputs of one format (`lenient`: sessions that cannot be reduced are left out and
/// counted), telling `note` what was left out.
pub fn import(
    paths: &[&Path],
    format: Option<serverbench_workloads::TraceFormat>,
    lenient: bool,
    note: fn(&str),
) -> Result<Imported> {
    let files = serverbench_workloads::source_files(paths)?;
    let i = serverbench_workloads::import_files(files, format, lenient)?;
    for line in skip_notes(&i) {
        note(&line);
    }
    Ok(i)
}

/// `workload fit`'s flags, as given.
#[derive(Clone, Debug)]
pub struct CorpusFitChoice<'a> {
    /// The corpus's files or folders.
    pub corpus: &'a [PathBuf],
    /// Their format (`None`: detected).
    pub trace_format: Option<TraceFormat>,
    /// Leave out sessions whose log cannot be reduced, instead of stopping.
    pub keep_going: bool,
    /// Further sessions to compare the fitted generator with, read leniently in their own format.
    pub check: &'a [PathBuf],
    /// Published quantities to aim the spec at: built-in targets' name or a YAML file.
    pub targets: Option<&'a str>,
    /// Sessions drawn from the fitted generator for the comparison.
    pub trees: u64,
    /// The generator's context limit in the comparison, tokens.
    pub context_limit: u32,
    /// The written spec's `name`.
    pub name: Option<String>,
    /// What the fit measures beyond the fields every fit writes (each session's own speed, its own
    /// application prefix).
    pub options: serverbench_workloads::fit::FitOptions,
    /// Hears what the imports left out, one line each.
    pub note: fn(&str),
}

/// `workload fit`: the corpus (and the sessions to check) imported, the targets read, and the
/// generator's spec fitted to the corpus.
pub fn fit_corpus(c: &CorpusFitChoice<'_>) -> Result<FittedCorpus> {
    let paths: Vec<&Path> = c.corpus.iter().map(|p| p.as_path()).collect();
    let imported = import(&paths, c.trace_format, c.keep_going, c.note)?;
    let generated = trees(c.trees)?;
    let targets = c
        .targets
        .map(serverbench_workloads::read_targets)
        .transpose()?;
    let check = match c.check.is_empty() {
        true => Vec::new(),
        false => {
            let paths: Vec<&Path> = c.check.iter().map(|p| p.as_path()).collect();
            import(&paths, None, true, c.note)?.trees
        }
    };
    let files: Vec<String> = c.corpus.iter().map(|p| p.display().to_string()).collect();
    Ok(fitted(FitRequest {
        imported,
        files: &files,
        check: &check,
        targets: targets.as_ref(),
        generated,
        context_limit: c.context_limit,
        name: c.name.clone(),
        options: c.options,
    })?)
}

/// What an import left out, one line per reason (none when nothing was), as `note: FORMAT N × WHAT`.
pub fn skip_notes(i: &Imported) -> Vec<String> {
    let mut lines: Vec<(usize, String)> = i
        .reduced
        .as_ref()
        .map(|r| r.skip_counts())
        .unwrap_or_default();
    if !i.unread.is_empty() {
        lines.push((i.unread.len(), format!("{} (unread)", i.unread[0].what)));
    }
    lines
        .into_iter()
        .map(|(n, what)| format!("note: {} {n} × {what}", i.format.name()))
        .collect()
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

/// A time scale (`--time-scale`): above 0, at most 1,000.
pub fn time_scale(x: f64) -> Result<f64> {
    if !(x > 0.0 && x <= 1000.0) {
        bail!("--time-scale: must be a number above 0 and at most 1000, got {x}");
    }
    Ok(x)
}

/// The run configuration for one replay; a bad option names its flag.
pub fn run_config(r: &ReplayChoice, concurrency: u32, seed: u64) -> Result<RunConfig> {
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
        text_prompts: false,
        kernels_warm: r.kernels_warm,
    };
    checked(cfg)
}

/// The AgentX protocols' parameters: the scenario's defaults with the flags that change them; the
/// flags are refused under the other protocols (which would silently ignore them).
pub fn agentx_params(r: &ReplayChoice, protocol: Protocol) -> Result<AgentxParams> {
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

/// `cfg` if its options are in range, else an error naming the flag.
pub fn checked(cfg: RunConfig) -> Result<RunConfig> {
    cfg.check()
        .map_err(|e| anyhow!("--{}: {}", e.field.replace('_', "-"), e.reason))?;
    Ok(cfg)
}

/// Refuses a `workload scan` whose lanes, window or idle-gap cap no run can have, naming the flag.
pub fn check_scan(concurrency: u32, window_s: f64, idle_gap_cap_s: f64) -> Result<()> {
    checked(RunConfig {
        idle_gap_cap_s,
        ..RunConfig::new(concurrency, 0, window_s)
    })?;
    Ok(())
}

/// Refuses a Poisson rate (trees per second) no open-loop run can have, naming `--rates`.
pub fn check_rates(rates: &[f64]) -> Result<()> {
    for &r in rates {
        Arrivals::parse(&format!("poisson:{r}")).map_err(|e| anyhow!("--rates: {e}"))?;
    }
    Ok(())
}

/// `sweep --rates`' study: the rates checked, and the open loop at the first one (the sweep sets each
/// rate of its runs).
pub fn rate_sweep_study(
    d: &DeploymentChoice,
    w: &WorkloadChoice,
    r: &ReplayChoice,
    rates: &[f64],
) -> Result<Study> {
    check_rates(rates)?;
    let first = rates
        .first()
        .ok_or_else(|| anyhow!("--rates: give at least one rate"))?;
    let open = ReplayChoice {
        arrivals: format!("poisson:{first}"),
        ..r.clone()
    };
    study(d, w, &open)
}

/// Refuses a concurrency sweep of an open loop: `sweep` varies the lanes of the closed loop, and an
/// open-loop sweep is `--rates`'.
pub fn check_closed_sweep(r: &ReplayChoice) -> Result<()> {
    if r.arrivals != "closed" {
        bail!("--arrivals: sweep varies concurrency in the closed loop; for an open-loop sweep give --rates R1,R2,… (Poisson trees per second), and replay a trace once with simulate --arrivals trace");
    }
    Ok(())
}

/// Refuses a level no run can have: the command line's error, naming the flag, before any run.
pub fn check_levels(r: &ReplayChoice, concurrency: &[u32]) -> Result<()> {
    for &c in concurrency {
        checked(run_config(r, c, 0)?)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_loop_run_keeps_its_protocol_and_a_closed_one_takes_the_deployments() {
        let own = |d: &str| (d == "agentx-deployment").then(|| "agentx".to_string());
        assert!(!open_loop("") && !open_loop("closed") && open_loop("poisson:0.1"));
        let settle = |given: Option<&str>, open| {
            settled_protocol(given.map(String::from), open, "agentx-deployment", own)
        };
        assert_eq!(settle(None, false).as_deref(), Some("agentx"));
        assert_eq!(settle(None, true), None);
        assert_eq!(settle(Some("steady"), false).as_deref(), Some("steady"));
        assert_eq!(settle(Some("cold"), true).as_deref(), Some("cold"));
        assert_eq!(settled_protocol(None, false, "other", own), None);
    }

    #[test]
    fn a_scan_out_of_range_names_its_flag() {
        assert!(check_scan(4, 300.0, 10.0).is_ok());
        let e = check_scan(4, 300.0, -1.0).unwrap_err().to_string();
        assert!(e.starts_with("--idle-gap-cap: "), "{e}");
        let e = check_scan(0, 300.0, 10.0).unwrap_err().to_string();
        assert!(e.starts_with("--concurrency: "), "{e}");
    }

    fn replay() -> ReplayChoice {
        ReplayChoice {
            window: 300.0,
            idle_gap_cap: 10.0,
            protocol: None,
            start_ratios: None,
            tree_idle_cap: None,
            warmup_per_lane: None,
            grace: None,
            arrivals: "closed".into(),
            max_open: None,
            kernels_warm: false,
        }
    }

    fn error<T: std::fmt::Debug>(r: Result<T>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    /// The default spec, generated.
    fn generated() -> WorkloadChoice {
        WorkloadChoice {
            workload: None,
            trace: None,
            trace_format: None,
            max_context_length: None,
            trace_repeat: TraceRepeat::Fresh,
            trace_as_recorded: false,
            compact_as: None,
            first_rows: None,
            note: |_| {},
        }
    }

    /// `workload stats` and `export` take the first `n` trees of a seed's stream, the same trees
    /// `simulate` replays, and refuse a count out of range.
    #[test]
    fn the_generated_trees_are_the_seed_s_stream() {
        let choice = generated();
        let trees: Vec<_> = trees_of(&choice, 3, 4, 131_072).unwrap().collect();
        let source = source_at(&choice, 3, 131_072).unwrap();
        assert_eq!(trees.len(), 4);
        assert_eq!(*trees[2], *source.tree(2));
        assert!(error(trees_of(&choice, 3, 0, 131_072).map(|_| ())).contains("--trees"));
        let (sessions, files) = corpus_sessions(&choice, 3, 4, 131_072, false).unwrap();
        assert_eq!((sessions.len(), files.len()), (4, 4));
        assert!(files.iter().all(|f| f.is_empty()));
    }

    /// Counts, ranges and lists are read as the flags document them, and refused naming the flag.
    #[test]
    fn counts_and_ranges_name_their_flag() {
        assert_eq!(seeds("3").unwrap(), [0, 1, 2]);
        assert_eq!(seeds("5..7").unwrap(), [5, 6]);
        assert!(error(seeds("7..5")).contains("--seeds: the range"));
        assert!(error(seeds("200000")).contains("at most 100000"));
        assert_eq!(windows("900, 300,300").unwrap(), [300.0, 900.0]);
        assert!(error(windows("0")).starts_with("--windows"));
        assert!(error(threads(Some(0))).starts_with("--threads"));
        assert!(error(time_scale(0.0)).starts_with("--time-scale"));
    }

    /// A replay's options become its run configuration; options of another mode are refused.
    #[test]
    fn replay_options_are_checked_against_their_mode() {
        let cfg = run_config(&replay(), 4, 7).unwrap();
        assert_eq!((cfg.concurrency, cfg.seed, cfg.window_s), (4, 7, 300.0));
        let open_cap = ReplayChoice {
            max_open: Some(3),
            ..replay()
        };
        assert!(error(run_config(&open_cap, 4, 0)).starts_with("--max-open"));
        let grace = ReplayChoice {
            grace: Some(5.0),
            ..replay()
        };
        assert!(error(run_config(&grace, 4, 0)).starts_with("--grace"));
        let protocol = ReplayChoice {
            protocol: Some("warm".into()),
            ..replay()
        };
        assert!(error(run_config(&protocol, 4, 0)).starts_with("--protocol"));
        assert!(check_levels(&replay(), &[1, 8]).is_ok());
        assert!(error(check_levels(&replay(), &[8, 0])).starts_with("--concurrency"));
        assert!(error(check_levels(&protocol, &[8])).starts_with("--protocol"));
        assert!(check_rates(&[0.5, 2.0]).is_ok());
        assert!(error(check_rates(&[0.5, -1.0])).starts_with("--rates"));
    }

    /// A rate sweep's study is the open loop at its first rate; a concurrency sweep must be closed.
    #[test]
    fn a_sweep_is_of_closed_loop_lanes_or_of_open_loop_rates() {
        let d = DeploymentChoice {
            deployment: "qwen3-8b-1xh200".into(),
            engine_config: None,
            profile: None,
            model: None,
        };
        let w = generated();
        let study = rate_sweep_study(&d, &w, &replay(), &[0.5, 2.0]).unwrap();
        assert_eq!(study.replay.arrivals, Arrivals::Poisson { rate: 0.5 });
        assert!(error(rate_sweep_study(&d, &w, &replay(), &[0.0])).starts_with("--rates"));
        assert!(error(rate_sweep_study(&d, &w, &replay(), &[])).starts_with("--rates"));
        assert!(check_closed_sweep(&replay()).is_ok());
        let open = ReplayChoice {
            arrivals: "poisson:1".into(),
            ..replay()
        };
        assert!(
            error(check_closed_sweep(&open)).starts_with("--arrivals: sweep varies concurrency")
        );
    }

    /// A deployment is a preset or a file; anything else names the presets.
    #[test]
    fn an_unknown_deployment_is_neither_preset_nor_file() {
        let name = serverbench_sim::DEFAULT_DEPLOYMENT;
        let choice = DeploymentChoice {
            deployment: name.into(),
            ..DeploymentChoice::default()
        };
        assert_eq!(resolved(&choice).unwrap().name, name);
        assert!(error(deployment("no-such-deployment")).contains("not a preset"));
    }
}
