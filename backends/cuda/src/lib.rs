//! serverbench's native CUDA engine (docs/cuda-engine.md): a Llama/Qwen3 dense transformer on one NVIDIA GPU
//! through cudarc — cuBLAS bf16 GEMMs and NVRTC kernels (embedding, RMSNorm and per-head q/k norm,
//! rotary embedding, SwiGLU, paged attention for decode and for chunked prefill over cached prefixes,
//! greedy sampling) — driven step by step by the simulator's own scheduler and KV manager.
//! Builds without a GPU or CUDA toolkit (libraries load at run time); only [`Device::open`] needs one.

pub mod batch;
pub mod bench;
pub mod config;
pub mod device;
pub mod engine;
pub mod error;
pub mod microbench;
pub mod model;

pub use batch::{pack, pack_padded, Entry, Packed, StepFeatures};
pub use config::ModelConfig;
pub use device::{CudaOptions, Device};
pub use engine::{token_scores, CudaEngine, StepOutput, StepRecord, TokenScores};
pub use error::{CudaError, Result};
pub use model::{Capacity, Model, Weights};

/// A 64-bit mix of two values (seeds for weight tensors).
pub(crate) fn hash(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
