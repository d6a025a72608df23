//! The one error type for user input ([`InputError`]: file, line, field, reason), shared with the
//! other crates through `serverbench-config`.

pub use serverbench_config::InputError;
