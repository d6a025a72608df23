//! Deployments: model + hardware + parallelism + engine knobs + prices + frozen SLO targets.
//! Presets are built in; a YAML file names a `base` preset and overrides any field. Parsing is pure (no file IO here).

use serde::{Deserialize, Serialize};
use serverbench_calibration::{
    memory_plan, parse_yaml, ConfigError, CostInputs, CostModel, HardwareSpec, MemoryPlan,
    ModelSpec, Profile, WeightDtype, GIB,
};

/// Scheduler policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// vLLM: decode first, then prefill chunks in arrival order; recompute preemption of the newest request.
    Vllm,
}

/// How a preempted request gives back its KV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preemption {
    /// Drop its KV and recompute prompt + generated tokens when it is scheduled again.
    Recompute,
}

/// The engine's knobs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Scheduler policy.
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
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: Policy::Vllm,
            block_size: 16,
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            gpu_memory_utilization: 0.9,
            activation_reserve_gib: 1.0,
            preemption: Preemption::Recompute,
            prefix_caching: true,
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
    /// Weight format.
    pub weights: WeightDtype,
    /// Quantisation group size (int4).
    pub quant_group_size: u32,
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
            weights,
            quant_group_size: 128,
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
        h200.profile = "h200-datasheet".into();
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
        let overrides: serde_yaml::Value = parse_yaml(file, text)?;
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
                "profile: unknown profile {:?} (known: l40-datasheet, h200-datasheet)",
                self.profile
            ));
        }
        let e = &self.engine;
        let checks = [
            (self.tp == 0, "tp: must be at least 1"),
            (self.dp != 1, "dp: only 1 replica is modelled so far"),
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
        ];
        match checks.iter().find(|(bad, _)| *bad) {
            Some((_, msg)) => Err(msg.to_string()),
            None => Ok(()),
        }
    }

    /// The model spec.
    pub fn model_spec(&self) -> ModelSpec {
        ModelSpec::preset(&self.model).expect("checked model")
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
        })
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
