//! What `calibrate` reads from the files a user names: step logs (plain or gzip) with a line of
//! provenance each, a profile by preset name or YAML file (`profile_source`'s), `--from-ops`' operator
//! tables and `--from-moe-probes`' files. It reads files and parses them; it never fits, writes or
//! prints.

use crate::calibrate::OpsTable;
use crate::{parse_moe_file, parse_step_log, FitTarget, MoeProbeRuns, StepSample};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// A text file (at most `MAX_DATA_BYTES`), gunzipped when its name ends in `.gz`.
pub fn read_text(path: &Path) -> Result<String> {
    Ok(serverbench_config::read_text(
        path,
        serverbench_config::MAX_DATA_BYTES,
    )?)
}

/// Reads one step log; errors name the file, line and field.
pub fn step_log(path: &Path, target: FitTarget) -> Result<Vec<StepSample>> {
    let text = read_text(path)?;
    Ok(parse_step_log(&path.display().to_string(), &text, target)?)
}

/// Every step log's samples, in order, and each file's provenance line (its name and step count).
pub fn step_logs(paths: &[PathBuf], target: FitTarget) -> Result<(Vec<StepSample>, Vec<String>)> {
    let mut samples = Vec::new();
    let mut inputs = Vec::new();
    for path in paths {
        let steps = step_log(path, target)?;
        inputs.push(format!("{} ({} steps)", path.display(), steps.len()));
        samples.extend(steps);
    }
    Ok((samples, inputs))
}

pub use crate::profile_source::profile;

/// `--from-ops`' tables: the CSV files `paths` name (files as given, a directory's `.csv` files in
/// name order), read.
pub fn op_tables(paths: &[PathBuf]) -> Result<Vec<OpsTable>> {
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
    Ok(tables)
}

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

/// `--from-moe-probes`' files, each parsed, and each file's provenance line (its name and case count).
pub fn moe_probe_runs(paths: &[PathBuf]) -> Result<MoeProbeRuns> {
    let mut out = MoeProbeRuns::default();
    for path in paths {
        let (file, text) = (path.display().to_string(), read_text(path)?);
        let (decode, prefill) = parse_moe_file(&file, &text)?;
        out.inputs.push(format!(
            "{file} ({} decode, {} prefill cases)",
            decode.len(),
            prefill.len()
        ));
        out.decode.push(decode);
        out.prefill.push(prefill);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Step logs are read in order with a provenance line each; a profile is a preset or a file, and
    /// neither names the flag.
    #[test]
    fn step_logs_and_profiles_are_read_from_what_is_named() {
        let dir = std::env::temp_dir().join(format!("sb-sources-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("steps.jsonl");
        let step =
            r#"{"step":0,"start_s":0,"gpu_ms":1.0,"wall_ms":2.0,"prefill":[],"decode":[100]}"#;
        std::fs::write(&log, format!("{step}\n{step}\n")).unwrap();
        let (samples, inputs) = step_logs(&[log.clone(), log.clone()], FitTarget::Wall).unwrap();
        assert_eq!(samples.len(), 4);
        assert_eq!(inputs[1], format!("{} (2 steps)", log.display()));
        assert_eq!(samples[0].seconds, 0.002);
        let preset = profile("--check", "h200-qwen3-8b-cuda").unwrap();
        let file = dir.join("p.yaml");
        std::fs::write(
            &file,
            serverbench_config::preset_file("profiles", "h200-qwen3-8b-cuda")
                .unwrap()
                .text,
        )
        .unwrap();
        assert_eq!(
            profile("--check", file.to_str().unwrap()).unwrap().name,
            preset.name
        );
        let e = profile("--check", "no-such-profile").unwrap_err();
        assert!(
            format!("{e:#}").starts_with("--check: \"no-such-profile\" is not a profile preset")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `--from-ops` reads a folder's `.csv` files in name order and refuses a folder without one;
    /// `--from-moe-probes` names each file with its case count.
    #[test]
    fn op_tables_and_moe_probes_are_read_in_order() {
        let dir = std::env::temp_dir().join(format!("sb-ops-{}", std::process::id()));
        let empty = dir.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        for (f, text) in [("b.csv", "b"), ("a.csv", "a"), ("c.txt", "c")] {
            std::fs::write(dir.join(f), text).unwrap();
        }
        let tables = op_tables(std::slice::from_ref(&dir)).unwrap();
        let names: Vec<_> = tables
            .iter()
            .map(|t| (t.file_name.as_str(), t.text.as_str()))
            .collect();
        assert_eq!(names, [("a.csv", "a"), ("b.csv", "b")]);
        let e = op_tables(std::slice::from_ref(&empty))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("--from-ops: {} holds no .csv table", empty.display())
        );
        let probes = PathBuf::from("../results/h200-vllm-moe/moe_probe.json");
        let runs = moe_probe_runs(std::slice::from_ref(&probes)).unwrap();
        assert_eq!(
            runs.inputs,
            [format!("{} (11 decode, 4 prefill cases)", probes.display())]
        );
        assert_eq!((runs.decode[0].len(), runs.prefill[0].len()), (11, 4));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
