//! What `calibrate` reads from the files a user names: step logs (plain or gzip) with a line of
//! provenance each, and a profile by preset name or YAML file. It reads files and parses them; it
//! never fits, writes or prints.

use crate::{parse_step_log, FitTarget, Profile, StepSample};
use anyhow::{Context, Result};
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

/// A profile preset by name, or a profile YAML file; `flag` names the option in errors.
pub fn profile(flag: &str, name: &str) -> Result<Profile> {
    match Profile::preset(name) {
        Some(p) => Ok(p),
        None => {
            let text = read_text(Path::new(name))
                .with_context(|| format!("{flag}: {name:?} is not a profile preset"))?;
            Ok(Profile::from_yaml(name, &text)?)
        }
    }
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
}
