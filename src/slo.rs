//! `serverbench slo`: freeze τ_first and τ_token from a reference configuration (SPEC §2).

use crate::cli::SloArgs;
use crate::inputs::{self, Workload};
use crate::sweep::run_all;
use anyhow::{Context, Result};
use serverbench_sim::Slo;

/// Per-seed p90s and the frozen targets (the maximum over seeds of each).
pub fn freeze(a: &SloArgs) -> Result<(Vec<(u64, f64, f64)>, Slo)> {
    let (d, cost) = inputs::resolved(&a.deployment)?;
    let workload = Workload::from_args(&a.workload)?;
    let jobs = inputs::seed_jobs(&a.replay, a.concurrency, &a.seeds)?;
    let rows = run_all(&jobs, None, true, |cfg| {
        let s = inputs::replay(&d, &cost, &workload, cfg)?.summary;
        Ok((cfg.seed, s.ttft_s.p90, s.tpot_s.p90))
    })?;
    let slo = Slo {
        ttft_s: rows.iter().map(|r| r.1).fold(0.0, f64::max),
        tpot_s: rows.iter().map(|r| r.2).fold(0.0, f64::max),
    };
    Ok((rows, slo))
}

pub fn run(a: SloArgs) -> Result<()> {
    let (mut d, _) = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let (rows, slo) = freeze(&a)?;
    println!(
        "serverbench slo — reference {} at c = {}, {} seeds, window {} s\n",
        d.name,
        a.concurrency,
        rows.len(),
        a.replay.window
    );
    println!(
        "  {:>6}  {:>13}  {:>14}",
        "seed", "p90 TTFT (s)", "p90 TPOT (ms)"
    );
    for (seed, ttft, tpot) in &rows {
        println!("  {:>6}  {:>13.5}  {:>14.4}", seed, ttft, tpot * 1e3);
    }
    println!(
        "\n  frozen: τ_first = {:.5} s, τ_token = {:.4} ms (the maximum over seeds of each p90)",
        slo.ttft_s,
        slo.tpot_s * 1e3
    );
    println!(
        "  (was τ_first = {:.5} s, τ_token = {:.4} ms)",
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    );
    if let Some(path) = &a.out {
        d.slo = slo;
        let text = format!(
            "# SLO targets frozen by `serverbench slo` from {} at c = {} over seeds {}, window {} s.\n{}",
            d.name,
            a.concurrency,
            a.seeds,
            a.replay.window,
            serde_yaml::to_string(&d)?
        );
        std::fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))?;
        println!("  wrote {} (use it with --deployment)", path.display());
    }
    Ok(())
}
