//! The one error type of the CUDA engine: every driver, NVRTC, cuBLAS, file and configuration failure.

use std::path::PathBuf;

/// Anything that can go wrong in the CUDA engine.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A CUDA driver call failed (also: no driver or no GPU found).
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC could not compile the kernels.
    #[error("NVRTC: {0}")]
    Compile(String),
    /// A cuBLAS call failed.
    #[error("cuBLAS: {0}")]
    Blas(#[from] cudarc::cublas::result::CublasError),
    /// A model file could not be read.
    #[error("{path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The model or engine configuration cannot run.
    #[error("{0}")]
    Config(String),
}

impl CudaError {
    /// A file error.
    pub fn file(path: impl Into<PathBuf>, reason: impl ToString) -> CudaError {
        CudaError::File {
            path: path.into(),
            reason: reason.to_string(),
        }
    }
}

/// Result with [`CudaError`].
pub type Result<T> = std::result::Result<T, CudaError>;
