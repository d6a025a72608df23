//! The binary built without the feature `cuda` (the default): what needs the native CUDA engine —
//! `cuda-bench`, `cuda-check`, `calibrate --microbench` — is an error that says how to build it
//! (`--engine cuda` is `serverbench_backends::engine_choice`'s). The same functions as `cuda.rs`, so
//! that their callers need no `cfg`.

use crate::cli::{CalibrateArgs, CudaBenchArgs, CudaCheckArgs};
use anyhow::Result;
use serverbench_backends::engine_choice::not_built;

pub fn bench(_: CudaBenchArgs) -> Result<()> {
    Err(not_built("cuda-bench"))
}

pub fn check(_: CudaCheckArgs) -> Result<()> {
    Err(not_built("cuda-check"))
}

pub fn microbench(_: &CalibrateArgs) -> Result<()> {
    Err(not_built("--microbench"))
}
