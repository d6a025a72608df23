//! The binary built without the feature `cuda` (the default): what needs the native CUDA engine —
//! `--engine cuda`, `cuda-bench`, `cuda-check`, `calibrate --microbench` — is an error that says how to
//! build it. The same functions as `cuda.rs`, so that their callers need no `cfg`.

use crate::cli::{CudaBenchArgs, CudaCheckArgs, EngineArgs};
use anyhow::{anyhow, bail, Result};
use serverbench_backends::CudaServe;

/// The error of `what`, which needs the CUDA engine.
pub fn not_built(what: &str) -> anyhow::Error {
    anyhow!(
        "{what}: this serverbench is built without the CUDA engine; \
         build it with `cargo build --release --features cuda` (docs/cuda-engine.md)"
    )
}

/// `None` for `--engine emulated`; `--engine cuda` is an error.
pub fn serve_setup(a: &EngineArgs, _model: &str) -> Result<Option<CudaServe>> {
    match a.engine.as_str() {
        "emulated" => Ok(None),
        "cuda" => Err(not_built("--engine cuda")),
        other => bail!("--engine: expected emulated or cuda, got {other:?}"),
    }
}

/// The CUDA engine's model's vocabulary size: an error.
pub fn vocab_size(_: &EngineArgs, _model: &str) -> Result<u32> {
    Err(not_built("--engine cuda"))
}

pub fn bench(_: CudaBenchArgs) -> Result<()> {
    Err(not_built("cuda-bench"))
}

pub fn check(_: CudaCheckArgs) -> Result<()> {
    Err(not_built("cuda-check"))
}
