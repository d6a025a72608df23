//! `cuda-check`: the CUDA engine run on the prompts of a cases file, wave by wave, recording each
//! request's tokens, its cached prompt tokens and the logits of the asked-for output steps (which
//! scripts/cuda_check.py compares with a reference implementation). It reads and writes no file; the
//! caller loads the model and writes what this returns.

use crate::engine::{Cuda, EngineCore};
use crate::prompt_blocks;
use anyhow::{anyhow, Result};
use serde::Deserialize;
use serverbench_cuda::{Capacity, CudaEngine, Model};
use serverbench_sim::{EngineConfig, Replica, ReplicaOptions, SeqEvent, SeqInput};
use serverbench_workloads::RequestKind;
use std::collections::HashMap;

/// A cases file.
#[derive(Deserialize)]
pub struct CheckFile {
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

/// KV blocks of the model `cuda-check` loads.
const BLOCKS: u32 = 4096;

impl CheckFile {
    /// The model's KV pool and limits: 4,096 blocks of 16, the largest step budget of any case.
    pub fn capacity(&self) -> Capacity {
        Capacity {
            num_blocks: BLOCKS,
            block_size: 16,
            max_tokens: self.cases.iter().map(|c| c.max_tokens).max().unwrap_or(256),
            max_seqs: 64,
            max_context: 16384,
        }
    }
}

/// Runs every case on `model` (loaded with [`CheckFile::capacity`] and `keep_logits`), a fresh engine
/// per case; `note` gets one line per case. Returns `{"cases": [{"name", "requests"}]}`.
pub fn run(
    file: &CheckFile,
    mut model: Model,
    note: &mut dyn FnMut(String),
) -> Result<serde_json::Value> {
    let mut out_cases = Vec::new();
    for case in &file.cases {
        let ecfg = EngineConfig {
            block_size: 16,
            max_num_batched_tokens: case.max_tokens,
            max_num_seqs: 64,
            ..EngineConfig::default()
        };
        let replica = Replica::paged(&ecfg, BLOCKS as u64, ReplicaOptions::default())?;
        let exec = Cuda {
            engine: CudaEngine::new(model, None),
        };
        let mut core = EngineCore::new(replica, exec, 1.0);
        let (results, steps) = check_case(case, &mut core)?;
        note(format!(
            "cuda-check: {} — {} requests, {} steps, {} preemptions",
            case.name,
            results.len(),
            steps,
            core.replica().stats.preemptions
        ));
        out_cases.push(serde_json::json!({ "name": case.name, "requests": results }));
        model = core.into_executor().engine.model;
    }
    Ok(serde_json::json!({ "cases": out_cases }))
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
