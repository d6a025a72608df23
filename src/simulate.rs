//! `serverbench simulate`: one `serverbench_sim::simulate`, its summary printed and its records,
//! summary, timeline and page written (rendered by `serverbench_study::report`).

use crate::cli::SimulateArgs;
use crate::inputs;
use crate::output::{prepare_out, write_files, write_report};
use anyhow::{bail, Result};
use serverbench_study::report::summary::{
    simulate_files, simulate_page, simulate_title, summary_rows, summary_table,
    unfitted_profile_note, SeenBy, SIMULATE_FILES,
};
use serverbench_study::report::timeline;

pub fn run(a: SimulateArgs) -> Result<()> {
    let d = inputs::resolved(&a.run.deployment)?;
    let cost = d.cost_model();
    if inputs::print_config(&a.run.deployment, &d)? {
        return Ok(());
    }
    if a.timeline && a.out.is_none() && a.report.is_none() {
        bail!("--timeline: give --out DIR (timeline.csv, timeline.svg) or --report FILE (the plot), or both");
    }
    let (mut cfg, source) = inputs::one_run(&a.run, &a.one, &d)?;
    cfg.timeline = a.timeline;
    if let Some(dir) = &a.out {
        prepare_out(dir, &SIMULATE_FILES)?;
    }
    let started = std::time::Instant::now();
    let out = serverbench_sim::simulate(&d, &cost, source.as_ref(), &cfg)?;
    let elapsed = started.elapsed();
    let title = simulate_title(&d, &cfg);
    outln!("{title}\n")?;
    if let Some(note) = unfitted_profile_note(&d) {
        outln!("{note}")?;
    }
    let (gpus, price, protocol) = (d.gpus(), d.gpu_hour_dollars, a.run.replay.protocol());
    let rows = summary_rows(&out.summary, gpus, price, protocol, SeenBy::Engine);
    out!(
        "{}",
        summary_table(&out.summary, gpus, price, protocol, SeenBy::Engine)
    )?;
    outln!(
        "\n  simulated {:.0} s in {:.1} ms of wall time",
        cfg.window_s,
        elapsed.as_secs_f64() * 1e3
    )?;
    if let Some(dir) = &a.out {
        let files = simulate_files(dir, &d, &cfg, &out, &crate::meta::now(Some(&d)))?;
        write_files(dir, &files)?;
    }
    if let Some(path) = &a.report {
        let svg = timeline::plot(&d, &cfg, &out)?;
        let page = simulate_page(&title, crate::meta::now(Some(&d)), &rows, svg.as_deref());
        write_report(&page, path)?;
    }
    Ok(())
}
