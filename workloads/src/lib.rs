//! Workloads: session trees, the seeded `agentic-coding` generator, trace importers and exporters,
//! and token synthesis for real backends.
//!
//! **Invariant:** this crate knows nothing of servers, time passing or scoring. A tree is a pure value:
//! tree `k` of seed `s` depends only on the spec, `s`, `k` and the deployment's context limit, so runs
//! at different concurrency see the same trees in the same order. All randomness flows through a
//! `ChaCha8Rng` seeded from `(seed, k)`.
//!
//! ```
//! use serverbench_workloads::{Generator, TreeSource, WorkloadSpec};
//! let g = Generator::new(WorkloadSpec::default(), 3, 1_048_576).unwrap();
//! let tree = g.tree(0);
//! assert!(tree.requests()[0].deps.is_empty());
//! assert_eq!(*tree, *g.tree(0)); // deterministic
//! ```

pub mod aim;
pub mod compact;
pub mod corpus;
pub mod error;
pub mod fit;
pub mod fit_corpus;
pub mod generator;
pub mod hash;
pub mod import;
pub mod recorded;
pub mod repeat;
pub mod report;
pub mod rows;
pub mod spec;
pub mod speed;
pub mod stats;
pub mod tokens;
pub mod tree;

pub use corpus::{parse_corpus, write_corpus, Call, CallKind, Session};
pub use error::InputError;
pub use generator::{Generator, TreeSource};
pub use import::{
    import, import_files, parse_trace, read_trace, source_files, write_aiperf, write_native,
    write_trees, write_weka, Imported, Reduced, Skip, SourceFile, Trace, TraceFormat,
    WekaExportError,
};
pub use recorded::{Recorded, Spawn, Stream};
pub use repeat::{FreshRepeats, SharedIds, TraceRepeat};
pub use spec::{
    CompactionSpec, ContextCuts, Dist, SubagentSpec, Thresholds, WorkloadSpec, DEFAULT_WORKLOAD,
};
pub use stats::{ks_distance, quantile, workload_stats, Quantiles, WorkloadStats};
pub use tree::{Blocks, Request, RequestKind, SessionTree, TreeError};

/// Reads a workload spec YAML file, naming the file and field on error.
pub fn read_spec(path: &std::path::Path) -> Result<WorkloadSpec, InputError> {
    let text = serverbench_config::read_text(path, serverbench_config::MAX_CONFIG_BYTES)?;
    parse_spec(&path.display().to_string(), &text)
}

/// The targets `name_or_path` names: a built-in one (`presets/targets/`) or a YAML file; with the
/// targets a `derived_from` names (built in).
pub fn read_targets(
    name_or_path: &str,
) -> Result<(aim::Targets, Option<aim::Targets>), InputError> {
    let t = match aim::Targets::preset(name_or_path) {
        Some(t) => t,
        None => {
            let path = std::path::Path::new(name_or_path);
            if !path.exists() {
                return Err(InputError::new(
                    name_or_path,
                    0,
                    "targets",
                    format!(
                        "neither a file nor built-in targets (built in: {})",
                        aim::Targets::preset_names()
                    ),
                ));
            }
            let text = serverbench_config::read_text(path, serverbench_config::MAX_CONFIG_BYTES)?;
            let file = path.display().to_string();
            let t: aim::Targets = serverbench_config::parse_yaml(&file, &text)?;
            t.check().map_err(|e| e.in_file(&file, &text))?;
            t
        }
    };
    let parent = match &t.derived_from {
        None => None,
        Some(p) => Some(aim::Targets::preset(p).ok_or_else(|| {
            InputError::new(
                name_or_path,
                0,
                "derived_from",
                format!(
                    "{p:?} is not built-in targets ({})",
                    aim::Targets::preset_names()
                ),
            )
        })?),
    };
    Ok((t, parent))
}

/// Parses a workload spec; unknown fields are errors (a typo must not silently fall back to a default).
pub fn parse_spec(file: &str, text: &str) -> Result<WorkloadSpec, InputError> {
    let spec: WorkloadSpec = serverbench_config::parse_yaml(file, text)?;
    spec.check().map_err(|e| e.in_file(file, text))?;
    Ok(spec)
}

/// Where a run's session trees come from: the generator with a spec (one stream per seed), or a
/// trace read from a file (the same trees for every seed). Cheap to clone and share between threads.
#[derive(Clone, Debug)]
pub enum Workload {
    /// The `agentic-coding` generator, the generator seed whose stream is its corpus under the AgentX
    /// protocols ([`CORPUS_SEED`] unless [`Workload::with_corpus_seed`] draws another), and that
    /// corpus's rows once found, shared by every run of the workload (and its clones).
    Generated(std::sync::Arc<WorkloadSpec>, u64, rows::RowsCache),
    /// A trace's trees, repeated as `repeat` says when a replay needs more of them.
    Trace {
        /// The trees read from the file.
        trace: std::sync::Arc<Trace>,
        /// New sessions shaped like the trace's, or the same trees again.
        repeat: TraceRepeat,
        /// The ids sessions share (`SharedIds`), found once for every seed's stream.
        shared: std::sync::Arc<std::sync::OnceLock<SharedIds>>,
    },
}

impl Default for Workload {
    fn default() -> Self {
        Workload::generated(WorkloadSpec::default())
    }
}

/// The generator seed whose stream is a spec's corpus under the AgentX protocols
/// ([`Workload::source_for`]): the first draw, not chosen for its sessions.
pub const CORPUS_SEED: u64 = 0;

impl Workload {
    /// The generator with the built-in spec `name` (a deployment's own, `Deployment::workload`), or
    /// with the default spec when there is none.
    pub fn builtin(name: Option<&str>) -> Workload {
        let spec = name.and_then(WorkloadSpec::preset).unwrap_or_default();
        Workload::generated(spec)
    }

    /// The generator with `spec`, its corpus under the AgentX protocols the stream of
    /// [`CORPUS_SEED`].
    pub fn generated(spec: WorkloadSpec) -> Workload {
        Workload::Generated(
            std::sync::Arc::new(spec),
            CORPUS_SEED,
            rows::RowsCache::default(),
        )
    }

    /// The same workload with its corpus under the AgentX protocols drawn from generator seed `seed`
    /// (another draw of the spec's sessions); `None` for a trace, which is its own corpus.
    pub fn with_corpus_seed(&self, seed: u64) -> Option<Workload> {
        match self {
            Workload::Generated(spec, _, cache) => {
                Some(Workload::Generated(spec.clone(), seed, cache.fresh()))
            }
            Workload::Trace { .. } => None,
        }
    }

    /// The same generator with its corpus under the AgentX protocols starting with `first`, a corpus's
    /// first rows as recorded (those that fit a deployment's context; the spec's rows follow, and
    /// another corpus draw keeps them); `None` for a trace, which is its own corpus.
    pub fn with_first_rows(&self, first: Vec<std::sync::Arc<SessionTree>>) -> Option<Workload> {
        match self {
            Workload::Generated(spec, seed, _) => Some(Workload::Generated(
                spec.clone(),
                *seed,
                rows::RowsCache::with_first_rows(first),
            )),
            Workload::Trace { .. } => None,
        }
    }

    /// A trace's workload.
    pub fn trace(trace: Trace, repeat: TraceRepeat) -> Workload {
        Workload::Trace {
            trace: std::sync::Arc::new(trace),
            repeat,
            shared: Default::default(),
        }
    }

    /// The tree stream of `seed` as AgentX reads it when `rows_in_order`: a trace's rows in file order,
    /// every pass the same rows (that replay's cache-bust marker makes each a new session, and the
    /// seed moves only where each lane starts); a spec's rows are likewise one corpus drawn from it,
    /// the generator's stream of its corpus seed ([`CORPUS_SEED`] by default), the same for every run seed, as the benchmark
    /// replays one fixed corpus whatever its seed (`reference/agentx-replay.md` §7, §13), generated as
    /// its corpus recorded them and those that cannot fit `context_limit` left out whole
    /// ([`rows::FittingRows`]). Otherwise [`Workload::source`].
    pub fn source_for(
        &self,
        seed: u64,
        context_limit: u32,
        rows_in_order: bool,
    ) -> Result<std::sync::Arc<dyn TreeSource>, serverbench_config::FieldError> {
        match self {
            Workload::Trace { trace, .. } if rows_in_order => Ok(trace.clone()),
            Workload::Generated(spec, corpus, cache) if rows_in_order => {
                Ok(cache.rows(spec, *corpus, context_limit)?)
            }
            _ => self.source(seed, context_limit),
        }
    }

    /// The tree stream of `seed` under a deployment's `context_limit` (a trace repeated `same` is the
    /// same stream for every seed).
    pub fn source(
        &self,
        seed: u64,
        context_limit: u32,
    ) -> Result<std::sync::Arc<dyn TreeSource>, serverbench_config::FieldError> {
        Ok(match self {
            Workload::Trace {
                trace,
                repeat: TraceRepeat::Same,
                ..
            } => trace.clone(),
            Workload::Trace {
                trace,
                repeat: TraceRepeat::Fresh,
                shared,
            } => std::sync::Arc::new(FreshRepeats::new(trace.clone(), seed, shared.clone())),
            Workload::Generated(spec, _, _) => {
                std::sync::Arc::new(Generator::new((**spec).clone(), seed, context_limit)?)
            }
        })
    }
}
