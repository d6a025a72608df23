//! `serverbench cuda-bench`, `cuda-check` and `calibrate --microbench`: argument handling around
//! `serverbench_backends::cuda_bench` (the engine's forward steps timed, a cases file's model loaded,
//! the microbenchmarks and their fit) and `serverbench_backends::cuda_check` (with the feature `cuda`;
//! without it, `no_cuda.rs`). The CUDA set-up of `serve` and `replay` is
//! `serverbench_backends::engine_choice`'s.

use crate::calibrate::{options, report, write_profile};
use crate::cli::{CalibrateArgs, CudaBenchArgs, CudaCheckArgs};
use anyhow::{Context, Result};
use serverbench_backends::cuda_bench::{bench_cases, check_inputs, microbench_fit};
use serverbench_backends::cuda_check;

pub fn bench(a: CudaBenchArgs) -> Result<()> {
    let note = |n: &str| eprintln!("{n}");
    let b = bench_cases(&a.engine.choice(), &a.model, &a.cases, a.reps, &note)?;
    out!("{}", serverbench_cuda::bench::results_table(&b.results))?;
    if let Some(dir) = &a.out {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create directory", dir.display()))?;
        crate::output::write_json(dir, "bench.json", &crate::meta::now(None), &b.json())?;
        std::fs::write(dir.join("steps.jsonl"), b.steps_jsonl())
            .with_context(|| format!("{}: cannot write steps.jsonl", dir.display()))?;
    }
    Ok(())
}

pub fn check(a: CudaCheckArgs) -> Result<()> {
    let (file, model) = check_inputs(&a.model_dir, &a.cases, a.gpu, |k| std::env::var(k).ok())?;
    let out = cuda_check::run(&file, model, &mut |line| eprintln!("{line}"))?;
    std::fs::write(&a.out, serde_json::to_string(&out)?)
        .with_context(|| format!("{}: cannot write", a.out.display()))?;
    Ok(())
}

/// `calibrate --microbench` on `--gpu`: the profile fitted to the forward steps is reported and
/// written, the curves beside it (`microbench.json`).
pub fn microbench(a: &CalibrateArgs) -> Result<()> {
    let measured_on = (a.measured_on != "unknown").then_some(a.measured_on.as_str());
    let vars = |k: &str| std::env::var(k).ok();
    let note = |n: &str| eprintln!("{n}");
    let m = microbench_fit(&options(a), &a.target, measured_on, a.gpu, vars, &note)?;
    report(&m.fit);
    eprint!("{}", m.curves);
    if let Some(path) = &a.out {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.unwrap_or(std::path::Path::new("."));
        crate::output::write_json(dir, "microbench.json", &crate::meta::now(None), &m.json)?;
    }
    write_profile(&m.fit.profile, a.out.as_deref())
}
