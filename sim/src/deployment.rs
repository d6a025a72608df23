//! Deployments: model + hardware + parallelism + engine knobs + prices + frozen SLO targets.
//! Presets are built in; a YAML file names a `base` preset and overrides any field. Parsing is pure (no file IO here).

use serde::{Deserialize, Serialize};
use serverbench_calibration::{
    memory_plan, parse_yaml, ConfigError, CostInputs, CostModel, HardwareSpec, MemoryPlan,
    ModelSpec, Profile, StateDtype, WeightDtype, GIB,
};
use serverbench_workloads::RequestKind;

pub use crate::engine::Policy;

/// How a preempted request gives back its KV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preemption {
    /// Drop its KV and recompute prompt + generated tokens when it is scheduled again.
    Recompute,
    /// Copy its KV to host memory over the host link and back when it is scheduled again
    /// (falls back to recompute when `swap_space_gib` is full).
    Swap,
}

/// How draft tokens are proposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecMethod {
    /// A small draft model runs `k` sequential passes.
    Draft,
    /// Prompt-lookup (n-gram) drafts: no GPU cost to propose.
    Ngram,
    /// A multi-token-prediction head: `k` passes of about one decoder layer.
    Mtp,
}

/// Per-kind acceptance overrides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindAcceptance {
    /// Root turns.
    #[serde(default)]
    pub root_turn: Option<f64>,
    /// Sub-agent turns.
    #[serde(default)]
    pub subagent_turn: Option<f64>,
    /// Compaction requests.
    #[serde(default)]
    pub compaction: Option<f64>,
}

/// Speculative decoding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    /// How drafts are proposed.
    pub method: SpecMethod,
    /// Draft length: tokens proposed per verify step.
    pub k: u32,
    /// Per-token acceptance probability α (each draft token is accepted with α until the first rejection).
    pub acceptance: f64,
    /// α per request kind, overriding `acceptance`.
    #[serde(default)]
    pub acceptance_by_kind: KindAcceptance,
    /// Parameters one draft pass streams; default: 0.6 B for `draft`, one decoder layer for `mtp`, 0 for `ngram`.
    #[serde(default)]
    pub draft_params: Option<f64>,
}

impl Speculative {
    /// Expected tokens per verify step: `(1 − α^(k+1)) / (1 − α)`.
    pub fn expected_tokens(alpha: f64, k: u32) -> f64 {
        if alpha >= 1.0 {
            (k + 1) as f64
        } else {
            (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha)
        }
    }

    /// Parameters one draft pass streams, for `model`.
    pub fn draft_params(&self, model: &ModelSpec) -> f64 {
        self.draft_params.unwrap_or(match self.method {
            SpecMethod::Draft => 0.6e9,
            SpecMethod::Ngram => 0.0,
            SpecMethod::Mtp => model.matmul_params / model.layers as f64,
        })
    }

    /// Draft passes per verify step.
    pub fn draft_passes(&self) -> u32 {
        match self.method {
            SpecMethod::Ngram => 0,
            _ => self.k,
        }
    }

    /// α for a request kind.
    pub fn alpha(&self, kind: RequestKind) -> f64 {
        let by = &self.acceptance_by_kind;
        match kind {
            RequestKind::RootTurn => by.root_turn,
            RequestKind::SubagentTurn => by.subagent_turn,
            RequestKind::Compaction => by.compaction,
        }
        .unwrap_or(self.acceptance)
    }
}

/// How requests are spread over data-parallel replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    /// Each request to the next replica in turn.
    RoundRobin,
    /// To the replica with the fewest running + waiting sequences (lowest index on ties).
    LeastLoaded,
    /// A lane (and its sub-agents) always to the same replica.
    SessionAffinity,
    /// To the replica holding the longest cached prefix of the prompt, least loaded on ties.
    PrefixAware,
}

/// The engine's knobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Scheduler policy (a name from the policy registry).
    #[serde(default)]
    pub policy: Policy,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Token budget of one step (prefill chunk tokens + decode tokens).
    pub max_num_batched_tokens: u32,
    /// Most sequences running at once.
    pub max_num_seqs: u32,
    /// Fraction of GPU memory the engine may use.
    pub gpu_memory_utilization: f64,
    /// Memory reserved for activations per GPU, GiB.
    pub activation_reserve_gib: f64,
    /// Preemption mode.
    pub preemption: Preemption,
    /// Whether the prefix cache is on.
    pub prefix_caching: bool,
    /// Host memory for swapped-out KV per GPU, GiB (`preemption: swap`).
    #[serde(default = "default_swap_space")]
    pub swap_space_gib: f64,
    /// `sglang`: the fraction of each running request's remaining output that admission reserves room for.
    #[serde(default = "default_new_token_ratio")]
    pub new_token_ratio: f64,
    /// Speculative decoding, when on.
    #[serde(default)]
    pub speculative: Option<Speculative>,
}

fn default_swap_space() -> f64 {
    64.0
}

fn default_new_token_ratio() -> f64 {
    0.7
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: Policy::VLLM,
            block_size: 16,
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            gpu_memory_utilization: 0.9,
            activation_reserve_gib: 1.0,
            preemption: Preemption::Recompute,
            prefix_caching: true,
            swap_space_gib: default_swap_space(),
            new_token_ratio: default_new_token_ratio(),
            speculative: None,
        }
    }
}

/// Prices per million tokens.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// Dollars per million input tokens.
    pub input_per_m: f64,
    /// Dollars per million output tokens.
    pub output_per_m: f64,
}

/// Frozen latency targets.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Time-to-first-token target τ_first, seconds.
    pub ttft_s: f64,
    /// Time-per-output-token target τ_token, seconds.
    pub tpot_s: f64,
}

/// Everything that defines the served system and how it is scored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    /// Preset name (or the file's own name).
    pub name: String,
    /// Model preset.
    pub model: String,
    /// Hardware preset.
    pub hardware: String,
    /// Cost-model profile preset.
    pub profile: String,
    /// Tensor-parallel degree (GPUs per replica).
    pub tp: u32,
    /// Data-parallel replicas.
    pub dp: u32,
    /// How requests are spread over replicas (when `dp > 1`).
    #[serde(default = "default_router")]
    pub router: Router,
    /// Weight format.
    pub weights: WeightDtype,
    /// Quantisation group size (int4).
    pub quant_group_size: u32,
    /// Precision of linear-attention (Gated DeltaNet) state: `bf16` or `fp32`.
    #[serde(default)]
    pub state_dtype: StateDtype,
    /// Longest prompt + output the deployment accepts, tokens.
    pub context_limit: u32,
    /// Token prices.
    pub prices: Prices,
    /// Price of one GPU-hour, dollars.
    pub gpu_hour_dollars: f64,
    /// Frozen SLO targets.
    pub slo: Slo,
    /// Engine knobs.
    pub engine: EngineConfig,
}

fn default_router() -> Router {
    Router::RoundRobin
}

/// The default deployment.
pub const DEFAULT_DEPLOYMENT: &str = "qwen3.5-9b-2xl40";

impl Deployment {
    /// GPUs in the deployment, `d = tp × dp`.
    pub fn gpus(&self) -> u32 {
        self.tp * self.dp
    }

    /// Dollars the deployment costs for `window_s` seconds.
    pub fn cost(&self, window_s: f64) -> f64 {
        self.gpus() as f64 * self.gpu_hour_dollars * window_s / 3600.0
    }

    /// The built-in presets.
    pub fn presets() -> Vec<Deployment> {
        let l40 = |name: &str,
                   model: &str,
                   tp: u32,
                   weights: WeightDtype,
                   ctx: u32,
                   prices: (f64, f64),
                   slo: (f64, f64)| Deployment {
            name: name.into(),
            model: model.into(),
            hardware: "l40".into(),
            profile: "l40-datasheet".into(),
            tp,
            dp: 1,
            router: Router::RoundRobin,
            weights,
            quant_group_size: 128,
            state_dtype: StateDtype::Bf16,
            context_limit: ctx,
            prices: Prices {
                input_per_m: prices.0,
                output_per_m: prices.1,
            },
            gpu_hour_dollars: 0.82,
            slo: Slo {
                ttft_s: slo.0,
                tpot_s: slo.1,
            },
            engine: EngineConfig::default(),
        };
        let mut h200 = l40(
            "qwen3-8b-1xh200",
            "qwen3-8b",
            1,
            WeightDtype::Bf16,
            40_960,
            (0.1044, 0.1855),
            (2.0, 0.020),
        );
        h200.hardware = "h200".into();
        h200.profile = "h200-qwen3-8b-cuda".into();
        h200.gpu_hour_dollars = 3.50;
        vec![
            l40(
                "gemma4-e4b-1xl40",
                "gemma4-e4b",
                1,
                WeightDtype::Bf16,
                131_072,
                (0.0200, 0.1000),
                (2.52693, 0.1217057),
            ),
            l40(
                DEFAULT_DEPLOYMENT,
                "qwen3.5-9b",
                2,
                WeightDtype::Bf16,
                1_048_576,
                (0.1044, 0.1855),
                (4.10028, 0.0234974),
            ),
            l40(
                "qwen3.8-27b-int4-2xl40",
                "qwen3.8-27b",
                2,
                WeightDtype::Int4,
                1_048_576,
                (0.0898, 2.6570),
                (10.2988, 0.0483769),
            ),
            h200,
        ]
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Option<Deployment> {
        Self::presets().into_iter().find(|d| d.name == name)
    }

    /// Names of the presets, for error messages.
    pub fn preset_names() -> String {
        Self::presets()
            .iter()
            .map(|d| d.name.clone())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a deployment YAML: `base: PRESET` (default: the default deployment) plus any fields to override.
    pub fn from_yaml(file: &str, text: &str) -> Result<Deployment, ConfigError> {
        let overrides: serde_yaml::Value = parse_yaml(file, text)?;
        let base_name = overrides
            .get("base")
            .and_then(|b| b.as_str())
            .unwrap_or(DEFAULT_DEPLOYMENT)
            .to_string();
        let base = Deployment::preset(&base_name).ok_or_else(|| {
            ConfigError::new(
                file,
                0,
                "base",
                format!(
                    "unknown preset {base_name:?} (presets: {})",
                    Self::preset_names()
                ),
            )
        })?;
        let mut merged = serde_yaml::to_value(&base).expect("presets serialise");
        let mut overrides = overrides;
        if let serde_yaml::Value::Mapping(m) = &mut overrides {
            m.remove("base");
        }
        if let Some(engine) = overrides.get_mut("engine") {
            apply_policy_budgets(engine);
        }
        merge(&mut merged, overrides);
        let text = serde_yaml::to_string(&merged).expect("merged value serialises");
        let d: Deployment = parse_yaml(file, &text).map_err(|mut e| {
            e.line = 0; // lines refer to the merged document, not the user's file
            e
        })?;
        d.check().map_err(|e| ConfigError::from_check(file, &e))?;
        Ok(d)
    }

    /// Applies an engine YAML (any subset of `engine` fields).
    pub fn with_engine_yaml(mut self, file: &str, text: &str) -> Result<Deployment, ConfigError> {
        let mut overrides: serde_yaml::Value = parse_yaml(file, text)?;
        apply_policy_budgets(&mut overrides);
        let mut merged = serde_yaml::to_value(&self.engine).expect("engine serialises");
        merge(&mut merged, overrides);
        self.engine = parse_yaml(file, &serde_yaml::to_string(&merged).expect("serialises"))
            .map_err(|mut e| {
                e.line = 0;
                e
            })?;
        self.check()
            .map_err(|e| ConfigError::from_check(file, &e))?;
        Ok(self)
    }

    /// Applies a YAML of any deployment fields on top of this deployment (as a `base` would be).
    pub fn with_overrides(self, file: &str, text: &str) -> Result<Deployment, ConfigError> {
        let mut overrides: serde_yaml::Value = parse_yaml(file, text)?;
        if let Some(engine) = overrides.get_mut("engine") {
            apply_policy_budgets(engine);
        }
        let mut merged = serde_yaml::to_value(&self).expect("deployments serialise");
        merge(&mut merged, overrides);
        let d: Deployment = parse_yaml(file, &serde_yaml::to_string(&merged).expect("serialises"))
            .map_err(|mut e| {
                e.line = 0;
                e
            })?;
        d.check().map_err(|e| ConfigError::from_check(file, &e))?;
        Ok(d)
    }

    /// Checks that the named presets exist and the numbers make sense; the error names the field.
    pub fn check(&self) -> Result<(), String> {
        if ModelSpec::preset(&self.model).is_none() {
            let names: Vec<String> = ModelSpec::presets().into_iter().map(|m| m.name).collect();
            return Err(format!(
                "model: unknown model {:?} (known: {})",
                self.model,
                names.join(", ")
            ));
        }
        if HardwareSpec::preset(&self.hardware).is_none() {
            return Err(format!(
                "hardware: unknown hardware {:?} (known: l40, h200)",
                self.hardware
            ));
        }
        if Profile::preset(&self.profile).is_none() {
            return Err(format!(
                "profile: unknown profile {:?} (known: {})",
                self.profile,
                Profile::preset_names()
            ));
        }
        let e = &self.engine;
        let checks = [
            (self.tp == 0, "tp: must be at least 1"),
            (self.dp == 0, "dp: must be at least 1"),
            (self.context_limit == 0, "context_limit: must be positive"),
            (
                !(self.gpu_hour_dollars > 0.0),
                "gpu_hour_dollars: must be positive",
            ),
            (
                !(self.prices.input_per_m >= 0.0 && self.prices.output_per_m >= 0.0),
                "prices: must be non-negative",
            ),
            (
                !(self.slo.ttft_s > 0.0 && self.slo.tpot_s > 0.0),
                "slo: targets must be positive",
            ),
            (e.block_size == 0, "engine.block_size: must be positive"),
            (
                e.max_num_batched_tokens == 0,
                "engine.max_num_batched_tokens: must be positive",
            ),
            (e.max_num_seqs == 0, "engine.max_num_seqs: must be positive"),
            (
                !(e.gpu_memory_utilization > 0.0 && e.gpu_memory_utilization <= 1.0),
                "engine.gpu_memory_utilization: must be in (0, 1]",
            ),
            (
                !(e.activation_reserve_gib >= 0.0),
                "engine.activation_reserve_gib: must be non-negative",
            ),
            (
                !(e.swap_space_gib >= 0.0),
                "engine.swap_space_gib: must be non-negative",
            ),
            (
                !(e.new_token_ratio >= 0.0 && e.new_token_ratio <= 1.0),
                "engine.new_token_ratio: must be in [0, 1]",
            ),
        ];
        if let Some(sp) = &e.speculative {
            let alphas = [
                Some(sp.acceptance),
                sp.acceptance_by_kind.root_turn,
                sp.acceptance_by_kind.subagent_turn,
                sp.acceptance_by_kind.compaction,
            ];
            if alphas.iter().flatten().any(|a| !(0.0..=1.0).contains(a)) {
                return Err("engine.speculative.acceptance: must be in [0, 1]".into());
            }
            if sp.k == 0 || sp.k > 16 {
                return Err("engine.speculative.k: must be between 1 and 16".into());
            }
        }
        match checks.iter().find(|(bad, _)| *bad) {
            Some((_, msg)) => Err(msg.to_string()),
            None => Ok(()),
        }
    }

    /// The model spec, with the deployment's state precision.
    pub fn model_spec(&self) -> ModelSpec {
        ModelSpec::preset(&self.model)
            .expect("checked model")
            .with_state_dtype(self.state_dtype)
    }

    /// The hardware spec.
    pub fn hardware_spec(&self) -> HardwareSpec {
        HardwareSpec::preset(&self.hardware).expect("checked hardware")
    }

    /// The memory plan of one GPU.
    pub fn memory_plan(&self) -> MemoryPlan {
        let e = &self.engine;
        memory_plan(
            &self.model_spec(),
            &self.hardware_spec(),
            self.weights,
            self.quant_group_size,
            self.tp,
            e.gpu_memory_utilization,
            e.activation_reserve_gib * GIB,
        )
    }

    /// The cost model, with `profile` (the named preset unless one is given).
    pub fn cost_model(&self, profile: Option<&Profile>) -> CostModel {
        let preset;
        let profile = match profile {
            Some(p) => p,
            None => {
                preset = Profile::preset(&self.profile).expect("checked profile");
                &preset
            }
        };
        let (m, h) = (self.model_spec(), self.hardware_spec());
        CostModel::new(CostInputs {
            model: &m,
            hardware: &h,
            profile,
            dtype: self.weights,
            group_size: self.quant_group_size,
            tp: self.tp,
            draft_params: self
                .engine
                .speculative
                .as_ref()
                .map_or(0.0, |s| s.draft_params(&m)),
        })
    }
}

/// When an engine override names a policy but not its budgets, fills in that policy's defaults.
fn apply_policy_budgets(engine: &mut serde_yaml::Value) {
    let Some(policy) = engine
        .get("policy")
        .and_then(|p| p.as_str())
        .and_then(Policy::named)
    else {
        return;
    };
    let (tokens, seqs) = policy.get().default_budgets();
    if let serde_yaml::Value::Mapping(m) = engine {
        for (k, v) in [("max_num_batched_tokens", tokens), ("max_num_seqs", seqs)] {
            m.entry(k.into()).or_insert(v.into());
        }
    }
}

/// Deep-merges `over` into `base` (mappings merge key by key; anything else replaces).
fn merge(base: &mut serde_yaml::Value, over: serde_yaml::Value) {
    match (base, over) {
        (serde_yaml::Value::Mapping(b), serde_yaml::Value::Mapping(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) => merge(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serverbench_calibration::BatchShape;

    #[test]
    fn an_fp32_linear_attention_state_costs_memory_and_step_time() {
        // The default model is hybrid (Gated DeltaNet layers): its per-sequence state doubles in fp32,
        // so fewer sequences fit beside the KV and every decode step reads and writes twice the state.
        let bf16 = Deployment::preset(DEFAULT_DEPLOYMENT).unwrap();
        let fp32 = bf16
            .clone()
            .with_overrides("fp32.yaml", "state_dtype: fp32")
            .unwrap();
        let (a, b) = (bf16.memory_plan(), fp32.memory_plan());
        assert!((b.state_bytes_per_seq / a.state_bytes_per_seq - 2.0).abs() < 1e-9);
        assert_eq!(
            a.kv_pool_bytes, b.kv_pool_bytes,
            "the pool is the same; more of it per sequence"
        );
        let mut decode = BatchShape::default();
        for _ in 0..16 {
            decode.add_decode(40_000, None);
        }
        let (ta, tb) = (
            bf16.cost_model(None).step_seconds(&decode),
            fp32.cost_model(None).step_seconds(&decode),
        );
        assert!(
            tb > ta * 1.01,
            "batch-16 decode {ta} s with bf16 state, {tb} s with fp32"
        );
        // A dense model has no such state: the knob changes nothing.
        let dense = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let dense32 = dense
            .clone()
            .with_overrides("d.yaml", "state_dtype: fp32")
            .unwrap();
        assert_eq!(dense.memory_plan().state_bytes_per_seq, 0.0);
        assert_eq!(dense32.memory_plan().state_bytes_per_seq, 0.0);
        assert!(
            Deployment::from_yaml("bad.yaml", "base: qwen3.5-9b-2xl40\nstate_dtype: fp64\n")
                .unwrap_err()
                .to_string()
                .contains("state_dtype")
        );
    }

    #[test]
    fn presets_are_valid_and_overridable() {
        for d in Deployment::presets() {
            d.check().unwrap();
        }
        let d = Deployment::from_yaml(
            "d.yaml",
            "base: gemma4-e4b-1xl40\nengine:\n  max_num_seqs: 8\nslo:\n  ttft_s: 1.5\n",
        )
        .unwrap();
        assert_eq!(d.engine.max_num_seqs, 8);
        assert_eq!(
            d.engine.block_size, 16,
            "untouched fields keep the preset's value"
        );
        assert_eq!(d.slo.ttft_s, 1.5);
        assert_eq!(d.model, "gemma4-e4b");
    }

    #[test]
    fn bad_deployment_files_name_the_field() {
        let e = Deployment::from_yaml("d.yaml", "engine:\n  max_num_seqz: 8\n").unwrap_err();
        assert!(
            e.field.contains("engine") && e.reason.contains("max_num_seqz"),
            "{e}"
        );
        let e = Deployment::from_yaml("d.yaml", "tp: -1\n").unwrap_err();
        assert_eq!(e.field, "tp");
        let e = Deployment::from_yaml("d.yaml", "base: nope\n").unwrap_err();
        assert_eq!(e.field, "base");
        let e = Deployment::from_yaml("d.yaml", "engine:\n  gpu_memory_utilization: 1.5\n")
            .unwrap_err();
        assert_eq!(e.field, "engine.gpu_memory_utilization");
        let e = Deployment::from_yaml("d.yaml", "tp: [\n").unwrap_err();
        assert_eq!(e.file, "d.yaml");
        assert!(e.line > 0);
    }
}
