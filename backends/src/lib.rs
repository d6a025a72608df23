//! Real backends (not built yet): the OpenAI-compatible streaming client, the emulated server
//! (`serverbench serve`), the native CUDA engine on cudarc, and the real-time replay driver.
//!
//! **Invariants, for when it is built:** this is the only crate that knows sockets, tokio and cudarc.
//! It depends on `sim` (the replay state machine, the scheduler and the KV manager, reused unchanged)
//! and never the reverse. A real run produces the same `Record`s and is scored by the same code as
//! a simulated one; the only difference is where step time and token timestamps come from.
