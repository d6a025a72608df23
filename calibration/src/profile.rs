//! Hardware/engine profiles: every efficiency of the cost model as a named, documented parameter, loaded from YAML.

use crate::ConfigError;
use serde::{Deserialize, Serialize};

/// Efficiencies and overheads of one engine on one kind of GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Profile name.
    pub name: String,
    /// The hardware preset these figures describe.
    pub hardware: String,
    /// True only when the coefficients were fitted from measurements.
    pub fitted: bool,
    /// What the numbers come from (datasheet, a step log, a microbenchmark), where and when.
    pub source: String,
    /// Fraction of peak tensor throughput reached by large GEMMs.
    pub gemm_efficiency: f64,
    /// Tokens per step at which GEMM efficiency reaches half of `gemm_efficiency` (small GEMMs run far below peak).
    pub gemm_half_tokens: f64,
    /// Fraction of peak tensor throughput reached by attention kernels.
    pub attention_efficiency: f64,
    /// Fraction of peak memory bandwidth reached when streaming weights and KV.
    pub memory_efficiency: f64,
    /// Fraction of link bandwidth reached by all-reduce.
    pub allreduce_efficiency: f64,
    /// Fixed cost of one step (scheduling, launch, sampling set-up), seconds.
    pub step_overhead_s: f64,
    /// Extra cost per sequence in the step (logits, sampling, bookkeeping), seconds.
    pub per_sequence_overhead_s: f64,
    /// Effective bandwidth of int4 (W4A16) GEMM kernels relative to bf16 ones (dequantisation costs).
    pub int4_bandwidth_efficiency: f64,
    /// Multiplier on linear-layer compute time for int4 weights (prefill is slower).
    pub int4_compute_penalty: f64,
    /// Speed-up of linear-layer compute for fp8 weights over bf16.
    pub fp8_compute_speedup: f64,
}

impl Profile {
    /// The built-in profiles (datasheet figures, not fitted).
    pub fn presets() -> Vec<Profile> {
        vec![
            Profile {
                name: "l40-datasheet".into(),
                hardware: "l40".into(),
                fitted: false,
                source: "L40 datasheet peaks; efficiencies are assumptions from published GEMM/bandwidth curves, not fitted".into(),
                gemm_efficiency: 0.70,
                gemm_half_tokens: 32.0,
                attention_efficiency: 0.45,
                memory_efficiency: 0.80,
                allreduce_efficiency: 0.70,
                step_overhead_s: 0.002,
                per_sequence_overhead_s: 20e-6,
                int4_bandwidth_efficiency: 0.75,
                int4_compute_penalty: 1.12,
                fp8_compute_speedup: 1.6,
            },
            Profile {
                name: "h200-datasheet".into(),
                hardware: "h200".into(),
                fitted: false,
                source: "H200 datasheet peaks and the reference's cuBLAS/streaming measurements; efficiencies not fitted".into(),
                gemm_efficiency: 0.80,
                gemm_half_tokens: 20.0,
                attention_efficiency: 0.50,
                memory_efficiency: 0.90,
                allreduce_efficiency: 0.70,
                step_overhead_s: 0.0015,
                per_sequence_overhead_s: 10e-6,
                int4_bandwidth_efficiency: 0.75,
                int4_compute_penalty: 1.12,
                fp8_compute_speedup: 1.6,
            },
        ]
    }

    /// A built-in profile by name.
    pub fn preset(name: &str) -> Option<Profile> {
        Self::presets().into_iter().find(|p| p.name == name)
    }

    /// Checks every coefficient; the error names the field.
    pub fn check(&self) -> Result<(), String> {
        let fractions = [
            ("gemm_efficiency", self.gemm_efficiency),
            ("attention_efficiency", self.attention_efficiency),
            ("memory_efficiency", self.memory_efficiency),
            ("allreduce_efficiency", self.allreduce_efficiency),
            ("int4_bandwidth_efficiency", self.int4_bandwidth_efficiency),
        ];
        for (name, v) in fractions {
            if !(v > 0.0 && v <= 1.0) {
                return Err(format!("{name}: must be in (0, 1], got {v}"));
            }
        }
        let non_negative = [
            ("gemm_half_tokens", self.gemm_half_tokens),
            ("step_overhead_s", self.step_overhead_s),
            ("per_sequence_overhead_s", self.per_sequence_overhead_s),
        ];
        for (name, v) in non_negative {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(format!("{name}: must be a non-negative number, got {v}"));
            }
        }
        if !(self.int4_compute_penalty >= 1.0 && self.fp8_compute_speedup >= 1.0) {
            return Err("int4_compute_penalty/fp8_compute_speedup: must be at least 1".into());
        }
        Ok(())
    }

    /// Parses a profile YAML, naming the file, line and field on error.
    pub fn from_yaml(file: &str, text: &str) -> Result<Profile, ConfigError> {
        let p: Profile = crate::parse_yaml(file, text)?;
        p.check().map_err(|e| ConfigError::from_check(file, &e))?;
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_labelled_and_round_trip() {
        for p in Profile::presets() {
            p.check().unwrap();
            assert!(!p.fitted, "datasheet profiles must say they are not fitted");
            let text = serde_yaml::to_string(&p).unwrap();
            assert_eq!(Profile::from_yaml("p.yaml", &text).unwrap(), p);
        }
    }

    #[test]
    fn malformed_profiles_name_the_field() {
        let mut text = serde_yaml::to_string(&Profile::preset("l40-datasheet").unwrap()).unwrap();
        text = text.replace("memory_efficiency: 0.8", "memory_efficiency: 1.8");
        let e = Profile::from_yaml("p.yaml", &text).unwrap_err();
        assert_eq!(e.field, "memory_efficiency");
        let e = Profile::from_yaml("p.yaml", "name: x\nhardware: [1]\n").unwrap_err();
        assert_eq!((e.file.as_str(), e.field.as_str()), ("p.yaml", "hardware"));
        assert_eq!(e.line, 2);
    }
}
