//! `serverbench calibrate --from-moe-probes`: `moe_probe.py`'s JSON files (read by
//! `serverbench_calibration::sources`) handed to the fit of a mixture of experts' profile terms over
//! the base profile (`serverbench_calibration::calibrate::fit_moe_probes`); prints its per-case table
//! (`calibration::report::moe_fit_text`) and writes the profile. It fits nothing itself and probes no
//! server.

use super::fit::{measured_on, options, write_profile};
use crate::cli::CalibrateArgs;
use anyhow::Result;
use serverbench_calibration::calibrate::{fit_moe_probes, moe_target, MoeOptions};
use serverbench_calibration::report::moe_fit_text;
use serverbench_calibration::sources::moe_probe_runs;
use serverbench_calibration::{GraphRule, LogEngine};
use std::path::PathBuf;

/// Fits `moe_layer_s` and `expert_memory_efficiency` (and, with `--graph-max-tokens`, the eager floor)
/// over `--base-profile` and writes the profile.
pub fn calibrate(a: &CalibrateArgs, paths: &[PathBuf]) -> Result<()> {
    let o = options(a);
    let target = moe_target(&o)?;
    let m = MoeOptions {
        engine: LogEngine {
            split_kv_decode: a.moe_split_kv,
            shared_prefix: None,
            graphs: a.graph_max_tokens.map(GraphRule::mixed),
        },
        prefill_chunk: a.prefill_chunk,
        measured_on: measured_on(a, "the server the probes measured".into()),
    };
    let fit = fit_moe_probes(&o, &target, &m, moe_probe_runs(paths)?)?;
    eprint!("{}", moe_fit_text(&fit, &target.model));
    write_profile(&fit.profile, a.out.as_deref())
}
