//! `simulate --timeline`'s renderings: timeline.csv (one row per engine step) and timeline.svg (load,
//! KV and latency over the window, at most 1,500 points per series so that no peak is lost and the
//! file stays small). Pure: a run's output in, text out.

use crate::plot::{timeline_svg, PlotError, Timeline};
use serverbench_sim::{Deployment, RunConfig, RunOutput, StepSample};
use std::fmt::Write as _;

/// Points per series in the plot.
const BUCKETS: usize = 1500;

/// timeline.csv: one row per engine step.
pub fn csv(steps: &[StepSample]) -> String {
    let mut t =
        String::from("start_s,step_ms,running,waiting,prefill_tokens,decode_seqs,kv_occupancy\n");
    for s in steps {
        let _ = writeln!(
            t,
            "{},{},{},{},{},{},{}",
            s.start_ns as f64 / 1e9,
            s.step_ns as f64 / 1e6,
            s.running,
            s.waiting,
            s.prefill_tokens,
            s.decode_seqs,
            s.kv_occupancy
        );
    }
    t
}

/// The timeline plot of a run simulated with its timeline (`None` without one).
pub fn plot(d: &Deployment, cfg: &RunConfig, out: &RunOutput) -> Result<Option<String>, PlotError> {
    let Some(steps) = &out.timeline else {
        return Ok(None);
    };
    let t = Timeline {
        title: &format!(
            "{} at c = {}, seed {}: load, KV and latency over time",
            d.name, cfg.concurrency, cfg.seed
        ),
        steps: bucket_max(steps, cfg.window_s, BUCKETS),
        ttft: out
            .records
            .iter()
            .filter_map(|r| r.ttft_s().map(|t| (r.send_ns as f64 / 1e9, t)))
            .collect(),
        ttft_target: d.slo.ttft_s,
        tpot: out
            .records
            .iter()
            .filter(|r| r.output_tokens > 1)
            .filter_map(|r| r.tpot_s().map(|t| (r.send_ns as f64 / 1e9, t)))
            .collect(),
        tpot_target: d.slo.tpot_s,
        window_s: cfg.window_s,
    };
    Ok(Some(timeline_svg(&t)?))
}

/// At most `buckets` points: the largest running, waiting and occupancy of the steps in each time bucket
/// (so the SVG stays small and no peak is lost).
fn bucket_max(steps: &[StepSample], window_s: f64, buckets: usize) -> Vec<(f64, f64, f64, f64)> {
    let width = window_s / buckets as f64;
    let mut out: Vec<(f64, f64, f64, f64)> = Vec::new();
    for s in steps {
        let t = s.start_ns as f64 / 1e9;
        let x = (t / width).floor() * width;
        match out.last_mut() {
            Some(p) if p.0 == x => {
                p.1 = p.1.max(s.running as f64);
                p.2 = p.2.max(s.waiting as f64);
                p.3 = p.3.max(s.kv_occupancy);
            }
            _ => out.push((x, s.running as f64, s.waiting as f64, s.kv_occupancy)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(start_ms: u64, running: u32) -> StepSample {
        StepSample {
            replica: 0,
            start_ns: start_ms * 1_000_000,
            step_ns: 2_500_000,
            running,
            waiting: 1,
            prefill_tokens: 0,
            decode_seqs: running,
            kv_occupancy: 0.5,
        }
    }

    #[test]
    fn a_bucket_keeps_its_peak() {
        let steps = [step(0, 3), step(400, 7), step(1200, 2)];
        let points = bucket_max(&steps, 10.0, 10);
        assert_eq!(points, vec![(0.0, 7.0, 1.0, 0.5), (1.0, 2.0, 1.0, 0.5)]);
    }

    #[test]
    fn a_run_with_its_timeline_has_a_plot_and_one_without_none() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = serverbench_workloads::Workload::builtin(d.workload.as_deref());
        let cfg = RunConfig {
            timeline: true,
            ..RunConfig::new(2, 0, 60.0)
        };
        let study = crate::Study::new(d.clone(), w, cfg);
        let out = study.run(&cfg).unwrap();
        let svg = plot(&d, &cfg, &out).unwrap().expect("a timeline");
        assert!(svg.contains("<svg"), "{svg}");
        let steps = out.timeline.as_ref().unwrap();
        assert_eq!(csv(steps).lines().count(), steps.len() + 1);
        let plain = RunConfig::new(2, 0, 60.0);
        assert!(plot(&d, &plain, &study.run(&plain).unwrap())
            .unwrap()
            .is_none());
    }

    #[test]
    fn the_csv_has_a_row_per_step() {
        let csv = csv(&[step(1500, 3)]);
        assert_eq!(
            csv,
            "start_s,step_ms,running,waiting,prefill_tokens,decode_seqs,kv_occupancy\n1.5,2.5,3,1,0,3,0.5\n"
        );
    }
}
