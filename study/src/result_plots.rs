//! The plots of the studies' results. The sweep's: D, G and f against the load (concurrency, or a rate
//! sweep's arrivals per second), each a mean line with its min..max band over seeds, the qualified
//! levels shaded and the recommended one marked, with the levels under the cost model's error when the
//! sweep has them. The screen's: a histogram of D over seeds. Each returns SVG text; none writes a file.

use crate::plot::{histogram_svg, sweep_svg, Band, PlotError};
use crate::{Level, RateSweep, ScreenResult, Spread, SweepReport, UnderError};
use serverbench_sim::Deployment;

/// Levels where at least this fraction of the value met the SLO on average are "qualified" (shaded).
pub const QUALIFIED_F: f64 = 0.9;

/// The load axis: what it counts and its labels' decimals.
type Axis = (&'static str, usize);

/// `sweep`'s plot (sweep.svg).
pub fn sweep_plot(r: &SweepReport, d: &Deployment) -> Result<String, PlotError> {
    let s = &r.result;
    let x: Vec<f64> = s.levels.iter().map(|l| l.concurrency as f64).collect();
    let levels: Vec<&Level> = s.levels.iter().collect();
    let title = title(d, "", s.seeds.len(), s.window_s);
    let axis = ("concurrent sessions (lanes)", 0);
    let error = r
        .under_model_error
        .as_ref()
        .map(|u| error_band(u, axis, &x));
    plot_levels(&title, axis, &x, &levels, s.best_mean as f64, error)
}

/// `sweep --rates`' plot (sweep.svg).
pub fn rate_sweep_plot(r: &RateSweep, d: &Deployment) -> Result<String, PlotError> {
    let x: Vec<f64> = r.levels.iter().map(|l| l.rate).collect();
    let levels: Vec<&Level> = r.levels.iter().map(|l| &l.level).collect();
    let title = title(d, "open loop, ", r.seeds.len(), r.window_s);
    let axis = ("session trees per second (Poisson)", 2);
    plot_levels(&title, axis, &x, &levels, r.best_mean, None)
}

/// `screen`'s plot (screen.svg): how many seeds reach each D, with the p10, p50 and p90 lines.
pub fn screen_plot(r: &ScreenResult) -> Result<String, PlotError> {
    let ds: Vec<f64> = r.seeds.iter().map(|s| s.d).collect();
    let title = format!(
        "{} at c = {}: D of {} seeds",
        r.deployment,
        r.concurrency,
        ds.len()
    );
    histogram_svg(
        &title,
        "D ($ of qualified value per $ of GPU time)",
        &ds,
        &[("p10", r.d_p10), ("p50", r.d_p50), ("p90", r.d_p90)],
    )
}

fn title(d: &Deployment, mode: &str, seeds: usize, window_s: f64) -> String {
    format!(
        "{} — {mode}{seeds} seeds × {window_s} s; green: f ≥ {:.0} % (TTFT ≤ {:.2} s, TPOT ≤ {:.1} ms)",
        d.name,
        QUALIFIED_F * 100.0,
        d.slo.ttft_s,
        d.slo.tpot_s * 1e3
    )
}

/// Mean D at the nominal figures, between the least and the most of its three ends.
fn error_band<'a>(u: &UnderError, (x_desc, x_decimals): Axis, x: &'a [f64]) -> Band<'a> {
    let ends = |f: fn(f64, f64) -> f64| -> Vec<f64> {
        u.levels
            .iter()
            .map(|l| f(f(l.d_nominal, l.d_slow), l.d_fast))
            .collect()
    };
    Band {
        title: "D under the cost model's error: mean over seeds, both ends of the band",
        unit: "$/$",
        x_desc,
        x_decimals,
        x,
        mean: u.levels.iter().map(|l| l.d_nominal).collect(),
        min: ends(f64::min),
        max: ends(f64::max),
    }
}

/// D, G and f of `levels` at `x`, the best level marked.
fn plot_levels(
    title: &str,
    (x_desc, x_decimals): Axis,
    x: &[f64],
    levels: &[&Level],
    best: f64,
    error: Option<Band<'_>>,
) -> Result<String, PlotError> {
    let band = |title, unit, f: fn(&Level) -> Spread| {
        let s: Vec<Spread> = levels.iter().map(|l| f(l)).collect();
        Band {
            title,
            unit,
            x_desc,
            x_decimals,
            x,
            mean: s.iter().map(|v| v.mean).collect(),
            min: s.iter().map(|v| v.min).collect(),
            max: s.iter().map(|v| v.max).collect(),
        }
    };
    let mut bands = vec![band("D: qualified value per GPU dollar", "$/$", |l| l.d)];
    bands.extend(error);
    bands.push(band("G: gross value per GPU dollar", "$/$", |l| l.g));
    bands.push(band(
        "f = D / G: value-weighted qualified fraction",
        "fraction",
        |l| l.f,
    ));
    let qualified: Vec<bool> = levels.iter().map(|l| l.f.mean >= QUALIFIED_F).collect();
    sweep_svg(title, &bands, &qualified, best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{run_sweep, Inline, Study};
    use serverbench_sim::RunConfig;
    use serverbench_workloads::Workload;

    #[test]
    fn the_plot_has_a_panel_per_metric_and_one_for_the_model_error() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let study = Study::new(d.clone(), w, RunConfig::new(1, 0, 60.0));
        let mut r = run_sweep(study, &[1, 4], &[0], &[], &Inline(&|| {})).unwrap();
        let svg = sweep_plot(&r, &d).unwrap();
        assert!(svg.contains("D under the cost model"), "the error panel");
        assert!(svg.contains("f = D / G") && svg.contains("1 seeds × 60 s"));
        r.under_model_error = None;
        let svg = sweep_plot(&r, &d).unwrap();
        assert!(!svg.contains("D under the cost model"));
    }

    #[test]
    fn the_screen_plot_counts_every_seed() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let study = Study::new(d, w, RunConfig::new(1, 0, 60.0));
        let r = crate::screen(&study, 2, &[0, 1, 2], &|| {}).unwrap();
        let svg = screen_plot(&r).unwrap();
        assert!(svg.contains("at c = 2: D of 3 seeds") && svg.contains("p90"));
    }
}
