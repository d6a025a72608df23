//! `serverbench screen`: the ranking comes from `serverbench_study::run_screen`; this prints it and writes
//! screen.csv, screen.json and screen.svg — of the seeds that finished, marked partial, when SIGINT
//! or SIGTERM stops it.

use crate::cli::ScreenArgs;
use crate::inputs;
use crate::output::{prepare_out, write_files, write_report};
use crate::signals::{study_stop, Stoppable, INTERRUPTED};
use anyhow::Result;
use serverbench_study::report::screen as render;

pub fn run(a: ScreenArgs) -> Result<()> {
    let d = inputs::resolved(&a.run.deployment)?;
    if inputs::print_config(&a.run.deployment, &d)? {
        return Ok(());
    }
    let all = inputs::seeds(&a.seeds)?.len();
    if let Some(dir) = &a.out {
        // Before any replay: a folder that cannot be written is found now, not after the screen.
        prepare_out(dir, &["screen.csv", "screen.json", "screen.svg"])?;
    }
    let stop = study_stop()?;
    let started = std::time::Instant::now();
    let mut study = inputs::study(&a.run)?;
    study.threads = inputs::threads(a.threads)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let r = serverbench_study::run_screen(study, a.concurrency, &seeds, &Stoppable(&stop))?;
    if r.partial {
        outln!(
            "{}",
            render::partial_line(stop.why().as_deref(), r.seeds.len(), all)
        )?;
    }
    out!("{}", render::text(&r))?;
    if let Some(note) = serverbench_study::report::summary::unfitted_profile_note(&d) {
        out!("\n{note}")?;
    }
    outln!(
        "\n  {} replays + workload scans in {:.1} s",
        r.seeds.len(),
        started.elapsed().as_secs_f64()
    )?;
    if let Some(dir) = &a.out {
        write_files(dir, &[render::files(&r, dir, &crate::meta::now(Some(&d)))?])?;
    }
    // A histogram needs a seed: a screen stopped before any finished writes no report.
    if let Some(path) = a.report.as_ref().filter(|_| !r.seeds.is_empty()) {
        let svg = serverbench_study::screen_plot(&r)?;
        write_report(&render::page(&r, crate::meta::now(Some(&d)), &svg), path)?;
    }
    if r.partial {
        let message = render::partial_error(stop.why().as_deref(), r.seeds.len(), all);
        return Err(crate::exit(INTERRUPTED, message));
    }
    Ok(())
}
