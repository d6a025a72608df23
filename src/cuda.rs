//! `serverbench cuda-bench` and `cuda-check`, and the CUDA options of `serve` and `replay`: argument
//! handling around the `serverbench-cuda` crate (with the feature `cuda`; without it, `no_cuda.rs`).

use crate::cli::{CudaBenchArgs, CudaCheckArgs, EngineArgs};
use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use serverbench_backends::{prompt_blocks, Cuda, CudaServe, EngineCore};
use serverbench_cuda::bench::{self, BenchCase, Ceilings};
use serverbench_cuda::{Capacity, CudaEngine, CudaOptions, Device, Model, ModelConfig, Weights};
use serverbench_sim::{EngineConfig, Replica, ReplicaOptions, SeqEvent, SeqInput};
use serverbench_workloads::RequestKind;
use std::collections::HashMap;
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
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize| -> Result<u32> {
        parts
            .get(i)
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| anyhow!("--cases: {s:?} is not decode:B:CTX or prefill:LEN:CACHED"))
    };
    match parts.first() {
        Some(&"decode") => Ok(BenchCase::decode(num(1)?, num(2)?)),
        Some(&"prefill") => Ok(BenchCase::prefill(num(1)?, num(2)?)),
        _ => bail!("--cases: {s:?} is not decode:B:CTX or prefill:LEN:CACHED"),
    }
}

/// The table: decode at batch 1–64 over 4K and 32K contexts, prefill 2K and 8K, 2K over 32K.
fn default_cases() -> Vec<BenchCase> {
    let mut v = Vec::new();
    for b in [1, 4, 8, 16, 32, 64] {
        v.push(BenchCase::decode(b, 4096));
    }
    for b in [1, 4, 16] {
        v.push(BenchCase::decode(b, 32768));
    }
    for (l, p) in [(512, 0), (2048, 0), (8192, 0), (2048, 32768)] {
        v.push(BenchCase::prefill(l, p));
    }
    v
}

pub fn bench(a: CudaBenchArgs) -> Result<()> {
    let cfg = model_config(&a.engine, &a.model)?;
    let cases = if a.cases.is_empty() {
        default_cases()
    } else {
        a.cases
            .iter()
            .map(|s| parse_case(s))
            .collect::<Result<_>>()?
    };
    let mut model = model_for(&cases, cfg, a.engine.gpu, &weights(&a.engine))?;
    let (results, records) = bench::run(&mut model, &cases, a.reps.max(1), Ceilings::default())?;
    outln!(
        "  {:<28} {:>10} {:>10} {:>7} {:>9}",
        "case",
        "median ms",
        "floor ms",
        "ratio",
        "TFLOP/s"
    )?;
    for r in &results {
        outln!(
            "  {:<28} {:>10.3} {:>10.3} {:>7.2} {:>9.1}",
            r.name,
            r.median_ms,
            r.floor_ms,
            r.ratio,
            r.tflops
        )?;
    }
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

#[derive(Deserialize)]
struct CheckFile {
    cases: Vec<CheckCase>,
}

#[derive(Deserialize)]
struct CheckCase {
    name: String,
    /// Token budget per step (small values force chunked prefill).
    max_tokens: u32,
    /// Requests in waves: a wave starts when the previous one has finished.
    waves: Vec<Vec<CheckRequest>>,
    /// Output steps whose logits are written.
    logit_steps: Vec<u32>,
}

#[derive(Deserialize)]
struct CheckRequest {
    prompt: Vec<u32>,
    output: u32,
}

pub fn check(a: CudaCheckArgs) -> Result<()> {
    let path = a.cases.display().to_string();
    let text = std::fs::read_to_string(&a.cases).with_context(|| format!("{path}: cannot read"))?;
    let file: CheckFile =
        serde_json::from_str(&text).with_context(|| format!("{path}: not a cases file"))?;
    let cfg = ModelConfig::from_file(&a.model_dir.join("config.json"))?;
    let max_tokens = file.cases.iter().map(|c| c.max_tokens).max().unwrap_or(256);
    let cap = Capacity {
        num_blocks: 4096,
        block_size: 16,
        max_tokens,
        max_seqs: 64,
        max_context: 16384,
    };
    let dev = Device::open(a.gpu, &options()?)?;
    let mut model = Model::load(dev, cfg, &Weights::Safetensors(a.model_dir.clone()), cap)?;
    model.keep_logits = true;
    let mut out_cases = Vec::new();
    for case in &file.cases {
        let ecfg = EngineConfig {
            block_size: 16,
            max_num_batched_tokens: case.max_tokens,
            max_num_seqs: 64,
            ..EngineConfig::default()
        };
        let replica = Replica::paged(&ecfg, cap.num_blocks as u64, ReplicaOptions::default())?;
        let exec = Cuda {
            engine: CudaEngine::new(model, None),
        };
        let mut core = EngineCore::new(replica, exec, 1.0);
        let (results, steps) = check_case(case, &mut core)?;
        eprintln!(
            "cuda-check: {} — {} requests, {} steps, {} preemptions",
            case.name,
            results.len(),
            steps,
            core.replica().stats.preemptions
        );
        out_cases.push(serde_json::json!({ "name": case.name, "requests": results }));
        model = core.into_executor().engine.model;
    }
    std::fs::write(
        &a.out,
        serde_json::to_string(&serde_json::json!({ "cases": out_cases }))?,
    )
    .with_context(|| format!("{}: cannot write", a.out.display()))?;
    Ok(())
}

/// Runs one case's waves through the engine: each request's tokens, cached prompt tokens and the
/// logits of the asked-for output steps; and the steps it took.
fn check_case(
    case: &CheckCase,
    core: &mut EngineCore<Cuda>,
) -> Result<(Vec<serde_json::Value>, u64)> {
    let mut results = Vec::new();
    let mut tag = 0u64;
    let mut steps = 0u64;
    for wave in &case.waves {
        let mut logits: HashMap<u64, serde_json::Map<String, serde_json::Value>> = HashMap::new();
        let mut made: HashMap<u64, u32> = HashMap::new();
        let first = tag;
        for r in wave {
            let input = SeqInput {
                tag,
                blocks: prompt_blocks(&r.prompt),
                workload_block_size: 16,
                input: r.prompt.len() as u32,
                output: r.output,
                kind: RequestKind::RootTurn,
            };
            core.submit(input, r.prompt.clone());
            tag += 1;
        }
        let mut cached = HashMap::new();
        let mut done = HashMap::new();
        while let Some(stepped) = core.step().map_err(|e| anyhow!(e))? {
            steps += 1;
            let model = &core.exec.engine.model;
            let v = model.cfg.vocab_size as usize;
            for (row, &(t, _)) in stepped.output.sampled.iter().enumerate() {
                let k = made.entry(t).or_insert(0);
                if case.logit_steps.contains(k) {
                    let l = &model.last_logits[row * v..(row + 1) * v];
                    logits
                        .entry(t)
                        .or_default()
                        .insert(k.to_string(), serde_json::json!(l));
                }
                *k += 1;
            }
            for e in &stepped.events {
                if let SeqEvent::Finished { tag: t, seq } = *e {
                    cached.insert(t, core.replica().progress(seq).cached_tokens);
                }
            }
            for (t, tokens) in core.take_finished() {
                done.insert(t, tokens.unwrap_or_default());
            }
        }
        for (i, r) in wave.iter().enumerate() {
            let t = first + i as u64;
            let toks = done
                .remove(&t)
                .ok_or_else(|| anyhow!("{}: request {t} did not finish", case.name))?;
            results.push(serde_json::json!({
                "prompt_len": r.prompt.len(),
                "tokens": toks[r.prompt.len()..],
                "cached_tokens": cached.get(&t),
                "logits": logits.remove(&t).unwrap_or_default(),
            }));
        }
    }
    Ok((results, steps))
}

/// The CUDA engine's build and kernel options, from this process's environment variables
/// (`SERVERBENCH_CUDA_INCLUDE`, `SERVERBENCH_PREFILL_ATTN`, `SERVERBENCH_GEMV_MAX_ROWS`,
/// `SERVERBENCH_NO_CUDA_GRAPHS`; docs/cuda-engine.md).
pub fn options() -> Result<CudaOptions> {
    Ok(CudaOptions::from_vars(|k| std::env::var(k).ok())?)
}

/// A model whose KV pool and batch limits fit the largest of `cases`, with random KV.
pub fn model_for(cases: &[BenchCase], cfg: ModelConfig, gpu: usize, w: &Weights) -> Result<Model> {
    let tokens: u32 = cases
        .iter()
        .map(|c| {
            c.features.prefill.iter().map(|p| p.0).sum::<u32>() + c.features.decode.len() as u32
        })
        .max()
        .unwrap_or(1);
    let seqs = cases
        .iter()
        .map(|c| (c.features.prefill.len() + c.features.decode.len()) as u32)
        .max()
        .unwrap_or(1);
    let ctx: u32 = cases
        .iter()
        .flat_map(|c| {
            c.features
                .decode
                .iter()
                .copied()
                .chain(c.features.prefill.iter().map(|p| p.0 + p.1))
        })
        .max()
        .unwrap_or(1)
        + 1;
    let blocks: u32 = cases
        .iter()
        .map(|c| {
            c.features
                .decode
                .iter()
                .map(|&x| (x + 1).div_ceil(16))
                .sum::<u32>()
                + c.features
                    .prefill
                    .iter()
                    .map(|p| (p.0 + p.1).div_ceil(16))
                    .sum::<u32>()
        })
        .max()
        .unwrap_or(1);
    let cap = Capacity {
        num_blocks: blocks,
        block_size: 16,
        max_tokens: tokens,
        max_seqs: seqs,
        max_context: ctx,
    };
    let dev = Device::open(gpu, &options()?)?;
    eprintln!(
        "cuda-bench: {} — {} layers, hidden {}, {:.2} B parameters; KV pool {} blocks",
        dev.name,
        cfg.num_hidden_layers,
        cfg.hidden_size,
        cfg.params() as f64 / 1e9,
        blocks
    );
    let model = Model::load(dev, cfg, w, cap)?;
    model.randomize_kv(7)?;
    Ok(model)
}
