//! The async runtime the real backends run on. Callers outside this crate drive the backends'
//! futures through [`Runtime::block_on`] and never see tokio.

use std::future::Future;

/// A multi-threaded runtime with timers and IO.
pub struct Runtime(tokio::runtime::Runtime);

impl Runtime {
    /// Starts the runtime's worker threads.
    pub fn new() -> std::io::Result<Runtime> {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map(Runtime)
    }

    /// Runs `f` to completion on the runtime.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.0.block_on(f)
    }
}
