//! A model spec from a Hugging Face `config.json`: the shapes the cost model needs (parameters,
//! KV bytes per token, attention FLOPs, experts, sliding windows, linear-attention state) derived from
//! the fields the architectures users serve carry. An architecture or a field this reader cannot place
//! is an error naming it, never a guess. Pure: takes the file's text, never reads files.

use crate::model::{AttentionLayers, Experts, LinearLayers, ModelSpec};
use serde_json::{Map, Value};
use serverbench_config::FieldError;

/// The architectures read, by their `architectures[0]` name: how their MLP is built and how their
/// layers are laid out. A `…ForConditionalGeneration` one (text and images) reads its language model
/// from `text_config`; its vision and audio towers are not counted.
const ARCHITECTURES: [(&str, Mlp, Layout); 19] = [
    ("LlamaForCausalLM", Mlp::Dense, Layout::Plain),
    ("MistralForCausalLM", Mlp::Dense, Layout::Plain),
    ("Qwen2ForCausalLM", Mlp::Dense, Layout::Plain),
    ("Qwen3ForCausalLM", Mlp::Dense, Layout::Plain),
    ("Qwen3MoeForCausalLM", Mlp::Qwen3Moe, Layout::Plain),
    ("MixtralForCausalLM", Mlp::Mixtral, Layout::Plain),
    ("GptOssForCausalLM", Mlp::Mixtral, Layout::Plain),
    ("DeepseekV2ForCausalLM", Mlp::Deepseek, Layout::Plain),
    ("DeepseekV3ForCausalLM", Mlp::Deepseek, Layout::Plain),
    ("Gemma2ForCausalLM", Mlp::Dense, Layout::Gemma(2)),
    ("Gemma3ForCausalLM", Mlp::Dense, Layout::Gemma(6)),
    (
        "Gemma3ForConditionalGeneration",
        Mlp::Dense,
        Layout::Gemma(6),
    ),
    ("Gemma4ForCausalLM", Mlp::Dense, Layout::Gemma4),
    ("Gemma4ForConditionalGeneration", Mlp::Dense, Layout::Gemma4),
    ("Qwen3NextForCausalLM", Mlp::SharedExpert, Layout::Hybrid),
    ("Qwen3_5ForCausalLM", Mlp::Dense, Layout::Hybrid),
    (
        "Qwen3_5ForConditionalGeneration",
        Mlp::Dense,
        Layout::Hybrid,
    ),
    ("Qwen3_5MoeForCausalLM", Mlp::SharedExpert, Layout::Hybrid),
    (
        "Qwen3_5MoeForConditionalGeneration",
        Mlp::SharedExpert,
        Layout::Hybrid,
    ),
];

/// How an architecture's feed-forward layers are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mlp {
    /// Gate, up and down projections of `intermediate_size` in every layer.
    Dense,
    /// `num_experts` experts of `moe_intermediate_size`, `num_experts_per_tok` per token, in the layers
    /// `decoder_sparse_step` picks outside `mlp_only_layers` (those are dense of `intermediate_size`).
    Qwen3Moe,
    /// Qwen3-MoE's experts beside one shared expert of `shared_expert_intermediate_size` that every
    /// token uses, behind a one-output gate (Qwen3-Next; Qwen3.5's mixtures of experts).
    SharedExpert,
    /// `num_local_experts` experts of `intermediate_size`, `num_experts_per_tok` per token, every layer
    /// (Mixtral; gpt-oss).
    Mixtral,
    /// DeepSeek-V2/V3: multi-head latent attention; `n_routed_experts` experts of
    /// `moe_intermediate_size`, `num_experts_per_tok` per token, beside `n_shared_experts` every token
    /// uses, in the layers from `first_k_dense_replace` on that `moe_layer_freq` picks (the first
    /// ones dense of `intermediate_size`).
    Deepseek,
}

/// How an architecture's layers are laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Full attention in every layer, unless `layer_types` names sliding ones or a `sliding_window`
    /// makes every layer slide (Mistral's first release).
    Plain,
    /// Gemma 2 and 3: sliding-window layers with a full one every `n`th (counting from 1) unless
    /// `sliding_window_pattern` or `layer_types` say otherwise; embeddings tied unless the config says.
    Gemma(u32),
    /// Gemma 4: Gemma's sliding and full layers from `layer_types` (or `sliding_window_pattern`), the
    /// full ones of `global_head_dim` and `num_global_key_value_heads`; the last `num_kv_shared_layers`
    /// reuse an earlier layer's KV; per-layer embeddings of `hidden_size_per_layer_input`.
    Gemma4,
    /// Qwen3-Next and Qwen3.5: Gated DeltaNet linear-attention layers with a full-attention layer every
    /// `full_attention_interval`th (or as `layer_types` says); the full ones' query projection twice as
    /// wide (it carries an output gate) unless `attn_output_gate` is false.
    Hybrid,
}

/// What a layer computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Full,
    Sliding,
    Linear,
}

impl Kind {
    /// The name `layer_types` gives it.
    fn name(self) -> &'static str {
        match self {
            Kind::Full => "full_attention",
            Kind::Sliding => "sliding_attention",
            Kind::Linear => "linear_attention",
        }
    }
}

/// The layers of a model: the hidden size, each layer's kind, and the first layer that reuses an
/// earlier layer's KV (the layer count when none does).
struct Stack {
    hidden: u32,
    kinds: Vec<Kind>,
    shared_from: u32,
}

impl Stack {
    fn layers(&self) -> u32 {
        self.kinds.len() as u32
    }

    /// Layers of `kind`.
    fn count(&self, kind: Kind) -> u32 {
        self.kinds.iter().filter(|&&k| k == kind).count() as u32
    }

    /// Layers of `kind` that hold their own KV.
    fn holding(&self, kind: Kind) -> u32 {
        self.kinds[..self.shared_from as usize]
            .iter()
            .filter(|&&k| k == kind)
            .count() as u32
    }
}

/// Query and KV heads of one attention layer.
#[derive(Clone, Copy, Debug)]
struct Heads {
    q: u32,
    kv: u32,
    dim: u32,
}

/// The architectures [`from_config`] reads, for messages.
pub fn architectures() -> String {
    ARCHITECTURES
        .iter()
        .map(|(a, _, _)| *a)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The model a `config.json` describes, named `name`. Errors name the field (`text_config.…` for a
/// field of a nested language model).
pub fn from_config(name: &str, text: &str) -> Result<ModelSpec, FieldError> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| FieldError::new("", format!("not JSON: {e}")))?;
    let c = v
        .as_object()
        .ok_or_else(|| FieldError::new("", "not a model config: expected a JSON object"))?;
    let (arch, mlp, layout) = architecture(c)?;
    let tie_default = matches!(layout, Layout::Gemma(_) | Layout::Gemma4);
    let spec = if arch.ends_with("ForConditionalGeneration") {
        let inner = c
            .get("text_config")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                FieldError::new(
                    "text_config",
                    format!("missing: {arch} gives its language model's fields there"),
                )
            })?;
        let tied = nested_tie(&Fields(c), &Fields(inner), tie_default)?;
        read(name, arch, mlp, layout, &Fields(inner), tied).map_err(|e| e.under("text_config"))?
    } else {
        let f = Fields(c);
        let tied = f.flag_or("tie_word_embeddings", tie_default)?;
        read(name, arch, mlp, layout, &f, tied)?
    };
    spec.check()?;
    Ok(spec)
}

/// The config's architecture (`architectures[0]`), as [`ARCHITECTURES`] reads it.
fn architecture(c: &Map<String, Value>) -> Result<(&'static str, Mlp, Layout), FieldError> {
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
    ARCHITECTURES
        .iter()
        .find(|(a, _, _)| *a == arch)
        .copied()
        .ok_or_else(|| {
            FieldError::new(
                "architectures",
                format!(
                    "{arch:?} is not an architecture this build reads ({})",
                    architectures()
                ),
            )
        })
}

/// Whether a nested config ties its embeddings: `text_config`'s flag or the top level's, which must
/// agree when both are given.
fn nested_tie(outer: &Fields<'_>, inner: &Fields<'_>, default: bool) -> Result<bool, FieldError> {
    let key = "tie_word_embeddings";
    let (top, text) = (outer.flag_opt(key)?, inner.flag_opt(key)?);
    match (top, text) {
        (Some(a), Some(b)) if a != b => Err(FieldError::new(
            key,
            format!("{a} here but {b} in text_config: which one holds is not clear"),
        )),
        _ => Ok(text.or(top).unwrap_or(default)),
    }
}

/// The model of one (flat or nested) language-model config.
fn read(
    name: &str,
    arch: &str,
    mlp: Mlp,
    layout: Layout,
    f: &Fields<'_>,
    tied: bool,
) -> Result<ModelSpec, FieldError> {
    refuse_unread(f, arch, mlp, layout)?;
    let hidden = f.count("hidden_size")?;
    let layers = f.count("num_hidden_layers")?;
    let window = sliding_window(f)?;
    let kinds = layer_kinds(f, layout, layers, window)?;
    let shared_from = kv_shared_from(f, layout, &kinds)?;
    let stack = Stack {
        hidden,
        kinds,
        shared_from,
    };
    let (full, sliding, attention) = attention(f, mlp, layout, &stack, window)?;
    let (linear, linear_params) = linear_attention(f, &stack)?;
    let (mlp_total, mlp_active, experts) = feed_forward(f, mlp, layout, &stack)?;
    let (per_layer, per_layer_table) = per_layer_inputs(f, layout, &stack)?;
    let vocab = f.count("vocab_size")?;
    let lm_head = vocab as f64 * hidden as f64;
    let quantizable = attention + linear_params + mlp_total + per_layer;
    Ok(ModelSpec {
        name: name.to_string(),
        hidden,
        layers,
        full_attention: full,
        sliding_attention: sliding,
        linear_attention: linear,
        matmul_params: attention + linear_params + mlp_active + per_layer + lm_head,
        total_params: quantizable + lm_head + if tied { 0.0 } else { lm_head } + per_layer_table,
        quantizable_params: quantizable,
        int4_weight_bytes: None,
        vocab,
        native_context: context(f)?,
        experts,
    })
}

/// Fields that change the shape in ways this reader does not model for `arch`: refused rather than
/// ignored.
fn refuse_unread(f: &Fields<'_>, arch: &str, mlp: Mlp, layout: Layout) -> Result<(), FieldError> {
    if f.flag("use_sliding_window")? {
        return Err(FieldError::new(
            "use_sliding_window",
            "true: sliding layers chosen by max_window_layers are not read by this build",
        ));
    }
    let mut keys = match mlp {
        Mlp::Deepseek => vec!["layer_types"],
        _ => vec!["kv_lora_rank", "q_lora_rank"],
    };
    if layout != Layout::Hybrid {
        keys.push("linear_num_value_heads");
    }
    // Experts on an architecture read as dense, or a shared expert where none is read: never a
    // silent dense fallback.
    match mlp {
        Mlp::Dense => keys.extend([
            "num_local_experts",
            "num_experts",
            "n_routed_experts",
            "num_experts_per_tok",
        ]),
        Mlp::Qwen3Moe | Mlp::Mixtral => keys.push("shared_expert_intermediate_size"),
        _ => {}
    }
    if layout == Layout::Gemma4 {
        keys.extend(["attention_k_eq_v", "enable_moe_block"]);
    } else {
        keys.extend(["num_kv_shared_layers", "hidden_size_per_layer_input"]);
    }
    match keys.into_iter().find(|k| f.is_set(k)) {
        Some(key) => Err(FieldError::new(
            key,
            format!(
                "set to {}: not read for {arch} by this build (latent, linear, shared-KV or \
                 per-layer-input attention, keys reused as values, or a mixture-of-experts block)",
                f.0[key]
            ),
        )),
        None => Ok(()),
    }
}

/// Each layer's kind: `layer_types` where the config gives it (and agrees with the pattern field it
/// also sets), else the layout's pattern.
fn layer_kinds(
    f: &Fields<'_>,
    layout: Layout,
    layers: u32,
    window: Option<u32>,
) -> Result<Vec<Kind>, FieldError> {
    let listed = listed_kinds(f, layout, layers)?;
    let pattern = pattern(f, layout, layers)?;
    if let (Some(kinds), Some((key, p))) = (&listed, &pattern) {
        if let Some(i) = (0..kinds.len()).find(|&i| kinds[i] != p[i]) {
            return Err(FieldError::new(
                *key,
                format!(
                    "{} makes layer {i} {}, but layer_types makes it {}",
                    f.0[*key],
                    p[i].name(),
                    kinds[i].name()
                ),
            ));
        }
    }
    match (listed, pattern, layout) {
        (Some(kinds), _, _) => Ok(kinds),
        (None, Some((_, p)), _) => Ok(p),
        (None, None, Layout::Gemma(every)) => Ok(periodic(layers, every, Kind::Sliding)),
        (None, None, Layout::Plain) => {
            // Without layer_types a sliding window holds in every layer (Mistral's first release).
            let kind = if window.is_some() {
                Kind::Sliding
            } else {
                Kind::Full
            };
            Ok(vec![kind; layers as usize])
        }
        (None, None, Layout::Gemma4 | Layout::Hybrid) => Err(FieldError::new(
            "layer_types",
            "missing: this architecture's layer kinds come from layer_types or a pattern \
             (sliding_window_pattern, full_attention_interval)",
        )),
    }
}

/// The kinds `layer_types` gives, when the config gives it: full and sliding attention, or full and
/// linear attention in a hybrid layout.
fn listed_kinds(
    f: &Fields<'_>,
    layout: Layout,
    layers: u32,
) -> Result<Option<Vec<Kind>>, FieldError> {
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
    let allowed = match layout {
        Layout::Hybrid => [Kind::Full, Kind::Linear],
        _ => [Kind::Full, Kind::Sliding],
    };
    types
        .iter()
        .map(|t| {
            allowed
                .into_iter()
                .find(|k| t.as_str() == Some(k.name()))
                .ok_or_else(|| {
                    FieldError::new(
                        "layer_types",
                        format!(
                            "{t} is not a layer kind this build reads here ({}, {})",
                            allowed[0].name(),
                            allowed[1].name()
                        ),
                    )
                })
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// The pattern field the config sets for its layout, and the kinds it gives: a full layer every
/// `sliding_window_pattern`th (Gemma; the rest slide) or `full_attention_interval`th (hybrid; the
/// rest linear), counting from 1.
fn pattern(
    f: &Fields<'_>,
    layout: Layout,
    layers: u32,
) -> Result<Option<(&'static str, Vec<Kind>)>, FieldError> {
    let (keys, other): (&[&'static str], Kind) = match layout {
        Layout::Plain => return Ok(None),
        Layout::Gemma(_) | Layout::Gemma4 => (
            &["sliding_window_pattern", "_sliding_window_pattern"],
            Kind::Sliding,
        ),
        Layout::Hybrid => (&["full_attention_interval"], Kind::Linear),
    };
    for &key in keys {
        if !matches!(f.get(key), None | Some(Value::Null)) {
            return Ok(Some((key, periodic(layers, f.count(key)?, other))));
        }
    }
    Ok(None)
}

/// `layers` layers with a full-attention one every `every`th (counting from 1), the rest `other`.
fn periodic(layers: u32, every: u32, other: Kind) -> Vec<Kind> {
    (1..=layers)
        .map(|i| if i % every == 0 { Kind::Full } else { other })
        .collect()
}

/// The first layer that reuses an earlier layer's KV (Gemma 4's last `num_kv_shared_layers`, each
/// reading the last earlier layer of its kind that holds its own); the layer count when none does.
fn kv_shared_from(f: &Fields<'_>, layout: Layout, kinds: &[Kind]) -> Result<u32, FieldError> {
    let layers = kinds.len() as u32;
    if layout != Layout::Gemma4 {
        return Ok(layers);
    }
    let shared = f.whole_or("num_kv_shared_layers", 0)?;
    if shared >= layers {
        return Err(FieldError::new(
            "num_kv_shared_layers",
            format!("{shared} shared layers leave none of the {layers} layers to hold KV"),
        ));
    }
    let from = layers - shared;
    let (holding, sharing) = kinds.split_at(from as usize);
    if let Some(kind) = sharing.iter().find(|k| !holding.contains(k)) {
        return Err(FieldError::new(
            "num_kv_shared_layers",
            format!(
                "{shared} shared layers include {} ones, but no earlier {} layer holds KV for them",
                kind.name(),
                kind.name()
            ),
        ));
    }
    Ok(from)
}

/// The full-attention and sliding-window groups and their projections' parameters, all layers.
fn attention(
    f: &Fields<'_>,
    mlp: Mlp,
    layout: Layout,
    stack: &Stack,
    window: Option<u32>,
) -> Result<(AttentionLayers, Option<AttentionLayers>, f64), FieldError> {
    if mlp == Mlp::Deepseek {
        let (group, per_layer) = latent_attention(f, stack.hidden, stack.layers())?;
        return Ok((group, None, per_layer * stack.layers() as f64));
    }
    let local = heads(f, stack.hidden)?;
    let global = match layout {
        Layout::Gemma4 => global_heads(f, local)?,
        _ => local,
    };
    let gated = layout == Layout::Hybrid && f.flag_or("attn_output_gate", true)?;
    let group = |kind: Kind, h: Heads, window: Option<u32>| AttentionLayers {
        layers: stack.count(kind),
        kv_layers: stack.holding(kind),
        q_heads: h.q,
        kv_heads: h.kv,
        head_dim: h.dim,
        window,
        latent_kv_bytes: None,
        latent_decode_flops_per_pair: None,
    };
    let full = group(Kind::Full, global, None);
    let sliding = match (stack.count(Kind::Sliding), window) {
        (0, _) => None,
        (_, Some(w)) => Some(group(Kind::Sliding, local, Some(w))),
        (_, None) => {
            return Err(FieldError::new(
                "sliding_window",
                "missing: the config names sliding layers, so their window must be given",
            ))
        }
    };
    let params = stack
        .kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            let own_kv = (i as u32) < stack.shared_from;
            match kind {
                Kind::Full => projections(stack.hidden, global, gated, own_kv),
                Kind::Sliding => projections(stack.hidden, local, false, own_kv),
                Kind::Linear => 0.0,
            }
        })
        .sum();
    Ok((full, sliding, params))
}

/// Query, key, value and output projections of one attention layer: the query twice as wide when
/// `gated` (it carries an output gate), no key and value projections when the layer reuses another's.
fn projections(hidden: u32, h: Heads, gated: bool, own_kv: bool) -> f64 {
    let (hidden, q, kv) = (hidden as f64, (h.q * h.dim) as f64, (h.kv * h.dim) as f64);
    let query = if gated { 2.0 * q } else { q };
    let keys_values = if own_kv { 2.0 * kv } else { 0.0 };
    hidden * (query + keys_values) + q * hidden
}

/// Grouped-query attention's heads: `num_attention_heads`, `num_key_value_heads` (default: the query
/// heads) of `head_dim` (default: hidden ÷ heads).
fn heads(f: &Fields<'_>, hidden: u32) -> Result<Heads, FieldError> {
    let q = f.count("num_attention_heads")?;
    let kv = f.count_or("num_key_value_heads", q)?;
    if hidden % q != 0 && f.get("head_dim").is_none() {
        return Err(FieldError::new(
            "num_attention_heads",
            format!("{q} heads do not divide hidden_size {hidden}, and no head_dim is given"),
        ));
    }
    let dim = f.count_or("head_dim", hidden / q)?;
    divides(q, kv, "num_key_value_heads")?;
    Ok(Heads { q, kv, dim })
}

/// Gemma 4's full-attention heads: `global_head_dim` and `num_global_key_value_heads`, each defaulting
/// to the sliding layers'.
fn global_heads(f: &Fields<'_>, local: Heads) -> Result<Heads, FieldError> {
    let kv = f.count_or("num_global_key_value_heads", local.kv)?;
    divides(local.q, kv, "num_global_key_value_heads")?;
    Ok(Heads {
        kv,
        dim: f.count_or("global_head_dim", local.dim)?,
        ..local
    })
}

/// An error naming `field` unless its `kv` KV heads divide the `q` query heads.
fn divides(q: u32, kv: u32, field: &str) -> Result<(), FieldError> {
    if q % kv != 0 {
        return Err(FieldError::new(
            field,
            format!("{kv} KV heads do not divide the {q} query heads"),
        ));
    }
    Ok(())
}

/// DeepSeek's multi-head latent attention: each token keeps one `kv_lora_rank` latent and one
/// `qk_rope_head_dim` rotary key per layer (bf16), shared by every head, so the group has one KV head
/// that tensor parallelism does not split. A prefill decompresses the latent into `num_attention_heads`
/// keys of `qk_nope_head_dim + qk_rope_head_dim` and values of `v_head_dim`: `head_dim` is their mean,
/// which gives that FLOPs per (query, key) pair. Decode reads the latent (the weights absorbed), which
/// the KV bytes per token carry, and computes `2·H·(2·kv_lora_rank + qk_rope_head_dim)` FLOPs per pair
/// against it (scores over the latent and rotary key, values in the latent). Parameters: the query's down and up projections (`q_lora_rank`; a
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
        latent_decode_flops_per_pair: Some(2.0 * n * (2 * latent + rope) as f64),
    };
    Ok((attention, query + kv_down + kv_up + out))
}

/// Gated DeltaNet layers (Qwen3-Next, Qwen3.5): `linear_num_key_heads` query and key heads of
/// `linear_key_head_dim`, `linear_num_value_heads` value heads of `linear_value_head_dim`. Parameters:
/// the input projections to queries, keys, values, the output gate and two scalars per value head
/// (`h·(2·k + 2·v + 2·H_v)`) and the output projection (`v·h`). The state a sequence holds in each
/// layer: a `d_k × d_v` matrix per value head and the short convolution's last
/// `linear_conv_kernel_dim − 1` inputs of the queries, keys and values, at bf16; updating and reading
/// it costs `4·H_v·d_k·d_v` FLOPs per token.
fn linear_attention(
    f: &Fields<'_>,
    stack: &Stack,
) -> Result<(Option<LinearLayers>, f64), FieldError> {
    let layers = stack.count(Kind::Linear);
    if layers == 0 {
        return Ok((None, 0.0));
    }
    let key_heads = f.count("linear_num_key_heads")? as u64;
    let value_heads = f.count("linear_num_value_heads")? as u64;
    if value_heads % key_heads != 0 {
        return Err(FieldError::new(
            "linear_num_value_heads",
            format!("{value_heads} value heads are not a multiple of the {key_heads} key heads"),
        ));
    }
    let key_dim = f.count("linear_key_head_dim")? as u64;
    let value_dim = f.count("linear_value_head_dim")? as u64;
    let kernel = f.count("linear_conv_kernel_dim")? as u64;
    let (k, v) = (key_heads * key_dim, value_heads * value_dim);
    let h = stack.hidden as f64;
    let per_layer = h * (2 * k + 2 * v + 2 * value_heads) as f64 + v as f64 * h;
    let recurrent = value_heads * key_dim * value_dim;
    let linear = LinearLayers {
        layers,
        state_bytes_per_layer: recurrent * 2 + (2 * k + v) * (kernel - 1) * 2,
        flops_per_token_per_layer: 4.0 * recurrent as f64,
    };
    Ok((Some(linear), layers as f64 * per_layer))
}

/// The sliding window the config sets (`sliding_window`, not null, unless `use_sliding_window` says
/// whether it holds).
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
    layout: Layout,
    stack: &Stack,
) -> Result<(f64, f64, Option<Experts>), FieldError> {
    let h = stack.hidden as f64;
    let layers = stack.layers();
    if mlp == Mlp::Dense {
        let p = dense_mlp(f, layout, stack)?;
        return Ok((p, p, None));
    }
    let (count_key, size_key) = match mlp {
        Mlp::Qwen3Moe | Mlp::SharedExpert => ("num_experts", "moe_intermediate_size"),
        Mlp::Deepseek => ("n_routed_experts", "moe_intermediate_size"),
        Mlp::Mixtral | Mlp::Dense => ("num_local_experts", "intermediate_size"),
    };
    // transformers 5 writes Qwen3-MoE's expert count as Mixtral names it.
    let count_key = match (mlp, f.get(count_key)) {
        (Mlp::Qwen3Moe, None) if f.get("num_local_experts").is_some() => "num_local_experts",
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
        Mlp::Qwen3Moe | Mlp::SharedExpert => qwen3_moe_layers(f, layers)?,
        Mlp::Deepseek => deepseek_moe_layers(f, layers)?,
        Mlp::Mixtral | Mlp::Dense => layers,
    };
    let dense_layers = (layers - moe_layers) as f64;
    let mut dense = if dense_layers > 0.0 {
        dense_layers * 3.0 * h * f.count("intermediate_size")? as f64
    } else {
        0.0
    };
    // Shared experts run for every token: dense parameters of the sparse layers.
    dense += moe_layers as f64
        * match mlp {
            Mlp::Deepseek => f.whole_or("n_shared_experts", 0)? as f64 * expert,
            Mlp::SharedExpert => shared_expert(f, h)?,
            _ => 0.0,
        };
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

/// Gate, up and down projections of every layer: `intermediate_size`, a number or (Gemma 4) one per
/// layer, doubled in the layers that reuse another's KV when Gemma 4's `use_double_wide_mlp` is set.
fn dense_mlp(f: &Fields<'_>, layout: Layout, stack: &Stack) -> Result<f64, FieldError> {
    let layers = stack.layers() as usize;
    let sizes = match (layout, f.get("intermediate_size")) {
        (Layout::Gemma4, Some(Value::Array(a))) => per_layer_sizes(a, layers)?,
        _ => vec![f.count("intermediate_size")?; layers],
    };
    let double = layout == Layout::Gemma4 && f.flag("use_double_wide_mlp")?;
    Ok(sizes
        .iter()
        .enumerate()
        .map(|(i, &size)| {
            let wide = double && i as u32 >= stack.shared_from;
            3.0 * stack.hidden as f64 * size as f64 * if wide { 2.0 } else { 1.0 }
        })
        .sum())
}

/// `intermediate_size` given per layer: one positive count for each of the `layers`.
fn per_layer_sizes(sizes: &[Value], layers: usize) -> Result<Vec<u32>, FieldError> {
    if sizes.len() != layers {
        return Err(FieldError::new(
            "intermediate_size",
            format!(
                "{} entries for {layers} layers (num_hidden_layers)",
                sizes.len()
            ),
        ));
    }
    sizes
        .iter()
        .map(|x| {
            x.as_u64()
                .filter(|&n| n > 0 && n <= MAX_COUNT)
                .map(|n| n as u32)
                .ok_or_else(|| {
                    FieldError::new(
                        "intermediate_size",
                        format!("{x} is not a whole number from 1 to {MAX_COUNT}"),
                    )
                })
        })
        .collect()
}

/// One layer's shared expert of `shared_expert_intermediate_size` and its one-output gate (none when
/// the size is 0 or absent).
fn shared_expert(f: &Fields<'_>, h: f64) -> Result<f64, FieldError> {
    match f.whole_or("shared_expert_intermediate_size", 0)? {
        0 => Ok(0.0),
        size => Ok(3.0 * h * size as f64 + h),
    }
}

/// Gemma 4's per-layer embeddings: a table of `vocab_size_per_layer_input` rows of
/// `hidden_size_per_layer_input` for every layer (gathered, not streamed), the hidden state's
/// projection to all of them, and in each layer a gate down to its width and a projection back.
/// Returns (parameters multiplied per token, the table's).
fn per_layer_inputs(
    f: &Fields<'_>,
    layout: Layout,
    stack: &Stack,
) -> Result<(f64, f64), FieldError> {
    if layout != Layout::Gemma4 {
        return Ok((0.0, 0.0));
    }
    let width = match f.whole_or("hidden_size_per_layer_input", 0)? {
        0 => return Ok((0.0, 0.0)),
        w => w as f64,
    };
    let rows = f.count("vocab_size_per_layer_input")? as f64;
    let (h, layers) = (stack.hidden as f64, stack.layers() as f64);
    let projections = layers * 2.0 * h * width + h * layers * width;
    Ok((projections, rows * layers * width))
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

/// The context the config allows: `max_position_embeddings`, or YaRN's factor times the original
/// (`rope_scaling`, or transformers 5's `rope_parameters`, whose full-attention entry counts when it
/// gives one per layer kind).
fn context(f: &Fields<'_>) -> Result<u32, FieldError> {
    let native = f.count("max_position_embeddings")?;
    let (key, rope) = match (f.get("rope_scaling"), f.get("rope_parameters")) {
        (Some(Value::Object(r)), _) => ("rope_scaling", r),
        (_, Some(Value::Object(r))) => match r.get("full_attention") {
            Some(Value::Object(full)) => ("rope_parameters.full_attention", full),
            _ => ("rope_parameters", r),
        },
        _ => return Ok(native),
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
        .ok_or_else(|| {
            FieldError::new(format!("{key}.factor"), "expected a number of at least 1")
        })?;
    let original = match rope.get("original_max_position_embeddings") {
        Some(v) => v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
            FieldError::new(
                format!("{key}.original_max_position_embeddings"),
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

    /// Whether the field holds anything but null, false or 0.
    fn is_set(&self, key: &str) -> bool {
        match self.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Number(n)) => n.as_f64() != Some(0.0),
            Some(_) => true,
        }
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

    /// A boolean, `None` when absent or null.
    fn flag_opt(&self, key: &str) -> Result<Option<bool>, FieldError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(FieldError::new(
                key,
                format!("expected true or false, got {v}"),
            )),
        }
    }

    /// A boolean, `default` when absent or null.
    fn flag_or(&self, key: &str, default: bool) -> Result<bool, FieldError> {
        Ok(self.flag_opt(key)?.unwrap_or(default))
    }

    /// A boolean, false when absent.
    fn flag(&self, key: &str) -> Result<bool, FieldError> {
        self.flag_or(key, false)
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

    fn text(file: &str) -> String {
        let path = format!("{}/../tests/fixtures/hf/{file}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(path).unwrap()
    }

    /// The fixture `file` with the field at `path` (`/`-separated) set to `value`, or removed when
    /// `value` is null.
    fn edited(file: &str, path: &str, value: Value) -> Result<ModelSpec, FieldError> {
        let mut v: Value = serde_json::from_str(&text(file)).unwrap();
        set(&mut v, path, value);
        from_config(file, &v.to_string())
    }

    fn set(v: &mut Value, path: &str, value: Value) {
        let (parent, key) = path.rsplit_once('/').unwrap_or(("", path));
        let mut at = v;
        for step in parent.split('/').filter(|s| !s.is_empty()) {
            at = &mut at[step];
        }
        let object = at.as_object_mut().unwrap();
        match value {
            Value::Null => object.remove(key),
            value => object.insert(key.to_string(), value),
        };
    }

    /// A public config against a shipped preset: the same layer groups (layers, KV-holding layers,
    /// heads, windows) and linear-attention layers, and parameters, KV bytes per token, state bytes
    /// per sequence and FLOPs within 1 %.
    fn assert_preset(file: &str, preset: &str) {
        let got = read(file);
        let want = ModelSpec::preset(preset).unwrap();
        assert_eq!(got.full_attention, want.full_attention, "{file}");
        assert_eq!(got.sliding_attention, want.sliding_attention, "{file}");
        assert_eq!(
            got.linear_attention.as_ref().map(|l| l.layers),
            want.linear_attention.as_ref().map(|l| l.layers),
            "{file}"
        );
        let linear = |m: &ModelSpec| {
            m.linear_attention.as_ref().map_or((1.0, 1.0), |l| {
                (l.state_bytes_per_layer as f64, l.flops_per_token_per_layer)
            })
        };
        let ((got_state, got_flops), (want_state, want_flops)) = (linear(&got), linear(&want));
        for (what, g, w) in [
            ("matmul_params", got.matmul_params, want.matmul_params),
            ("total_params", got.total_params, want.total_params),
            (
                "quantizable_params",
                got.quantizable_params,
                want.quantizable_params,
            ),
            (
                "kv bytes per token",
                got.kv_bytes_per_token() as f64,
                want.kv_bytes_per_token() as f64,
            ),
            (
                "state bytes per sequence",
                got.state_bytes_per_seq() as f64 + 1.0,
                want.state_bytes_per_seq() as f64 + 1.0,
            ),
            ("linear state per layer", got_state, want_state),
            ("linear flops per token", got_flops, want_flops),
        ] {
            assert!(within(g, w, 0.01), "{file}: {what}: {g} against {w}");
        }
        assert_eq!(
            (
                got.hidden,
                got.layers,
                got.vocab,
                got.native_context,
                got.experts
            ),
            (
                want.hidden,
                want.layers,
                want.vocab,
                want.native_context,
                None
            ),
            "{file}"
        );
    }

    /// The four shipped presets from public configs of their models: Qwen3-8B, Gemma 4 E4B (35
    /// sliding layers of window 512 and 7 full ones of head 512, the last 18 reusing KV, per-layer
    /// embeddings), Qwen3.5-9B and Qwen3.8-27B (Gated DeltaNet between full layers every fourth).
    #[test]
    fn the_shipped_presets_come_from_their_public_configs() {
        assert_preset("qwen3-8b.json", "qwen3-8b");
        assert_preset("gemma-4-e4b-it.json", "gemma4-e4b");
        assert_preset("qwen3.5-9b.json", "qwen3.5-9b");
        assert_preset("qwen3.8-27b.json", "qwen3.8-27b");
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
        let e = edit("Qwen3MoeForCausalLM", "Gemma3nForConditionalGeneration");
        assert_eq!(e.field, "architectures");
        assert!(
            e.reason.contains("Gemma3nForConditionalGeneration"),
            "{}",
            e.reason
        );
        assert_eq!(
            edit("\"vocab_size\"", "\"kv_lora_rank\": 512, \"vocab_size\"").field,
            "kv_lora_rank"
        );
        assert_eq!(
            edit("\"num_experts_per_tok\": 8", "\"num_experts_per_tok\": 200").field,
            "num_experts_per_tok"
        );
        // Experts on a dense architecture, a shared expert on one that reads none: refused by name.
        let dense = edit("Qwen3MoeForCausalLM", "Qwen3ForCausalLM");
        assert_eq!(dense.field, "num_experts", "{}", dense.reason);
        assert!(
            dense.reason.contains("Qwen3ForCausalLM"),
            "{}",
            dense.reason
        );
        assert_eq!(
            edit(
                "\"vocab_size\"",
                "\"shared_expert_intermediate_size\": 512, \"vocab_size\""
            )
            .field,
            "shared_expert_intermediate_size"
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

    /// Gemma 2 and 3 against their published sizes: Gemma 2 2B's 2,614 M parameters (tied embeddings,
    /// 13 sliding layers of window 4,096 alternating with 13 full ones); Gemma 3 12B's language model,
    /// 10,759 M parameters outside the embedding and 1,012 M in it (the Gemma 3 technical report's
    /// table), 40 sliding layers of window 1,024 and 8 full ones, its linear rope scaling no longer
    /// context than `max_position_embeddings`.
    #[test]
    fn gemma_sliding_and_full_layers_are_placed() {
        let g2 = read("gemma-2-2b-it.json");
        let s = g2.sliding_attention.clone().unwrap();
        assert_eq!((s.layers, s.kv_layers, s.window), (13, 13, Some(4096)));
        assert_eq!(
            (g2.full_attention.layers, g2.full_attention.head_dim),
            (13, 256)
        );
        assert_eq!(g2.kv_bytes_per_token(), 13 * 2 * 4 * 256 * 2);
        assert!(
            within(g2.total_params, 2.614e9, 0.01),
            "{}",
            g2.total_params
        );
        assert_eq!(
            g2.total_params, g2.matmul_params,
            "tied: the table is the lm_head"
        );
        let g3 = read("gemma-3-12b-it.json");
        let s = g3.sliding_attention.clone().unwrap();
        assert_eq!((s.layers, s.window), (40, Some(1024)));
        assert_eq!(g3.full_attention.layers, 8);
        assert_eq!(g3.kv_bytes_per_token(), 8 * 2 * 8 * 256 * 2);
        assert!(
            within(g3.quantizable_params, 10.759e9, 0.01),
            "{}",
            g3.quantizable_params
        );
        assert!(
            within(g3.total_params, 11.771e9, 0.01),
            "{}",
            g3.total_params
        );
        assert_eq!(g3.native_context, 131_072);
        let untied = edited(
            "gemma-3-12b-it.json",
            "text_config/tie_word_embeddings",
            Value::Bool(false),
        )
        .unwrap();
        assert!(
            (untied.total_params - g3.total_params - 262_208.0 * 3840.0).abs() < 1.0,
            "Gemma ties its embeddings unless the config says not"
        );
    }

    /// Gemma 4 E2B from the E4B config with the fields its own config.json sets (hidden 1,536, 35
    /// layers of 4 sliding to 1 full, 1 KV head, the last 20 reusing KV, their MLP double-wide): its
    /// card's 2.3 B effective parameters (without the per-layer embedding table). A per-layer
    /// `intermediate_size` gives what the same number does.
    #[test]
    fn gemma4_shared_kv_and_double_wide_layers_are_placed() {
        let mut v: Value = serde_json::from_str(&text("gemma-4-e4b-it.json")).unwrap();
        let types: Vec<Value> = (1..=35)
            .map(|i| {
                Value::from(if i % 5 == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                })
            })
            .collect();
        for (key, value) in [
            ("hidden_size", Value::from(1536)),
            ("num_hidden_layers", 35.into()),
            ("intermediate_size", 6144.into()),
            ("num_key_value_heads", 1.into()),
            ("num_kv_shared_layers", 20.into()),
            ("use_double_wide_mlp", true.into()),
            ("layer_types", Value::Array(types)),
        ] {
            set(&mut v, &format!("text_config/{key}"), value);
        }
        let e2b = from_config("gemma-4-e2b", &v.to_string()).unwrap();
        assert!(
            within(e2b.matmul_params, 2.3e9, 0.02),
            "{}",
            e2b.matmul_params
        );
        let full = &e2b.full_attention;
        assert_eq!((full.layers, full.kv_layers, full.head_dim), (7, 3, 512));
        assert_eq!(e2b.kv_bytes_per_token(), 3 * 2 * 512 * 2);
        let e4b = read("gemma-4-e4b-it.json");
        let listed = edited(
            "gemma-4-e4b-it.json",
            "text_config/intermediate_size",
            Value::Array(vec![10240.into(); 42]),
        )
        .unwrap();
        assert_eq!(listed.total_params, e4b.total_params);
    }

    /// Qwen3.5's and Qwen3-Next's mixtures of experts with Gated DeltaNet layers: Qwen3.6-35B-A3B
    /// (30 linear layers beside 10 full ones, 8 of 256 experts and a shared one) against its 35 B
    /// held and 3 B active (without the embedding table), Qwen3-Coder-Next (36 and 12, 10 of 512)
    /// against its 80 B.
    #[test]
    fn hybrid_linear_attention_and_shared_experts_are_placed() {
        let m = read("qwen3.6-35b-a3b.json");
        let l = m.linear_attention.clone().unwrap();
        assert_eq!(l.layers, 30);
        assert_eq!(
            l.state_bytes_per_layer,
            32 * 128 * 128 * 2 + (2 * 2048 + 4096) * 3 * 2
        );
        assert_eq!(l.flops_per_token_per_layer, 4.0 * 32.0 * 128.0 * 128.0);
        assert_eq!(m.full_attention.layers, 10);
        assert_eq!(m.kv_bytes_per_token(), 10 * 2 * 2 * 256 * 2);
        let e = m.experts.clone().unwrap();
        assert_eq!((e.layers, e.count, e.per_token), (40, 256, 8));
        assert!(within(m.total_params, 35e9, 0.02), "{}", m.total_params);
        assert!(within(m.matmul_params, 3e9, 0.03), "{}", m.matmul_params);
        let next = read("qwen3-coder-next.json");
        assert_eq!(next.linear_attention.unwrap().layers, 36);
        let e = next.experts.clone().unwrap();
        assert_eq!((e.layers, e.count, e.per_token), (48, 512, 10));
        assert!(
            within(next.total_params, 80e9, 0.01),
            "{}",
            next.total_params
        );
        let plain = edited(
            "qwen3.6-35b-a3b.json",
            "text_config/shared_expert_intermediate_size",
            Value::Null,
        )
        .unwrap();
        assert!(
            (m.total_params - plain.total_params - 40.0 * (3.0 * 2048.0 * 512.0 + 2048.0)).abs()
                < 1.0,
            "the shared expert and its gate in every layer"
        );
    }

    /// YaRN extends the context from `rope_scaling` (Qwen3's card: 4 × 32,768) or transformers 5's
    /// `rope_parameters` (Qwen3.8's card: 4 × 262,144; Gemma 4's full-attention entry); other
    /// scalings do not; a factor below 1 is named.
    #[test]
    fn yarn_extends_the_context() {
        let yarn = |original: u64| {
            serde_json::json!({"rope_type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": original, "rope_theta": 10000000})
        };
        let q3 = edited("qwen3-8b.json", "rope_scaling", yarn(32_768)).unwrap();
        assert_eq!(q3.native_context, 131_072);
        let linear = serde_json::json!({"type": "linear", "factor": 4.0});
        let q3 = edited("qwen3-8b.json", "rope_scaling", linear).unwrap();
        assert_eq!(q3.native_context, 40_960);
        let path = "text_config/rope_parameters";
        let q38 = edited("qwen3.8-27b.json", path, yarn(262_144)).unwrap();
        assert_eq!(q38.native_context, 1_048_576);
        let gemma = edited(
            "gemma-4-e4b-it.json",
            "text_config/rope_parameters/full_attention",
            yarn(131_072),
        )
        .unwrap();
        assert_eq!(gemma.native_context, 524_288);
        let mut low = yarn(262_144);
        low["factor"] = 0.5.into();
        assert_eq!(
            edited("qwen3.8-27b.json", path, low).unwrap_err().field,
            "text_config.rope_parameters.factor"
        );
    }

    /// What the new families cannot place is named: layer kinds a layout does not have, a pattern
    /// that contradicts `layer_types` or is not a count, no way to tell the kinds, contradictory or
    /// missing head and state fields, shared KV with no donor, Gemma 4 fields this build does not
    /// read, a missing `text_config`, tie flags that disagree.
    #[test]
    fn what_the_new_families_cannot_place_is_named() {
        let kinds = |n: usize, odd: &str| {
            let mut v = vec![Value::from("linear_attention"); n];
            v[3] = odd.into();
            Value::Array(v)
        };
        for (file, path, value, field) in [
            (
                "qwen3.5-9b.json",
                "text_config/layer_types",
                kinds(32, "sliding_attention"),
                "text_config.layer_types",
            ),
            (
                "qwen3.5-9b.json",
                "text_config/full_attention_interval",
                3.into(),
                "text_config.full_attention_interval",
            ),
            (
                "qwen3.8-27b.json",
                "text_config/full_attention_interval",
                Value::Null,
                "text_config.layer_types",
            ),
            (
                "qwen3.5-9b.json",
                "text_config/linear_num_value_heads",
                40.into(),
                "text_config.linear_num_value_heads",
            ),
            (
                "qwen3.5-9b.json",
                "text_config/linear_conv_kernel_dim",
                Value::Null,
                "text_config.linear_conv_kernel_dim",
            ),
            ("qwen3.5-9b.json", "text_config", Value::Null, "text_config"),
            (
                "qwen3.5-9b.json",
                "tie_word_embeddings",
                true.into(),
                "tie_word_embeddings",
            ),
            (
                "gemma-3-12b-it.json",
                "text_config/layer_types",
                kinds(48, "full_attention"),
                "text_config.layer_types",
            ),
            (
                "gemma-3-12b-it.json",
                "text_config/sliding_window_pattern",
                4.into(),
                "text_config.sliding_window_pattern",
            ),
            (
                "gemma-3-12b-it.json",
                "text_config/sliding_window_pattern",
                0.into(),
                "text_config.sliding_window_pattern",
            ),
            (
                "gemma-2-2b-it.json",
                "sliding_window",
                Value::Null,
                "sliding_window",
            ),
            (
                "gemma-4-e4b-it.json",
                "text_config/layer_types",
                Value::Null,
                "text_config.layer_types",
            ),
            (
                "gemma-4-e4b-it.json",
                "text_config/num_kv_shared_layers",
                42.into(),
                "text_config.num_kv_shared_layers",
            ),
            (
                "gemma-4-e4b-it.json",
                "text_config/num_kv_shared_layers",
                37.into(),
                "text_config.num_kv_shared_layers",
            ),
            (
                "gemma-4-e4b-it.json",
                "text_config/attention_k_eq_v",
                true.into(),
                "text_config.attention_k_eq_v",
            ),
            (
                "gemma-4-e4b-it.json",
                "text_config/enable_moe_block",
                true.into(),
                "text_config.enable_moe_block",
            ),
            (
                "gemma-4-e4b-it.json",
                "text_config/intermediate_size",
                Value::Array(vec![10240.into(); 41]),
                "text_config.intermediate_size",
            ),
            (
                "gemma-4-e4b-it.json",
                "text_config/num_global_key_value_heads",
                3.into(),
                "text_config.num_global_key_value_heads",
            ),
            (
                "qwen3-8b.json",
                "hidden_size_per_layer_input",
                256.into(),
                "hidden_size_per_layer_input",
            ),
            (
                "qwen3-8b.json",
                "num_kv_shared_layers",
                4.into(),
                "num_kv_shared_layers",
            ),
        ] {
            let e = edited(file, path, value.clone()).unwrap_err();
            assert_eq!(e.field, field, "{file}: {path} = {value}: {}", e.reason);
        }
    }
}
