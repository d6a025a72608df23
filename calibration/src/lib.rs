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
    check_profile, fit_profile, parse_step_log, predict_steps, CannotFit, ClassError, Fit,
    FitAccuracy, FitSetup, FitTarget, StepSample,
};
pub use memory::{memory_plan, MemoryPlan};
pub use model::{
    streamed_weight_bytes, weight_bytes, AttentionLayers, HardwareSpec, LinearLayers, ModelSpec,
    StateDtype, WeightDtype, GIB, MIB,
};
pub use profile::{FitRecord, Profile, StepTime};
pub use serverbench_config::{FieldError, InputError};
