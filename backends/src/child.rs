//! `serverbench replay` as a child process, so that each measured run gets a fresh engine and cache:
//! the flags of `compare`'s measured runs (`MeasuredRuns`) and of `verify`'s held-out replays
//! (`HeldOutFlags`), and the process run to its end. The only module that starts a process; it never
//! reads a run's results and prints nothing (what it would say goes to the caller's `note`).

use crate::compare::{run_salt, RunScenario};
use crate::engine_choice::EngineChoice;
use crate::verify::HeldOutReplay;
use anyhow::{bail, Context, Result};
use serverbench_study::inputs::{DeploymentChoice, ReplayChoice, WorkloadChoice};
use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, ExitStatus};

/// The flags every measured run of `compare` shares: where it sends its requests and what it replays.
#[derive(Clone, Debug)]
pub struct MeasuredRuns<'a> {
    /// `--url`: a server that outlives each run (or none, with `engine` "cuda").
    pub url: Option<&'a str>,
    /// `--api`, for a server at `url`.
    pub api: &'a str,
    /// `--server`, its kind.
    pub server: &'a str,
    /// `--timeout`, seconds.
    pub timeout: f64,
    /// `--model`, the name sent.
    pub model: Option<&'a str>,
    /// `--tokenizer`, for text prompts.
    pub tokenizer: Option<&'a Path>,
    /// `--engine`: "emulated" (a server at `url`) or "cuda" (started in each child, with its
    /// `--weights`, `--gpu` and `--model-dir`; each run writes its own step log).
    pub engine: EngineChoice<'a>,
    /// The deployment, workload and replay flags, forwarded as given.
    pub run: RunFlags<'a>,
}

/// The deployment, workload and replay flags a measured run is given, as the user gave them.
#[derive(Clone, Debug)]
pub struct RunFlags<'a> {
    /// `-d`, a preset name or a file.
    pub deployment: &'a str,
    /// `--engine-config`.
    pub engine_config: Option<&'a Path>,
    /// `--model-config`.
    pub model_config: Option<&'a Path>,
    /// `--workload`.
    pub workload: Option<&'a Path>,
    /// `--trace`.
    pub trace: Option<&'a Path>,
    /// `--trace-format`, its name.
    pub trace_format: Option<&'a str>,
    /// `--max-context-length`.
    pub max_context_length: Option<u32>,
    /// `--trace-repeat`, its name (forwarded with a trace only).
    pub trace_repeat: &'a str,
    /// `--trace-as-recorded`.
    pub trace_as_recorded: bool,
    /// `--compact-as`.
    pub compact_as: Option<&'a Path>,
    /// `--first-rows`.
    pub first_rows: Option<&'a Path>,
    /// `-w`, seconds.
    pub window: f64,
    /// `--idle-gap-cap`, seconds.
    pub idle_gap_cap: f64,
    /// `--protocol`.
    pub protocol: &'a str,
    /// `--arrivals`.
    pub arrivals: &'a str,
    /// `--start-ratios` (AgentX).
    pub start_ratios: Option<&'a str>,
    /// `--tree-idle-cap` (AgentX).
    pub tree_idle_cap: Option<f64>,
    /// `--warmup-per-lane` (AgentX).
    pub warmup_per_lane: Option<u32>,
    /// `--grace` (AgentX).
    pub grace: Option<f64>,
    /// `--max-open`.
    pub max_open: Option<u32>,
}

impl<'a> RunFlags<'a> {
    /// The flags as the study's choices hold them (`--profile` is the simulator's: a measured run is
    /// not given it).
    pub fn of(d: &'a DeploymentChoice, w: &'a WorkloadChoice, r: &'a ReplayChoice) -> RunFlags<'a> {
        RunFlags {
            deployment: &d.deployment,
            engine_config: d.engine_config.as_deref(),
            model_config: d.model.as_deref(),
            workload: w.workload.as_deref(),
            trace: w.trace.as_deref(),
            trace_format: w.trace_format.map(|f| f.name()),
            max_context_length: w.max_context_length,
            trace_repeat: w.trace_repeat.name(),
            trace_as_recorded: w.trace_as_recorded,
            compact_as: w.compact_as.as_deref(),
            first_rows: w.first_rows.as_deref(),
            window: r.window,
            idle_gap_cap: r.idle_gap_cap,
            protocol: r.protocol(),
            arrivals: &r.arrivals,
            start_ratios: r.start_ratios.as_deref(),
            tree_idle_cap: r.tree_idle_cap,
            warmup_per_lane: r.warmup_per_lane,
            grace: r.grace,
            max_open: r.max_open,
        }
    }
}

/// The flags of `verify`'s held-out replays that are not in the frozen file.
#[derive(Clone, Copy, Debug)]
pub struct HeldOutFlags<'a> {
    /// `--time-scale`.
    pub time_scale: f64,
    /// `--tokenizer`, for text prompts.
    pub tokenizer: Option<&'a Path>,
    /// `--output-tokenizer`, counting streamed output.
    pub output_tokenizer: Option<&'a Path>,
}

/// A `replay` command line, built flag by flag.
struct Args(Vec<OsString>);

impl Args {
    fn flag(&mut self, name: &str, value: impl Into<OsString>) -> &mut Self {
        self.0.push(name.into());
        self.0.push(value.into());
        self
    }

    fn some<T: Into<OsString>>(&mut self, name: &str, value: Option<T>) -> &mut Self {
        if let Some(v) = value {
            self.flag(name, v);
        }
        self
    }
}

/// The command line of `compare`'s run at level `c` and `seed`, written to `dir`.
pub fn measured_args(m: &MeasuredRuns<'_>, dir: &Path, c: u32, seed: u64) -> Result<Vec<OsString>> {
    let mut a = Args(vec!["replay".into()]);
    match (m.url, m.engine.engine) {
        (Some(url), "emulated") => {
            // The server outlives each run: salted prompts keep one run out of another's cache.
            let salt = run_salt(&scenario(&m.run), c, seed);
            a.flag("--url", url)
                .flag("--api", m.api)
                .flag("--server", m.server);
            a.flag("--timeout", m.timeout.to_string());
            a.flag("--prompt-salt", salt.to_string());
            a.some("--model", m.model).some("--tokenizer", m.tokenizer);
        }
        (None, "cuda") => {
            a.flag("--engine", "cuda")
                .flag("--weights", m.engine.weights);
            a.flag("--gpu", m.engine.gpu.to_string());
            a.flag("--step-log", dir.join("steps.jsonl"));
            a.some("--model-dir", m.engine.model_dir);
        }
        (None, _) => bail!(
            "{}: no measured run to reuse; give --url or --engine cuda",
            dir.display()
        ),
        (Some(_), _) => bail!("--url and --engine cuda exclude each other"),
    }
    run_flags(&mut a, &m.run);
    a.flag("-c", c.to_string()).flag("-s", seed.to_string());
    a.0.push("--no-probe".into());
    a.flag("--out", dir);
    Ok(a.0)
}

/// What tells one stored run's scenario from another's, for its prompt salt.
fn scenario<'a>(r: &RunFlags<'a>) -> RunScenario<'a> {
    RunScenario {
        protocol: r.protocol,
        deployment: r.deployment,
        workload: r.workload,
        trace: r.trace,
    }
}

/// The deployment, workload and replay flags, forwarded.
fn run_flags(a: &mut Args, r: &RunFlags<'_>) {
    a.flag("-d", r.deployment)
        .some("--engine-config", r.engine_config)
        .some("--model-config", r.model_config);
    a.some("--workload", r.workload).some("--trace", r.trace);
    a.some("--first-rows", r.first_rows);
    a.some("--trace-format", r.trace_format);
    a.some(
        "--max-context-length",
        r.max_context_length.map(|n| n.to_string()),
    );
    if r.trace.is_some() {
        a.flag("--trace-repeat", r.trace_repeat);
        if r.trace_as_recorded {
            a.0.push("--trace-as-recorded".into());
        }
        a.some("--compact-as", r.compact_as);
    }
    a.flag("-w", r.window.to_string());
    a.flag("--idle-gap-cap", r.idle_gap_cap.to_string());
    a.flag("--protocol", r.protocol)
        .flag("--arrivals", r.arrivals);
    a.some("--start-ratios", r.start_ratios);
    a.some("--tree-idle-cap", r.tree_idle_cap.map(|x| x.to_string()));
    a.some(
        "--warmup-per-lane",
        r.warmup_per_lane.map(|x| x.to_string()),
    );
    a.some("--grace", r.grace.map(|x| x.to_string()));
    a.some("--max-open", r.max_open.map(|n| n.to_string()));
}

/// The command line of a held-out replay of `verify`.
pub fn held_out_args(r: &HeldOutReplay<'_>, f: &HeldOutFlags<'_>) -> Vec<OsString> {
    let frozen = r.frozen;
    let mut a = Args(vec!["replay".into()]);
    a.flag("--url", r.url).flag("--server", &frozen.server.kind);
    a.flag("--api", &frozen.server.api)
        .flag("--model", &frozen.server.model);
    a.flag("-d", r.deployment);
    a.flag("-c", frozen.concurrency.to_string())
        .flag("-s", r.seed.to_string());
    a.flag("-w", frozen.window_s.to_string());
    a.flag("--protocol", &frozen.protocol);
    a.flag("--prompt-salt", r.prompt_salt().to_string());
    a.flag("--time-scale", f.time_scale.to_string());
    a.flag("--out", r.dir);
    if !r.probe {
        a.0.push("--no-probe".into());
    }
    a.some("--tokenizer", f.tokenizer);
    a.some("--output-tokenizer", f.output_tokenizer);
    a.0
}

/// Makes the folder a run writes to.
fn make_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create directory", dir.display()))
}

/// Runs `exe` with `args` to its end.
fn run(exe: &Path, args: &[OsString]) -> Result<ExitStatus> {
    Command::new(exe)
        .args(args)
        .status()
        .context("cannot start the replay")
}

/// Measures `compare`'s run at level `c` and `seed` into `dir` with `exe` (this program). A run that
/// failed after writing its summary is used, with a warning; one that wrote none is an error.
pub fn measure(
    m: &MeasuredRuns<'_>,
    exe: &Path,
    (dir, c, seed): (&Path, u32, u64),
    note: &dyn Fn(&str),
) -> Result<()> {
    make_dir(dir)?;
    let args = measured_args(m, dir, c, seed)?;
    note(&format!(
        "measuring c = {c}, seed {seed} → {}",
        dir.display()
    ));
    let status = run(exe, &args)?;
    if !status.success() {
        if dir.join("summary.json").exists() {
            note(&format!("warning: the replay at c = {c}, seed {seed} exited with {status} after writing its summary; using it"));
        } else {
            bail!("the replay at c = {c}, seed {seed} failed ({status})");
        }
    }
    Ok(())
}

/// Runs `verify`'s held-out replay `r` with `exe` (this program); it must write its summary.
pub fn replay_held_out(
    r: &HeldOutReplay<'_>,
    f: &HeldOutFlags<'_>,
    exe: &Path,
    note: &dyn Fn(&str),
) -> Result<()> {
    let seed = r.seed;
    make_dir(r.dir)?;
    note(&format!(
        "replaying held-out seed {seed} → {}",
        r.dir.display()
    ));
    let status = run(exe, &held_out_args(r, f))?;
    if !r.dir.join("summary.json").exists() {
        bail!("the replay of held-out seed {seed} failed ({status}) before writing its summary");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serverbench_sim::Deployment;

    fn text(args: &[OsString]) -> String {
        let words: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
        words.join(" ")
    }

    fn runs(url: Option<&'static str>, engine: &'static str) -> MeasuredRuns<'static> {
        let run = RunFlags {
            deployment: "qwen3-8b-1xh200-vllm",
            engine_config: None,
            model_config: None,
            workload: None,
            trace: Some(Path::new("t.jsonl")),
            trace_format: Some("mooncake"),
            max_context_length: Some(4096),
            trace_repeat: "fresh",
            trace_as_recorded: true,
            compact_as: None,
            first_rows: None,
            window: 30.0,
            idle_gap_cap: 5.0,
            protocol: "steady",
            arrivals: "closed",
            start_ratios: None,
            tree_idle_cap: Some(1.5),
            warmup_per_lane: None,
            grace: None,
            max_open: Some(8),
        };
        MeasuredRuns {
            url,
            api: "tokens",
            server: "vllm",
            timeout: 600.0,
            model: Some("m"),
            tokenizer: None,
            engine: EngineChoice {
                engine,
                model_dir: None,
                weights: "w",
                gpu: 1,
                step_log: None,
                vars: |_| None,
            },
            run,
        }
    }

    /// A measured run against a server is salted apart from every other run and forwards the
    /// deployment, workload and replay flags as given; against the CUDA engine it logs its steps.
    #[test]
    fn a_measured_run_forwards_its_flags() {
        let dir = Path::new("out/real/c4_s3");
        let salt = run_salt(&scenario(&runs(None, "x").run), 4, 3);
        let server = measured_args(&runs(Some("http://h:1"), "emulated"), dir, 4, 3).unwrap();
        assert_eq!(
            text(&server),
            format!("replay --url http://h:1 --api tokens --server vllm --timeout 600 --prompt-salt {salt} --model m -d qwen3-8b-1xh200-vllm --trace t.jsonl --trace-format mooncake --max-context-length 4096 --trace-repeat fresh --trace-as-recorded -w 30 --idle-gap-cap 5 --protocol steady --arrivals closed --tree-idle-cap 1.5 --max-open 8 -c 4 -s 3 --no-probe --out out/real/c4_s3")
        );
        let cuda = text(&measured_args(&runs(None, "cuda"), dir, 4, 3).unwrap());
        assert!(cuda.starts_with(
            "replay --engine cuda --weights w --gpu 1 --step-log out/real/c4_s3/steps.jsonl -d "
        ));
        let none = measured_args(&runs(None, "emulated"), dir, 4, 3).unwrap_err();
        assert!(none.to_string().contains("no measured run to reuse"));
        let both = measured_args(&runs(Some("u"), "cuda"), dir, 4, 3).unwrap_err();
        assert!(both.to_string().contains("exclude each other"));
    }

    /// The study's choices forward as given (the protocol named, `cold` when none is); the profile
    /// stays behind.
    #[test]
    fn the_flags_of_a_measured_run_are_the_studys_choices() {
        let d = DeploymentChoice {
            deployment: "qwen3-8b-1xh200-vllm".into(),
            engine_config: None,
            profile: Some("p.yaml".into()),
            model: None,
        };
        let w = WorkloadChoice {
            workload: None,
            trace: Some("t.jsonl".into()),
            trace_format: serverbench_workloads::TraceFormat::parse("mooncake"),
            max_context_length: Some(4096),
            trace_repeat: serverbench_workloads::TraceRepeat::Fresh,
            trace_as_recorded: true,
            compact_as: None,
            first_rows: None,
            note: |_| {},
        };
        let r = ReplayChoice {
            window: 30.0,
            idle_gap_cap: 5.0,
            protocol: Some("steady".into()),
            start_ratios: None,
            tree_idle_cap: Some(1.5),
            warmup_per_lane: None,
            grace: None,
            arrivals: "closed".into(),
            max_open: Some(8),
            kernels_warm: false,
        };
        let dir = Path::new("out/real/c4_s3");
        let of = MeasuredRuns {
            run: RunFlags::of(&d, &w, &r),
            ..runs(Some("http://h:1"), "emulated")
        };
        let given = measured_args(&runs(Some("http://h:1"), "emulated"), dir, 4, 3).unwrap();
        assert_eq!(text(&measured_args(&of, dir, 4, 3).unwrap()), text(&given));
        let cold = ReplayChoice {
            protocol: None,
            ..r
        };
        assert_eq!(RunFlags::of(&d, &w, &cold).protocol, "cold");
    }

    /// A held-out replay takes the frozen decisions, its own salt, and the probe only when asked.
    #[test]
    fn a_held_out_replay_takes_the_frozen_decisions() {
        let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
        let frozen = crate::verify::test_frozen(d.slo, vec![7]);
        let r = HeldOutReplay {
            frozen: &frozen,
            url: "http://h:2",
            deployment: Path::new("v/deployment.yaml"),
            seed: 7,
            probe: false,
            dir: Path::new("v/seed_7"),
        };
        let f = HeldOutFlags {
            time_scale: 1.0,
            tokenizer: None,
            output_tokenizer: Some(Path::new("tok.json")),
        };
        assert_eq!(
            text(&held_out_args(&r, &f)),
            format!("replay --url http://h:2 --server vllm --api chat --model m -d v/deployment.yaml -c 2 -s 7 -w 60 --protocol cold --prompt-salt {} --time-scale 1 --out v/seed_7 --no-probe --output-tokenizer tok.json", 7 ^ 0x5EA1)
        );
        let probed = HeldOutReplay { probe: true, ..r };
        assert!(!text(&held_out_args(&probed, &f)).contains("--no-probe"));
    }

    /// A measured run that fails is used when it wrote its summary and is an error when it did not.
    #[cfg(unix)]
    #[test]
    fn a_failed_run_counts_only_with_its_summary() {
        let dir = std::env::temp_dir().join(format!("sb-child-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let m = runs(Some("http://h:1"), "emulated");
        let notes = std::cell::RefCell::new(Vec::new());
        let note = |n: &str| notes.borrow_mut().push(n.to_string());
        let fails = Path::new("/bin/false");
        let err = measure(&m, fails, (&dir, 1, 0), &note).unwrap_err();
        assert!(err.to_string().contains("failed"), "{err}");
        std::fs::write(dir.join("summary.json"), "{}").unwrap();
        measure(&m, fails, (&dir, 1, 0), &note).unwrap();
        assert!(notes.borrow().last().unwrap().starts_with("warning:"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
