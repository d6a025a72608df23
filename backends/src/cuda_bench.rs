//! The CUDA engine measured on the GPU (the feature `cuda`): `cuda-bench`'s forward steps timed against
//! their floors, `calibrate --microbench`'s GEMM curves, copy bandwidth and step grid with the profile
//! fitted to the steps, and `cuda-check`'s cases file and model loaded. It prints nothing (what it would
//! say goes to the caller's `note`) and writes no file: the caller writes what it returns.

use crate::cuda_check::CheckFile;
use crate::engine_choice::cuda::{model_config, options, weights};
use crate::engine_choice::EngineChoice;
use anyhow::{anyhow, Context, Result};
use serverbench_calibration::calibrate::{fit_steps, parse_target, FitOptions, Provenance};
use serverbench_calibration::Fit;
use serverbench_cuda::bench::{self, BenchCase, BenchResult, Ceilings};
use serverbench_cuda::{microbench, Device, Model, ModelConfig, StepRecord, Weights};
use std::path::Path;

/// The environment variables the CUDA engine's kernel options come from, as the caller reads them.
pub type Vars = fn(&str) -> Option<String>;

/// A model whose KV pool and batch limits fit the largest of `cases`, with random KV, on GPU `gpu`.
pub fn bench_model(
    cases: &[BenchCase],
    cfg: ModelConfig,
    gpu: usize,
    vars: Vars,
    w: &Weights,
    note: &dyn Fn(&str),
) -> Result<Model> {
    let cap = bench::capacity_for(cases);
    let dev = Device::open(gpu, &options(vars)?)?;
    note(&format!(
        "cuda-bench: {} — {} layers, hidden {}, {:.2} B parameters; KV pool {} blocks",
        dev.name,
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.params() as f64 / 1e9,
        cap.num_blocks
    ));
    let model = Model::load(dev, cfg, w, cap)?;
    model.randomize_kv(7)?;
    Ok(model)
}

/// `--cases`' one case.
pub fn parse_case(s: &str) -> Result<BenchCase> {
    BenchCase::parse(s)
        .ok_or_else(|| anyhow!("--cases: {s:?} is not decode:B:CTX or prefill:LEN:CACHED"))
}

/// `cuda-bench`'s result: the GPU, each case's median against its floor, and every timed step.
pub struct Benched {
    /// The GPU's name.
    pub device: String,
    /// Each case's measurement.
    pub results: Vec<BenchResult>,
    /// Every timed step.
    pub records: Vec<StepRecord>,
}

impl Benched {
    /// bench.json's content (without its metadata).
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({ "device": self.device, "ceilings": Ceilings::default(), "results": self.results })
    }

    /// steps.jsonl: the steps as a step log for `calibrate --from-steps`.
    pub fn steps_jsonl(&self) -> String {
        let lines: Vec<String> = self
            .records
            .iter()
            .map(|r| serde_json::to_string(r).expect("serialises"))
            .collect();
        lines.join("\n") + "\n"
    }
}

/// Times `cases` (each `decode:B:CTX` or `prefill:LEN:CACHED`; none: the default table) `reps` times
/// each on the engine `e` describes, for the model preset `model` (or `e`'s model folder).
pub fn bench_cases(
    e: &EngineChoice<'_>,
    model: &str,
    cases: &[String],
    reps: usize,
    note: &dyn Fn(&str),
) -> Result<Benched> {
    let cfg = model_config(e.model_dir, model)?;
    let cases = match cases.is_empty() {
        true => bench::default_cases(),
        false => cases.iter().map(|s| parse_case(s)).collect::<Result<_>>()?,
    };
    let w = weights(e.weights);
    let mut model = bench_model(&cases, cfg, e.gpu, e.vars, &w, note)?;
    let (results, records) = bench::run(&mut model, &cases, reps.max(1), Ceilings::default())?;
    Ok(Benched {
        device: model.dev.name.clone(),
        results,
        records,
    })
}

/// `calibrate --microbench`'s result.
pub struct Microbenched {
    /// The profile fitted to the forward steps.
    pub fit: Fit,
    /// The `gate_up` GEMM's curve and the copy bandwidth, a line each.
    pub curves: String,
    /// microbench.json's content (without its metadata): the GPU, the curves and the steps.
    pub json: serde_json::Value,
}

/// GEMM curves, copy bandwidth and a grid of forward steps of the CUDA engine on GPU `gpu`, and the
/// profile `o` describes fitted to the steps, timed as `target` says (`wall` or `gpu`); `measured_on`
/// as given, else the GPU.
pub fn microbench_fit(
    o: &FitOptions,
    target: &str,
    measured_on: Option<&str>,
    gpu: usize,
    vars: Vars,
    note: &dyn Fn(&str),
) -> Result<Microbenched> {
    let cfg = ModelConfig::preset(&o.model).ok_or_else(|| {
        anyhow!(
            "--model: no CUDA model preset {:?} (presets: qwen3-8b)",
            o.model
        )
    })?;
    let cases = microbench::step_grid();
    let random = Weights::Random { seed: 0 };
    let mut model = bench_model(&cases, cfg.clone(), gpu, vars, &random, note)?;
    note("microbench: GEMM shapes");
    let tokens = [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
    ];
    let gemms = microbench::gemm_curve(&model.dev, &microbench::gemm_shapes(&cfg), &tokens, 10)?;
    note("microbench: copy bandwidth");
    let copy = microbench::copy_bandwidth(&model.dev, 1 << 30, 10)?;
    note(&format!("microbench: {} forward steps", cases.len()));
    let (results, records) = bench::run(&mut model, &cases, 5, Ceilings::default())?;
    let target = parse_target(target)?;
    let samples = microbench::step_samples(&records, target);
    let inputs = vec![format!(
        "microbenchmark on {}: {} forward steps ({} cases × 5), {} GEMM timings, copy bandwidth {:.0} GB/s",
        model.dev.name,
        samples.len(),
        cases.len(),
        gemms.len(),
        copy / 1e9
    )];
    let measured_on = measured_on.map_or_else(
        || {
            let name = &model.dev.name;
            format!("{name} (GPU {gpu}), serverbench CUDA engine microbenchmarks")
        },
        str::to_string,
    );
    let provenance = Provenance {
        method: "microbenchmark least squares",
        inputs,
        target: Some(target),
        measured_on: &measured_on,
    };
    Ok(Microbenched {
        fit: fit_steps(o, &samples, provenance)?,
        curves: microbench::curves_text(&gemms, copy),
        json: serde_json::json!({ "device": model.dev.name, "copy_bytes_per_s": copy, "gemm": gemms, "steps": results }),
    })
}

/// `cuda-check`'s cases file, and the model of `model_dir` (its config.json and safetensors weights)
/// loaded for it on GPU `gpu`, keeping logits.
pub fn check_inputs(
    model_dir: &Path,
    cases: &Path,
    gpu: usize,
    vars: Vars,
) -> Result<(CheckFile, Model)> {
    let path = cases.display().to_string();
    let text = std::fs::read_to_string(cases).with_context(|| format!("{path}: cannot read"))?;
    let file: CheckFile =
        serde_json::from_str(&text).with_context(|| format!("{path}: not a cases file"))?;
    let cfg = ModelConfig::from_file(&model_dir.join("config.json"))?;
    let dev = Device::open(gpu, &options(vars)?)?;
    let w = Weights::Safetensors(model_dir.to_path_buf());
    let mut model = Model::load(dev, cfg, &w, file.capacity())?;
    model.keep_logits = true;
    Ok((file, model))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case names its kind and sizes; anything else is refused naming the flag and both forms. (The
    /// measurements need a GPU: `cuda-bench` on one, docs/cuda-engine.md.)
    #[test]
    fn a_case_is_decode_or_prefill_with_its_sizes() {
        assert!(parse_case("decode:8:4096").is_ok());
        assert!(parse_case("prefill:512:0").is_ok());
        let e = parse_case("decode:8").unwrap_err().to_string();
        assert_eq!(
            e,
            "--cases: \"decode:8\" is not decode:B:CTX or prefill:LEN:CACHED"
        );
    }

    /// bench.json names the GPU and the ceilings; steps.jsonl has a line per step (none here).
    #[test]
    fn a_bench_without_steps_writes_its_ceilings_and_an_empty_log() {
        let b = Benched {
            device: "gpu".into(),
            results: Vec::new(),
            records: Vec::new(),
        };
        let json = b.json();
        assert_eq!(json["device"], "gpu");
        assert!(json["ceilings"]["bandwidth"].as_f64().unwrap() > 0.0);
        assert_eq!(b.steps_jsonl(), "\n");
    }
}
