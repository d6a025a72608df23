//! `compare`: the same runs in the simulator and measured against a real backend, side by side. Each
//! level and seed's measured run is read from its folder (its `summary.json`, re-scored from its
//! records when it was measured under another deployment), after the caller measures it when it is
//! not there or not to be reused; the simulated run is made here. It starts no process and prints
//! nothing.

use anyhow::{bail, Context, Result};
use serverbench_sim::{Deployment, Record, Summary};
use serverbench_study::compare::{rankings, row, same_requests, Row, SeedRanking};
use serverbench_study::Study;
use std::path::Path;

/// Every run's simulated and measured figures, and how the seeds rank in each.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// One row per level and seed, levels outer.
    pub rows: Vec<Row>,
    /// Per level, the seeds ranked by simulated and by measured D.
    pub rankings: Vec<SeedRanking>,
}

/// Refuses what `compare` cannot do before it runs anything: a step log of the caller's (`step_log`:
/// each measured run writes its own, to `OUT/real/cC_sS/steps.jsonl`), or no level or no seed.
pub fn check_flags(step_log: bool, levels: &[u32], seeds: &[u64]) -> Result<()> {
    if step_log {
        bail!(
            "--step-log: compare writes each run's step log to OUT/real/cC_sS/steps.jsonl itself"
        );
    }
    if levels.is_empty() || seeds.is_empty() {
        bail!("--concurrency and --seeds: give at least one value each");
    }
    Ok(())
}

/// Compares `study`'s runs at every level and seed with the measured runs in `out/real/cC_sS/`;
/// `measure(dir, c, seed)` makes a run's folder when it is missing or `reuse` is off. A stored run
/// replayed under another protocol or other arrivals is refused.
pub fn compare(
    study: &Study,
    levels: &[u32],
    seeds: &[u64],
    out: &Path,
    reuse: bool,
    measure: &mut dyn FnMut(&Path, u32, u64) -> Result<()>,
) -> Result<Comparison> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("{}: cannot create directory", out.display()))?;
    let mut rows = Vec::new();
    for &c in levels {
        for &seed in seeds {
            let dir = out.join("real").join(format!("c{c}_s{seed}"));
            if !(reuse && dir.join("summary.json").exists()) {
                measure(&dir, c, seed)?;
            }
            let records = stored_records(&dir)?;
            let real = rescored(&study.deployment, records.as_deref(), measured(&dir)?);
            same_replay(study, &dir, c, seed, &real)?;
            // The measured runs go to one server in this order: after the first, its engine has
            // compiled the kernels its steps need (before it too, where the study says so).
            let mut cfg = study.config(c, seed);
            cfg.kernels_warm |= !rows.is_empty();
            let sim = study.run(&cfg)?;
            let mut r = row(c, seed, &sim.summary, &real);
            r.same_requests = records.map(|m| same_requests(&sim.records, &m));
            rows.push(r);
        }
    }
    let rankings = rankings(&rows);
    Ok(Comparison { rows, rankings })
}

/// Refuses a measured run that replayed another protocol or other arrivals than the study's.
fn same_replay(study: &Study, dir: &Path, c: u32, seed: u64, real: &Summary) -> Result<()> {
    let protocol = study.config(c, seed).protocol;
    if let Some(stored) = real
        .protocol
        .filter(|s| study.replay.arrivals.is_closed() && *s != protocol)
    {
        bail!(
            "{}: the stored run replayed --protocol {}, this compare asks for --protocol {} (pass the stored run's --protocol, or measure again without --reuse)",
            dir.display(),
            stored.name(),
            protocol.name()
        );
    }
    if real.arrivals != study.replay.arrivals {
        bail!(
            "{}: the stored run's arrivals are {}, this compare asks for {} (measure again without --reuse)",
            dir.display(),
            real.arrivals.label(),
            study.replay.arrivals.label()
        );
    }
    Ok(())
}

/// The measured summary of one run, as its replay wrote it in `dir`.
fn measured(dir: &Path) -> Result<Summary> {
    let file = dir.join("summary.json");
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("{}: cannot read the measured run", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", file.display()))?;
    serde_json::from_value(v.get("summary").cloned().unwrap_or(v))
        .with_context(|| format!("{}: no replay summary in it", file.display()))
}

/// The measured run's records, when its folder holds them (`records.jsonl` or `records.jsonl.gz`).
fn stored_records(dir: &Path) -> Result<Option<Vec<Record>>> {
    let Some(path) = ["records.jsonl", "records.jsonl.gz"]
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.exists())
    else {
        return Ok(None);
    };
    let text = serverbench_config::read_text(&path, serverbench_config::MAX_DATA_BYTES)?;
    let mut records = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let r: Record =
            serverbench_config::parse_json_line(&path.display().to_string(), i + 1, line)?;
        records.push(r);
    }
    Ok(Some(records))
}

/// The measured run scored for the compared deployment: a run measured under another deployment (its
/// name or targets differ) has its records re-scored with this one's targets and prices when its
/// folder holds them; otherwise the summary as stored.
fn rescored(d: &Deployment, records: Option<&[Record]>, stored: Summary) -> Summary {
    if stored.deployment == d.name && stored.slo == d.slo {
        return stored;
    }
    let Some(records) = records else {
        return stored;
    };
    let (_, mut s) = serverbench_sim::summarise(records, d, stored.window_s);
    s.seed = stored.seed;
    s.concurrency = stored.concurrency;
    s.trees_started = stored.trees_started;
    s.prefix_hit_rate = stored.prefix_hit_rate;
    s
}

/// What a measured run replays, as far as its prompt salt tells runs apart.
pub struct RunScenario<'a> {
    /// The protocol's name.
    pub protocol: &'a str,
    /// `--deployment` as given (a preset name or a file).
    pub deployment: &'a str,
    /// `--workload`, when given.
    pub workload: Option<&'a Path>,
    /// `--trace`, when given.
    pub trace: Option<&'a Path>,
}

/// The prompt salt of one measured run: its level and seed, and (from 2026-12-02) its protocol,
/// deployment and workload, so that a cold run finds nothing that a steady run of the same level and
/// seed left in the server's cache. A run of the steady start on the deployment's own workload keeps
/// the salt the stored sets were measured with, `1 + c × 10⁶ + seed`.
pub fn run_salt(r: &RunScenario<'_>, c: u32, seed: u64) -> u64 {
    let base = 1 + c as u64 * 1_000_000 + seed;
    let workload =
        [r.workload, r.trace].map(|p| p.map_or(String::new(), |p| p.display().to_string()));
    let what = format!(
        "{}|{}|{}|{}",
        r.protocol, r.deployment, workload[0], workload[1]
    );
    if r.protocol == "steady" && workload.iter().all(|w| w.is_empty()) {
        return base;
    }
    let h = what.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    base ^ (h << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step log of its own and an empty list of levels or seeds are refused, each naming its flags.
    #[test]
    fn compare_refuses_a_step_log_and_nothing_to_run() {
        assert!(check_flags(false, &[4], &[0]).is_ok());
        let e = check_flags(true, &[4], &[0]).unwrap_err().to_string();
        assert!(e.starts_with("--step-log: compare writes"), "{e}");
        for (levels, seeds) in [(&[][..], &[0][..]), (&[4], &[])] {
            let e = check_flags(false, levels, seeds).unwrap_err().to_string();
            assert_eq!(e, "--concurrency and --seeds: give at least one value each");
        }
    }

    /// The steady start on the deployment's own workload keeps the stored sets' salt; anything else
    /// mixes in a hash of what the run replays.
    #[test]
    fn a_salt_tells_runs_of_one_level_and_seed_apart() {
        let steady = RunScenario {
            protocol: "steady",
            deployment: "qwen3-8b-1xh200",
            workload: None,
            trace: None,
        };
        assert_eq!(run_salt(&steady, 4, 3), 4_000_004);
        let cold = RunScenario {
            protocol: "cold",
            ..steady
        };
        // FNV-1a of "cold|qwen3-8b-1xh200||" in the high half.
        assert_eq!(run_salt(&cold, 4, 3), 13_419_667_183_697_201_412);
        let traced = RunScenario {
            trace: Some(Path::new("t.jsonl")),
            ..steady
        };
        assert_ne!(run_salt(&traced, 4, 3), 4_000_004);
    }
    use serverbench_sim::{Protocol, RunConfig};
    use serverbench_workloads::Workload;

    fn study() -> Study {
        let d = Deployment::preset(serverbench_sim::DEFAULT_DEPLOYMENT).unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let mut cfg = RunConfig::new(1, 0, 60.0);
        cfg.protocol = Protocol::Cold;
        Study::new(d, w, cfg)
    }

    /// A measured run of the study's own replay compares equal to its simulation; a stored run that
    /// replayed another protocol is refused, naming both; with `reuse`, a stored run is not measured
    /// again.
    #[test]
    fn stored_runs_are_compared_and_another_protocol_is_refused() {
        let s = study();
        let out = std::env::temp_dir().join(format!("sb-compare-{}", std::process::id()));
        std::fs::remove_dir_all(&out).ok();
        let write = |dir: &Path, protocol: Protocol| {
            let mut cfg = s.config(1, 0);
            cfg.protocol = protocol;
            let summary = s.run(&cfg).unwrap().summary;
            std::fs::create_dir_all(dir).unwrap();
            let json = serde_json::json!({ "summary": summary });
            std::fs::write(dir.join("summary.json"), json.to_string()).unwrap();
        };
        let mut measured = 0;
        let c = compare(&s, &[1], &[0], &out, true, &mut |dir, _, _| {
            measured += 1;
            write(dir, Protocol::Cold);
            Ok(())
        })
        .unwrap();
        assert_eq!((measured, c.rows.len()), (1, 1));
        for m in &c.rows[0].metrics {
            // JSON's decimal text gives the last bit back only to within a rounding.
            let close = (m.real - m.sim).abs() <= 1e-12 * m.real.abs().max(1.0);
            assert!(close, "{}: {} against {}", m.metric, m.sim, m.real);
        }
        let mut again = 0;
        compare(&s, &[1], &[0], &out, true, &mut |_, _, _| {
            again += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(again, 0, "a stored run is reused");
        write(&out.join("real/c1_s0"), Protocol::Steady);
        let e = compare(&s, &[1], &[0], &out, true, &mut |_, _, _| Ok(())).unwrap_err();
        std::fs::remove_dir_all(&out).ok();
        assert!(
            format!("{e:#}").contains("the stored run replayed --protocol steady"),
            "{e:#}"
        );
    }
}
