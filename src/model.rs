//! `serverbench model show` and `serverbench hardware list`: render what the cost model derives from a
//! model (parameters, KV bytes and FLOPs per token, experts) and the GPU catalog; the derivations are the
//! calibration crate's, and so is their text (`serverbench_calibration::report`).

use crate::inputs;
use anyhow::Result;
use serverbench_calibration::report::{catalog, model_text};
use serverbench_calibration::{HardwareSpec, Profile};

/// Prints the model's derived numbers.
pub fn show(name_or_path: &str) -> Result<()> {
    let m = inputs::model(name_or_path)?;
    outln!("{}", model_text(&m))?;
    Ok(())
}

/// Prints the GPU catalog.
pub fn hardware_list() -> Result<()> {
    outln!("{}", catalog(&HardwareSpec::presets(), &Profile::presets()))?;
    Ok(())
}
