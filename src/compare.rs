//! `serverbench compare`: the same runs in the simulator and against a real backend, side by side
//! (`serverbench_backends::compare`), rendered (`serverbench_study::report::compare`) as a Markdown table,
//! JSON, an SVG plot and a report.
//! Each real run it measures is a `serverbench replay` child process (`serverbench_backends::child`).

use crate::cli::CompareArgs;
use crate::inputs;
use crate::output::{write_files, write_report};
use anyhow::Result;
use serverbench_backends::child::{self, MeasuredRuns, RunFlags};
use serverbench_backends::compare::{check_flags, compare, Comparison};
use serverbench_study::report::compare::{self as render, Setting};

/// Runs the command.
pub fn run(a: CompareArgs) -> Result<()> {
    let mut study = inputs::study(&a.run)?;
    study.replay.text_prompts = serverbench_backends::inputs::text_prompts(&a.client.api)?;
    let d = &study.deployment;
    check_flags(a.engine.step_log.is_some(), &a.concurrency, &a.seeds)?;
    let (deployment, workload, replay) = inputs::choices(&a.run);
    let runs = measured_runs(&a, RunFlags::of(&deployment, &workload, &replay));
    let exe = crate::this_exe()?;
    let Comparison { rows, rankings } = compare(
        &study,
        &a.concurrency,
        &a.seeds,
        &a.out,
        a.reuse,
        &mut |dir, c, seed| child::measure(&runs, &exe, (dir, c, seed), &|n| eprintln!("{n}")),
    )?;
    let setting = Setting {
        deployment: &d.name,
        window_s: a.run.replay.window,
        arrivals: &a.run.replay.arrivals,
        protocol: a.run.replay.protocol(),
        profile: &d.profile.name,
    };
    let table = render::markdown(&setting, &rows, &rankings);
    out!("{table}")?;
    let model = a.client.model.as_deref().unwrap_or(&d.model.name);
    let meta = crate::meta::now(Some(d)).with_server(a.url.as_deref(), model);
    let files = render::files(&a.out, &setting, &rows, &rankings, &table, &meta)?;
    write_files(&a.out, &[files])?;
    if let Some(path) = &a.report {
        let svg = render::plot(&d.name, &rows)?;
        write_report(&render::page(&d.name, meta, &table, &svg), path)?;
    }
    Ok(())
}

/// The flags every measured run is given, from `compare`'s (`run`: its deployment, workload and
/// replay flags).
fn measured_runs<'a>(a: &'a CompareArgs, run: RunFlags<'a>) -> MeasuredRuns<'a> {
    MeasuredRuns {
        url: a.url.as_deref(),
        api: &a.client.api,
        server: &a.client.server,
        timeout: a.timeout,
        model: a.client.model.as_deref(),
        tokenizer: a.tokenizer.as_deref(),
        engine: a.engine.choice(),
        run,
    }
}
