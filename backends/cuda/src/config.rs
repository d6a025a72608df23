//! The transformer's shape: a Hugging Face `config.json` of the Llama/Qwen3 dense family, or a preset.
//! Never touches the GPU.

use crate::error::{CudaError, Result};
use serde::Deserialize;
use serverbench_config::FieldError;
use std::path::Path;

/// Shape of a dense decoder-only transformer (Llama / Qwen3 family).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ModelConfig {
    /// Residual width.
    pub hidden_size: u32,
    /// Decoder layers.
    pub num_hidden_layers: u32,
    /// Query heads.
    pub num_attention_heads: u32,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: u32,
    /// Width of one head (only 128 is supported by the kernels).
    #[serde(default)]
    pub head_dim: Option<u32>,
    /// MLP (SwiGLU) width.
    pub intermediate_size: u32,
    /// Vocabulary.
    pub vocab_size: u32,
    /// RMSNorm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// Rotary base.
    #[serde(default = "default_theta")]
    pub rope_theta: f64,
    /// Output projection shares the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Per-head RMSNorm on q and k (Qwen3: true; Llama: false). Inferred from `model_type` when absent.
    #[serde(default)]
    pub qk_norm: Option<bool>,
    /// `qwen3`, `llama`, ...
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_eps() -> f64 {
    1e-6
}

fn default_theta() -> f64 {
    1_000_000.0
}

/// transformers 5 writes the rotary base under `rope_parameters.rope_theta` instead of `rope_theta`;
/// the nested value, when the top-level one is absent.
fn nested_rope_theta(text: &str) -> Option<f64> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    if v.get("rope_theta").is_some() {
        return None;
    }
    v.get("rope_parameters")?.get("rope_theta")?.as_f64()
}

impl ModelConfig {
    /// Qwen3-8B's shape (for `--weights random`).
    pub fn qwen3_8b() -> ModelConfig {
        ModelConfig {
            hidden_size: 4096,
            num_hidden_layers: 36,
            num_attention_heads: 32,
            num_key_value_heads: 8,
            head_dim: Some(128),
            intermediate_size: 12288,
            vocab_size: 151_936,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            tie_word_embeddings: false,
            qk_norm: Some(true),
            model_type: Some("qwen3".into()),
        }
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Option<ModelConfig> {
        match name {
            "qwen3-8b" => Some(ModelConfig::qwen3_8b()),
            _ => None,
        }
    }

    /// Reads and checks `config.json`.
    pub fn from_file(path: &Path) -> Result<ModelConfig> {
        let text = std::fs::read_to_string(path).map_err(|e| CudaError::file(path, e))?;
        let file = path.display().to_string();
        let mut cfg: ModelConfig = serverbench_config::parse_json_line(&file, 0, &text)
            .map_err(|e| CudaError::Config(e.to_string()))?;
        if let Some(theta) = nested_rope_theta(&text) {
            cfg.rope_theta = theta;
        }
        cfg.check()
            .map_err(|e| CudaError::Config(format!("{file}: {e}")))?;
        Ok(cfg)
    }

    /// Query heads per KV head (grouped-query attention).
    pub fn query_group(&self) -> u32 {
        self.num_attention_heads / self.num_key_value_heads.max(1)
    }

    /// Head width.
    pub fn head_dim(&self) -> u32 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Whether q and k get a per-head RMSNorm.
    pub fn has_qk_norm(&self) -> bool {
        self.qk_norm
            .unwrap_or_else(|| self.model_type.as_deref() == Some("qwen3"))
    }

    /// Width of the fused q, k, v projection.
    pub fn qkv_width(&self) -> u32 {
        (self.num_attention_heads + 2 * self.num_key_value_heads) * self.head_dim()
    }

    /// KV bytes one token occupies (all layers, bf16).
    pub fn kv_bytes_per_token(&self) -> u64 {
        2 * 2
            * self.num_hidden_layers as u64
            * self.num_key_value_heads as u64
            * self.head_dim() as u64
    }

    /// Parameters (for reporting).
    pub fn params(&self) -> u64 {
        let (h, i, l) = (
            self.hidden_size as u64,
            self.intermediate_size as u64,
            self.num_hidden_layers as u64,
        );
        let qd = (self.num_attention_heads * self.head_dim()) as u64;
        let per_layer = h * self.qkv_width() as u64 + qd * h + 3 * h * i + 2 * h;
        let emb = self.vocab_size as u64 * h;
        l * per_layer + emb * if self.tie_word_embeddings { 1 } else { 2 } + h
    }

    /// What the kernels support; the error names the `config.json` field.
    pub fn check(&self) -> std::result::Result<(), FieldError> {
        let bad = |field: &str, reason: String| Err(FieldError::new(field, reason));
        if self.head_dim() != 128 {
            return bad(
                "head_dim",
                format!(
                    "{} is not supported (the kernels are built for 128)",
                    self.head_dim()
                ),
            );
        }
        if self.num_key_value_heads == 0 || self.num_attention_heads % self.num_key_value_heads != 0
        {
            return bad(
                "num_key_value_heads",
                format!(
                    "{} must divide num_attention_heads {}",
                    self.num_key_value_heads, self.num_attention_heads
                ),
            );
        }
        if self.num_attention_heads / self.num_key_value_heads > 8 {
            return bad(
                "num_attention_heads",
                "more than 8 query heads per KV head is not supported".into(),
            );
        }
        if self.hidden_size % 8 != 0 || self.hidden_size == 0 {
            return bad(
                "hidden_size",
                format!("{} must be a positive multiple of 8", self.hidden_size),
            );
        }
        for (field, v) in [
            ("num_hidden_layers", self.num_hidden_layers),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
        ] {
            if v == 0 {
                return bad(field, "must be positive".into());
            }
        }
        if self.intermediate_size % 8 != 0 {
            return bad(
                "intermediate_size",
                format!(
                    "{} must be a multiple of 8 (the SwiGLU kernel moves 8 at a time)",
                    self.intermediate_size
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen3_8b_has_8_billion_parameters_and_144_kib_of_kv_per_token() {
        let c = ModelConfig::qwen3_8b();
        c.check().unwrap();
        let b = c.params() as f64 / 1e9;
        assert!((8.1..8.3).contains(&b), "{b}");
        assert_eq!(c.kv_bytes_per_token(), 144 * 1024);
        assert!(c.has_qk_norm());
    }

    #[test]
    fn a_bad_config_names_the_file_and_field() {
        let dir = std::env::temp_dir().join(format!("sb-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("config.json");
        std::fs::write(&p, r#"{"hidden_size": 4096, "num_hidden_layers": "many"}"#).unwrap();
        let e = ModelConfig::from_file(&p).unwrap_err().to_string();
        assert!(
            e.contains("config.json") && e.contains("num_hidden_layers"),
            "{e}"
        );
        std::fs::write(
            &p,
            r#"{"hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
                "head_dim": 64, "intermediate_size": 100, "vocab_size": 10}"#,
        )
        .unwrap();
        let e = ModelConfig::from_file(&p).unwrap_err().to_string();
        assert!(e.contains("head_dim"), "{e}");
    }

    #[test]
    fn the_rotary_base_is_read_where_transformers_5_writes_it() {
        let dir = std::env::temp_dir().join(format!("sb-rope-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("config.json");
        let shape = r#""hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
                "head_dim": 128, "intermediate_size": 3072, "vocab_size": 1000"#;
        std::fs::write(&p, format!(r#"{{{shape}, "rope_parameters": {{"rope_theta": 5000.0, "rope_type": "default"}}}}"#)).unwrap();
        assert_eq!(ModelConfig::from_file(&p).unwrap().rope_theta, 5000.0);
        std::fs::write(
            &p,
            format!(
                r#"{{{shape}, "rope_theta": 7.0, "rope_parameters": {{"rope_theta": 5000.0}}}}"#
            ),
        )
        .unwrap();
        assert_eq!(ModelConfig::from_file(&p).unwrap().rope_theta, 7.0);
        std::fs::write(&p, format!("{{{shape}}}")).unwrap();
        assert_eq!(ModelConfig::from_file(&p).unwrap().rope_theta, 1e6);
    }
}
