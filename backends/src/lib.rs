//! Real backends: the OpenAI-compatible streaming client, the real-time replay driver, the
//! emulated server (`serverbench serve`), and `verify` (a submission frozen, sealed, and verified
//! against a fresh server through the behaviour and fidelity gates).
//!
//! **Invariants:** this is the only crate that knows sockets, tokio and cudarc (through `serverbench-cuda`,
//! with the feature `cuda`). It depends on
//! `sim` — the replay state machine, the scheduler and the KV manager are reused unchanged — and never
//! the reverse. A real run produces the same `Record`s and is scored by the same code as a simulated
//! one; only where timestamps come from differs.

pub mod calibrate;
pub mod child;
pub mod client;
pub mod clock;
pub mod compare;
pub mod count;
#[cfg(feature = "cuda")]
pub mod cuda_bench;
#[cfg(feature = "cuda")]
pub mod cuda_check;
pub mod driver;
pub mod engine;
pub mod engine_choice;
pub mod fidelity;
pub mod graceful;
pub mod inputs;
pub mod interrupt;
pub mod natural_stop;
pub mod openai;
pub mod probe;
pub mod real_replay;
pub mod report;
pub mod runtime;
pub mod server;
pub mod sse;
pub mod timer;
pub mod verify;
pub mod words;

pub use client::{base_url, ClientConfig, ClientError, HttpClient, ModelsError, StreamResult};
pub use count::OutputCounter;
pub use driver::{
    run_real, unless_interrupted, ClientStats, NotCounted, RealConfig, RealOutput, RecordSink,
};
#[cfg(feature = "cuda")]
pub use engine::Cuda;
pub use engine::{Emulated, EngineCore, Executor, Stepped, Timing};
pub use graceful::{Graceful, StudyStop};
pub use interrupt::Interrupt;
pub use natural_stop::{natural_stop_probe, NaturalStop, NATURAL_STOP_TOKENS};
pub use openai::{Api, BodyForm, Server, Usage};
pub use probe::{probe, DecodeGaps, MixedProbe, ProbePlan, ProbeStep, RaggedProbe, SharedProbe};
pub use runtime::Runtime;
pub use server::{
    prompt_blocks, serve, serve_blocking, serve_until_interrupted, spawn_local, spawn_local_server,
    CudaServe, Fault, Generation, LocalServer, ServeConfig, ServeLimits,
};
pub use words::Words;
