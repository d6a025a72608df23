//! Timing of synthetic steps on the GPU (a decode batch at given contexts, a prefill chunk over a cached
//! prefix), each against its floor: bytes over memory bandwidth, FLOPs over the matrix rate.
//! Used by `serverbench cuda-bench` for the engine's speed table and as step logs for calibration.

use crate::batch::{pack, Entry, StepFeatures};
use crate::config::ModelConfig;
use crate::engine::StepRecord;
use crate::error::{CudaError, Result};
use crate::model::{Capacity, Model};
use serde::Serialize;

/// One synthetic step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchCase {
    /// Label.
    pub name: String,
    /// What the step computes.
    pub features: StepFeatures,
}

impl BenchCase {
    /// `batch` decodes at context `ctx` each.
    pub fn decode(batch: u32, ctx: u32) -> BenchCase {
        BenchCase {
            name: format!("decode b={batch} ctx={ctx}"),
            features: StepFeatures {
                prefill: Vec::new(),
                decode: vec![ctx; batch as usize],
                decode_kv_distinct: None,
            },
        }
    }

    /// One prefill chunk of `len` tokens after `cached` cached tokens.
    pub fn prefill(len: u32, cached: u32) -> BenchCase {
        BenchCase {
            name: format!("prefill {len} over {cached}"),
            features: StepFeatures {
                prefill: vec![(len, cached)],
                decode: Vec::new(),
                decode_kv_distinct: None,
            },
        }
    }

    /// `decode:B:CTX` or `prefill:LEN:CACHED` (`cuda-bench --cases`); `None` for anything else.
    pub fn parse(s: &str) -> Option<BenchCase> {
        let parts: Vec<&str> = s.split(':').collect();
        let num = |i: usize| parts.get(i).and_then(|x| x.parse::<u32>().ok());
        match parts.first() {
            Some(&"decode") => Some(BenchCase::decode(num(1)?, num(2)?)),
            Some(&"prefill") => Some(BenchCase::prefill(num(1)?, num(2)?)),
            _ => None,
        }
    }
}

/// The engine's speed table: decode at batch 1–64 over 4K and 32K contexts, prefill 512, 2K and 8K,
/// and 2K over 32K cached.
pub fn default_cases() -> Vec<BenchCase> {
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

/// A KV pool (blocks of 16) and batch limits that fit the largest of `cases`.
pub fn capacity_for(cases: &[BenchCase]) -> Capacity {
    let largest = |per_case: &dyn Fn(&StepFeatures) -> u32| {
        cases
            .iter()
            .map(|c| per_case(&c.features))
            .max()
            .unwrap_or(1)
    };
    let tokens = largest(&|f| f.prefill.iter().map(|p| p.0).sum::<u32>() + f.decode.len() as u32);
    let seqs = largest(&|f| (f.prefill.len() + f.decode.len()) as u32);
    let ctx = cases
        .iter()
        .flat_map(|c| {
            let prefill = c.features.prefill.iter().map(|p| p.0 + p.1);
            c.features.decode.iter().copied().chain(prefill)
        })
        .max()
        .unwrap_or(1)
        + 1;
    let blocks = largest(&|f| {
        let decode: u32 = f.decode.iter().map(|&x| (x + 1).div_ceil(16)).sum();
        decode
            + f.prefill
                .iter()
                .map(|p| (p.0 + p.1).div_ceil(16))
                .sum::<u32>()
    });
    Capacity {
        num_blocks: blocks,
        block_size: 16,
        max_tokens: tokens,
        max_seqs: seqs,
        max_context: ctx,
    }
}

/// `cuda-bench`'s table: each case's median time against its floor, and the FLOP/s it reached.
pub fn results_table(results: &[BenchResult]) -> String {
    let mut t = format!(
        "  {:<28} {:>10} {:>10} {:>7} {:>9}\n",
        "case", "median ms", "floor ms", "ratio", "TFLOP/s"
    );
    for r in results {
        t.push_str(&format!(
            "  {:<28} {:>10.3} {:>10.3} {:>7.2} {:>9.1}\n",
            r.name, r.median_ms, r.floor_ms, r.ratio, r.tflops
        ));
    }
    t
}

/// Rates the floors are computed against.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Ceilings {
    /// Memory bandwidth, bytes/s.
    pub bandwidth: f64,
    /// Dense bf16 matrix rate, FLOP/s.
    pub flops: f64,
}

impl Default for Ceilings {
    /// The H200 figures measured in docs/models-and-hardware.md.
    fn default() -> Self {
        Ceilings {
            bandwidth: 4.4e12,
            flops: 790e12,
        }
    }
}

/// A case's measurement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BenchResult {
    /// The case.
    pub name: String,
    /// Median GPU time, ms.
    pub median_ms: f64,
    /// Bytes the step must move (weights once, KV read).
    pub bytes: f64,
    /// FLOPs the step must do.
    pub flops: f64,
    /// max(bytes / bandwidth, FLOPs / rate), ms.
    pub floor_ms: f64,
    /// median / floor.
    pub ratio: f64,
    /// Achieved FLOP/s.
    pub tflops: f64,
}

/// Bytes and FLOPs a step must at least cost with this model.
pub fn work(cfg: &ModelConfig, f: &StepFeatures) -> (f64, f64) {
    let h = cfg.hidden_size as f64;
    let emb = cfg.vocab_size as f64 * h;
    let linear_params =
        cfg.params() as f64 - emb * if cfg.tie_word_embeddings { 0.0 } else { 1.0 } - emb;
    let tokens: f64 = f.prefill.iter().map(|p| p.0 as f64).sum::<f64>() + f.decode.len() as f64;
    let rows = (f.prefill.len() + f.decode.len()) as f64;
    let kv_tok = cfg.kv_bytes_per_token() as f64;
    let kv_read: f64 = f.decode.iter().map(|&c| c as f64).sum::<f64>() * kv_tok
        + f.prefill.iter().map(|p| p.1 as f64).sum::<f64>() * kv_tok;
    let bytes = 2.0 * (linear_params + emb) + kv_read;
    let per_layer = 4.0 * (cfg.num_attention_heads * cfg.head_dim()) as f64;
    let pairs: f64 = f
        .prefill
        .iter()
        .map(|&(l, p)| l as f64 * p as f64 + (l as f64) * (l as f64) / 2.0)
        .sum::<f64>()
        + f.decode.iter().map(|&c| c as f64).sum::<f64>();
    let flops = 2.0 * linear_params * tokens
        + 2.0 * emb * rows
        + per_layer * pairs * cfg.num_hidden_layers as f64;
    (bytes, flops)
}

/// Times each case `reps` times (after two warm-ups) on a model whose KV cache holds random values.
pub fn run(
    model: &mut Model,
    cases: &[BenchCase],
    reps: usize,
    ceil: Ceilings,
) -> Result<(Vec<BenchResult>, Vec<StepRecord>)> {
    let bs = model.cap.block_size;
    let mut results = Vec::new();
    let mut records = Vec::new();
    let mut rng = 0x1234_5678u64;
    for case in cases {
        let f = &case.features;
        let spans: Vec<(u32, u32)> = f
            .prefill
            .iter()
            .map(|&(l, p)| (p, l))
            .chain(f.decode.iter().map(|&c| (c, 1)))
            .collect();
        let mut next_block = 0u32;
        let mut tables = Vec::new();
        let mut toks = Vec::new();
        for &(start, n) in &spans {
            let blocks = (start + n).div_ceil(bs);
            if next_block + blocks > model.cap.num_blocks {
                return Err(CudaError::Config(format!(
                    "{}: needs more than the {} KV blocks allocated",
                    case.name, model.cap.num_blocks
                )));
            }
            tables.push((next_block..next_block + blocks).collect::<Vec<u32>>());
            next_block += blocks;
            toks.push(
                (0..n)
                    .map(|_| {
                        rng = crate::hash(rng, 1);
                        (rng % model.cfg.vocab_size as u64) as u32
                    })
                    .collect::<Vec<u32>>(),
            );
        }
        let entries: Vec<Entry> = spans
            .iter()
            .zip(&tables)
            .zip(&toks)
            .enumerate()
            .map(|(i, ((&(start, _), t), tk))| Entry {
                tag: i as u64,
                start,
                tokens: tk,
                table: t,
                emits: true,
            })
            .collect();
        let packed = pack(&entries, bs, model.cfg.query_group());
        let mut times = Vec::new();
        for k in 0..reps + 2 {
            let a = model.dev.mark()?;
            model.forward(&packed)?;
            let b = model.dev.mark()?;
            b.synchronize()?;
            if k >= 2 {
                times.push(a.elapsed_ms(&b)? as f64);
            }
        }
        times.sort_by(f64::total_cmp);
        let median = times[times.len() / 2];
        let (bytes, flops) = work(&model.cfg, f);
        let floor = (bytes / ceil.bandwidth).max(flops / ceil.flops) * 1e3;
        results.push(BenchResult {
            name: case.name.clone(),
            median_ms: median,
            bytes,
            flops,
            floor_ms: floor,
            ratio: median / floor,
            tflops: flops / (median * 1e-3) / 1e12,
        });
        for (i, &t) in times.iter().enumerate() {
            records.push(StepRecord {
                step: i as u64,
                start_s: 0.0,
                gpu_ms: t,
                wall_ms: t,
                features: packed.features.clone(),
            });
        }
    }
    Ok((results, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_parse_and_the_pool_fits_the_largest() {
        assert_eq!(
            BenchCase::parse("decode:4:4096"),
            Some(BenchCase::decode(4, 4096))
        );
        assert_eq!(
            BenchCase::parse("prefill:2048:0"),
            Some(BenchCase::prefill(2048, 0))
        );
        assert_eq!(BenchCase::parse("decode:4"), None);
        assert_eq!(BenchCase::parse("mixed:1:2"), None);
        assert_eq!(default_cases().len(), 13);
        let cap = capacity_for(&[BenchCase::decode(4, 4096), BenchCase::prefill(2048, 32768)]);
        assert_eq!(cap.max_tokens, 2048);
        assert_eq!(cap.max_seqs, 4);
        assert_eq!(cap.max_context, 34817);
        assert_eq!(cap.num_blocks, (32768 + 2048) / 16);
        assert_eq!(capacity_for(&[BenchCase::decode(1, 15)]).num_blocks, 1);
    }

    #[test]
    fn the_table_has_a_line_per_case() {
        let r = BenchResult {
            name: "decode b=1 ctx=4096".into(),
            median_ms: 4.1234,
            bytes: 0.0,
            flops: 0.0,
            floor_ms: 3.9,
            ratio: 1.057,
            tflops: 4.06,
        };
        assert_eq!(
            results_table(&[r]),
            "  case                          median ms   floor ms   ratio   TFLOP/s\n  decode b=1 ctx=4096               4.123      3.900    1.06       4.1\n"
        );
    }

    #[test]
    fn the_decode_floor_of_qwen3_8b_at_4k_is_about_4_ms() {
        let c = ModelConfig::qwen3_8b();
        let (bytes, _) = work(&c, &BenchCase::decode(1, 4096).features);
        let ms = bytes / Ceilings::default().bandwidth * 1e3;
        assert!((3.4..4.2).contains(&ms), "{ms} ms");
        // A 2,048-token prefill is compute-bound: about 34 TFLOP.
        let (_, flops) = work(&c, &BenchCase::prefill(2048, 0).features);
        assert!((2.8e13..3.6e13).contains(&flops), "{flops}");
    }
}
