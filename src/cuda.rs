//! `serverbench cuda-bench` and `cuda-check`: argument handling around the `serverbench-cuda` crate
//! (its bench cases and capacity, `bench`) and `serverbench_backends::cuda_check` (with the feature
//! `cuda`; without it, `no_cuda.rs`). The CUDA set-up of `serve` and `replay` is
//! `serverbench_backends::engine_choice`'s.

use crate::cli::{CudaBenchArgs, CudaCheckArgs};
use anyhow::{anyhow, Context, Result};
use serverbench_backends::cuda_check::{self, CheckFile};
use serverbench_backends::engine_choice::cuda::{model_config, options, weights};
use serverbench_cuda::bench::{self, BenchCase, Ceilings};
use serverbench_cuda::{Device, Model, ModelConfig, Weights};

/// The CUDA engine's options come from this process's environment.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn parse_case(s: &str) -> Result<BenchCase> {
    BenchCase::parse(s)
        .ok_or_else(|| anyhow!("--cases: {s:?} is not decode:B:CTX or prefill:LEN:CACHED"))
}

pub fn bench(a: CudaBenchArgs) -> Result<()> {
    let cfg = model_config(a.engine.model_dir.as_deref(), &a.model)?;
    let cases = if a.cases.is_empty() {
        bench::default_cases()
    } else {
        a.cases
            .iter()
            .map(|s| parse_case(s))
            .collect::<Result<_>>()?
    };
    let mut model = model_for(&cases, cfg, a.engine.gpu, &weights(&a.engine.weights))?;
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
    let dev = Device::open(a.gpu, &options(env)?)?;
    let weights = Weights::Safetensors(a.model_dir.clone());
    let mut model = Model::load(dev, cfg, &weights, file.capacity())?;
    model.keep_logits = true;
    let out = cuda_check::run(&file, model, &mut |line| eprintln!("{line}"))?;
    std::fs::write(&a.out, serde_json::to_string(&out)?)
        .with_context(|| format!("{}: cannot write", a.out.display()))?;
    Ok(())
}

/// A model whose KV pool and batch limits fit the largest of `cases`, with random KV.
pub fn model_for(cases: &[BenchCase], cfg: ModelConfig, gpu: usize, w: &Weights) -> Result<Model> {
    let cap = bench::capacity_for(cases);
    let dev = Device::open(gpu, &options(env)?)?;
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
