//! `calibrate --from-ops PATH…`: a profile fitted from measured operator tables (CSV), with each operator
//! class's error on held-out rows: the tables read here, fitted by `serverbench_calibration::calibrate`.

use super::fit::{options, write_profile};
use crate::cli::CalibrateArgs;
use anyhow::{bail, Context, Result};
use serverbench_calibration::calibrate::{self as fits, OpsOptions, OpsTable};
use serverbench_calibration::report::ops_table;
use serverbench_calibration::sources::{profile as load_profile, read_text};
use std::path::PathBuf;

/// The CSV files `paths` name: files as given, directories' `.csv` files in name order.
fn tables_in(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("--from-ops: cannot read the directory {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "csv"))
                .collect();
            if inside.is_empty() {
                bail!("--from-ops: {} holds no .csv table", p.display());
            }
            inside.sort();
            files.extend(inside);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

/// Runs `--from-ops`.
pub fn calibrate(a: &CalibrateArgs, paths: &[PathBuf]) -> Result<()> {
    fits::ops_target(&a.hardware)?;
    let mut tables = Vec::new();
    for f in tables_in(paths)? {
        let name = f.display().to_string();
        tables.push(OpsTable {
            text: read_text(&f)?,
            file_name: f
                .file_name()
                .map_or(name.clone(), |n| n.to_string_lossy().into_owned()),
            name,
        });
    }
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
