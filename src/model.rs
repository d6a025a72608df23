//! `serverbench model show` and `serverbench hardware list`: render what the cost model derives from a
//! model (parameters, KV bytes and FLOPs per token, experts) and the GPU catalog; the derivations are the
//! calibration crate's, never done here.

use crate::inputs;
use anyhow::Result;
use serverbench_calibration::{AttentionLayers, HardwareSpec, ModelSpec, Profile};

/// Prints the model's derived numbers.
pub fn show(name_or_path: &str) -> Result<()> {
    let m = inputs::model(name_or_path)?;
    outln!("{}", render(&m))?;
    Ok(())
}

/// Prints the GPU catalog.
pub fn hardware_list() -> Result<()> {
    outln!("{}", catalog(&HardwareSpec::presets(), &Profile::presets()))?;
    Ok(())
}

/// The catalog's table: one row per GPU, its profiles last (fitted ones marked).
fn catalog(gpus: &[HardwareSpec], profiles: &[Profile]) -> String {
    let mut out = format!(
        "{:<14} {:>9} {:>9} {:>10} {:>10} {:>11} {:>7}  profiles (* fitted to measurements)\n",
        "gpu", "memory GB", "TB/s", "bf16 TF/s", "fp8 TF/s", "link GB/s", "$/GPU-h"
    );
    for h in gpus {
        let mut names: Vec<String> = profiles
            .iter()
            .filter(|p| p.hardware == h.name)
            .map(|p| format!("{}{}", p.name, if p.fitted { "*" } else { "" }))
            .collect();
        names.sort();
        out.push_str(&format!(
            "{:<14} {:>9.1} {:>9.2} {:>10.0} {:>10.0} {:>11.0} {:>7.2}  {}\n",
            h.name,
            h.memory_bytes / 1e9,
            h.memory_bandwidth / 1e12,
            h.bf16_flops / 1e12,
            h.fp8_flops / 1e12,
            h.link_bandwidth / 1e9,
            h.dollars_per_hour,
            names.join(", ")
        ));
    }
    out
}

fn billions(x: f64) -> String {
    format!("{:.3} B", x / 1e9)
}

fn group(label: &str, g: &AttentionLayers) -> String {
    let window = g
        .window
        .map_or_else(String::new, |w| format!(", window {w}"));
    format!(
        "  {label:<22} {} layers ({} with their own KV), {} query / {} KV heads of {}{window}; {:.0} FLOPs per (query, key) pair\n",
        g.layers,
        g.kv_layers,
        g.q_heads,
        g.kv_heads,
        g.head_dim,
        g.flops_per_pair()
    )
}

/// The text `model show` prints.
fn render(m: &ModelSpec) -> String {
    let mut out = format!(
        "{}: {} layers, hidden {}, vocabulary {}, context {}\n",
        m.name, m.layers, m.hidden, m.vocab, m.native_context
    );
    out.push_str(&format!(
        "  parameters             {} held, {} multiplied per token (2 × that = {:.2} GFLOPs of matmuls per token), {} quantizable\n",
        billions(m.total_params),
        billions(m.matmul_params),
        2.0 * m.matmul_params / 1e9,
        billions(m.quantizable_params)
    ));
    if m.full_attention.layers > 0 {
        out.push_str(&group("full attention", &m.full_attention));
    }
    if let Some(s) = &m.sliding_attention {
        out.push_str(&group("sliding attention", s));
    }
    if let Some(l) = &m.linear_attention {
        out.push_str(&format!(
            "  linear attention       {} layers, {} bytes of state per sequence per layer, {:.0} FLOPs per token per layer\n",
            l.layers, l.state_bytes_per_layer, l.flops_per_token_per_layer
        ));
    }
    out.push_str(&format!(
        "  KV per token           {} bytes stored, {} read per decode step; {} bytes of fixed state per sequence\n",
        m.kv_bytes_per_token(),
        m.kv_read_bytes_per_token(),
        m.state_bytes_per_seq()
    ));
    if let Some(e) = &m.experts {
        out.push_str(&format!(
            "  experts                {} of {} per token in {} layers, {:.2} M parameters each ({} active per token); a step of n tokens reads {} × (1 − (1 − {}/{})ⁿ) per layer (uniform routing): {:.1} at 1, {:.1} at 16, {:.1} at 256\n",
            e.per_token,
            e.count,
            e.layers,
            e.params_per_expert / 1e6,
            billions(e.active_params()),
            e.count,
            e.per_token,
            e.count,
            e.distinct(1.0),
            e.distinct(16.0),
            e.distinct(256.0)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every GPU of the catalog has a profile to run on, and the table lists them all.
    #[test]
    fn every_catalog_gpu_has_a_profile() {
        let (gpus, profiles) = (HardwareSpec::presets(), Profile::presets());
        assert!(gpus.len() >= 12, "{} GPUs", gpus.len());
        let table = catalog(&gpus, &profiles);
        for h in &gpus {
            let row = table
                .lines()
                .find(|l| l.starts_with(&format!("{} ", h.name)))
                .unwrap();
            assert!(
                row.contains(&format!("{}-", h.name)) || row.contains("l40-"),
                "{row}"
            );
        }
        assert!(table.contains("h200-qwen3-8b-vllm*"), "{table}");
    }

    #[test]
    fn a_mixture_of_experts_shows_its_experts_and_a_dense_model_none() {
        let dense = render(&ModelSpec::preset("qwen3-8b").unwrap());
        assert!(
            dense.contains("8.190 B held") && !dense.contains("experts"),
            "{dense}"
        );
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/hf/qwen3-30b-a3b.json"
        ))
        .unwrap();
        let moe =
            render(&serverbench_calibration::hf::from_config("qwen3-30b-a3b", &text).unwrap());
        assert!(moe.contains("8 of 128 per token in 48 layers"), "{moe}");
        assert!(moe.contains("98304 bytes stored"), "{moe}");
    }
}
