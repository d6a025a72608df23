//! Command-line definitions (clap).

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use serverbench_workloads::{TraceFormat, TraceRepeat};
use std::path::PathBuf;

/// Latency-qualified token value per GPU dollar, for LLM serving systems.
///
/// Replays closed-loop coding-agent sessions against a simulated server and scores each run as
/// D = (value of requests that met their TTFT and TPOT targets) / (GPU cost of the run).
#[derive(Parser, Debug)]
#[command(name = "serverbench", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// One replay in the simulator: prints D, G, f, latency quantiles, throughput and cache figures.
    Simulate(SimulateArgs),
    /// Concurrency × seeds grid in parallel; recommends a concurrency (the main job).
    Sweep(SweepArgs),
    /// Many seeds at one configuration, ranked by difficulty; names representative and hardest seeds.
    Screen(ScreenArgs),
    /// Freeze TTFT and TPOT targets from a reference configuration over seeds.
    Slo(SloArgs),
    /// Each serving knob changed alone: D, G and f against the deployment as it is (a Markdown table).
    WhatIf(WhatIfArgs),
    /// The same closed-loop replay against a real OpenAI-compatible server, scored the same way.
    Replay(ReplayRealArgs),
    /// An OpenAI-compatible server whose engine is the simulated engine paced to the wall clock, or the CUDA engine.
    Serve(ServeArgs),
    /// Time the CUDA engine's forward pass on synthetic steps against their floors (needs a GPU).
    CudaBench(CudaBenchArgs),
    /// Run the CUDA engine on prompts from a cases file and write its tokens and logits (needs a GPU).
    CudaCheck(CudaCheckArgs),
    /// The same runs in the simulator and against a real backend: D, G, f, TTFT and TPOT side by side with errors.
    Compare(CompareArgs),
    /// Write a submission's decisions to one sealed file: deployment, targets, concurrency, window,
    /// development seeds, the server, the gates, and held-out seeds chosen from them.
    Freeze(FreezeArgs),
    /// A key pair for signing frozen files: NAME.key (private: the evaluator keeps it) and NAME.pub
    /// (public: `verify --public-key` needs only this).
    Keygen(KeygenArgs),
    /// The final verification of a frozen submission: replays on its held-out seeds against a fresh
    /// server, scored only if every behaviour gate passes (exit 3 when one fails).
    Verify(VerifyArgs),
    /// Fit a cost-model profile: from a real engine's step logs, GPU microbenchmarks, a black-box endpoint
    /// or measured operator tables.
    Calibrate(CalibrateArgs),
    /// Generate, import, export and summarise workloads.
    #[command(subcommand)]
    Workload(WorkloadCommand),
    /// What the cost model derives from a model: a preset, or a Hugging Face `config.json`.
    #[command(subcommand)]
    Model(ModelCommand),
    /// The GPU catalog: every hardware preset's datasheet figures and the profiles measured or assumed
    /// for it.
    #[command(subcommand)]
    Hardware(HardwareCommand),
}

impl Command {
    /// The deployment, workload and replay flags of a command that has them.
    fn run_mut(&mut self) -> Option<&mut RunArgs> {
        match self {
            Command::Simulate(a) => Some(&mut a.run),
            Command::Sweep(a) => Some(&mut a.run),
            Command::Screen(a) => Some(&mut a.run),
            Command::Slo(a) => Some(&mut a.run),
            Command::WhatIf(a) => Some(&mut a.run),
            Command::Replay(a) => Some(&mut a.run),
            Command::Compare(a) => Some(&mut a.run),
            _ => None,
        }
    }

    /// Fills an unnamed `--protocol` with the deployment's own, as
    /// `serverbench_study::inputs::settled_protocol` decides (`protocol_of` reads it from a
    /// deployment name or file).
    pub fn settle_protocol(&mut self, protocol_of: impl Fn(&str) -> Option<String>) {
        use serverbench_study::inputs::{open_loop, settled_protocol};
        let (d, p, open) = match self {
            // `sweep --rates` is open-loop whatever `--arrivals` says.
            Command::Sweep(a) if a.rates.is_some() => {
                (&a.run.deployment, &mut a.run.replay.protocol, true)
            }
            Command::Freeze(a) => (&a.deployment, &mut a.protocol, false),
            other => match other.run_mut() {
                Some(r) => (
                    &r.deployment,
                    &mut r.replay.protocol,
                    open_loop(&r.replay.arrivals),
                ),
                None => return,
            },
        };
        *p = settled_protocol(p.take(), open, &d.deployment, protocol_of);
    }
}

/// What a run is: the deployment, where its session trees come from, and how they are replayed.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    #[command(flatten)]
    pub replay: ReplayArgs,
}

/// Where the deployment comes from and how it is modified.
#[derive(Args, Debug, Clone)]
pub struct DeploymentArgs {
    /// Deployment preset name or YAML file (a file names a `base` preset and overrides fields).
    #[arg(long, short = 'd', default_value = serverbench_sim::DEFAULT_DEPLOYMENT)]
    pub deployment: String,
    /// `vllm` or `sglang` (that engine's own defaults for this deployment's GPU and model), or an engine
    /// YAML overriding fields of the deployment's `engine` section.
    #[arg(long)]
    pub engine_config: Option<PathBuf>,
    /// Cost-model profile YAML replacing the deployment's named profile.
    #[arg(long)]
    pub profile: Option<PathBuf>,
    /// The model instead of the deployment's: a Hugging Face `config.json`, a folder holding one, or a
    /// model preset (not the name a server serves: that is `--model`, where a command talks to one).
    #[arg(long, value_name = "CONFIG")]
    pub model_config: Option<PathBuf>,
    /// Print the effective deployment as YAML and exit.
    #[arg(long)]
    pub print_config: bool,
}

/// `--trace-format`: the registry's formats, with their aliases.
fn trace_formats() -> impl TypedValueParser<Value = TraceFormat> {
    PossibleValuesParser::new(TraceFormat::all().map(|f| {
        PossibleValue::new(f.name())
            .aliases(f.aliases())
            .help(f.summary())
    }))
    .map(|name| TraceFormat::parse(&name).expect("clap accepted one of the registry's names"))
}

/// Where session trees come from.
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// The generator's spec: a built-in one (`agentic-coding`, fitted to real Claude Code sessions,
    /// the default; `synthetic-v1`, the hand-set spec before the fit) or a YAML file.
    #[arg(long, conflicts_with = "trace")]
    pub workload: Option<PathBuf>,
    /// Replay a trace instead: a file, or a folder of files of one format (a Claude Code project with
    /// its sub-agent files, trajectories); the format is detected from the content, or named by
    /// --trace-format.
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// Trace format (default: detected from the content).
    #[arg(long, requires = "trace", value_parser = trace_formats())]
    pub trace_format: Option<TraceFormat>,
    /// Leave out every trace with a request longer than this (prompt + output, sub-agents
    /// included), as AgentX's option of that name does; the note on standard error counts them.
    #[arg(long, requires = "trace", value_name = "TOKENS")]
    pub max_context_length: Option<u32>,
    /// When a closed-loop replay needs more trees than the trace has (more lanes, or a window longer
    /// than its sessions): fresh (new sessions shaped like the trace's: block ids no other agent of the
    /// file uses are re-salted on every pass, so only shared prefixes hit the cache; the seed rotates
    /// each lane's first tree) or same (the very trees again: a repeat finds its prompts cached).
    #[arg(long, requires = "trace", default_value = "fresh", value_parser = trace_repeats())]
    pub trace_repeat: TraceRepeat,
    /// Replay the trace's prompts as recorded where they pass the deployment's context (each such
    /// request then fails as a context overflow). By default, outside AgentX's protocols, an agent
    /// compacts where the deployment's context forces it, as the generator's agents do.
    #[arg(long, requires = "trace")]
    pub trace_as_recorded: bool,
    /// Compact the trace at the deployment's context as this spec's agents do (its compaction
    /// threshold and reserve, summary and carried tokens) instead of the default spec's
    /// (agentic-coding): a built-in spec's name or a spec file, such as the spec `workload fit` made
    /// from the other sessions of the trace's corpus.
    #[arg(
        long,
        requires = "trace",
        conflicts_with = "trace_as_recorded",
        value_name = "SPEC"
    )]
    pub compact_as: Option<PathBuf>,
    /// Under AgentX's protocols, start the spec's corpus with these rows as recorded (a trace file
    /// of any format, such as the benchmark corpus's first rows,
    /// corpus/agentx-062126-256k/rows-0-3.jsonl.gz): those that fit the deployment's context whole
    /// are rows 0, 1, … (lane i takes row i), and the spec's rows follow.
    #[arg(long, conflicts_with = "trace", value_name = "FILE")]
    pub first_rows: Option<PathBuf>,
}

/// `--trace-repeat`: fresh or same.
fn trace_repeats() -> impl TypedValueParser<Value = TraceRepeat> {
    PossibleValuesParser::new(["fresh", "same"])
        .map(|name| TraceRepeat::parse(&name).expect("clap accepted fresh or same"))
}

/// Replay knobs shared by simulate and sweep.
#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// Window W, seconds.
    #[arg(long, short = 'w', default_value_t = 1800.0)]
    pub window: f64,
    /// Cap on think times, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub idle_gap_cap: f64,
    /// Replay protocol: cold (every lane at turn 0 with an empty cache: a freshly started server),
    /// steady (lanes start mid-session with warm prefixes), agentx (SemiAnalysis AgentX's `agentx`
    /// scenario, the benchmark's final replayer: trace rows in order, seeded start points with primed
    /// streams and a 10-request warm-up never scored, the recording's own gaps, idle caps, a window of
    /// requests issued before its end that finish within the grace) or agentx-mvp (its
    /// `inferencex-agentx-mvp` scenario); the open loop always starts cold. Default: the
    /// deployment's own (`protocol` in its file; the benchmark's deployments: agentx), else cold.
    /// docs/definitions.md.
    #[arg(long, alias = "start")]
    pub protocol: Option<String>,
    /// AgentX protocols: the share of each session's recorded span its lane starts in, LO,HI
    /// (default 0.25,0.75 for agentx, 0,1 for agentx-mvp).
    #[arg(long, value_name = "LO,HI")]
    pub start_ratios: Option<String>,
    /// AgentX protocols: a tree with nothing on the wire this long has its timers moved up, seconds;
    /// 0 for none (default 300 for agentx, none for agentx-mvp).
    #[arg(long, value_name = "SECONDS")]
    pub tree_idle_cap: Option<f64>,
    /// AgentX protocols: warm-up requests per lane after the primers, 0 for primers only (default 10
    /// for agentx, 0 for agentx-mvp).
    #[arg(long, value_name = "N")]
    pub warmup_per_lane: Option<u32>,
    /// AgentX protocols: seconds after the window in which requests still running may finish and
    /// count (default 30); the rest leave no record.
    #[arg(long, value_name = "SECONDS")]
    pub grace: Option<f64>,
    /// How session trees arrive: closed (c lanes, the benchmark's score), trace[:SPEEDUP] (each request
    /// at its recorded time, never before its dependencies) or poisson:RATE (trees per second). The
    /// open modes ignore -c; --max-open caps them.
    #[arg(long, default_value = "closed")]
    pub arrivals: String,
    /// Open loop: most session trees open at once (an arrival past it waits); default no cap.
    #[arg(long)]
    pub max_open: Option<u32>,
    /// The simulated server has served before: its engine compiled every kernel variant its steps
    /// need, so no step waits for a compile (a mixture of experts whose profile gives
    /// `expert_compile_s`). By default a cold or AgentX run meets a freshly started server's compiles;
    /// `--start steady` always runs warm, and `compare` runs warm after its first run.
    #[arg(long)]
    pub kernels_warm: bool,
}

impl ReplayArgs {
    /// The protocol's name: as given, or as [`Command::settle_protocol`] set it from the deployment.
    pub fn protocol(&self) -> &str {
        self.protocol.as_deref().unwrap_or("cold")
    }
}

/// The lanes and the seed of one replay (`simulate`'s and `replay`'s).
#[derive(Args, Debug, Clone, Copy)]
pub struct OneRunArgs {
    /// Lanes (concurrent sessions).
    #[arg(long, short = 'c', default_value_t = 16)]
    pub concurrency: u32,
    /// Workload seed.
    #[arg(long, short = 's', default_value_t = 0)]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub one: OneRunArgs,
    /// Write records.jsonl and summary.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write timeline.csv (one row per engine step) and timeline.svg to --out (and the plot into
    /// --report).
    #[arg(long)]
    pub timeline: bool,
    /// Write a self-contained HTML report (summary, timeline plot, metadata) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Concurrency levels, comma-separated.
    #[arg(
        long,
        short = 'c',
        value_delimiter = ',',
        default_value = "1,2,4,6,8,12,16,24,32,48,64"
    )]
    pub concurrency: Vec<u32>,
    /// Number of seeds (0..N), or a range A..B.
    #[arg(long, default_value = "8")]
    pub seeds: String,
    /// Worker threads (default: all cores). Output never depends on it.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also score prefix windows of the same runs, e.g. 300,900,1800 (the runs use the longest).
    #[arg(long)]
    pub windows: Option<String>,
    /// Sweep Poisson arrival rates (session trees per second, comma-separated) instead of concurrency:
    /// open loop, -c ignored, --max-open caps the trees open at once.
    #[arg(long, value_delimiter = ',', conflicts_with = "windows")]
    pub rates: Option<Vec<f64>>,
    /// Also print each end of the profile's stated band (slowest and fastest server it allows): its
    /// best mean D and robust concurrency, and whether the recommended concurrency moves (the sweep
    /// runs both ends anyway, for the recommendation under the cost model's error).
    #[arg(long, conflicts_with = "rates")]
    pub band: bool,
    /// Write sweep.csv, sweep.json and sweep.svg here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write a self-contained HTML report (the table, the plot, metadata) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ScreenArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Lanes.
    #[arg(long, short = 'c', default_value_t = 16)]
    pub concurrency: u32,
    /// Seeds: a count N (= 0..N) or a range A..B.
    #[arg(long, default_value = "128")]
    pub seeds: String,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Write screen.csv, screen.json and screen.svg here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Write a self-contained HTML report (the ranking, the histogram, metadata) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SloArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Lanes of the reference configuration (default: the deployment's reference arm's, else 1).
    #[arg(long, short = 'c')]
    pub concurrency: Option<u32>,
    /// Freeze on the deployment's own engine section, not on its reference arm (the engine preset,
    /// running limit and memory fraction its targets were measured with). Implied by --engine-config.
    #[arg(long)]
    pub as_deployed: bool,
    /// Seeds (k independent seeds): a count N or a range A..B.
    #[arg(long, default_value = "8")]
    pub seeds: String,
    /// Freeze on N corpora drawn from the workload spec (generator seeds 0..N, each replayed with the
    /// same rows on every seed, as AgentX replays one corpus) and take the median over draws of each
    /// target: a spec does not know which sessions a corpus puts first. A spec under an AgentX
    /// protocol only; 1 (the default) is the one corpus every other command replays.
    #[arg(long, default_value = "1")]
    pub corpus_draws: u64,
    /// Write the deployment with the frozen targets to this YAML file.
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum HardwareCommand {
    /// One line per GPU: memory, bandwidth, dense bf16 and fp8 FLOP/s, the link between GPUs, the
    /// default price, and its profiles (docs/models-and-hardware.md gives each figure's source).
    List,
}

#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Parameters, KV bytes per token, FLOPs per token and experts of a model preset or a `config.json`
    /// (the file, or a folder holding one).
    Show(ModelShowArgs),
}

#[derive(Args, Debug)]
pub struct ModelShowArgs {
    /// A model preset's name, or the path of a Hugging Face `config.json` (or of its folder).
    pub model: String,
}

#[derive(Subcommand, Debug)]
pub enum WorkloadCommand {
    /// Summarise trees: turns, token quantiles, think times, sub-agents, prefix reuse.
    Stats(WorkloadStatsArgs),
    /// Write trees as native JSONL (re-imports exactly), an AIPerf or Weka trace, or corpus sessions.
    Export(WorkloadExportArgs),
    /// Per seed, the value an infinitely fast server would be asked for inside the window.
    Scan(WorkloadScanArgs),
    /// Fit the generator's spec to a corpus of real sessions; print the corpus beside the fitted
    /// generator and the KS distance on held-out sessions.
    Fit(WorkloadFitArgs),
}

#[derive(Args, Debug)]
pub struct WorkloadFitArgs {
    /// Corpus files or folders (the corpus format, or any trace format: agents' logs are reduced as
    /// they are read).
    #[arg(required = true)]
    pub corpus: Vec<PathBuf>,
    /// Format of the inputs (default: detected from the content).
    #[arg(long, value_parser = trace_formats())]
    pub trace_format: Option<TraceFormat>,
    /// Write the fitted spec here (YAML, for --workload).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// The `name` the written spec carries (a built-in spec's file name).
    #[arg(long)]
    pub name: Option<String>,
    /// Write the held-out sessions here (corpus JSONL), to replay them beside the fitted generator.
    #[arg(long)]
    pub held_out: Option<PathBuf>,
    /// Further sessions to compare with the fitted generator, not fitted on (sessions that cannot
    /// be shipped, another agent's); read in their own format, leniently.
    #[arg(long)]
    pub check: Vec<PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Sessions drawn from the fitted generator for the comparison.
    #[arg(long, default_value_t = 2000)]
    pub trees: u64,
    /// Context limit the generator compacts against in the comparison.
    #[arg(long, default_value_t = 1_048_576)]
    pub context_limit: u32,
    /// Leave out sessions whose log cannot be reduced, each counted with its error, instead of
    /// stopping.
    #[arg(long)]
    pub keep_going: bool,
    /// Aim the fitted spec at a corpus's published quantities (built-in targets by name, e.g.
    /// `cc-traces-weka-062126`, or a YAML file): fit only the sessions the corpus's own filter keeps,
    /// then move the spec until its sessions show those numbers, and print each beside them.
    #[arg(long)]
    pub targets: Option<String>,
    /// Fit each session's own speed and spread of think times (`session_think_speeds`, one `[a, b]`
    /// per session shape; `think_time_s` then holds the corpus's think times at its typical speed).
    #[arg(long)]
    pub session_speed: bool,
    /// Give each session shape its session's own application prefix (`session_app_prefixes`): a
    /// session then shares its prefix only with sessions whose prefix has the same length, as the
    /// corpus's sessions share theirs, instead of every session sharing `system_prefix_tokens`.
    #[arg(long)]
    pub app_prefixes: bool,
    /// Sessions that never compacted and never passed the corpus's typical compaction threshold
    /// (`compaction.max_tokens`) compact there (their `session_shapes` row's threshold), instead of growing on to the
    /// deployment's limit. The shipped `agentic-coding` uses it (docs/workload.md).
    #[arg(long)]
    pub compact_typical: bool,
    /// The fitted `compaction.carried_tokens` stand for everything the first prompt after a compaction
    /// holds besides the prefix and the summary, the compacting turn's additions included, as the fit
    /// measures them (`compaction.turn_in_carry`); without it the generator adds the turn's growth on top,
    /// counting it twice. Every fitted spec shipped uses it (docs/workload.md).
    #[arg(long)]
    pub turn_in_carry: bool,
    /// Measure the growth of each session's early root turns apart from the later ones'
    /// (`new_tokens.early`: turn 1, turns 2–5, turns 6–9, each with its own bands and rewrites): the
    /// corpus's second root turns add 14K new tokens on average, turns 2–5 3–5K, later ones about
    /// 2K. The shipped `agentic-coding` uses it (docs/workload.md).
    #[arg(long)]
    pub early_growth: bool,
    /// Hold out the fifth K (0-4) of the corpus instead of the last: the sessions at positions K,
    /// K + 5, … (default 4). One fit per K, each replayed beside its held-out fifth, is a five-fold
    /// cross-validation (scripts/workload_replay_check.sh, FOLDS).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u8).range(0..5))]
    pub fold: Option<u8>,
}

#[derive(Args, Debug)]
pub struct WorkloadStatsArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Seed of the generator.
    #[arg(long, short = 's', default_value_t = 0)]
    pub seed: u64,
    /// Trees to summarise from the generator (a trace is summarised whole).
    #[arg(long, default_value_t = 1000)]
    pub trees: u64,
    /// Context limit the generator compacts against.
    #[arg(long, default_value_t = 1_048_576)]
    pub context_limit: u32,
}

#[derive(Args, Debug)]
pub struct WorkloadExportArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Seed of the generator.
    #[arg(long, short = 's', default_value_t = 0)]
    pub seed: u64,
    /// Trees to export from the generator (a trace is exported whole).
    #[arg(long, default_value_t = 100)]
    pub trees: u64,
    /// Context limit the generator compacts against.
    #[arg(long, default_value_t = 1_048_576)]
    pub context_limit: u32,
    /// Output format: `native` (this tool's trees, re-importable exactly), `aiperf` (AIPerf's
    /// multi-turn Mooncake trace: `aiperf profile --custom-dataset-type mooncake_trace`) or `weka`
    /// (Weka / Claude-Code traces with nested sub-agents: GuideLLM's `--data kind=weka,…`, and this
    /// tool's `--trace`) or `corpus` (real sessions reduced to numbers, what `workload fit` reads: a
    /// log's calls with their recorded times and cache reads, or any trees with the prefixes their
    /// block ids share).
    #[arg(long, default_value = "native", value_parser = ["native", "aiperf", "weka", "corpus"])]
    pub format: String,
    /// Output file (default: standard output).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Leave out sessions whose log cannot be reduced (a broken line, a sub-agent without its
    /// session), each counted with its error on standard error, instead of stopping.
    #[arg(long)]
    pub keep_going: bool,
    /// With `--format corpus`: write here, per session, its id and the files it was read from
    /// (JSONL), for a corpus manifest.
    #[arg(long)]
    pub origins: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct WorkloadScanArgs {
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Seeds, as a range A..B (end exclusive) or a count N (= 0..N).
    #[arg(long, default_value = "0..128")]
    pub seeds: String,
    /// Lanes.
    #[arg(long, short = 'c', default_value_t = 16)]
    pub concurrency: u32,
    /// Window, seconds.
    #[arg(long, short = 'w', default_value_t = 1800.0)]
    pub window: f64,
    /// Cap on think times, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub idle_gap_cap: f64,
    /// Deployment whose prices and context limit apply (preset or YAML file).
    #[arg(long, short = 'd', default_value = serverbench_sim::DEFAULT_DEPLOYMENT)]
    pub deployment: String,
    /// Write scan.csv and scan.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct WhatIfArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Concurrency levels, comma-separated.
    #[arg(long, short = 'c', value_delimiter = ',', default_value = "8,16")]
    pub concurrency: Vec<u32>,
    /// Seeds: a count N or a range A..B.
    #[arg(long, default_value = "4")]
    pub seeds: String,
}

/// Which engine serves, and the CUDA engine's model.
#[derive(Args, Debug, Clone)]
pub struct EngineArgs {
    /// `emulated` (the simulator paced to the wall clock) or `cuda` (the native CUDA engine).
    #[arg(long, default_value = "emulated")]
    pub engine: String,
    /// CUDA engine: a directory with a Hugging Face config.json (and safetensors weights, unless --weights random).
    #[arg(long)]
    pub model_dir: Option<PathBuf>,
    /// CUDA engine: `random` (generated on the GPU; shapes, not values, set the cost) or a safetensors file or directory.
    #[arg(long, default_value = "random")]
    pub weights: String,
    /// CUDA engine: GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// CUDA engine: write one JSON line per step (batch features and GPU time) here, for `calibrate --from-steps`.
    #[arg(long)]
    pub step_log: Option<PathBuf>,
}

impl EngineArgs {
    /// The flags' values, for `serverbench_backends::engine_choice`.
    pub fn choice(&self) -> serverbench_backends::engine_choice::EngineChoice<'_> {
        serverbench_backends::engine_choice::EngineChoice {
            engine: &self.engine,
            model_dir: self.model_dir.as_deref(),
            weights: &self.weights,
            gpu: self.gpu,
            step_log: self.step_log.as_deref(),
            vars: |k| std::env::var(k).ok(),
        }
    }
}

/// How a real server is asked (`replay`'s, `compare --url`'s and the frozen runs' of `freeze`).
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// Endpoint and prompt form: tokens (/v1/completions with token ids, exact), text, or chat (the
    /// server tokenizes these two: `compare` charges the profile's `tokenize_s_per_token`).
    #[arg(long, default_value = "tokens")]
    pub api: String,
    /// The server kind, which decides the fields that ask for exact output lengths: vllm or sglang
    /// (`ignore_eos`, `min_tokens`; also serverbench's own serve), transformers (`transformers serve`:
    /// a `generation_config` without end-of-sequence, text prompts only), openai (standard fields only).
    #[arg(long, default_value = "vllm")]
    pub server: String,
    /// Model name to send (default: the deployment's model).
    #[arg(long)]
    pub model: Option<String>,
}

#[derive(Args, Debug)]
pub struct ReplayRealArgs {
    /// Base URL of the server, e.g. http://127.0.0.1:8000 or https://host (a trailing /v1 is dropped); not
    /// with --engine cuda.
    #[arg(long)]
    pub url: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub one: OneRunArgs,
    #[command(flatten)]
    pub client: ServerArgs,
    /// Mix this into every synthesised prompt token, so a server that lives across runs serves no run
    /// from another run's cache (0: unsalted; `compare --url` salts each run by its level and seed).
    #[arg(long, default_value_t = 0)]
    pub prompt_salt: u64,
    /// Per-request timeout, seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,
    /// Environment variable holding an API key (sent as a bearer token) if it is set: over HTTPS or to
    /// this machine only, unless --api-key-over-http.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
    /// Send the API key over plain HTTP to another machine too.
    #[arg(long)]
    pub api_key_over_http: bool,
    /// Header carrying the lane id for session affinity (e.g. X-Session-ID).
    #[arg(long)]
    pub affinity_header: Option<String>,
    /// Extra header NAME:VALUE (repeatable).
    #[arg(long = "header")]
    pub headers: Vec<String>,
    /// Token ids of synthesised prompts are drawn from [100, VOCAB) (default and most: the model's
    /// vocabulary).
    #[arg(long)]
    pub vocab: Option<u32>,
    /// With --api text or chat: build prompts from this Hugging Face tokenizer.json's one-token words,
    /// so that a server with the same tokenizer counts exactly the workload's tokens.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// The served model's tokenizer.json: count each stream's output text with it, which confirms a
    /// stream that put several tokens in one chunk (its usage is then backed by text; `verify`'s
    /// stream gate accepts it). Any --api.
    #[arg(long)]
    pub output_tokenizer: Option<PathBuf>,
    /// Compress wall-clock time by this factor (only for testing against `serve --time-scale`).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Skip the natural-stop probe.
    #[arg(long)]
    pub no_probe: bool,
    /// Write records.jsonl (appended as requests end) and summary.json here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Run this many times faster than real time (for tests).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Model name to report (default: the deployment's model); with --engine cuda, the model preset (qwen3-8b).
    #[arg(long)]
    pub model: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Connections open at once; one over the cap is closed as it is accepted.
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (also closes a connection idle that long).
    #[arg(long, default_value_t = 30.0)]
    pub header_timeout: f64,
    /// Seconds a client has to send a request's body.
    #[arg(long, default_value_t = 30.0)]
    pub body_timeout: f64,
    /// On Ctrl-C, seconds open requests may take to finish before the server exits.
    #[arg(long, default_value_t = 30.0)]
    pub drain_timeout: f64,
    /// Which emulated checkpoint answers: servers with the same seed and vocabulary give the same greedy
    /// tokens and log-probabilities (a reference and a candidate for `verify --reference`).
    #[arg(long, default_value_t = 0)]
    pub model_seed: u64,
    /// Serve the model differently on purpose, to see what `verify` makes of it: `none`,
    /// `truncate-prompt:N` (the model sees only the last N prompt tokens; usage still counts them all)
    /// `runner-up:P` (a fraction P of output tokens is the second most likely: faithful but not
    /// greedy-identical) or, with `--engine cuda`, `corrupt-prefix-cache` (cached prefixes are read
    /// from the wrong KV blocks).
    #[arg(long, default_value = "none")]
    pub fault: String,
    /// Count text prompts with this Hugging Face tokenizer.json and write each output token as one of its
    /// one-token words (so a client counting the text with it agrees with usage); emulated engine only.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CudaBenchArgs {
    /// Model preset.
    #[arg(long, default_value = "qwen3-8b")]
    pub model: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Timed repetitions per case (median reported).
    #[arg(long, default_value_t = 10)]
    pub reps: usize,
    /// Cases: `decode:B:CTX` or `prefill:LEN:CACHED`, comma-separated (default: the table).
    #[arg(long, value_delimiter = ',')]
    pub cases: Vec<String>,
    /// Write bench.json and steps.jsonl (a step log for calibration) here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Concurrency levels, comma-separated.
    #[arg(long, short = 'c', value_delimiter = ',', default_value = "4")]
    pub concurrency: Vec<u32>,
    /// Workload seeds, comma-separated (every seed runs at every level).
    #[arg(long, short = 's', value_delimiter = ',', default_value = "0")]
    pub seeds: Vec<u64>,
    /// The real backend: base URL of an OpenAI-compatible server (or `--engine cuda`), asked as --api,
    /// --server and --model say. Each run's prompts are salted by its level and seed (`replay
    /// --prompt-salt`): the server keeps its cache across runs.
    #[arg(long)]
    pub url: Option<String>,
    #[command(flatten)]
    pub client: ServerArgs,
    /// With --url: per-request timeout, seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout: f64,
    /// With --url and --api text or chat: build prompts from this tokenizer.json (as `replay --tokenizer`).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Use measured runs already in OUT/real/ and run only the missing ones (no backend needed if none is missing).
    #[arg(long)]
    pub reuse: bool,
    /// Directory for the measured runs (real/cC_sS/), compare.json, compare.md and compare.svg.
    #[arg(long)]
    pub out: PathBuf,
    /// Write a self-contained HTML report (the comparison tables, the plot, metadata) to this file.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Step logs (JSONL, `.gz` accepted) written by the CUDA engine (`--step-log`, `cuda-bench --out`).
    #[arg(long, num_args = 1.., required_unless_present_any = ["microbench", "endpoint", "derive_from", "from_probes", "from_ops", "from_moe_probes"])]
    pub from_steps: Vec<PathBuf>,
    /// Fit a profile for `--hardware` from measured operator tables: CSV files, or directories whose
    /// every `.csv` is read (aiconfigurator's operator database, its fused-MoE rows included, or
    /// LLMServingSim's per-layer profile); reports each operator class's error on held-out rows.
    #[arg(long, num_args = 1.., conflicts_with_all = ["from_steps", "microbench", "endpoint", "derive_from", "from_probes"])]
    pub from_ops: Vec<PathBuf>,
    /// `--from-ops`: the GPU whose compute-bound rows (GEMM compute, prefill attention) set the compute
    /// efficiencies, as fractions of its own peak (default: `--hardware`).
    #[arg(long, requires = "from_ops")]
    pub compute_gpu: Option<String>,
    /// `--from-ops`: the GPU whose bandwidth-bound rows (weight streaming, decode attention, int4,
    /// all-reduce) set the bandwidth efficiencies (default: `--hardware`).
    #[arg(long, requires = "from_ops")]
    pub memory_gpu: Option<String>,
    /// `--from-ops`: the profile's stated band, as relative half-widths of its compute efficiencies,
    /// bandwidth efficiencies and host overheads (`0.15,0.10,0.5`: ±15 %, ±10 %, ±50 %).
    #[arg(long, requires = "from_ops", value_delimiter = ',', num_args = 1)]
    pub band: Option<Vec<f64>>,
    /// Fit a probe log (`--endpoint --probe-log`) as `--endpoint` fits its probes: the request latency
    /// estimated, the attention layout chosen; no server needed.
    #[arg(long, conflicts_with_all = ["from_steps", "microbench", "endpoint", "derive_from"])]
    pub from_probes: Option<PathBuf>,
    /// Fit a mixture of experts' two profile terms (`moe_layer_s`, `expert_memory_efficiency`) over
    /// `--base-profile` to decode probes written by `scripts/vllm/moe_probe.py` (JSON; several files
    /// are repeats, their cases averaged); every second case is held out. `--model` is the mixture of
    /// experts served (a preset or a `config.json`).
    #[arg(long, num_args = 1.., conflicts_with_all = ["from_steps", "microbench", "endpoint", "derive_from", "from_probes", "from_ops"])]
    pub from_moe_probes: Vec<PathBuf>,
    /// `--from-moe-probes`: the engine's decode attention runs FlashAttention 3's split-KV schedule (vLLM
    /// on Hopper), as the `vllm` engine presets say.
    #[arg(long, requires = "from_moe_probes")]
    pub moe_split_kv: bool,
    /// `--from-moe-probes`, `--from-probes`, `--endpoint` and `--check`: steps of at most this many
    /// tokens (decode or with prefill) replay CUDA graphs, as vLLM's piecewise graphs do (its presets:
    /// 512); the others run eagerly and take at least the profile's `eager_s_per_layer` per layer, which
    /// `--from-moe-probes` then fits to the probes' fresh prefills; steps that replay no whole graph pay
    /// the (base) profile's host gaps, which `--from-probes` and `--endpoint` take off each probe.
    #[arg(long)]
    pub graph_max_tokens: Option<u32>,
    /// `--from-moe-probes`: the engine's prefill chunk, tokens (vLLM's `max_num_batched_tokens`).
    #[arg(long, default_value_t = 8192, value_parser = clap::value_parser!(u32).range(1..))]
    pub prefill_chunk: u32,
    /// Derive a profile for `--hardware` from a measured one (preset name or YAML): its efficiencies and
    /// overheads on the new GPU's datasheet peaks.
    #[arg(long, conflicts_with_all = ["from_steps", "microbench", "endpoint"])]
    pub derive_from: Option<String>,
    /// Fit nothing: predict every step of `--from-steps` with this profile (preset name or YAML) and
    /// report its error per class of step (decode only and by decode batch, prefill by new tokens): a
    /// held-out check.
    #[arg(long, requires = "from_steps", conflicts_with_all = ["microbench", "endpoint"])]
    pub check: Option<String>,
    /// With `--check`: also write every step's features, measured and predicted time to this CSV file (one
    /// row per step, in the order of the logs given).
    #[arg(long, requires = "check")]
    pub per_step: Option<PathBuf>,
    /// With `--check`: the logs come from an engine whose decode attention runs FlashAttention 3's
    /// split-KV schedule (vLLM on Hopper): pure decode steps pay the excess it gives (docs/simulator.md).
    #[arg(long, requires = "check")]
    pub split_kv: bool,
    /// With `--split-kv`: the decodes of every pure decode step share their first TOKENS tokens (the
    /// workload's common system prompt, e.g. 20000 for `synthetic-v1`); where the GPU's file gives
    /// `l2_reuse`, their re-reads of it are priced as served from the L2 (docs/simulator.md).
    #[arg(long, requires = "split_kv", value_name = "TOKENS")]
    pub shared_prefix: Option<u32>,
    /// Notes written to the profile (assumptions, uncertainty).
    #[arg(long, default_value = "")]
    pub notes: String,
    /// Run GPU microbenchmarks through the CUDA engine (GEMM shapes, attention, bandwidth) and fit them.
    #[arg(long, conflicts_with_all = ["from_steps", "endpoint"])]
    pub microbench: bool,
    /// Probe a black-box OpenAI-compatible server (TTFT against prompt length, TPOT against streams).
    #[arg(long, conflicts_with_all = ["from_steps", "microbench"])]
    pub endpoint: Option<String>,
    /// The model whose steps were measured: a model preset, or a Hugging Face `config.json` (or a folder holding one).
    #[arg(long, default_value = "qwen3-8b")]
    pub model: String,
    /// The GPU they were measured on (a hardware preset).
    #[arg(long, default_value = "h200")]
    pub hardware: String,
    /// Profile preset or YAML file supplying what the measurements cannot inform (all-reduce, int4/fp8 factors).
    #[arg(long, default_value = "h200-datasheet")]
    pub base_profile: String,
    /// Which step time to fit: `wall` (the engine loop's, what clients wait for) or `gpu` (CUDA events).
    #[arg(long, default_value = "wall")]
    pub target: String,
    /// Name of the new profile.
    #[arg(long, default_value = "fitted")]
    pub name: String,
    /// Query tokens per tile of the engine's prefill attention kernel, per query head (128: a block of
    /// serverbench's CUDA engine covers 128 (query, head) rows of one GQA group).
    #[arg(long, default_value_t = 128)]
    pub attention_tile: u32,
    /// Fix the weight-streaming efficiency (fraction of peak bandwidth) at a measured value instead of
    /// fitting it (decode steps alone cannot separate it from the fixed step overhead).
    #[arg(long)]
    pub memory_efficiency: Option<f64>,
    /// Fix the weight-streaming efficiency of one-token steps (batch-1 decode: an engine's GEMV path) at a
    /// measured value; with it fixed, `--memory-efficiency` can be left to the fit.
    #[arg(long)]
    pub single_row_memory_efficiency: Option<f64>,
    /// The front end's latency per request in ms (client send to the engine seeing it), measured outside
    /// the step log (docs/calibration.md says how); written to the profile as `request_latency_s`. 0 if
    /// not given, except with `--endpoint`, which estimates it from the probes.
    #[arg(long)]
    pub request_latency_ms: Option<f64>,
    /// With --endpoint or --from-probes: also fit the front end's time per prompt token
    /// (`frontend_s_per_token`) from the time-to-first-token probes; the prefill attention's sweep and
    /// first-round terms then stay 0, since one request's probe cannot tell them apart.
    #[arg(long)]
    pub fit_frontend: bool,
    /// Where the measurements were taken (written to the profile).
    #[arg(long, default_value = "unknown")]
    pub measured_on: String,
    /// Write the profile YAML here (default: print it); `--microbench` also writes its measurements beside it.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// `--endpoint`: model name to send (default: `--model`).
    #[arg(long)]
    pub served_model: Option<String>,
    /// `--endpoint`: endpoint and prompt form (as `replay --api`).
    #[arg(long, default_value = "tokens")]
    pub api: String,
    /// `--endpoint`: the server kind (as `replay --server`).
    #[arg(long, default_value = "vllm")]
    pub server: String,
    /// `--endpoint`: fresh prompt lengths probed for TTFT, comma-separated (keep them within the
    /// server's tokens per step: each should be one prefill step).
    #[arg(long, value_delimiter = ',', default_value = "64,256,512,1024,2048")]
    pub probe_prompts: Vec<u32>,
    /// `--endpoint`: numbers of concurrent streams decoding over a long prompt (`--probe-long-context`
    /// tokens each), comma-separated; none by default. What decode costs per context token, and whether
    /// the server's attention grows with the square of the batch, show only here.
    #[arg(long, value_delimiter = ',')]
    pub probe_long_streams: Vec<u32>,
    /// `--endpoint`: prompt length of the long-context streams.
    #[arg(long, default_value_t = 8192)]
    pub probe_long_context: u32,
    /// `--endpoint`: lengths of the cached prefixes that suffixes (16, 128 and 512 tokens) are probed
    /// over, comma-separated. Several lengths tell the front end's time per prompt token from the step's.
    #[arg(long, value_delimiter = ',', default_value = "8192")]
    pub probe_cached_prefixes: Vec<u32>,
    /// `--endpoint`: steps that prefill while streams decode, each `STREAMS:CONTEXT:NEW:CACHED` (STREAMS
    /// streams decoding over CONTEXT-token prompts, and a prefill of NEW tokens over CACHED cached ones
    /// sent meanwhile), comma-separated; none by default. Only these show what a prefill chunk costs the
    /// decodes it shares a step with.
    #[arg(long, value_delimiter = ',')]
    pub probe_mixed: Vec<String>,
    /// `--endpoint`: batches of streams with unequal prompts, each `STREAMS:SHORT:LONG` (STREAMS streams
    /// whose prompts are spread evenly from SHORT to LONG tokens, decoding together), comma-separated;
    /// none by default. A closed loop's decode batch mixes context lengths: beside `--probe-long-streams`
    /// of the same mean it shows whether the longest sequence, not the total, sets decode attention's time.
    #[arg(long, value_delimiter = ',')]
    pub probe_ragged: Vec<String>,
    /// `--endpoint`: batches of streams that share a prompt prefix, each `STREAMS:SHARED:OWN` (STREAMS
    /// streams over one SHARED-token prefix and OWN tokens each of their own, decoding together),
    /// comma-separated; none by default. Only these fit `shared_kv_efficiency`: what a KV block that
    /// another sequence of the step also reads costs (an application's system prompt).
    #[arg(long, value_delimiter = ',')]
    pub probe_shared: Vec<String>,
    /// `--endpoint`: also write the probes as a step log (JSON lines `calibrate --from-steps` reads), so
    /// the fit can be redone without the server.
    #[arg(long)]
    pub probe_log: Option<PathBuf>,
    /// `--endpoint`: seed of the probe prompts (change it to avoid prompts a shared server has cached).
    #[arg(long, default_value_t = 0)]
    pub probe_seed: u64,
    /// `--endpoint`: the longest wait for one probe's request, seconds.
    #[arg(long, default_value_t = 300.0)]
    pub timeout: f64,
    /// `--microbench`: GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
}

#[derive(Args, Debug)]
pub struct CudaCheckArgs {
    /// Directory with config.json and safetensors weights.
    #[arg(long)]
    pub model_dir: PathBuf,
    /// Cases file (JSON, written by scripts/cuda_check.py).
    #[arg(long)]
    pub cases: PathBuf,
    /// Where to write the engine's tokens and logits (JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// GPU ordinal.
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
}

#[cfg(test)]
mod tests {
    /// Clap checks argument ids and flags only when a command is built: build them all.
    #[test]
    fn every_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}

#[derive(Args, Debug)]
pub struct FreezeArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Declared concurrency (lanes) of the submission.
    #[arg(long, short = 'c')]
    pub concurrency: u32,
    /// Seeds used during development (a count N or a range A..B); the held-out seeds avoid them.
    #[arg(long, default_value = "8")]
    pub dev_seeds: String,
    /// Held-out seeds the final replay runs.
    #[arg(long, default_value_t = 3)]
    pub held_out: usize,
    /// Window of each final run, seconds.
    #[arg(long, short = 'w', default_value_t = 1800.0)]
    pub window: f64,
    /// The protocol the final runs replay (as `replay --protocol`; the benchmark's final run is
    /// `agentx`). Default: the deployment's own, else cold.
    #[arg(long)]
    pub protocol: Option<String>,
    /// The server's base URL.
    #[arg(long)]
    pub url: String,
    #[command(flatten)]
    pub client: ServerArgs,
    /// The frozen file to write.
    #[arg(long, short = 'o', default_value = "frozen.json")]
    pub out: PathBuf,
    /// The evaluator's private key (`serverbench keygen`): signs the decisions, so that `verify` with
    /// the public key refuses any edit. Without it the file is unsigned (`verify --unsigned` only).
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Let the score count without a generation check against a reference (`verify --reference`).
    #[arg(long)]
    pub no_fidelity: bool,
    /// Held-out prompts whose greedy continuations are compared with the reference's.
    #[arg(long, default_value_t = 16)]
    pub fidelity_prompts: usize,
    /// Least fraction of continuation tokens that must agree with the reference's before the first
    /// difference.
    #[arg(long, default_value_t = 0.0)]
    pub min_greedy_agreement: f64,
    /// Largest mean per-token log-probability regret (nats) under the reference of a continuation that
    /// differs from the reference's.
    #[arg(long, default_value_t = 4.0)]
    pub max_regret: f64,
}

#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Write NAME.key and NAME.pub (a path without the extension); neither may exist yet.
    #[arg(long, default_value = "evaluator")]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The file `serverbench freeze` wrote.
    pub frozen: PathBuf,
    /// The evaluator's public key (a NAME.pub file `serverbench keygen` wrote, or its 64 hex digits):
    /// the frozen file's signature must match it.
    #[arg(long, required_unless_present = "unsigned")]
    pub public_key: Option<String>,
    /// Check an unsigned (or any) frozen file without its signature: a rehearsal, never VERIFIED.
    #[arg(long, conflicts_with = "public_key")]
    pub unsigned: bool,
    /// The fresh deployment's URL, when it is not the frozen one.
    #[arg(long)]
    pub url: Option<String>,
    /// Write verify.json, the deployment and each held-out run (summary, records) here.
    #[arg(long, default_value = "verify")]
    pub out: PathBuf,
    /// Wall-clock compression, for testing against `serve --time-scale X` (as `replay --time-scale`).
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// A reference server of the same checkpoint (a plain implementation) to check generation against.
    #[arg(long)]
    pub reference: Option<String>,
    /// The reference's model name (default: the frozen model name).
    #[arg(long)]
    pub reference_model: Option<String>,
    /// The reference's server kind (which fields ask for an exact output length).
    #[arg(long, default_value = "vllm")]
    pub reference_server: String,
    /// A question set (JSONL: {"prompt": text, "answer": text} per line) both servers answer.
    #[arg(long)]
    pub answers: Option<PathBuf>,
    /// With a frozen --api text or chat: build the replays' prompts from this tokenizer.json (as
    /// `replay --tokenizer`), so that the full-prompt gate counts exactly.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// The candidate's tokenizer.json, counting the held-out replays' output text (as `replay
    /// --output-tokenizer`): a stream with several tokens in a chunk passes the stream gate when its
    /// text backs the usage count (vLLM merges the deltas a client has not read yet).
    #[arg(long)]
    pub output_tokenizer: Option<PathBuf>,
}
