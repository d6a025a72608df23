//! Where a model comes from: a preset's name, or a Hugging Face `config.json` (the file, or a folder
//! holding one) read here and handed to [`crate::hf`]. It derives no shapes itself.

use crate::hf;
use crate::model::ModelSpec;
use serverbench_config::InputError;
use std::path::Path;

/// The model a Hugging Face `config.json` describes, given as the file or a folder holding one (named
/// by the folder); `None` when there is no such file.
pub fn model_file(path: &Path) -> Result<Option<ModelSpec>, InputError> {
    let file = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    };
    if !file.is_file() {
        return Ok(None);
    }
    let named = if path.is_dir() { path } else { &file };
    let name = named
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    let name = if name == "config" {
        file.parent()
            .and_then(|p| p.file_name())
            .map_or(name, |p| p.to_string_lossy().into_owned())
    } else {
        name
    };
    let shown = file.display().to_string();
    let text = serverbench_config::read_text(&file, serverbench_config::MAX_CONFIG_BYTES)?;
    hf::from_config(&name, &text)
        .map(Some)
        .map_err(|e| InputError::new(&shown, 0, e.field, e.reason))
}

/// A model preset by name, or the model of a `config.json` (the file or its folder).
pub fn model(name_or_path: &str) -> anyhow::Result<ModelSpec> {
    if let Some(m) = ModelSpec::preset(name_or_path) {
        return Ok(m);
    }
    model_file(Path::new(name_or_path))?.ok_or_else(|| {
        anyhow::anyhow!(
            "unknown model {name_or_path:?}: not a preset ({}) and no config.json there (read: {})",
            ModelSpec::preset_names(),
            hf::architectures()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/hf/qwen3-30b-a3b.json"
    );

    #[test]
    fn a_preset_a_config_file_and_a_folder_holding_one_name_their_model() {
        assert_eq!(model("qwen3-8b").unwrap().name, "qwen3-8b");
        let from_file = model(FIXTURE).unwrap();
        assert_eq!(from_file.name, "qwen3-30b-a3b");
        assert!(from_file.experts.is_some());
        let dir = std::env::temp_dir().join(format!("sb-model-source-{}", std::process::id()));
        let folder = dir.join("my-moe");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::copy(FIXTURE, folder.join("config.json")).unwrap();
        let from_folder = model(folder.to_str().unwrap()).unwrap();
        assert_eq!(from_folder.name, "my-moe");
        assert_eq!(from_folder.total_params, from_file.total_params);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn an_unknown_name_or_a_bad_file_says_what_it_is() {
        let err = model("no-such-model").unwrap_err().to_string();
        assert!(
            err.contains("not a preset") && err.contains("qwen3-8b"),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("sb-model-source-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = dir.join("config.json");
        std::fs::write(&bad, r#"{"architectures": ["NoSuchForCausalLM"]}"#).unwrap();
        let err = model(bad.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
