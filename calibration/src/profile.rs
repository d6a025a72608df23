//! Hardware/engine profiles: every efficiency of the cost model as a named, documented parameter, loaded from YAML.

use serde::{Deserialize, Serialize};
use serverbench_config::{FieldError, InputError};
use std::sync::OnceLock;

/// Highest `shared_kv_efficiency` a profile may give: re-reads served from cache at 100× the memory
/// bandwidth are as good as free.
pub const MAX_SHARED_KV_EFFICIENCY: f64 = 100.0;

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
    /// Time from a client sending a request to the engine seeing it (HTTP, parsing the prompt, the hand-over
    /// to the engine's loop), seconds; the simulator delays each request's arrival by it. 0 if absent.
    #[serde(default)]
    pub request_latency_s: f64,
    /// Host time the server's front end spends on each prompt token before the engine can schedule the
    /// request (vLLM: validating the token list, hashing the prompt's blocks for the prefix cache),
    /// seconds per token, one request at a time: a request whose predecessor is still being taken in
    /// waits for it. The simulator adds it to `request_latency_s`. 0 if absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub frontend_s_per_token: f64,
    /// Host time the front end spends on each prompt token of a prompt sent as chat messages (the chat
    /// template and the tokenizer, which a prompt of token ids skips), seconds per token, on top of
    /// `frontend_s_per_token` and in the same one-at-a-time queue. The simulator charges it under the
    /// AgentX protocols, whose requests are chat completions. 0 if absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tokenize_s_per_token: f64,
    /// Extra cost per sequence in the step (logits, sampling, bookkeeping), seconds.
    pub per_sequence_overhead_s: f64,
    /// Effective bandwidth of int4 (W4A16) GEMM kernels relative to bf16 ones (dequantisation costs).
    pub int4_bandwidth_efficiency: f64,
    /// Multiplier on linear-layer compute time for int4 weights (prefill is slower).
    pub int4_compute_penalty: f64,
    /// Speed-up of linear-layer compute for fp8 weights over bf16.
    pub fp8_compute_speedup: f64,
    /// How the step's parts combine into its time (`roofline` unless the profile says otherwise).
    #[serde(default)]
    pub step_time: StepTime,
    /// Which (query, key) pairs the engine's attention computes (`per_sequence` unless the profile says
    /// otherwise).
    #[serde(default, skip_serializing_if = "AttentionLayout::is_per_sequence")]
    pub attention_layout: AttentionLayout,
    /// Prefill attention's sweep: seconds per KV token one round of query tiles takes to sweep (all layers
    /// together). A short chunk over a long prefix cannot fill the GPU, so its attention costs its span,
    /// not its pairs; 0 means no sweep term.
    #[serde(default)]
    pub attention_sweep_s_per_token: f64,
    /// Prefill attention's first-round latency: seconds per KV token of the longest span, once per step
    /// with prefill, on top of the rounds' sweep (the kernel's blocks are latency-bound, so the first
    /// round costs more than each further one); 0 means none.
    #[serde(default)]
    pub attention_span_s_per_token: f64,
    /// Query tokens per attention tile of the engine's prefill kernel (0: no tiling, one round per step).
    #[serde(default)]
    pub attention_tile_tokens: u32,
    /// Tiles (× query heads) the GPU runs at once; more make another round.
    #[serde(default)]
    pub attention_parallel_tiles: f64,
    /// Fraction of peak memory bandwidth reached by attention reading and writing KV (`memory_efficiency` if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_efficiency: Option<f64>,
    /// Fraction of peak memory bandwidth reached streaming weights in a step of exactly one token (a
    /// batch-1 decode), for engines that switch to a GEMV kernel there (`memory_efficiency` if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_row_memory_efficiency: Option<f64>,
    /// Fraction of peak memory bandwidth at which decode attention re-reads KV blocks that another decode
    /// sequence of the same step also reads (a shared prefix: after the first read the block comes from
    /// L2, so this may exceed 1). `kv_efficiency` if absent: every read counts as a read from memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_kv_efficiency: Option<f64>,
    /// Host time to launch one decoder layer of a step that runs without a CUDA graph, seconds: such a
    /// step takes at least `layers` times this (the GPU waits for its kernels). Which steps replay a
    /// graph is the engine's (`engine.cuda_graph_max_tokens`); 0 if absent: launches always hidden.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub eager_s_per_layer: f64,
    /// Time a step replayed as piecewise CUDA graphs (a step with prefill, up to the engine's graph
    /// size) spends beyond its GPU work, per decoder layer, seconds: the host launching the eager
    /// attention between the captured pieces leaves the GPU idle. 0 if absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub piecewise_gap_s_per_layer: f64,
    /// Time a step that runs without a CUDA graph spends beyond its GPU work, per decoder layer,
    /// seconds: the host launching kernels shorter than their launch leaves the GPU idle between them
    /// (beside `eager_s_per_layer`, the floor of a step the host cannot launch in its GPU time). 0 if
    /// absent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub eager_gap_s_per_layer: f64,
    /// Fixed time of one routed (mixture-of-experts) layer in a step, seconds: the router's small GEMM,
    /// its top-k, the sort of the step's tokens by expert and the fused-MoE kernels' launch and tail —
    /// latency a step of any size pays once per routed layer, on top of the expert bytes it reads. 0 if
    /// absent; a model without routed experts never pays it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moe_layer_s: f64,
    /// Fraction of peak memory bandwidth reached streaming the routed experts' weights (the engine's
    /// fused-MoE kernel), in every step whatever its size. Absent: the experts stream as the dense
    /// weights do (`memory_efficiency`, `single_row_memory_efficiency` in a one-token step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_memory_efficiency: Option<f64>,
    /// Fraction of peak bf16 FLOPs the routed experts' GEMMs reach on a step's tokens (the engine's
    /// fused-MoE kernel). Absent: `gemm_efficiency`, as the dense GEMMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_gemm_efficiency: Option<f64>,
    /// The fused-MoE kernel's row tile by step size (Triton's `BLOCK_SIZE_M` in the engine's tuned
    /// configuration table for this model's expert shape on this GPU): a step uses the entry whose
    /// `tokens` is nearest its token count (the smaller on a tie, as vLLM picks), and each expert's
    /// routed rows are padded to a multiple of its `rows` before the GEMMs, which multiply the padded
    /// rows at `expert_gemm_efficiency` ([`crate::padding`]). Empty: no padding, the GEMMs count routed
    /// rows only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expert_tile_rows: Vec<ExpertTile>,
    /// Seconds a step waits while the engine compiles a fused-MoE kernel variant no earlier step
    /// needed (vLLM's Triton kernel, the first time a step outside the captured CUDA graphs runs a
    /// configuration of `expert_tile_rows` with its routed pairs aligned or not to 16:
    /// [`crate::compile`]). Needs every entry's `kernel`. 0 if absent: compiles are not modelled.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expert_compile_s: f64,
    /// The stated uncertainty of the figures, if the profile gives one (`sweep --band` runs both ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<Band>,
    /// How a fitted profile was obtained: the inputs, where and when, and the error of the fit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<FitRecord>,
}

/// One entry of a fused-MoE kernel's tile table ([`Profile::expert_tile_rows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertTile {
    /// The step size (tokens) the entry was tuned for.
    pub tokens: u32,
    /// Rows of one tile: each expert's rows are padded to a multiple of it.
    pub rows: u32,
    /// Which compiled kernel the entry's configuration is: entries whose whole configurations (tiles,
    /// warps, stages) are equal share an id, and one compile ([`Profile::expert_compile_s`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<u32>,
}

/// Largest tile a profile's `expert_tile_rows` may give (Triton fused-MoE configurations use 16 to 256).
pub const MAX_EXPERT_TILE_ROWS: u32 = 4096;

/// A profile's stated uncertainty, as relative half-widths (0.15: ±15 %).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// Compute-bound efficiencies: `gemm_efficiency`, `attention_efficiency`,
    /// `expert_gemm_efficiency`.
    pub compute: f64,
    /// Bandwidth-bound efficiencies: `memory_efficiency`, `kv_efficiency`, `single_row_memory_efficiency`,
    /// `expert_memory_efficiency`, `allreduce_efficiency`.
    pub memory: f64,
    /// Host costs: `step_overhead_s`, `per_sequence_overhead_s`, `request_latency_s`,
    /// `frontend_s_per_token`, `tokenize_s_per_token`, `eager_s_per_layer`, `piecewise_gap_s_per_layer`,
    /// `eager_gap_s_per_layer`, `moe_layer_s`.
    pub overhead: f64,
}

/// Which end of a profile's band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BandEnd {
    /// Every efficiency at its low end and every overhead at its high end: the slowest server the band allows.
    Slow,
    /// The opposite: the fastest.
    Fast,
}

/// How the parts of a step combine into its duration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepTime {
    /// `max(all compute, all memory traffic)` plus overheads: the whole step overlaps perfectly (docs/simulator.md).
    #[default]
    Roofline,
    /// Kernels run one after another: `max(weight streaming, GEMM compute)` + attention compute + KV traffic
    /// + overheads. What the fit uses; it matches an engine that launches its kernels in sequence.
    KernelSum,
}

/// Which (query, key) pairs a step's attention computes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionLayout {
    /// Each sequence's queries attend to its own keys (causal): paged-attention kernels (vLLM, SGLang,
    /// serverbench's CUDA engine).
    #[default]
    PerSequence,
    /// The step's queries of every sequence are packed into one row and attend to the keys of every
    /// sequence, a mask hiding the pairs that do not belong together: all `Q × (K + Q)` pairs are
    /// computed (`Q` query tokens of the step, `K` cached tokens its sequences read). What
    /// `transformers serve --continuous-batching` does with its `paged|sdpa` attention.
    Packed,
}

impl AttentionLayout {
    /// True for the default (not written to profile files).
    pub fn is_per_sequence(&self) -> bool {
        *self == AttentionLayout::PerSequence
    }
}

/// One operator class of a profile fitted from operator tables (`calibrate --from-ops`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpClassRecord {
    /// The class (`gemm (compute)`, `decode attention`, …).
    pub class: String,
    /// The profile field it set.
    pub field: String,
    /// The GPU its rows were measured on.
    pub gpu: String,
    /// The fitted value.
    pub value: f64,
    /// Rows fitted.
    pub rows_fitted: usize,
    /// Rows held out.
    pub rows_held_out: usize,
    /// Median of `predicted / measured − 1` over held-out rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out_median_error: Option<f64>,
    /// Median absolute error over held-out rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out_median_ape: Option<f64>,
}

/// Provenance and quality of a fitted profile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitRecord {
    /// The method (`step-log least squares`, `derived`, …).
    pub method: String,
    /// The inputs it was fitted from (files with their line counts, or the profile it was derived from).
    pub inputs: Vec<String>,
    /// The model whose steps were measured.
    pub model: String,
    /// Where the measurements were taken (GPU, engine, machine).
    pub measured_on: String,
    /// When the profile was fitted (UTC, RFC 3339).
    pub fitted_at: String,
    /// Which time of each step was fitted (`wall` or `gpu`), if fitted from steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Steps used to fit.
    #[serde(default)]
    pub steps_fitted: usize,
    /// Steps held out to measure the error (every fifth step).
    #[serde(default)]
    pub steps_held_out: usize,
    /// Median absolute percentage error of the step time on held-out steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out_median_ape: Option<f64>,
    /// 90th-percentile absolute percentage error on held-out steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out_p90_ape: Option<f64>,
    /// The weight-streaming efficiency the fit was given (measured elsewhere) instead of fitting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_efficiency_fixed: Option<f64>,
    /// The one-token steps' weight-streaming efficiency the fit was given instead of fitting it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_row_memory_efficiency_fixed: Option<f64>,
    /// Free-text notes: assumptions, uncertainty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub notes: String,
    /// Operator-table fits: per operator class, the field it set and its error on held-out rows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub op_classes: Vec<OpClassRecord>,
}

impl Profile {
    /// The built-in profiles (`presets/profiles/`): datasheet estimates, and the fitted and derived
    /// profiles with their provenance.
    pub fn presets() -> Vec<Profile> {
        static PARSED: OnceLock<Vec<Profile>> = OnceLock::new();
        PARSED
            .get_or_init(|| {
                serverbench_config::parse_presets("profiles", Profile::check, |p| &p.name)
            })
            .clone()
    }

    /// Names of the built-in profiles, comma-separated (for error messages).
    pub fn preset_names() -> String {
        serverbench_config::preset_names("profiles")
    }

    /// The profile at one end of its band (itself when it states none). Efficiencies stay at most 1
    /// (`shared_kv_efficiency`, which may exceed it, is scaled with the bandwidth terms without a cap).
    pub fn at_band_end(&self, end: BandEnd) -> Profile {
        let Some(b) = self.band else {
            return self.clone();
        };
        let sign = match end {
            BandEnd::Slow => -1.0,
            BandEnd::Fast => 1.0,
        };
        let eff = |x: f64, w: f64| (x * (1.0 + sign * w)).min(1.0);
        let cost = |x: f64| x * (1.0 - sign * b.overhead);
        let mut p = self.clone();
        p.gemm_efficiency = eff(p.gemm_efficiency, b.compute);
        p.attention_efficiency = eff(p.attention_efficiency, b.compute);
        p.expert_gemm_efficiency = p.expert_gemm_efficiency.map(|e| eff(e, b.compute));
        p.memory_efficiency = eff(p.memory_efficiency, b.memory);
        p.allreduce_efficiency = eff(p.allreduce_efficiency, b.memory);
        p.kv_efficiency = p.kv_efficiency.map(|e| eff(e, b.memory));
        p.single_row_memory_efficiency = p.single_row_memory_efficiency.map(|e| eff(e, b.memory));
        p.expert_memory_efficiency = p.expert_memory_efficiency.map(|e| eff(e, b.memory));
        p.shared_kv_efficiency = p.shared_kv_efficiency.map(|e| e * (1.0 + sign * b.memory));
        p.step_overhead_s = cost(p.step_overhead_s);
        p.per_sequence_overhead_s = cost(p.per_sequence_overhead_s);
        p.request_latency_s = cost(p.request_latency_s);
        p.frontend_s_per_token = cost(p.frontend_s_per_token);
        p.tokenize_s_per_token = cost(p.tokenize_s_per_token);
        p.eager_s_per_layer = cost(p.eager_s_per_layer);
        p.piecewise_gap_s_per_layer = cost(p.piecewise_gap_s_per_layer);
        p.eager_gap_s_per_layer = cost(p.eager_gap_s_per_layer);
        p.moe_layer_s = cost(p.moe_layer_s);
        p.expert_compile_s = cost(p.expert_compile_s);
        p.name = format!(
            "{} ({} end of its band)",
            p.name,
            match end {
                BandEnd::Slow => "slow",
                BandEnd::Fast => "fast",
            }
        );
        p
    }

    /// Keeps every efficiency and overhead of `self` (fractions of peak, host costs) and moves them to
    /// another GPU: the derivation of a profile for hardware that was not measured.
    pub fn derived_for(&self, hardware: &str, name: &str, record: FitRecord) -> Profile {
        Profile {
            name: name.into(),
            hardware: hardware.into(),
            fitted: false,
            source: format!(
                "derived from profile {} (its efficiencies and overheads) and the {hardware} datasheet peaks",
                self.name
            ),
            fit: Some(record),
            ..self.clone()
        }
    }

    /// The profile this one was moved from by [`Profile::derived_for`] (its fit record's method names it),
    /// if it was: its `band` was then measured on that profile's GPU, not on this one.
    pub fn derived_from(&self) -> Option<&str> {
        let method = &self.fit.as_ref()?.method;
        let rest = method.strip_prefix("derived from ")?;
        (!self.fitted).then(|| rest.split(" for ").next().unwrap_or(rest))
    }

    /// A built-in profile by name (only its file is parsed).
    pub fn preset(name: &str) -> Option<Profile> {
        serverbench_config::parse_preset("profiles", name, Profile::check, |p| &p.name)
    }

    /// Checks every coefficient; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        let fractions = [
            ("gemm_efficiency", self.gemm_efficiency),
            ("attention_efficiency", self.attention_efficiency),
            ("memory_efficiency", self.memory_efficiency),
            ("allreduce_efficiency", self.allreduce_efficiency),
            ("int4_bandwidth_efficiency", self.int4_bandwidth_efficiency),
        ];
        let kv = (
            "kv_efficiency",
            self.kv_efficiency.unwrap_or(self.memory_efficiency),
        );
        let single_row = (
            "single_row_memory_efficiency",
            self.single_row_memory_efficiency
                .unwrap_or(self.memory_efficiency),
        );
        let expert = (
            "expert_memory_efficiency",
            self.expert_memory_efficiency
                .unwrap_or(self.memory_efficiency),
        );
        let expert_gemm = (
            "expert_gemm_efficiency",
            self.expert_gemm_efficiency.unwrap_or(self.gemm_efficiency),
        );
        for (name, v) in fractions
            .into_iter()
            .chain([kv, single_row, expert, expert_gemm])
        {
            if !(v > 0.0 && v <= 1.0) {
                return Err(FieldError::new(name, format!("must be in (0, 1], got {v}")));
            }
        }
        let non_negative = [
            ("gemm_half_tokens", self.gemm_half_tokens),
            ("step_overhead_s", self.step_overhead_s),
            ("request_latency_s", self.request_latency_s),
            ("frontend_s_per_token", self.frontend_s_per_token),
            ("tokenize_s_per_token", self.tokenize_s_per_token),
            ("per_sequence_overhead_s", self.per_sequence_overhead_s),
            ("eager_s_per_layer", self.eager_s_per_layer),
            ("piecewise_gap_s_per_layer", self.piecewise_gap_s_per_layer),
            ("eager_gap_s_per_layer", self.eager_gap_s_per_layer),
            ("moe_layer_s", self.moe_layer_s),
            ("expert_compile_s", self.expert_compile_s),
            (
                "attention_sweep_s_per_token",
                self.attention_sweep_s_per_token,
            ),
            (
                "attention_span_s_per_token",
                self.attention_span_s_per_token,
            ),
            ("attention_parallel_tiles", self.attention_parallel_tiles),
        ];
        for (name, v) in non_negative {
            if !(v >= 0.0 && v.is_finite()) {
                return Err(FieldError::new(
                    name,
                    format!("must be a non-negative number, got {v}"),
                ));
            }
        }
        if let Some(e) = self.shared_kv_efficiency {
            if !(e > 0.0 && e <= MAX_SHARED_KV_EFFICIENCY) {
                return Err(FieldError::new(
                    "shared_kv_efficiency",
                    format!("must be in (0, {MAX_SHARED_KV_EFFICIENCY}], got {e}"),
                ));
            }
        }
        // A measured int4 or fp8 kernel may match or slightly beat the bf16 one it is compared with
        // (L40S: TensorRT-LLM's weight-only int4 at large batches runs at 0.95 × torch's bf16 time).
        for (name, v) in [
            ("int4_compute_penalty", self.int4_compute_penalty),
            ("fp8_compute_speedup", self.fp8_compute_speedup),
        ] {
            if !(0.5..=10.0).contains(&v) {
                return Err(FieldError::new(
                    name,
                    format!("must be between 0.5 and 10, got {v}"),
                ));
            }
        }
        self.check_expert_tiles()?;
        if self.attention_tile_tokens > 0 && self.attention_parallel_tiles <= 0.0 {
            return Err(FieldError::new(
                "attention_parallel_tiles",
                "must be positive when attention_tile_tokens is set",
            ));
        }
        if let Some(b) = self.band {
            for (name, w) in [
                ("band.compute", b.compute),
                ("band.memory", b.memory),
                ("band.overhead", b.overhead),
            ] {
                if !(0.0..1.0).contains(&w) {
                    return Err(FieldError::new(
                        name,
                        format!("must be at least 0 and below 1, got {w}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `expert_tile_rows`: tokens strictly ascending, each tile 1 to [`MAX_EXPERT_TILE_ROWS`] rows.
    fn check_expert_tiles(&self) -> Result<(), FieldError> {
        let mut last = 0;
        for (i, t) in self.expert_tile_rows.iter().enumerate() {
            if t.tokens <= last {
                return Err(FieldError::new(
                    "expert_tile_rows",
                    format!(
                        "entry {i}: tokens must be positive and ascending, got {} after {last}",
                        t.tokens
                    ),
                ));
            }
            if !(1..=MAX_EXPERT_TILE_ROWS).contains(&t.rows) {
                return Err(FieldError::new(
                    "expert_tile_rows",
                    format!(
                        "entry {i}: rows must be 1 to {MAX_EXPERT_TILE_ROWS}, got {}",
                        t.rows
                    ),
                ));
            }
            last = t.tokens;
        }
        let named = self.expert_tile_rows.iter().all(|t| t.kernel.is_some());
        if self.expert_compile_s != 0.0 && (self.expert_tile_rows.is_empty() || !named) {
            return Err(FieldError::new(
                "expert_compile_s",
                "needs expert_tile_rows whose every entry names its kernel",
            ));
        }
        Ok(())
    }

    /// Parses a profile YAML, naming the file, line and field on error.
    pub fn from_yaml(file: &str, text: &str) -> Result<Profile, InputError> {
        let p: Profile = serverbench_config::parse_yaml(file, text)?;
        p.check().map_err(|e| e.in_file(file, text))?;
        Ok(p)
    }
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_labelled_and_round_trip() {
        for p in Profile::presets()
            .into_iter()
            .filter(|p| p.name.ends_with("-datasheet"))
        {
            p.check().unwrap();
            assert!(!p.fitted, "datasheet profiles must say they are not fitted");
            let text = serde_yaml::to_string(&p).unwrap();
            assert_eq!(Profile::from_yaml("p.yaml", &text).unwrap(), p);
        }
    }

    #[test]
    fn shipped_profiles_parse_and_say_how_they_were_made() {
        let fitted = Profile::preset("h200-qwen3-8b-cuda").unwrap();
        assert!(fitted.fitted && fitted.step_time == StepTime::KernelSum);
        let record = fitted.fit.as_ref().unwrap();
        assert!(record.held_out_median_ape.is_some() && record.steps_held_out > 0);
        let derived = Profile::preset("l40-derived").unwrap();
        assert!(!derived.fitted, "a derived profile is not measured");
        assert_eq!(derived.hardware, "l40");
        assert!(derived.source.contains(
            "derived from profile h200-qwen3-8b-cuda as fitted to the mma.sync prefill attention"
        ));
        // The H200 fit of the mma.sync prefill attention an L40 runs, not the shipped one (fitted to the
        // Hopper-only warpgroup kernel): docs/calibration.md.
        assert_eq!(derived.gemm_efficiency, 0.6342325365283297);
        assert_ne!(derived.gemm_efficiency, fitted.gemm_efficiency);
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

    /// A tile table out of order, with a zero or oversized tile, or with unknown keys is refused by name.
    #[test]
    fn a_bad_expert_tile_table_names_the_field() {
        let base = serde_yaml::to_string(&Profile::preset("l40-datasheet").unwrap()).unwrap();
        for (table, says) in [
            (
                "[{tokens: 256, rows: 32}, {tokens: 128, rows: 16}]",
                "ascending",
            ),
            ("[{tokens: 0, rows: 16}]", "positive"),
            ("[{tokens: 1, rows: 0}]", "rows must be"),
            ("[{tokens: 1, rows: 100000}]", "rows must be"),
        ] {
            let text = format!("{base}expert_tile_rows: {table}\n");
            let e = Profile::from_yaml("p.yaml", &text).unwrap_err();
            assert_eq!(e.field, "expert_tile_rows", "{table}: {e}");
            assert!(e.to_string().contains(says), "{table}: {e}");
        }
        let text = format!("{base}expert_tile_rows: [{{tokens: 1, rows: 16, block_k: 64}}]\n");
        let e = Profile::from_yaml("p.yaml", &text).unwrap_err();
        assert!(e.to_string().contains("block_k"), "{e}");
        let text = format!(
            "{base}expert_tile_rows: [{{tokens: 1, rows: 16}}, {{tokens: 1024, rows: 128}}]\n"
        );
        let p = Profile::from_yaml("p.yaml", &text).unwrap();
        assert_eq!(
            p.expert_tile_rows[1],
            ExpertTile {
                tokens: 1024,
                rows: 128,
                kernel: None
            }
        );
        // A compile cost needs every entry's kernel, and is a number of seconds.
        for (fields, says) in [
            (
                "expert_tile_rows: [{tokens: 1, rows: 16, kernel: 0}, {tokens: 1024, rows: 128}]\nexpert_compile_s: 1.2\n",
                "names its kernel",
            ),
            ("expert_compile_s: 1.2\n", "names its kernel"),
            (
                "expert_tile_rows: [{tokens: 1, rows: 16, kernel: 0}]\nexpert_compile_s: -1\n",
                "non-negative",
            ),
        ] {
            let e = Profile::from_yaml("p.yaml", &format!("{base}{fields}")).unwrap_err();
            assert_eq!(e.field, "expert_compile_s", "{fields}: {e}");
            assert!(e.to_string().contains(says), "{fields}: {e}");
        }
        let text = format!(
            "{base}expert_tile_rows: [{{tokens: 1, rows: 16, kernel: 0}}, {{tokens: 1024, rows: 128, kernel: 1}}]\nexpert_compile_s: 1.2\n"
        );
        let p = Profile::from_yaml("p.yaml", &text).unwrap();
        assert_eq!(p.expert_tile_rows[1].kernel, Some(1));
        assert_eq!(p.expert_compile_s, 1.2);
    }

    #[test]
    fn a_band_moves_every_term_the_way_its_end_says() {
        let p = Profile::preset("l40-ops-sglang").unwrap();
        let b = p.band.expect("the operator-table profiles state a band");
        let slow = p.at_band_end(BandEnd::Slow);
        let fast = p.at_band_end(BandEnd::Fast);
        assert!((slow.gemm_efficiency - p.gemm_efficiency * (1.0 - b.compute)).abs() < 1e-12);
        assert_eq!(fast.gemm_efficiency, 1.0, "capped at the peak");
        assert!(slow.kv_efficiency < p.kv_efficiency && fast.kv_efficiency > p.kv_efficiency);
        assert!(
            slow.step_overhead_s > p.step_overhead_s && fast.step_overhead_s < p.step_overhead_s
        );
        slow.check().unwrap();
        fast.check().unwrap();
        let none = Profile::preset("l40-datasheet").unwrap();
        assert_eq!(none.at_band_end(BandEnd::Slow), none, "no band: unchanged");
        let mut bad = p.clone();
        bad.band = Some(Band { compute: 1.5, ..b });
        assert_eq!(bad.check().unwrap_err().field, "band.compute");
        // The mixture-of-experts terms move with the bandwidth and host halves.
        let moe = Profile::preset("h200-qwen3-30b-a3b-vllm").unwrap();
        let (b, slow) = (moe.band.unwrap(), moe.at_band_end(BandEnd::Slow));
        let e = moe.expert_memory_efficiency.unwrap();
        assert!((slow.expert_memory_efficiency.unwrap() - e * (1.0 - b.memory)).abs() < 1e-12);
        assert!((slow.moe_layer_s - moe.moe_layer_s * (1.0 + b.overhead)).abs() < 1e-15);
        // … and the experts' GEMM efficiency with the compute half.
        let g = moe.expert_gemm_efficiency.unwrap();
        assert!((slow.expert_gemm_efficiency.unwrap() - g * (1.0 - b.compute)).abs() < 1e-12);
    }

    #[test]
    fn the_moe_terms_are_checked_by_name() {
        let mut p = Profile::preset("h200-qwen3-30b-a3b-vllm").unwrap();
        p.check().unwrap();
        p.expert_memory_efficiency = Some(1.2);
        assert_eq!(p.check().unwrap_err().field, "expert_memory_efficiency");
        p.expert_memory_efficiency = None;
        p.expert_gemm_efficiency = Some(0.0);
        assert_eq!(p.check().unwrap_err().field, "expert_gemm_efficiency");
        p.expert_gemm_efficiency = None;
        p.moe_layer_s = -1e-6;
        assert_eq!(p.check().unwrap_err().field, "moe_layer_s");
    }
}
