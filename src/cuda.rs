//! `serverbench cuda-bench` and `cuda-check`, and the CUDA options of `serve` and `replay`: argument
//! handling around the `serverbench-cuda` crate (its bench cases and capacity, `bench`) and
//! `serverbench_backends::cuda_check` (with the feature `cuda`; without it, `no_cuda.rs`).

use crate::cli::{CudaBenchArgs, CudaCheckArgs, EngineArgs};
use anyhow::{anyhow, bail, Context, Result};
use serverbench_backends::cuda_check::{self, CheckFile};
use serverbench_backends::CudaServe;
use serverbench_cuda::bench::{self, BenchCase, Ceilings};
use serverbench_cuda::{CudaOptions, Device, Model, ModelConfig, Weights};
use std::path::PathBuf;

/// The model shape: `--model-dir`'s config.json, else the preset `model`.
pub fn model_config(a: &EngineArgs, model: &str) -> Result<ModelConfig> {
    match &a.model_dir {
        Some(dir) => Ok(ModelConfig::from_file(&dir.join("config.json"))?),
        None => ModelConfig::preset(model).ok_or_else(|| {
            anyhow!(
                "--model: no CUDA model preset {model:?} (presets: qwen3-8b); or give --model-dir"
            )
        }),
    }
}

/// The vocabulary size of the CUDA engine's model (`model_config`'s).
pub fn vocab_size(a: &EngineArgs, model: &str) -> Result<u32> {
    Ok(model_config(a, model)?.vocab_size)
}

fn weights(a: &EngineArgs) -> Weights {
    match a.weights.as_str() {
        "random" => Weights::Random { seed: 0 },
        p => Weights::Safetensors(PathBuf::from(p)),
    }
}

/// The CUDA engine's set-up when `--engine cuda`, else `None`.
pub fn serve_setup(a: &EngineArgs, model: &str) -> Result<Option<CudaServe>> {
    match a.engine.as_str() {
        "emulated" => Ok(None),
        "cuda" => Ok(Some(CudaServe {
            gpu: a.gpu,
            model: model_config(a, model)?,
            weights: weights(a),
            step_log: a.step_log.clone(),
            options: options()?,
        })),
        other => bail!("--engine: expected emulated or cuda, got {other:?}"),
    }
}

fn parse_case(s: &str) -> Result<BenchCase> {
    BenchCase::parse(s)
        .ok_or_else(|| anyhow!("--cases: {s:?} is not decode:B:CTX or prefill:LEN:CACHED"))
}

pub fn bench(a: CudaBenchArgs) -> Result<()> {
    let cfg = model_config(&a.engine, &a.model)?;
    let cases = if a.cases.is_empty() {
        bench::default_cases()
    } else {
        a.cases
            .iter()
            .map(|s| parse_case(s))
            .collect::<Result<_>>()?
    };
    let mut model = model_for(&cases, cfg, a.engine.gpu, &weights(&a.engine))?;
    let (results, records) = bench::run(&mut model, &cases, a.reps.max(1), Ceilings::default())?;
    out!("{}", bench::results_table(&results))?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create directory", dir.display()))?;
        crate::output::write_json(
            dir,
            "bench.json",
            &crate::meta::now(None),
            &serde_json::json!({ "device": model.dev.name, "ceilings": Ceilings::default(), "results": results }),
        )?;
        let lines: Vec<String> = records
            .iter()
            .map(|r| serde_json::to_string(r).expect("serialises"))
            .collect();
        std::fs::write(dir.join("steps.jsonl"), lines.join("\n") + "\n")
            .with_context(|| format!("{}: cannot write steps.jsonl", dir.display()))?;
    }
    Ok(())
}

pub fn check(a: CudaCheckArgs) -> Result<()> {
    let path = a.cases.display().to_string();
    let text = std::fs::read_to_string(&a.cases).with_context(|| format!("{path}: cannot read"))?;
    let file: CheckFile =
        serde_json::from_str(&text).with_context(|| format!("{path}: not a cases file"))?;
    let cfg = ModelConfig::from_file(&a.model_dir.join("config.json"))?;
    let dev = Device::open(a.gpu, &options()?)?;
    let weights = Weights::Safetensors(a.model_dir.clone());
    let mut model = Model::load(dev, cfg, &weights, file.capacity())?;
    model.keep_logits = true;
    let out = cuda_check::run(&file, model, &mut |line| eprintln!("{line}"))?;
    std::fs::write(&a.out, serde_json::to_string(&out)?)
        .with_context(|| format!("{}: cannot write", a.out.display()))?;
    Ok(())
}

/// The CUDA engine's build and kernel options, from this process's environment variables
/// (`SERVERBENCH_CUDA_INCLUDE`, `SERVERBENCH_PREFILL_ATTN`, `SERVERBENCH_GEMV_MAX_ROWS`,
/// `SERVERBENCH_NO_CUDA_GRAPHS`; docs/cuda-engine.md).
pub fn options() -> Result<CudaOptions> {
    Ok(CudaOptions::from_vars(|k| std::env::var(k).ok())?)
}

/// A model whose KV pool and batch limits fit the largest of `cases`, with random KV.
pub fn model_for(cases: &[BenchCase], cfg: ModelConfig, gpu: usize, w: &Weights) -> Result<Model> {
    let cap = bench::capacity_for(cases);
    let dev = Device::open(gpu, &options()?)?;
    eprintln!(
        "cuda-bench: {} — {} layers, hidden {}, {:.2} B parameters; KV pool {} blocks",
        dev.name,
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.params() as f64 / 1e9,
        cap.num_blocks
    );
    let model = Model::load(dev, cfg, w, cap)?;
    model.randomize_kv(7)?;
    Ok(model)
}
