//! SLO freezing: run a reference configuration on independent seeds, take each seed's p90 TTFT and
//! p90 TPOT; the frozen targets are the maximum over seeds of each (docs/definitions.md).

use crate::{run_all, Study, StudyError};
use serde::Serialize;
use serverbench_sim::{Deployment, Slo};

/// One seed's p90s.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SeedP90 {
    /// Workload seed.
    pub seed: u64,
    /// p90 TTFT, seconds.
    pub ttft_s: f64,
    /// p90 TPOT, seconds.
    pub tpot_s: f64,
}

/// Per-seed p90s at `concurrency` and the frozen targets (the maximum over seeds of each).
pub fn freeze_slo(
    study: &Study,
    concurrency: u32,
    seeds: &[u64],
    progress: &(dyn Fn() + Sync),
) -> Result<(Vec<SeedP90>, Slo), StudyError> {
    if seeds.is_empty() {
        return Err(StudyError::NothingToRun);
    }
    let jobs: Vec<_> = seeds
        .iter()
        .map(|&s| study.config(concurrency, s))
        .collect();
    let rows = run_all(&jobs, study.threads, progress, |cfg| {
        let s = study.run(cfg)?.summary;
        Ok(SeedP90 {
            seed: cfg.seed,
            ttft_s: s.ttft_s.p90,
            tpot_s: s.tpot_s.p90,
        })
    })?;
    let slo = Slo {
        ttft_s: rows.iter().map(|r| r.ttft_s).fold(0.0, f64::max),
        tpot_s: rows.iter().map(|r| r.tpot_s).fold(0.0, f64::max),
    };
    Ok((rows, slo))
}
/// One corpus draw's freeze: its seeds' p90s and the targets frozen from them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CorpusFreeze {
    /// The generator seed whose stream is this draw's corpus.
    pub corpus_seed: u64,
    /// Each run seed's p90s on it.
    pub rows: Vec<SeedP90>,
    /// The maximum over seeds of each.
    pub slo: Slo,
}

/// The freeze of [`freeze_slo`] on `draws` corpora of the study's spec (generator seeds `0..draws`,
/// each the same rows for every run seed, as AgentX replays one corpus), and the targets: the median
/// over draws of each draw's frozen target. A spec stands in for a corpus whose rows it does not know,
/// so which rows come first is drawn, not fixed. Needs a generated spec under an AgentX protocol.
pub fn freeze_over_corpora(
    study: &Study,
    concurrency: u32,
    seeds: &[u64],
    draws: u64,
    progress: &(dyn Fn() + Sync),
) -> Result<(Vec<CorpusFreeze>, Slo), StudyError> {
    if draws == 0 {
        return Err(StudyError::NothingToRun);
    }
    if !study.replay.protocol.is_agentx() {
        return Err(StudyError::CorpusDraws(
            "only the AgentX protocols replay a corpus (the others draw each seed's own sessions)",
        ));
    }
    let mut out = Vec::new();
    for corpus_seed in 0..draws {
        let workload =
            study
                .workload
                .with_corpus_seed(corpus_seed)
                .ok_or(StudyError::CorpusDraws(
                    "a trace is its own corpus: draws need a workload spec",
                ))?;
        let drawn = Study {
            workload,
            ..study.clone()
        };
        let (rows, slo) = freeze_slo(&drawn, concurrency, seeds, progress)?;
        out.push(CorpusFreeze {
            corpus_seed,
            rows,
            slo,
        });
    }
    let median = |f: fn(&Slo) -> f64| {
        let mut v: Vec<f64> = out.iter().map(|d| f(&d.slo)).collect();
        v.sort_by(f64::total_cmp);
        serverbench_workloads::quantile(&v, 0.5)
    };
    let slo = Slo {
        ttft_s: median(|s| s.ttft_s),
        tpot_s: median(|s| s.tpot_s),
    };
    Ok((out, slo))
}

/// The configuration targets are frozen on: the deployment (on its reference arm, when it has one and
/// its own engine was not asked for), the concurrency, and how a header names the arm.
pub struct SloReference {
    /// The deployment the reference runs use.
    pub deployment: Deployment,
    /// Their lanes.
    pub concurrency: u32,
    /// ` on its reference arm (ENGINE, at most C running, memory fraction F)`, or empty.
    pub arm: String,
}

/// The reference of `d`: its reference arm's engine preset, running limit and memory fraction (at
/// `concurrency` when given, else the arm's), unless `own_engine` asks for the deployment's own engine
/// section; without an arm, `d` itself at `concurrency` (default 1).
pub fn slo_reference(
    d: &Deployment,
    concurrency: Option<u32>,
    own_engine: bool,
) -> anyhow::Result<SloReference> {
    let arm = d.reference.as_ref().filter(|_| !own_engine);
    let c = concurrency.or(arm.map(|r| r.concurrency)).unwrap_or(1);
    let Some(arm) = arm else {
        return Ok(SloReference {
            deployment: d.clone(),
            concurrency: c,
            arm: String::new(),
        });
    };
    let on = d
        .as_reference_arm(c)
        .expect("the deployment has an arm")
        .map_err(|e| anyhow::anyhow!("{}: its reference arm at c = {c}: {e}", d.name))?;
    let label = format!(
        " on its reference arm ({}, at most {c} running, memory fraction {})",
        arm.engine, arm.gpu_memory_utilization
    );
    Ok(SloReference {
        deployment: on,
        concurrency: c,
        arm: label,
    })
}

/// `d` with the frozen targets `slo`, under a name that is not its source's, whose targets it no
/// longer has (every header would show the preset's name for another deployment).
pub fn with_frozen_slo(d: &Deployment, slo: Slo) -> Deployment {
    const MARK: &str = " with frozen SLO";
    let mut frozen = d.clone();
    if !d.name.ends_with(MARK) {
        frozen.name = format!("{}{MARK}", d.name);
    }
    frozen.slo = slo;
    frozen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_freeze_on_the_reference_arm_unless_the_own_engine_is_asked_for() {
        let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
        let arm = d
            .reference
            .clone()
            .expect("an L40 deployment has a reference arm");
        let r = slo_reference(&d, None, false).unwrap();
        assert_eq!(r.concurrency, arm.concurrency);
        assert!(r.arm.starts_with(" on its reference arm ("), "{}", r.arm);
        let own = slo_reference(&d, Some(4), true).unwrap();
        assert_eq!((own.concurrency, own.arm.as_str()), (4, ""));
        assert_eq!(own.deployment.to_yaml(), d.to_yaml());
        let plain = Deployment::preset("qwen3-8b-1xh200").unwrap();
        assert_eq!(slo_reference(&plain, None, false).unwrap().concurrency, 1);
    }

    #[test]
    fn a_frozen_deployment_is_renamed_once() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let slo = Slo {
            ttft_s: 1.5,
            ..d.slo
        };
        let once = with_frozen_slo(&d, slo);
        assert_eq!(once.name, "qwen3-8b-1xh200 with frozen SLO");
        assert_eq!(once.slo.ttft_s, 1.5);
        assert_eq!(with_frozen_slo(&once, slo).name, once.name);
    }
}
