//! `serverbench calibrate --microbench`: GEMM curves, copy bandwidth and a grid of forward steps of the
//! CUDA engine on the GPU; the profile is fitted to the forward steps.

use crate::cli::CalibrateArgs;
use anyhow::{anyhow, Result};
use serverbench_cuda::bench::{self, Ceilings};
use serverbench_cuda::{ModelConfig, Weights};

/// `calibrate --microbench`: GEMM curves, copy bandwidth and a grid of forward steps on the GPU; the
/// profile is fitted to the forward steps, the curves are written beside it (`microbench.json`).
pub fn calibrate(a: &CalibrateArgs) -> Result<()> {
    use serverbench_cuda::microbench;
    let cfg = ModelConfig::preset(&a.model).ok_or_else(|| {
        anyhow!(
            "--model: no CUDA model preset {:?} (presets: qwen3-8b)",
            a.model
        )
    })?;
    let cases = microbench::step_grid();
    let mut model =
        crate::cuda::model_for(&cases, cfg.clone(), a.gpu, &Weights::Random { seed: 0 })?;
    eprintln!("microbench: GEMM shapes");
    let tokens = [
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
    ];
    let gemms = microbench::gemm_curve(&model.dev, &microbench::gemm_shapes(&cfg), &tokens, 10)?;
    eprintln!("microbench: copy bandwidth");
    let copy = microbench::copy_bandwidth(&model.dev, 1 << 30, 10)?;
    eprintln!("microbench: {} forward steps", cases.len());
    let (results, records) = bench::run(&mut model, &cases, 5, Ceilings::default())?;
    let target = serverbench_calibration::calibrate::parse_target(&a.target)?;
    let samples = microbench::step_samples(&records, target);
    let inputs = vec![format!(
        "microbenchmark on {}: {} forward steps ({} cases × 5), {} GEMM timings, copy bandwidth {:.0} GB/s",
        model.dev.name,
        samples.len(),
        cases.len(),
        gemms.len(),
        copy / 1e9
    )];
    let measured_on = super::fit::measured_on(
        a,
        format!(
            "{} (GPU {}), serverbench CUDA engine microbenchmarks",
            model.dev.name, a.gpu
        ),
    );
    let provenance = serverbench_calibration::calibrate::Provenance {
        method: "microbenchmark least squares",
        inputs,
        target: Some(target),
        measured_on: &measured_on,
    };
    let fit = serverbench_calibration::calibrate::fit_steps(
        &super::fit::options(a),
        &samples,
        provenance,
    )?;
    super::fit::report(&fit);
    eprint!("{}", microbench::curves_text(&gemms, copy));
    if let Some(path) = &a.out {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        crate::output::write_json(
            dir,
            "microbench.json",
            &crate::meta::now(None),
            &serde_json::json!({ "device": model.dev.name, "copy_bytes_per_s": copy, "gemm": gemms, "steps": results }),
        )?;
    }
    super::fit::write_profile(&fit.profile, a.out.as_deref())
}
