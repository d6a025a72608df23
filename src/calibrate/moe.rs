//! `serverbench calibrate --from-moe-probes`: `moe_probe.py`'s JSON files (read by
//! `serverbench_calibration::sources`) handed to the
//! fit of a mixture of experts' profile terms (`serverbench_calibration::moe`), prints its per-case
//! table (`calibration::report::moe_fit_text`) and writes the profile. It fits nothing itself and
//! probes no server.

use super::fit::{measured_on, now, write_profile};
use crate::cli::CalibrateArgs;
use anyhow::{anyhow, Result};
use serverbench_calibration::report::moe_fit_text;
use serverbench_calibration::sources::moe_probe_runs;
use serverbench_calibration::{
    fit_moe, merge_prefills, merge_runs, FitRecord, GraphRule, HardwareSpec, LogEngine,
    MoeFitSetup, Profile,
};
use std::path::PathBuf;

/// Fits `moe_layer_s` and `expert_memory_efficiency` (and, with `--graph-max-tokens`, the eager floor)
/// over `--base-profile` and writes the profile.
pub fn calibrate(a: &CalibrateArgs, paths: &[PathBuf]) -> Result<()> {
    let model = crate::inputs::model(&a.model).map_err(|e| anyhow!("--model: {e}"))?;
    let hardware = HardwareSpec::preset(&a.hardware)
        .ok_or_else(|| anyhow!("--hardware: no hardware preset {:?}", a.hardware))?;
    let base = Profile::preset(&a.base_profile)
        .ok_or_else(|| anyhow!("--base-profile: no profile preset {:?}", a.base_profile))?;
    if base.hardware != hardware.name {
        anyhow::bail!(
            "--base-profile: {} describes {}, not --hardware {}",
            base.name,
            base.hardware,
            hardware.name
        );
    }
    let runs = moe_probe_runs(paths)?;
    let (cases, prefills) = (merge_runs(&runs.decode), merge_prefills(&runs.prefill));
    let setup = MoeFitSetup {
        model: &model,
        hardware: &hardware,
        base: &base,
        name: a.name.clone(),
        engine: LogEngine {
            split_kv_decode: a.moe_split_kv,
            graphs: a.graph_max_tokens.map(GraphRule::mixed),
        },
        prefill_chunk: a.prefill_chunk,
        record: FitRecord {
            method: format!(
                "mixture-of-experts decode probes least squares over profile {}",
                base.name
            ),
            inputs: runs.inputs,
            model: model.name.clone(),
            measured_on: measured_on(a, "the server the probes measured".into()),
            fitted_at: now(),
            target: Some("wall".into()),
            notes: a.notes.clone(),
            ..Default::default()
        },
    };
    let fit = fit_moe(&cases, &prefills, &setup).map_err(|e| anyhow!("cannot fit: {e}"))?;
    eprint!("{}", moe_fit_text(&fit, &model));
    write_profile(&fit.profile, a.out.as_deref())
}
