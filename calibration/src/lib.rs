//! Calibration: model and hardware specs, profiles of efficiencies, the step-time cost model and
//! the GPU memory plan (how many KV tokens fit), and model specs read from Hugging Face `config.json`
//! files ([`hf`]).
//!
//! **Invariant:** this crate knows nothing of sessions, requests or scheduling. Everything the cost
//! model uses is a named field of a [`ModelSpec`], [`HardwareSpec`] or [`Profile`]; no efficiency is
//! a buried constant.

pub mod calibrate;
pub mod compile;
pub mod cost;
pub mod dpattn;
pub mod fit;
pub mod graphs;
pub mod hf;
pub mod memory;
pub mod model;
pub mod model_source;
pub mod moe;
pub mod ops;
pub mod padding;
pub mod profile;
pub mod profile_source;
pub mod report;
pub mod sources;
pub mod splitkv;
pub mod varlen;

pub use compile::{KernelVariant, MoeCompiles};
pub use cost::{BatchShape, CostInputs, CostModel, GraphRule, StepClock, StepParts, VarlenStep};
pub use dpattn::{dense_part, DpAttentionCost};
pub use fit::{
    check_profile, fit_profile, parse_step_log, predict_steps, predict_steps_on,
    predict_steps_with, CannotFit, ClassError, Fit, FitAccuracy, FitSetup, FitTarget, LogEngine,
    StepSample,
};
pub use memory::{memory_plan, MemoryPlan};
pub use model::{
    streamed_weight_bytes, weight_bytes, AttentionLayers, Experts, HardwareSpec, LinearLayers,
    ModelSpec, StateDtype, WeightDtype, GIB, MIB,
};
pub use moe::{
    fit_moe, merge_prefills, merge_runs, parse_moe_file, parse_moe_prefills, parse_moe_probes,
    CannotFitMoe, MoeDecode, MoeFit, MoeFitSetup, MoePrefill, MoePrefillRow, MoeProbeRuns, MoeRow,
};
pub use profile::{AttentionLayout, Band, BandEnd, FitRecord, OpClassRecord, Profile, StepTime};
pub use serverbench_config::{FieldError, InputError};
pub use splitkv::{L2Reuse, SharedReads, SplitCost, SplitKv, SplitRun, SplitScratch};
pub use varlen::{Seq as VarlenSeq, Varlen, VarlenTiles};

#[cfg(test)]
mod tests {
    /// Every built-in model, GPU and profile parses, passes its check and is named as its file
    /// (a broken preset would panic here, in CI, not in a user's run).
    #[test]
    fn every_preset_file_parses() {
        let kinds = [
            ("models", crate::ModelSpec::presets().len()),
            ("hardware", crate::HardwareSpec::presets().len()),
            ("profiles", crate::Profile::presets().len()),
        ];
        for (kind, n) in kinds {
            assert!(n > 0, "no {kind} presets");
            assert_eq!(n, serverbench_config::preset_files(kind).count(), "{kind}");
        }
        for name in ["qwen3-8b", "l40", "h200-datasheet"] {
            let found = crate::ModelSpec::preset(name).is_some()
                || crate::HardwareSpec::preset(name).is_some()
                || crate::Profile::preset(name).is_some();
            assert!(found, "{name}");
        }
    }
}
