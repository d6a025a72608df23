//! Calibration: model and hardware specs, profiles of efficiencies, the step-time cost model and
//! the GPU memory plan (how many KV tokens fit).
//!
//! **Invariant:** this crate knows nothing of sessions, requests or scheduling. Everything the cost
//! model uses is a named field of a [`ModelSpec`], [`HardwareSpec`] or [`Profile`]; no efficiency is
//! a buried constant.

pub mod cost;
pub mod fit;
pub mod memory;
pub mod model;
pub mod profile;

pub use cost::{BatchShape, CostInputs, CostModel, StepClock, StepParts};
pub use fit::{
    check_profile, fit_profile, parse_step_log, predict_steps, ClassError, Fit, FitError, FitSetup,
    FitTarget, StepSample,
};
pub use memory::{memory_plan, MemoryPlan};
pub use model::{
    streamed_weight_bytes, weight_bytes, AttentionLayers, HardwareSpec, LinearLayers, ModelSpec,
    StateDtype, WeightDtype, GIB, MIB,
};
pub use profile::{FitRecord, Profile, StepTime};

use std::fmt;

/// A configuration file that cannot be used: names the file, line, field and reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or a preset name).
    pub file: String,
    /// 1-based line, 0 when unknown.
    pub line: usize,
    /// The field as a path (`engine.max_num_seqs`).
    pub field: String,
    /// Why.
    pub reason: String,
}

impl ConfigError {
    /// An error in `file` at `field`.
    pub fn new(
        file: &str,
        line: usize,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        ConfigError {
            file: file.into(),
            line,
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// From a `"field: reason"` message of a `check()`.
    pub fn from_check(file: &str, message: &str) -> Self {
        let (field, reason) = message.split_once(": ").unwrap_or(("", message));
        ConfigError::new(file, 0, field, reason)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ": line {}", self.line)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// Deserialises YAML, naming the field path and line of the first problem. Unknown fields are rejected
/// by the target types, so a typo never falls back to a default silently.
pub fn parse_yaml<T: for<'de> serde::Deserialize<'de>>(
    file: &str,
    text: &str,
) -> Result<T, ConfigError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let line = e.inner().location().map_or(0, |l| l.line());
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        let reason = without_location(&e.into_inner().to_string()).to_string();
        ConfigError::new(file, line, field, reason)
    })
}

/// A YAML error message without its trailing ` at line N column M`: the line is reported on its own
/// (and is dropped where it would point into a merged document the user never wrote).
fn without_location(message: &str) -> &str {
    let Some(at) = message.rfind(" at line ") else {
        return message;
    };
    let rest = &message[at + " at line ".len()..];
    let location = rest
        .split_once(" column ")
        .is_some_and(|(l, c)| l.parse::<u64>().is_ok() && c.parse::<u64>().is_ok());
    if location {
        &message[..at]
    } else {
        message
    }
}
