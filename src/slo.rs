//! `serverbench slo`: freezes τ_first and τ_token with `serverbench_study::freeze_slo` and prints or
//! writes the deployment with them (docs/definitions.md).

use crate::cli::SloArgs;
use crate::inputs;
use crate::output::replays_bar;
use anyhow::{anyhow, Context, Result};
use serverbench_sim::Deployment;

pub fn run(a: SloArgs) -> Result<()> {
    let mut d = inputs::resolved(&a.deployment)?;
    let (reference, c, arm) = reference(&a, &d)?;
    if inputs::print_config(&a.deployment, &reference)? {
        return Ok(());
    }
    let study = inputs::study_on(reference, &a.deployment, &a.workload, &a.replay)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let bar = replays_bar(seeds.len(), true);
    let (rows, slo) = serverbench_study::freeze_slo(&study, c, &seeds, &|| bar.inc(1))?;
    bar.finish_and_clear();
    outln!(
        "serverbench slo — reference {} at c = {}{arm}, {} seeds, window {} s\n",
        d.name,
        c,
        rows.len(),
        a.replay.window
    )?;
    outln!(
        "  {:>6}  {:>13}  {:>14}",
        "seed",
        "p90 TTFT (s)",
        "p90 TPOT (ms)"
    )?;
    for r in &rows {
        outln!(
            "  {:>6}  {:>13.5}  {:>14.4}",
            r.seed,
            r.ttft_s,
            r.tpot_s * 1e3
        )?;
    }
    outln!(
        "\n  frozen: τ_first = {:.5} s, τ_token = {:.4} ms (the maximum over seeds of each p90)",
        slo.ttft_s,
        slo.tpot_s * 1e3
    )?;
    outln!(
        "  (was τ_first = {:.5} s, τ_token = {:.4} ms)",
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    )?;
    if let Some(path) = &a.out {
        let frozen = frozen_name(&d.name);
        let source = std::mem::replace(&mut d.name, frozen);
        d.slo = slo;
        let text = format!(
            "# SLO targets frozen by `serverbench slo` from {} at c = {} over {} seeds ({}), window {} s.\n{}",
            source,
            c,
            seeds.len(),
            serverbench_study::report::summary::seed_list(&seeds),
            a.replay.window,
            d.to_yaml()
        );
        std::fs::write(path, text).with_context(|| format!("{}: cannot write", path.display()))?;
        outln!("  wrote {} (use it with --deployment)", path.display())?;
    }
    Ok(())
}

/// The deployment the targets are frozen on, the concurrency, and how the header names the engine: the
/// reference arm's engine preset, running limit and memory fraction (at `-c` when given) unless
/// `--as-deployed` or `--engine-config` asks for the deployment's own engine section.
fn reference(a: &SloArgs, d: &Deployment) -> Result<(Deployment, u32, String)> {
    let own = a.as_deployed || a.deployment.engine_config.is_some();
    let arm = d.reference.as_ref().filter(|_| !own);
    let c = a.concurrency.or(arm.map(|r| r.concurrency)).unwrap_or(1);
    let Some(arm) = arm else {
        return Ok((d.clone(), c, String::new()));
    };
    let on = d
        .as_reference_arm(c)
        .expect("the deployment has an arm")
        .map_err(|e| anyhow!("{}: its reference arm at c = {c}: {e}", d.name))?;
    let label = format!(
        " on its reference arm ({}, at most {c} running, memory fraction {})",
        arm.engine, arm.gpu_memory_utilization
    );
    Ok((on, c, label))
}

/// The name a deployment with newly frozen targets is written under: not its source's, whose targets
/// it no longer has (every header would show the preset's name for another deployment).
fn frozen_name(name: &str) -> String {
    const MARK: &str = " with frozen SLO";
    match name.ends_with(MARK) {
        true => name.to_string(),
        false => format!("{name}{MARK}"),
    }
}
