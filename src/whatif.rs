//! `serverbench what-if`: each serving knob alone (`serverbench_study::what_if`), printed as a Markdown
//! table (`serverbench_study::report::whatif`).

use crate::cli::WhatIfArgs;
use crate::inputs;
use crate::output::replays_bar;
use anyhow::Result;
use serverbench_study::report::whatif as render;
use serverbench_study::KNOBS;

pub fn run(a: WhatIfArgs) -> Result<()> {
    // A level no run can have is the command line's error, not a row of the table.
    inputs::check_levels(&inputs::replay_choice(&a.run.replay), &a.concurrency)?;
    let study = inputs::study(&a.run)?;
    let d = &study.deployment;
    let seeds = inputs::seeds(&a.seeds)?;
    let bar = replays_bar(KNOBS.len() * a.concurrency.len() * seeds.len(), true);
    let r = serverbench_study::what_if(&study, KNOBS, &a.concurrency, &seeds, &|| bar.inc(1))?;
    bar.finish_and_clear();
    outln!("{}", render::header(&r, d))?;
    outln!("{}", render::table(&r))?;
    Ok(())
}
