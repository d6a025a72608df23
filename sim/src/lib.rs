//! The simulator: a discrete-event kernel, the closed-loop replay state machine, the engine replica
//! (scheduler + paged KV with prefix cache), deployments, and scoring.
//!
//! **Invariant:** this crate does no IO, reads no wall clock, spawns no thread, uses no async and no
//! unseeded randomness. Time is integer nanoseconds ([`Time`]); events at equal times keep insertion
//! order. The same deployment, workload, seed and concurrency give byte-identical records.
//!
//! The pieces, in the order a run uses them:
//!
//! ```
//! use serverbench_sim::{simulate, Deployment, RunConfig};
//! use serverbench_workloads::{Generator, WorkloadSpec};
//!
//! // A deployment: model + GPUs + engine knobs + prices + frozen SLOs.
//! let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
//! // A workload: the seeded stream of agentic-coding session trees.
//! let workload = Generator::new(WorkloadSpec::default(), 7, d.context_limit).unwrap();
//! // The cost model turns each step's batch into seconds.
//! let cost = d.cost_model();
//! // Four lanes replay trees closed-loop for 120 simulated seconds through the scheduler and KV cache.
//! let out = simulate(&d, &cost, &workload, &RunConfig::new(4, 7, 120.0)).unwrap();
//! // Every request sent in the window is scored: D = G × f.
//! let s = out.summary.score;
//! assert!(out.summary.requests > 0 && s.g > 0.0);
//! assert!((s.d - s.g * s.f).abs() < 1e-9);
//! ```

pub mod deployment;
pub mod des;
pub mod engine;
pub mod kv;
pub mod replay;
pub mod run;
pub mod scan;
pub mod score;

pub use deployment::{
    engine_preset, Deployment, DeploymentFile, DeploymentOf, EngineConfig, KindAcceptance, Policy,
    Preemption, Prices, Referenced, Refusal, Router, Slo, SpecMethod, Speculative,
    DEFAULT_DEPLOYMENT, ENGINE_PRESETS,
};
pub use des::{EventQueue, PastError, Time};
pub use engine::{
    Admission, CacheEviction, CapacityError, DecodeBudget, EngineStats, IntervalHistogram,
    KvLayout, PagingError, Replica, ReplicaOptions, RunBounds, SchedulingPolicy, SeqEvent, SeqId,
    SeqInput, SeqProgress, Shortage, StepBuilder, StepEntry, StepSample, WaitingOrder,
};
pub use kv::AuditError;
pub use replay::{
    AgentxParams, AgentxStats, Arrivals, Handle, LanePlan, OpenStats, Protocol, Ready, Replay,
    ReplayConfig, StreamStart,
};
pub use run::{
    records_hit_rate, simulate, OverflowGuard, RunConfig, RunError, RunOutput, Stalled,
    MAX_CONCURRENCY, MAX_IDLE_GAP_CAP_S, MAX_INSTANT_OVERFLOWS, MAX_WINDOW_S, MIN_WINDOW_S,
};
pub use scan::{scan, Offer, Unbounded};
pub use score::{
    agentx_prefix_window, agentx_window, apply_agentx, prefix_window, score, summarise, value,
    AgentxSummary, Outcome, Record, Score, Summary, AGENTX_COVERAGE, AGENTX_MIN_WINDOW_S,
    MAX_ERROR_RATE, MAX_OVERFLOW_RATE,
};
