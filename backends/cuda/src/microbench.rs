//! GPU microbenchmarks for calibration: the model's GEMM shapes across token counts, streaming bandwidth,
//! and a grid of whole forward steps (attention over context lengths, prefill over cached prefixes).
//! Measures, and hands the steps to the fit as its samples (`step_samples`); the fitting is
//! `serverbench-calibration`'s. `curves_text` is the measured curves as `calibrate --microbench` reports them.

use crate::bench::BenchCase;
use crate::config::ModelConfig;
use crate::device::Device;
use crate::engine::StepRecord;
use crate::Result;
use serde::Serialize;
use serverbench_calibration::{FitTarget, StepSample};

/// One GEMM timing.
#[derive(Clone, Debug, Serialize)]
pub struct GemmPoint {
    /// Which linear layer (`qkv`, `o`, `gate_up`, `down`, `lm_head`).
    pub shape: String,
    /// Output features × input features.
    pub n: u32,
    /// Input features.
    pub k: u32,
    /// Tokens (rows).
    pub tokens: u32,
    /// Median milliseconds.
    pub ms: f64,
    /// Achieved TFLOP/s.
    pub tflops: f64,
    /// Achieved weight-streaming bandwidth, GB/s (weight bytes / time).
    pub weight_gbps: f64,
}

/// The linear layers of one transformer block plus the LM head: (name, out features, in features).
pub fn gemm_shapes(cfg: &ModelConfig) -> Vec<(&'static str, u32, u32)> {
    let (h, hd) = (cfg.hidden_size, cfg.head_dim());
    let q = cfg.num_attention_heads * hd;
    let kv = cfg.num_key_value_heads * hd;
    vec![
        ("qkv", q + 2 * kv, h),
        ("o", h, q),
        ("gate_up", 2 * cfg.intermediate_size, h),
        ("down", h, cfg.intermediate_size),
        ("lm_head", cfg.vocab_size, h),
    ]
}

/// Times every shape at every token count (median of `reps` after one warm-up), on zeroed bf16 buffers.
pub fn gemm_curve(
    dev: &Device,
    shapes: &[(&'static str, u32, u32)],
    tokens: &[u32],
    reps: usize,
) -> Result<Vec<GemmPoint>> {
    let max_t = tokens.iter().copied().max().unwrap_or(1) as usize;
    let mut out = Vec::new();
    for &(name, n, k) in shapes {
        let x = dev.zeros::<half::bf16>(max_t * k as usize)?;
        let w = dev.zeros::<half::bf16>(n as usize * k as usize)?;
        let y = dev.zeros::<half::bf16>(max_t * n as usize)?;
        for &t in tokens {
            let mut times = Vec::with_capacity(reps);
            for rep in 0..reps + 1 {
                let a = dev.mark()?;
                dev.linear(x.at(0), w.at(0), y.at(0), t, n, k)?;
                let b = dev.mark()?;
                b.synchronize()?;
                if rep > 0 {
                    times.push(a.elapsed_ms(&b)? as f64);
                }
            }
            times.sort_by(f64::total_cmp);
            let ms = times[times.len() / 2];
            out.push(GemmPoint {
                shape: name.into(),
                n,
                k,
                tokens: t,
                ms,
                tflops: 2.0 * n as f64 * k as f64 * t as f64 / (ms * 1e-3) / 1e12,
                weight_gbps: 2.0 * n as f64 * k as f64 / (ms * 1e-3) / 1e9,
            });
        }
    }
    Ok(out)
}

/// Device-to-device copy bandwidth, bytes per second counting the read and the write (median of `reps`).
pub fn copy_bandwidth(dev: &Device, bytes: usize, reps: usize) -> Result<f64> {
    let src = dev.zeros::<u8>(bytes)?;
    let mut dst = dev.zeros::<u8>(bytes)?;
    let mut times = Vec::with_capacity(reps);
    for rep in 0..reps + 1 {
        let a = dev.mark()?;
        dev.stream.memcpy_dtod(src.slice(), dst.slice_mut())?;
        let b = dev.mark()?;
        b.synchronize()?;
        if rep > 0 {
            times.push(a.elapsed_ms(&b)? as f64);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(2.0 * bytes as f64 / (times[times.len() / 2] * 1e-3))
}

/// Forward steps spanning what a serving engine runs: decode batches over context lengths, prefill chunks
/// of many lengths over no, short and long cached prefixes, and a few mixed steps.
pub fn step_grid() -> Vec<BenchCase> {
    let mut cases = Vec::new();
    for b in [1, 2, 4, 8, 16, 32, 64] {
        for ctx in [1024, 4096, 16_384, 32_768] {
            if b * ctx <= 262_144 {
                cases.push(BenchCase::decode(b, ctx));
            }
        }
    }
    for len in [8, 32, 128, 256, 512, 1024, 2048, 4096, 8192] {
        for cached in [0, 4096, 16_384, 32_768] {
            if len + cached <= 40_960 {
                cases.push(BenchCase::prefill(len, cached));
            }
        }
    }
    for (len, cached, b, ctx) in [
        (512, 8192, 16, 8192),
        (2048, 0, 32, 4096),
        (128, 16_384, 8, 16_384),
    ] {
        let mut c = BenchCase::prefill(len, cached);
        c.features.decode = vec![ctx; b];
        c.name = format!("mixed prefill {len} over {cached} + decode {b} × {ctx}");
        cases.push(c);
    }
    cases
}

/// The forward steps' records as the step fit's samples, each timed as `target` says (seconds).
pub fn step_samples(records: &[StepRecord], target: FitTarget) -> Vec<StepSample> {
    records
        .iter()
        .map(|r| StepSample {
            prefill: r.features.prefill.clone(),
            decode: r.features.decode.clone(),
            decode_kv_distinct: r.features.decode_kv_distinct,
            seconds: match target {
                FitTarget::Wall => r.wall_ms,
                FitTarget::Gpu => r.gpu_ms,
            } / 1e3,
        })
        .collect()
}

/// The `gate_up` GEMM's curve and the device-to-device copy bandwidth (bytes per second), one line each.
pub fn curves_text(gemms: &[GemmPoint], copy: f64) -> String {
    let mut text = String::new();
    for g in gemms.iter().filter(|g| g.shape == "gate_up") {
        text += &format!(
            "  gate_up GEMM at {:>5} tokens: {:>7.3} ms, {:>6.1} TFLOP/s, {:>6.0} GB/s of weights\n",
            g.tokens, g.ms, g.tflops, g.weight_gbps
        );
    }
    text + &format!("  device-to-device copy: {:.0} GB/s\n", copy / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_covers_decode_prefill_and_mixed_steps_within_one_context() {
        let g = step_grid();
        assert!(g
            .iter()
            .any(|c| c.features.prefill.is_empty() && c.features.decode.len() == 64));
        assert!(g.iter().any(|c| c.features.prefill == vec![(8, 32_768)]));
        assert!(g
            .iter()
            .any(|c| !c.features.prefill.is_empty() && !c.features.decode.is_empty()));
        for c in &g {
            let longest = c
                .features
                .prefill
                .iter()
                .map(|p| p.0 + p.1)
                .chain(c.features.decode.iter().copied())
                .max()
                .unwrap();
            assert!(longest <= 40_960, "{}", c.name);
        }
        let shapes = gemm_shapes(&ModelConfig::preset("qwen3-8b").unwrap());
        assert_eq!(shapes[0], ("qkv", 6144, 4096));
        assert_eq!(shapes[2], ("gate_up", 24_576, 4096));
    }

    /// A step's sample is its wall or its GPU time, in seconds; the curves are the `gate_up` GEMM's.
    #[test]
    fn steps_become_samples_and_curves_text() {
        let mut f = BenchCase::prefill(8, 32).features;
        f.decode = vec![100, 200];
        let r = StepRecord {
            step: 0,
            start_s: 0.0,
            gpu_ms: 2.0,
            wall_ms: 3.0,
            features: f,
        };
        let wall = step_samples(std::slice::from_ref(&r), FitTarget::Wall);
        assert_eq!((wall[0].seconds, &wall[0].decode), (0.003, &vec![100, 200]));
        assert_eq!(step_samples(&[r], FitTarget::Gpu)[0].seconds, 0.002);
        let point = |shape: &str| GemmPoint {
            shape: shape.into(),
            n: 1,
            k: 1,
            tokens: 16,
            ms: 0.5,
            tflops: 10.0,
            weight_gbps: 900.0,
        };
        assert_eq!(
            curves_text(&[point("qkv"), point("gate_up")], 3.2e12),
            "  gate_up GEMM at    16 tokens:   0.500 ms,   10.0 TFLOP/s,    900 GB/s of weights\n  device-to-device copy: 3200 GB/s\n"
        );
    }
}
