//! `calibrate --from-ops PATH…`: a profile fitted from measured operator tables (CSV), with each operator
//! class's error on held-out rows: the tables read by `serverbench_calibration::sources`, fitted by
//! `serverbench_calibration::calibrate`.

use super::fit::{options, write_profile};
use crate::cli::CalibrateArgs;
use anyhow::Result;
use serverbench_calibration::calibrate::{self as fits, OpsOptions};
use serverbench_calibration::report::ops_table;
use serverbench_calibration::sources::{self, profile as load_profile};
use std::path::PathBuf;

/// Runs `--from-ops`.
pub fn calibrate(a: &CalibrateArgs, paths: &[PathBuf]) -> Result<()> {
    fits::ops_target(&a.hardware)?;
    let tables = sources::op_tables(paths)?;
    let base = load_profile("--base-profile", &a.base_profile)?;
    let ops = OpsOptions {
        compute_gpu: a.compute_gpu.clone(),
        memory_gpu: a.memory_gpu.clone(),
        band: a.band.clone(),
        measured_on: a.measured_on.clone(),
    };
    let c = fits::fit_op_tables(&options(a), &ops, &base, &tables)?;
    eprintln!("{}", ops_table(&c.fits, &c.used, &c.skipped));
    write_profile(&c.profile, a.out.as_deref())
}
