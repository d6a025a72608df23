//! SVG plots (plotters) of what the studies and runs computed: the sweep's D/G/f against concurrency, a
//! run's timeline, a histogram, a comparison's panels. Each returns the SVG text; none writes a file.

use plotters::coord::Shift;
use plotters::prelude::*;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A plot that could not be drawn: plotters' own error, as text.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw the plot: {0}")]
pub struct PlotError(String);

type Result<T> = std::result::Result<T, PlotError>;

fn err<E: std::fmt::Debug>(e: E) -> PlotError {
    PlotError(format!("{e:?}"))
}

/// One metric over concurrency levels: mean line and a min..max band per level.
pub struct Band<'a> {
    /// The metric's name, above its panel.
    pub title: &'a str,
    /// Its unit, on the y axis.
    pub unit: &'a str,
    /// What the x axis counts (concurrent sessions, or arrivals per second).
    pub x_desc: &'a str,
    /// Decimals of the x axis' labels.
    pub x_decimals: usize,
    /// The levels, in order.
    pub x: &'a [f64],
    /// Mean over seeds at each level.
    pub mean: Vec<f64>,
    /// Lowest seed's value at each level.
    pub min: Vec<f64>,
    /// Highest seed's value at each level.
    pub max: Vec<f64>,
}

/// Three stacked panels (D, G, f) against concurrency on a log axis. Levels whose mean f reaches
/// `qualified_f` are shaded green; `recommended` gets a vertical line.
pub fn sweep_svg(
    title: &str,
    bands: &[Band<'_>],
    qualified: &[bool],
    recommended: f64,
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 320 * bands.len() as u32 + 64))
            .into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(64);
        let (heading, legend) = top.split_vertically(34);
        heading.titled(title, ("sans-serif", 18)).map_err(err)?;
        sweep_legend(&legend)?;
        let panels = rest.split_evenly((bands.len(), 1));
        for (area, band) in panels.iter().zip(bands) {
            band_panel(area, band, qualified, recommended)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The sweep's legend, once, above the panels (inside a panel it hid the curves' peaks).
fn sweep_legend(area: &Area<'_>) -> Result<()> {
    let font = ("sans-serif", 13).into_font();
    let y = 14;
    let mut x = 70;
    let entries: [(&str, ShapeStyle, bool); 4] = [
        ("mean over seeds", BLUE.stroke_width(2), false),
        ("band: min..max over seeds", BLUE.mix(0.18).filled(), true),
        ("f ≥ 90 % at this level", GREEN.mix(0.12).filled(), true),
        ("recommended concurrency", RED.stroke_width(1), false),
    ];
    for (label, style, filled) in entries {
        if filled {
            area.draw(&Rectangle::new([(x, y - 6), (x + 22, y + 6)], style))
                .map_err(err)?;
        } else {
            area.draw(&PathElement::new(vec![(x, y), (x + 22, y)], style))
                .map_err(err)?;
        }
        area.draw(&Text::new(label, (x + 28, y - 7), font.clone()))
            .map_err(err)?;
        x += 40 + 7 * label.chars().count() as i32;
    }
    Ok(())
}

/// Ticks of a log axis from `lo` to `hi`: 1, 2, …, 9 times each power of ten (1, 2 and 5 times
/// when the axis spans more than two decades), each label once and none that rounds to 0. plotters'
/// own log ticks put two at 10 (one just below it), and both printed "10".
fn log_ticks(lo: f64, hi: f64, decimals: usize) -> Vec<f64> {
    let label = |v: f64| format!("{v:.decimals$}");
    let steps: &[u32] = if hi / lo > 100.0 {
        &[1, 2, 5]
    } else {
        &[1, 2, 3, 4, 5, 6, 7, 8, 9]
    };
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let mut ticks: Vec<f64> = Vec::new();
    for power in first..=last {
        for &m in steps {
            // Parsed back from its label, so that the tick sits where its label says.
            let v: f64 = label(m as f64 * 10f64.powi(power)).parse().unwrap_or(0.0);
            let fresh = ticks.last().map_or(true, |&t| label(t) != label(v));
            if v >= lo && v <= hi && v > 0.0 && fresh {
                ticks.push(v);
            }
        }
    }
    ticks
}

fn band_panel(area: &Area<'_>, b: &Band<'_>, qualified: &[bool], recommended: f64) -> Result<()> {
    let (x0, x1) = (
        b.x.iter().cloned().fold(f64::MAX, f64::min),
        b.x.iter().cloned().fold(f64::MIN, f64::max),
    );
    let (x0, x1) = (x0 / 1.15, (x1 * 1.15).max(x0 * 1.5));
    let ymax = b.max.iter().cloned().fold(0.0, f64::max).max(1e-9) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{} ({})", b.title, b.unit), ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(64)
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(log_ticks(x0, x1, b.x_decimals)),
            0f64..ymax,
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(b.x_desc)
        .y_desc(b.unit)
        .max_light_lines(1)
        .x_label_formatter(&|v| format!("{v:.prec$}", prec = b.x_decimals))
        .draw()
        .map_err(err)?;
    // Shade the levels where most value meets the SLO: a strip centred on each, never past the
    // midpoint to its neighbours (nor past 8 % of the level), so a strip ends at its level.
    for (i, &ok) in qualified.iter().enumerate() {
        if ok {
            let reach = |j: Option<usize>| {
                j.and_then(|j| b.x.get(j)).map_or(1.08, |&n| {
                    let ratio = if n > b.x[i] { n / b.x[i] } else { b.x[i] / n };
                    ratio.sqrt().min(1.08)
                })
            };
            let lo = b.x[i] / reach(i.checked_sub(1));
            let hi = b.x[i] * reach(Some(i + 1));
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(lo, 0.0), (hi, ymax)],
                    GREEN.mix(0.12).filled(),
                )))
                .map_err(err)?;
        }
    }
    let mut band: Vec<(f64, f64)> = b.x.iter().zip(&b.max).map(|(&x, &y)| (x, y)).collect();
    band.extend(b.x.iter().zip(&b.min).rev().map(|(&x, &y)| (x, y)));
    chart
        .draw_series(std::iter::once(Polygon::new(band, BLUE.mix(0.18))))
        .map_err(err)?;
    chart
        .draw_series(LineSeries::new(
            b.x.iter().zip(&b.mean).map(|(&x, &y)| (x, y)),
            BLUE.stroke_width(2),
        ))
        .map_err(err)?;
    chart
        .draw_series(
            b.x.iter()
                .zip(&b.mean)
                .map(|(&x, &y)| Circle::new((x, y), 3, BLUE.filled())),
        )
        .map_err(err)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(recommended, 0.0), (recommended, ymax)],
            RED.stroke_width(1),
        )))
        .map_err(err)?;
    Ok(())
}

/// A histogram of `values` with labelled vertical marks (quantiles).
pub fn histogram_svg(
    title: &str,
    x_desc: &str,
    values: &[f64],
    marks: &[(&str, f64)],
) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (900, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let lo = values.iter().cloned().fold(f64::MAX, f64::min);
        let hi = values.iter().cloned().fold(f64::MIN, f64::max);
        let (lo, hi) = if hi > lo {
            (lo, hi)
        } else {
            (lo - 0.5, lo + 0.5)
        };
        let bins = 24usize;
        let width = (hi - lo) / bins as f64;
        let mut counts = vec![0u32; bins];
        for &v in values {
            counts[(((v - lo) / width) as usize).min(bins - 1)] += 1;
        }
        let top = *counts.iter().max().unwrap_or(&1) as f64 * 1.15;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d(lo..hi, 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("seeds")
            .y_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(counts.iter().enumerate().map(|(i, &c)| {
                let x = lo + i as f64 * width;
                Rectangle::new(
                    [(x, 0.0), (x + width * 0.92, c as f64)],
                    BLUE.mix(0.6).filled(),
                )
            }))
            .map_err(err)?;
        // Dark colours that read on white.
        for (i, &(label, x)) in marks.iter().enumerate() {
            let color = match i {
                0 => RGBColor(200, 30, 30),
                1 => RGBColor(20, 20, 20),
                2 => RGBColor(120, 40, 160),
                _ => RGBColor(0, 110, 110),
            };
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(x, 0.0), (x, top)],
                    color.stroke_width(2),
                )))
                .map_err(err)?
                .label(format!("{label} = {x:.3}"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Series of a run's timeline: per-step samples and per-request TTFTs.
pub struct Timeline<'a> {
    /// Above the panels.
    pub title: &'a str,
    /// (time s, running, waiting, KV occupancy)
    pub steps: Vec<(f64, f64, f64, f64)>,
    /// (send time s, TTFT s)
    pub ttft: Vec<(f64, f64)>,
    /// The TTFT target, s (a line).
    pub ttft_target: f64,
    /// (send time s, TPOT s)
    pub tpot: Vec<(f64, f64)>,
    /// The TPOT target, s (a line).
    pub tpot_target: f64,
    /// The window's length, s (the x axis).
    pub window_s: f64,
}

/// Running and waiting sequences, KV occupancy, and each request's TTFT (at its send time) over time.
pub fn timeline_svg(t: &Timeline<'_>) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 1160)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(40);
        top.titled(t.title, ("sans-serif", 20)).map_err(err)?;
        let panels = rest.split_evenly((4, 1));
        let xs = 0f64..t.window_s;
        let seqs_max = t.steps.iter().map(|s| s.1.max(s.2)).fold(1.0, f64::max) * 1.1;
        let mut c = ChartBuilder::on(&panels[0])
            .caption("sequences in the engine", ("sans-serif", 15))
            .margin(10)
            .margin_right(28)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(xs.clone(), 0f64..seqs_max)
            .map_err(err)?;
        c.configure_mesh().y_desc("sequences").draw().map_err(err)?;
        c.draw_series(LineSeries::new(t.steps.iter().map(|s| (s.0, s.1)), BLUE))
            .map_err(err)?
            .label("running")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLUE));
        c.draw_series(LineSeries::new(t.steps.iter().map(|s| (s.0, s.2)), RED))
            .map_err(err)?
            .label("waiting")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], RED));
        c.configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        let mut c = ChartBuilder::on(&panels[1])
            .caption("KV cache occupancy", ("sans-serif", 15))
            .margin(10)
            .margin_right(28)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(xs.clone(), 0f64..100f64)
            .map_err(err)?;
        c.configure_mesh()
            .y_desc("% of blocks in use")
            .draw()
            .map_err(err)?;
        c.draw_series(LineSeries::new(
            t.steps.iter().map(|s| (s.0, s.3 * 100.0)),
            GREEN.stroke_width(1),
        ))
        .map_err(err)?;
        latency_panel(
            &panels[2],
            "TTFT of each request, at its send time (red: over the target)",
            "TTFT (s)",
            &t.ttft,
            t.ttft_target,
            1.0,
            t.window_s,
        )?;
        latency_panel(
            &panels[3],
            "TPOT of each request, at its send time (red: over the target)",
            "TPOT (ms)",
            &t.tpot,
            t.tpot_target,
            1e3,
            t.window_s,
        )?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn latency_panel(
    area: &Area<'_>,
    caption: &str,
    y_desc: &str,
    points: &[(f64, f64)],
    target: f64,
    scale: f64,
    window_s: f64,
) -> Result<()> {
    let top = latency_axis_top(points, target) * scale;
    let above = points.iter().filter(|p| p.1 * scale > top).count();
    let caption = if above > 0 {
        format!("{caption}; {above} above the axis, drawn at its top")
    } else {
        caption.to_string()
    };
    let mut c = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(10)
        .margin_right(28)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..window_s, 0f64..top)
        .map_err(err)?;
    c.configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    c.draw_series(points.iter().map(|&(x, y)| {
        Circle::new(
            (x, (y * scale).min(top)),
            2,
            if y <= target {
                BLUE.filled()
            } else {
                RED.filled()
            },
        )
    }))
    .map_err(err)?;
    c.draw_series(std::iter::once(PathElement::new(
        vec![(0.0, target * scale), (window_s, target * scale)],
        BLACK,
    )))
    .map_err(err)?
    .label(format!(
        "target {:.2} {}",
        target * scale,
        y_desc.split('(').nth(1).unwrap_or("").trim_end_matches(')')
    ))
    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], BLACK));
    c.configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// The top of a latency axis: the largest value, unless a few outliers would squash the rest — then
/// the larger of three times the target and the 99th percentile (with 10 % headroom either way).
fn latency_axis_top(points: &[(f64, f64)], target: f64) -> f64 {
    let mut v: Vec<f64> = points
        .iter()
        .map(|p| p.1)
        .filter(|y| y.is_finite())
        .collect();
    v.sort_by(f64::total_cmp);
    let max = v.last().copied().unwrap_or(0.0).max(target);
    let p99 = v
        .get((v.len() * 99 / 100).min(v.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0);
    let cap = (3.0 * target).max(p99);
    max.min(cap).max(target) * 1.1
}

/// Panels of simulated (y) against measured (x) values, one point per run, with the line y = x.
pub fn compare_svg(title: &str, panels: &[(&str, Vec<(f64, f64)>)]) -> Result<String> {
    let cols = 3;
    let rows = panels.len().div_ceil(cols);
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (1050, 330 * rows as u32 + 40)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(40);
        top.titled(title, ("sans-serif", 18)).map_err(err)?;
        for (area, (name, points)) in rest.split_evenly((rows, cols)).iter().zip(panels) {
            scatter_panel(area, name, points)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn scatter_panel(area: &Area<'_>, name: &str, points: &[(f64, f64)]) -> Result<()> {
    let hi = points
        .iter()
        .flat_map(|&(x, y)| [x, y])
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(name, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..hi, 0f64..hi)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("measured")
        .y_desc("simulated")
        .max_light_lines(1)
        .draw()
        .map_err(err)?;
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 0.0), (hi, hi)],
            BLACK.mix(0.4).stroke_width(1),
        )))
        .map_err(err)?;
    chart
        .draw_series(
            points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| Circle::new((x, y), 4, BLUE.filled())),
        )
        .map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_ticks_label_each_value_once() {
        // The default sweep's axis (1 to 64, widened by 15 %): 10 once, 1 to 9 and 20 to 70.
        let ticks = log_ticks(1.0 / 1.15, 64.0 * 1.15, 0);
        let labels: Vec<String> = ticks.iter().map(|t| format!("{t:.0}")).collect();
        assert_eq!(
            labels.iter().filter(|l| *l == "10").count(),
            1,
            "{labels:?}"
        );
        assert_eq!(labels.first().map(String::as_str), Some("1"));
        assert_eq!(labels.last().map(String::as_str), Some("70"));
        // Rates over three decades: 1, 2 and 5 per decade, none rounding to 0.
        let rates = log_ticks(0.008, 12.0, 2);
        let labels: Vec<String> = rates.iter().map(|t| format!("{t:.2}")).collect();
        assert_eq!(
            labels,
            ["0.01", "0.02", "0.05", "0.10", "0.20", "0.50", "1.00", "2.00", "5.00", "10.00"]
        );
    }
}
