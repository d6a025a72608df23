//! A model spec from a Hugging Face `config.json`: the shapes the cost model needs (parameters,
//! KV bytes per token, attention FLOPs, experts) derived from the fields the architectures users serve
//! carry. An architecture or a field this reader cannot place is an error naming it, never a guess.
//! Pure: takes the file's text, never reads files.

use crate::model::{AttentionLayers, Experts, ModelSpec};
use serde_json::{Map, Value};
use serverbench_config::FieldError;

/// The architectures read, by their `architectures[0]` name, and how their MLP is built.
const ARCHITECTURES: [(&str, Mlp); 9] = [
    ("LlamaForCausalLM", Mlp::Dense),
    ("MistralForCausalLM", Mlp::Dense),
    ("Qwen2ForCausalLM", Mlp::Dense),
    ("Qwen3ForCausalLM", Mlp::Dense),
    ("Qwen3MoeForCausalLM", Mlp::Qwen3Moe),
    ("MixtralForCausalLM", Mlp::Mixtral),
    ("GptOssForCausalLM", Mlp::Mixtral),
    ("DeepseekV2ForCausalLM", Mlp::Deepseek),
    ("DeepseekV3ForCausalLM", Mlp::Deepseek),
];

/// How an architecture's feed-forward layers are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mlp {
    /// Gate, up and down projections of `intermediate_size` in every layer.
    Dense,
    /// `num_experts` experts of `moe_intermediate_size`, `num_experts_per_tok` per token, in the layers
    /// `decoder_sparse_step` picks outside `mlp_only_layers` (those are dense of `intermediate_size`).
    Qwen3Moe,
    /// `num_local_experts` experts of `intermediate_size`, `num_experts_per_tok` per token, every layer
    /// (Mixtral; gpt-oss).
    Mixtral,
    /// DeepSeek-V2/V3: multi-head latent attention; `n_routed_experts` experts of
    /// `moe_intermediate_size`, `num_experts_per_tok` per token, beside `n_shared_experts` every token
    /// uses, in the layers from `first_k_dense_replace` on that `moe_layer_freq` picks (the first
    /// ones dense of `intermediate_size`).
    Deepseek,
}

/// The architectures [`from_config`] reads, for messages.
pub fn architectures() -> String {
    ARCHITECTURES
        .iter()
        .map(|(a, _)| *a)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The model a `config.json` describes, named `name`. Errors name the field.
pub fn from_config(name: &str, text: &str) -> Result<ModelSpec, FieldError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| FieldError::new("", format!("not JSON: {e}")))?;
    let c = v
        .as_object()
        .ok_or_else(|| FieldError::new("", "not a model config: expected a JSON object"))?;
    let arch = c
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .ok_or_else(|| {
            FieldError::new(
                "architectures",
                "missing: not a model config (a Hugging Face config.json names its architecture)",
            )
        })?;
    let mlp = ARCHITECTURES
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, m)| *m)
        .ok_or_else(|| {
            FieldError::new(
                "architectures",
                format!(
                    "{arch:?} is not an architecture this build reads ({})",
                    architectures()
                ),
            )
        })?;
    let f = Fields(c);
    refuse_unread(&f, mlp == Mlp::Deepseek)?;
    let hidden = f.count("hidden_size")?;
    let layers = f.count("num_hidden_layers")?;
    let (attention, attn_params) = match mlp {
        Mlp::Deepseek => latent_attention(&f, hidden, layers)?,
        _ => grouped_attention(&f, hidden, layers)?,
    };
    let vocab = f.count("vocab_size")?;
    let tied = f.flag("tie_word_embeddings")?;
    let window = sliding_window(&f)?;
    let h = hidden as f64;
    let (mlp_total, mlp_active, experts) = feed_forward(&f, mlp, hidden, layers)?;
    let per_layer_attn = layers as f64 * attn_params;
    let lm_head = vocab as f64 * h;
    let quantizable = per_layer_attn + mlp_total;
    let spec = ModelSpec {
        name: name.to_string(),
        hidden,
        layers,
        full_attention: AttentionLayers {
            window: None,
            ..attention.clone()
        },
        sliding_attention: None,
        linear_attention: None,
        matmul_params: per_layer_attn + mlp_active + lm_head,
        total_params: quantizable + lm_head + if tied { 0.0 } else { lm_head },
        quantizable_params: quantizable,
        int4_weight_bytes: None,
        vocab,
        native_context: context(&f)?,
        experts,
    };
    let sliding = match (sliding_layers(&f, layers)?, window) {
        (Some(0), _) | (None, None) => 0,
        (Some(n), Some(_)) => n,
        (Some(_), None) => {
            return Err(FieldError::new(
                "sliding_window",
                "missing: layer_types names sliding layers, so their window must be given",
            ))
        }
        // Every layer slides (Mistral's first release).
        (None, Some(_)) => layers,
    };
    let spec = match window.filter(|_| sliding > 0) {
        Some(w) => ModelSpec {
            full_attention: AttentionLayers {
                layers: layers - sliding,
                kv_layers: layers - sliding,
                ..attention.clone()
            },
            sliding_attention: Some(AttentionLayers {
                layers: sliding,
                kv_layers: sliding,
                window: Some(w),
                ..attention
            }),
            ..spec
        },
        None => spec,
    };
    spec.check()?;
    Ok(spec)
}

/// Fields that change the shape in ways this reader does not model: refused rather than ignored.
/// `latent` (DeepSeek) reads the latent ranks itself.
fn refuse_unread(f: &Fields<'_>, latent: bool) -> Result<(), FieldError> {
    if f.flag("use_sliding_window")? {
        return Err(FieldError::new(
            "use_sliding_window",
            "true: sliding layers chosen by max_window_layers are not read by this build",
        ));
    }
    let keys: &[&str] = if latent {
        &["layer_types", "linear_num_value_heads"]
    } else {
        &["kv_lora_rank", "q_lora_rank", "linear_num_value_heads"]
    };
    for key in keys {
        if f.get(key).is_some_and(|v| !v.is_null()) {
            return Err(FieldError::new(
                *key,
                "set: latent, hybrid or per-layer attention is not read for this architecture",
            ));
        }
    }
    Ok(())
}

/// Grouped-query attention (Llama, Mistral, Qwen, Mixtral): the layers and their projections' parameters.
fn grouped_attention(
    f: &Fields<'_>,
    hidden: u32,
    layers: u32,
) -> Result<(AttentionLayers, f64), FieldError> {
    let heads = f.count("num_attention_heads")?;
    let kv_heads = f.count_or("num_key_value_heads", heads)?;
    if hidden % heads != 0 && f.get("head_dim").is_none() {
        return Err(FieldError::new(
            "num_attention_heads",
            format!("{heads} heads do not divide hidden_size {hidden}, and no head_dim is given"),
        ));
    }
    let head_dim = f.count_or("head_dim", hidden / heads)?;
    if heads % kv_heads != 0 {
        return Err(FieldError::new(
            "num_key_value_heads",
            format!("{kv_heads} KV heads do not divide the {heads} query heads"),
        ));
    }
    let (h, q, kv) = (
        hidden as f64,
        (heads * head_dim) as f64,
        (kv_heads * head_dim) as f64,
    );
    let attention = AttentionLayers {
        layers,
        kv_layers: layers,
        q_heads: heads,
        kv_heads,
        head_dim,
        window: None,
        latent_kv_bytes: None,
    };
    Ok((attention, h * q + 2.0 * h * kv + q * h))
}

/// DeepSeek's multi-head latent attention: each token keeps one `kv_lora_rank` latent and one
/// `qk_rope_head_dim` rotary key per layer (bf16), shared by every head, so the group has one KV head
/// that tensor parallelism does not split. A prefill decompresses the latent into `num_attention_heads`
/// keys of `qk_nope_head_dim + qk_rope_head_dim` and values of `v_head_dim`: `head_dim` is their mean,
/// which gives that FLOPs per (query, key) pair. Decode reads the latent (the weights absorbed), which
/// the KV bytes per token carry. Parameters: the query's down and up projections (`q_lora_rank`; a
/// full projection when it is null), the latent's down projection with the rotary key, its up
/// projection to keys and values, and the output projection.
fn latent_attention(
    f: &Fields<'_>,
    hidden: u32,
    layers: u32,
) -> Result<(AttentionLayers, f64), FieldError> {
    let heads = f.count("num_attention_heads")?;
    let latent = f.count("kv_lora_rank")?;
    let rope = f.count("qk_rope_head_dim")?;
    let nope = f.count("qk_nope_head_dim")?;
    let value = f.count("v_head_dim")?;
    let h = hidden as f64;
    let (n, qk, v) = (heads as f64, (nope + rope) as f64, value as f64);
    let query = match f.get("q_lora_rank") {
        None | Some(Value::Null) => h * n * qk,
        Some(_) => {
            let rank = f.count("q_lora_rank")? as f64;
            h * rank + rank * n * qk
        }
    };
    let kv_down = h * (latent + rope) as f64;
    let kv_up = latent as f64 * n * (nope as f64 + v);
    let out = n * v * h;
    let attention = AttentionLayers {
        layers,
        kv_layers: layers,
        q_heads: heads,
        kv_heads: 1,
        head_dim: (nope + rope + value).div_ceil(2),
        window: None,
        latent_kv_bytes: Some((latent + rope) as u64 * 2),
    };
    Ok((attention, query + kv_down + kv_up + out))
}

/// How many layers `layer_types` makes sliding-window ones (the rest full attention), when it is given;
/// any other kind of layer (linear, hybrid) is refused, naming the field.
fn sliding_layers(f: &Fields<'_>, layers: u32) -> Result<Option<u32>, FieldError> {
    let types = match f.get("layer_types") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(FieldError::new(
                "layer_types",
                format!("expected a list of layer kinds, got {other}"),
            ))
        }
    };
    if types.len() != layers as usize {
        return Err(FieldError::new(
            "layer_types",
            format!(
                "{} entries for {layers} layers (num_hidden_layers)",
                types.len()
            ),
        ));
    }
    let mut sliding = 0;
    for t in types {
        match t.as_str() {
            Some("full_attention") => {}
            Some("sliding_attention") => sliding += 1,
            _ => {
                return Err(FieldError::new(
                    "layer_types",
                    format!(
                    "{t} is not a layer kind this build reads (full_attention, sliding_attention)"
                ),
                ))
            }
        }
    }
    Ok(Some(sliding))
}

/// The sliding window every layer uses, when the config sets one (`sliding_window`, not null).
fn sliding_window(f: &Fields<'_>) -> Result<Option<u32>, FieldError> {
    match f.get("sliding_window") {
        None | Some(Value::Null) => Ok(None),
        Some(_) if f.get("use_sliding_window").is_some() => Ok(None),
        Some(_) => f.count("sliding_window").map(Some),
    }
}

/// Feed-forward parameters of all layers: (held, multiplied per token, the routed experts).
fn feed_forward(
    f: &Fields<'_>,
    mlp: Mlp,
    hidden: u32,
    layers: u32,
) -> Result<(f64, f64, Option<Experts>), FieldError> {
    let h = hidden as f64;
    match mlp {
        Mlp::Dense => {
            let p = layers as f64 * 3.0 * h * f.count("intermediate_size")? as f64;
            Ok((p, p, None))
        }
        Mlp::Qwen3Moe | Mlp::Mixtral | Mlp::Deepseek => {
            let (count_key, size_key) = match mlp {
                Mlp::Qwen3Moe => ("num_experts", "moe_intermediate_size"),
                Mlp::Deepseek => ("n_routed_experts", "moe_intermediate_size"),
                Mlp::Mixtral | Mlp::Dense => ("num_local_experts", "intermediate_size"),
            };
            // transformers 5 writes Qwen3-MoE's expert count as Mixtral names it.
            let count_key = match (mlp, f.get(count_key)) {
                (Mlp::Qwen3Moe, None) if f.get("num_local_experts").is_some() => {
                    "num_local_experts"
                }
                _ => count_key,
            };
            let count = f.count(count_key)?;
            let per_token = f.count("num_experts_per_tok")?;
            if per_token > count {
                return Err(FieldError::new(
                    "num_experts_per_tok",
                    format!("{per_token} experts per token, more than the {count} experts"),
                ));
            }
            let expert = 3.0 * h * f.count(size_key)? as f64;
            let moe_layers = match mlp {
                Mlp::Qwen3Moe => qwen3_moe_layers(f, layers)?,
                Mlp::Deepseek => deepseek_moe_layers(f, layers)?,
                Mlp::Mixtral | Mlp::Dense => layers,
            };
            let dense_layers = (layers - moe_layers) as f64;
            let mut dense = if dense_layers > 0.0 {
                dense_layers * 3.0 * h * f.count("intermediate_size")? as f64
            } else {
                0.0
            };
            if mlp == Mlp::Deepseek {
                // Shared experts run for every token: dense parameters of the sparse layers.
                dense += moe_layers as f64 * f.whole_or("n_shared_experts", 0)? as f64 * expert;
            }
            let router = moe_layers as f64 * h * count as f64;
            let held = dense + router + moe_layers as f64 * count as f64 * expert;
            let active = dense + router + moe_layers as f64 * per_token as f64 * expert;
            let experts = Experts {
                layers: moe_layers,
                count,
                per_token,
                params_per_expert: expert,
            };
            Ok((held, active, Some(experts)))
        }
    }
}

/// Qwen3-MoE's sparse layers: every `decoder_sparse_step`-th (counting from 1) not in `mlp_only_layers`.
fn qwen3_moe_layers(f: &Fields<'_>, layers: u32) -> Result<u32, FieldError> {
    let step = f.count_or("decoder_sparse_step", 1)?;
    let dense: Vec<u64> = match f.get("mlp_only_layers") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_u64().filter(|&i| i < layers as u64).ok_or_else(|| {
                    FieldError::new("mlp_only_layers", format!("{x} is not a layer index"))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(FieldError::new(
                "mlp_only_layers",
                format!("expected a list of layer indices, got {other}"),
            ))
        }
    };
    Ok((0..layers as u64)
        .filter(|&i| !dense.contains(&i) && (i + 1) % step as u64 == 0)
        .count() as u32)
}

/// DeepSeek's sparse layers: those from `first_k_dense_replace` on whose index `moe_layer_freq` divides.
fn deepseek_moe_layers(f: &Fields<'_>, layers: u32) -> Result<u32, FieldError> {
    let first = f.whole_or("first_k_dense_replace", 0)?;
    let freq = f.count_or("moe_layer_freq", 1)?;
    let sparse = (first..layers).filter(|i| i % freq == 0).count() as u32;
    if sparse == 0 {
        return Err(FieldError::new(
            "first_k_dense_replace",
            format!("{first} dense leading layers leave none of the {layers} layers sparse"),
        ));
    }
    Ok(sparse)
}

/// The context the config allows: `max_position_embeddings`, or YaRN's factor times the original.
fn context(f: &Fields<'_>) -> Result<u32, FieldError> {
    let native = f.count("max_position_embeddings")?;
    let Some(Value::Object(rope)) = f.get("rope_scaling") else {
        return Ok(native);
    };
    let kind = rope
        .get("rope_type")
        .or_else(|| rope.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind != "yarn" {
        return Ok(native);
    }
    let factor = rope
        .get("factor")
        .and_then(Value::as_f64)
        .filter(|x| x.is_finite() && *x >= 1.0)
        .ok_or_else(|| FieldError::new("rope_scaling.factor", "expected a number of at least 1"))?;
    let original = match rope.get("original_max_position_embeddings") {
        Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
            FieldError::new(
                "rope_scaling.original_max_position_embeddings",
                "expected a positive whole number",
            )
        })? as f64,
        None => native as f64,
    };
    Ok((original * factor).min(crate::model::MAX_MODEL_CONTEXT as f64) as u32)
}

/// The config's top-level fields, read with errors that name them.
struct Fields<'a>(&'a Map<String, Value>);

/// The largest count a shape field may hold (a layer count, a hidden size, a vocabulary).
const MAX_COUNT: u64 = 1 << 24;

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// A positive whole number, at most [`MAX_COUNT`].
    fn count(&self, key: &str) -> Result<u32, FieldError> {
        match self.get(key) {
            None | Some(Value::Null) => Err(FieldError::new(key, "missing")),
            Some(v) => v
                .as_u64()
                .filter(|&n| n > 0 && n <= MAX_COUNT)
                .map(|n| n as u32)
                .ok_or_else(|| {
                    FieldError::new(
                        key,
                        format!("expected a whole number from 1 to {MAX_COUNT}, got {v}"),
                    )
                }),
        }
    }

    /// [`Fields::count`], or `default` when the field is absent or null.
    fn count_or(&self, key: &str, default: u32) -> Result<u32, FieldError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(_) => self.count(key),
        }
    }

    /// A whole number from 0 to [`MAX_COUNT`], or `default` when the field is absent or null.
    fn whole_or(&self, key: &str, default: u32) -> Result<u32, FieldError> {
        match self.get(key) {
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(0),
            _ => self.count_or(key, default),
        }
    }

    /// A boolean, false when absent.
    fn flag(&self, key: &str) -> Result<bool, FieldError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(v) => Err(FieldError::new(
                key,
                format!("expected true or false, got {v}"),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(file: &str) -> ModelSpec {
        let path = format!("{}/../tests/fixtures/hf/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        from_config(file, &text).unwrap()
    }

    fn within(got: f64, want: f64, tolerance: f64) -> bool {
        (got / want - 1.0).abs() <= tolerance
    }

    /// Qwen3-8B's config.json gives the shipped preset's parameters, KV bytes and FLOPs within 1 %.
    #[test]
    fn qwen3_8b_from_its_config_is_the_shipped_preset() {
        let got = read("qwen3-8b.json");
        let want = ModelSpec::preset("qwen3-8b").unwrap();
        for (what, g, w) in [
            ("matmul_params", got.matmul_params, want.matmul_params),
            ("total_params", got.total_params, want.total_params),
            (
                "quantizable_params",
                got.quantizable_params,
                want.quantizable_params,
            ),
            (
                "kv bytes",
                got.kv_bytes_per_token() as f64,
                want.kv_bytes_per_token() as f64,
            ),
            (
                "attention flops",
                got.full_attention.flops_per_pair(),
                want.full_attention.flops_per_pair(),
            ),
        ] {
            assert!(within(g, w, 0.01), "{what}: {g} against {w}");
        }
        assert_eq!(
            (got.vocab, got.native_context, got.experts),
            (want.vocab, want.native_context, None)
        );
    }

    /// Mixtures of experts against their published totals: Qwen3-30B-A3B 30.5 B parameters of which
    /// 3.3 B active, Mixtral 8x7B 46.7 B and 12.9 B; a sliding window on every layer for Mistral 7B.
    #[test]
    fn mixtures_of_experts_and_sliding_windows_are_placed() {
        let q = read("qwen3-30b-a3b.json");
        let e = q.experts.clone().unwrap();
        assert_eq!((e.layers, e.count, e.per_token), (48, 128, 8));
        assert!(within(q.total_params, 30.5e9, 0.01), "{}", q.total_params);
        // Active: the published 3.3 B counts the embedding table, which is gathered, not multiplied.
        assert!(
            within(q.matmul_params + 151_936.0 * 2048.0, 3.3e9, 0.03),
            "{}",
            q.matmul_params
        );
        assert_eq!(q.kv_bytes_per_token(), 48 * 2 * 4 * 128 * 2);
        let m = read("mixtral-8x7b.json");
        assert!(within(m.total_params, 46.7e9, 0.01), "{}", m.total_params);
        assert!(
            within(m.matmul_params + 32_000.0 * 4096.0, 12.9e9, 0.01),
            "{}",
            m.matmul_params
        );
        let s = read("mistral-7b-v0.1.json");
        assert!(within(s.total_params, 7.24e9, 0.01), "{}", s.total_params);
        let sliding = s.sliding_attention.unwrap();
        assert_eq!((sliding.layers, sliding.window), (32, Some(4096)));
        assert_eq!(s.full_attention.layers, 0);
    }

    /// DeepSeek's latent attention: one 512-wide latent and one 64-wide rotary key per token and
    /// layer, held whole on every GPU; prefill FLOPs over 128 heads of (192 + 128) / 2; YaRN's 40 ×
    /// 4,096 context; three dense layers before 58 with 256 experts (8 per token) beside a shared one.
    #[test]
    fn deepseek_latent_attention_and_experts_are_placed() {
        let m = read("deepseek-r1.json");
        let a = &m.full_attention;
        assert_eq!(a.kv_bytes_per_token_per_layer(), (512 + 64) * 2);
        assert_eq!(m.kv_bytes_per_token(), 61 * 1152);
        assert_eq!((a.q_heads, a.kv_heads, a.head_dim), (128, 1, 160));
        assert_eq!(crate::cost::kv_shard(a, 8), 1.0);
        assert_eq!(a.flops_per_pair(), 4.0 * 128.0 * 160.0 * 61.0);
        assert_eq!(m.native_context, 163_840);
        let e = m.experts.clone().unwrap();
        assert_eq!((e.layers, e.count, e.per_token), (58, 256, 8));
        assert_eq!(e.params_per_expert, 3.0 * 7168.0 * 2048.0);
        let lite = std::fs::read_to_string(format!(
            "{}/../tests/fixtures/hf/deepseek-r1.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
        .replace("\"q_lora_rank\": 1536", "\"q_lora_rank\": null");
        let full_query = from_config("c", &lite).unwrap();
        let per_layer = 7168.0 * 128.0 * 192.0 - (7168.0 * 1536.0 + 1536.0 * 128.0 * 192.0);
        assert!(
            (full_query.total_params - m.total_params - 61.0 * per_layer).abs() < 1.0,
            "a null q_lora_rank is a full query projection"
        );
        for (from, to, field) in [
            (
                "\"first_k_dense_replace\": 3",
                "\"first_k_dense_replace\": 61",
                "first_k_dense_replace",
            ),
            ("\"v_head_dim\": 128,", "", "v_head_dim"),
            (
                "\"n_routed_experts\": 256",
                "\"n_routed_experts\": 4",
                "num_experts_per_tok",
            ),
        ] {
            let text = lite.replace(from, to);
            assert_eq!(from_config("c", &text).unwrap_err().field, field, "{from}");
        }
    }

    /// gpt-oss: 18 sliding layers of window 128 beside 18 full ones (`layer_types`), 4 of 128 experts
    /// per token; its card's 116.8 B held and 5.1 B active (without the embedding table), and the 20b's
    /// 20.9 B and 3.6 B from the same config with 24 layers and 32 experts.
    #[test]
    fn gpt_oss_layer_types_and_experts_are_placed() {
        let m = read("gpt-oss-120b.json");
        let s = m.sliding_attention.clone().unwrap();
        assert_eq!((s.layers, s.window), (18, Some(128)));
        assert_eq!(m.full_attention.layers, 18);
        assert_eq!(m.kv_bytes_per_token(), 18 * 2 * 8 * 64 * 2);
        assert_eq!(m.native_context, 131_072);
        assert!(within(m.total_params, 116.8e9, 0.01), "{}", m.total_params);
        assert!(within(m.matmul_params, 5.1e9, 0.02), "{}", m.matmul_params);
        let text = std::fs::read_to_string(format!(
            "{}/../tests/fixtures/hf/gpt-oss-120b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["num_hidden_layers"] = 24.into();
        v["num_local_experts"] = 32.into();
        v["layer_types"] = Value::Array(v["layer_types"].as_array().unwrap()[..24].to_vec());
        let small = from_config("gpt-oss-20b", &v.to_string()).unwrap();
        assert!(
            within(small.total_params, 20.9e9, 0.01),
            "{}",
            small.total_params
        );
        assert!(
            within(small.matmul_params, 3.6e9, 0.02),
            "{}",
            small.matmul_params
        );
        for (edit, field) in [
            (
                serde_json::json!({"layer_types": ["linear_attention"]}),
                "layer_types",
            ),
            (serde_json::json!({"num_hidden_layers": 35}), "layer_types"),
            (
                serde_json::json!({"sliding_window": null}),
                "sliding_window",
            ),
        ] {
            let mut w = v.clone();
            for (k, x) in edit.as_object().unwrap() {
                w[k] = x.clone();
            }
            assert_eq!(
                from_config("c", &w.to_string()).unwrap_err().field,
                field,
                "{edit}"
            );
        }
    }

    /// Every fixture against its model card's published parameter count (and, for the mixtures of
    /// experts, the active count, which cards give with the embedding table).
    #[test]
    fn public_configs_give_their_published_sizes() {
        let cases: [(&str, f64, Option<f64>); 12] = [
            ("qwen3-8b.json", 8.19e9, None),
            ("qwen3-0.6b.json", 0.6e9, None),
            ("qwen2.5-7b-instruct.json", 7.61e9, None),
            ("qwen2.5-0.5b-instruct.json", 0.49e9, None),
            ("mistral-7b-v0.1.json", 7.24e9, None),
            ("mistral-nemo-base-2407.json", 12.2e9, None),
            ("qwen3-30b-a3b.json", 30.5e9, Some(3.3e9)),
            ("qwen3-235b-a22b.json", 235e9, Some(22e9)),
            ("mixtral-8x7b.json", 46.7e9, Some(12.9e9)),
            ("mixtral-8x22b.json", 141e9, Some(39e9)),
            // 671 B without the multi-token-prediction layer the card's 685 B adds; 37 B active.
            ("deepseek-r1.json", 671e9, Some(37e9)),
            ("deepseek-v2.5.json", 236e9, Some(21e9)),
        ];
        for (file, total, active) in cases {
            let m = read(file);
            assert!(
                within(m.total_params, total, 0.02),
                "{file}: {} held",
                m.total_params
            );
            if let Some(a) = active {
                let embedding = m.vocab as f64 * m.hidden as f64;
                let got = m.matmul_params + embedding;
                assert!(within(got, a, 0.03), "{file}: {got} active");
                assert!(m.experts.is_some(), "{file}");
            }
        }
    }

    /// Whatever cannot be placed is named: an unknown architecture, a missing or contradictory field,
    /// a file that is no model config.
    #[test]
    fn what_cannot_be_placed_is_named() {
        let base = std::fs::read_to_string(format!(
            "{}/../tests/fixtures/hf/qwen3-30b-a3b.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let edit = |from: &str, to: &str| {
            assert!(base.contains(from), "{from}");
            from_config("c", &base.replace(from, to)).unwrap_err()
        };
        let e = edit("Qwen3MoeForCausalLM", "Gemma3ForCausalLM");
        assert_eq!(e.field, "architectures");
        assert!(e.reason.contains("Gemma3ForCausalLM"), "{}", e.reason);
        assert_eq!(
            edit("\"vocab_size\"", "\"kv_lora_rank\": 512, \"vocab_size\"").field,
            "kv_lora_rank"
        );
        assert_eq!(
            edit("\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 200").field,
            "num_experts_per_tok"
        );
        assert_eq!(
            edit("\"num_key_value_heads\": 4", "\"num_key_value_heads\": 5").field,
            "num_key_value_heads"
        );
        assert_eq!(edit("\"hidden_size\": 2048,", "").field, "hidden_size");
        assert_eq!(
            edit("\"hidden_size\": 2048", "\"hidden_size\": -1").field,
            "hidden_size"
        );
        assert_eq!(
            edit(
                "\"use_sliding_window\": false",
                "\"use_sliding_window\": true"
            )
            .field,
            "use_sliding_window"
        );
        assert_eq!(edit("\"num_experts\": 128,", "").field, "num_experts");
        let renamed = base.replace("\"num_experts\"", "\"num_local_experts\"");
        assert_eq!(
            from_config("c", &renamed).unwrap().experts.unwrap().count,
            128
        );
        assert_eq!(
            from_config("c", "[1, 2]").unwrap_err().reason,
            "not a model config: expected a JSON object"
        );
        assert_eq!(
            from_config("c", "{\"a\": 1}").unwrap_err().field,
            "architectures"
        );
    }
}
