//! `calibrate --from-ops PATH…`: a profile fitted from measured operator tables (CSV), with each operator
//! class's error on held-out rows. The reading and fitting are `serverbench_calibration::ops`.

use super::fit::{now, read_text, write_profile};
use super::load_profile;
use crate::cli::CalibrateArgs;
use anyhow::{anyhow, bail, Context, Result};
use serverbench_calibration::ops::{fit_ops, profile_from_ops, read_op_table, OpsSources};
use serverbench_calibration::{Band, FitRecord, HardwareSpec, OpClassRecord};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The CSV files `paths` name: files as given, directories' `.csv` files in name order.
fn tables(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
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
    let target = HardwareSpec::preset(&a.hardware).ok_or_else(|| {
        anyhow!(
            "--hardware: no hardware preset {:?} (one of: {})",
            a.hardware,
            HardwareSpec::preset_names()
        )
    })?;
    let sources = OpsSources {
        compute_gpu: a.compute_gpu.clone().unwrap_or_else(|| target.name.clone()),
        memory_gpu: a.memory_gpu.clone().unwrap_or_else(|| target.name.clone()),
    };
    let files = tables(paths)?;
    let mut rows = Vec::new();
    let mut inputs = Vec::new();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    for f in &files {
        let text = read_text(f)?;
        let name = f.display().to_string();
        let t = read_op_table(&name, &text)?;
        let base = f
            .file_name()
            .map_or(name.clone(), |n| n.to_string_lossy().into_owned());
        inputs.push(format!("{base} ({} operator rows)", t.rows.len()));
        for (k, v) in t.skipped {
            *skipped.entry(k).or_insert(0) += v;
        }
        rows.extend(t.rows);
    }
    let fits = fit_ops(&rows, &|gpu| HardwareSpec::preset(gpu)).map_err(|e| anyhow!(e))?;
    let base = load_profile("--base-profile", &a.base_profile)?;
    let (mut p, used) =
        profile_from_ops(&base, &fits, &sources).map_err(|e| anyhow!("--from-ops: {e}"))?;
    p.name = a.name.clone();
    p.hardware = target.name.clone();
    p.source = format!(
        "fitted from {} measured operator tables (compute-bound terms from {}, bandwidth-bound from {}); step and per-sequence overheads, request latency from {}",
        files.len(),
        sources.compute_gpu,
        sources.memory_gpu,
        base.name
    );
    let classes: Vec<OpClassRecord> = used
        .iter()
        .map(|(field, f)| OpClassRecord {
            class: f.class.label().to_string(),
            field: field.to_string(),
            gpu: f.gpu.clone(),
            value: f.value,
            rows_fitted: f.fitted,
            rows_held_out: f.held_out,
            held_out_median_error: f.held_out_median_error,
            held_out_median_ape: f.held_out_median_ape,
        })
        .collect();
    let mut held: Vec<f64> = classes
        .iter()
        .filter_map(|c| c.held_out_median_ape)
        .collect();
    held.sort_by(f64::total_cmp);
    p.fit = Some(FitRecord {
        method: "operator tables: per class, the median over rows of ideal time / measured time"
            .into(),
        inputs,
        model: "operator shapes (not one model)".into(),
        measured_on: a.measured_on.clone(),
        fitted_at: now(),
        held_out_median_ape: held.get(held.len() / 2).copied(),
        notes: a.notes.clone(),
        op_classes: classes,
        ..Default::default()
    });
    if let Some(b) = &a.band {
        let [compute, memory, overhead] = b[..] else {
            bail!(
                "--band: expected three numbers (compute, bandwidth, overheads), got {}",
                b.len()
            );
        };
        p.band = Some(Band {
            compute,
            memory,
            overhead,
        });
    }
    p.check().map_err(|e| anyhow!("fitted profile: {e}"))?;
    eprintln!(
        "{}",
        report(
            &fits,
            &used
                .iter()
                .map(|(f, c)| (*f, c.clone()))
                .collect::<Vec<_>>(),
            &skipped
        )
    );
    write_profile(&p, a.out.as_deref())
}

/// The per-class table on standard error: every class fitted on every GPU, the ones the profile uses
/// marked with their field.
fn report(
    fits: &[serverbench_calibration::ops::ClassFit],
    used: &[(&'static str, serverbench_calibration::ops::ClassFit)],
    skipped: &BTreeMap<String, usize>,
) -> String {
    let mut t = String::from(
        "| class | GPU | value | rows fitted | fitted median abs error | rows held out | held-out median error | held-out median abs error | profile field |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let pct = |x: Option<f64>, signed: bool| match (x, signed) {
        (Some(x), true) => format!("{:+.1} %", 100.0 * x),
        (Some(x), false) => format!("{:.1} %", 100.0 * x),
        (None, _) => "—".into(),
    };
    for f in fits {
        let field = used
            .iter()
            .find(|(_, u)| u.class == f.class && u.gpu == f.gpu)
            .map_or("", |(name, _)| name);
        t.push_str(&format!(
            "| {} | {} | {:.4} | {} | {} | {} | {} | {} | {} |\n",
            f.class.label(),
            f.gpu,
            f.value,
            f.fitted,
            pct(Some(f.fitted_median_ape), false),
            f.held_out,
            pct(f.held_out_median_error, true),
            pct(f.held_out_median_ape, false),
            field
        ));
    }
    if !skipped.is_empty() {
        t.push_str("\nrows of operators no profile term prices (not fitted): ");
        t.push_str(
            &skipped
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        );
        t.push('\n');
    }
    t
}
