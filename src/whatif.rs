//! `serverbench what-if`: each serving knob alone (`serverbench_study::what_if`), printed as a Markdown
//! table.

use crate::cli::WhatIfArgs;
use crate::inputs;
use crate::output::replays_bar;
use anyhow::Result;
use serverbench_study::KNOBS;

pub fn run(a: WhatIfArgs) -> Result<()> {
    // A level no run can have is the command line's error, not a row of the table.
    for &c in &a.concurrency {
        inputs::run_config(&a.replay, c, 0).and_then(inputs::checked)?;
    }
    let study = inputs::study(&a.deployment, &a.workload, &a.replay)?;
    let d = &study.deployment;
    let seeds = inputs::seeds(&a.seeds)?;
    let bar = replays_bar(KNOBS.len() * a.concurrency.len() * seeds.len(), true);
    let rows = serverbench_study::what_if(&study, KNOBS, &a.concurrency, &seeds, &|| bar.inc(1))?;
    bar.finish_and_clear();
    outln!("serverbench what-if — {} ({} × {} GPU), each knob alone, mean over {} seeds, window {} s\n", d.name, d.gpus(), d.hardware.name, seeds.len(), a.replay.window)?;
    let mut header = String::from("| knob |");
    let mut rule = String::from("|---|");
    for c in &a.concurrency {
        header.push_str(&format!(" D (c={c}) | G (c={c}) | f (c={c}) |"));
        rule.push_str("---:|---:|---:|");
    }
    outln!("{header}\n{rule}")?;
    for knob in KNOBS.iter().map(|k| k.0) {
        let mut line = format!("| {knob} |");
        let mut said: Option<&str> = None;
        for r in rows.iter().filter(|r| r.knob == knob) {
            match &r.error {
                // The whole reason, numbers and all, as `simulate` gives it; once per row.
                Some(e) if said == Some(e.as_str()) => {
                    line.push_str(" cannot run (the same reason) | | |")
                }
                Some(e) => {
                    line.push_str(&format!(" cannot run: {} | | |", e.replace('|', "/")));
                    said = Some(e);
                }
                None => line.push_str(&format!(
                    " {:.3} | {:.3} | {:.1} % |",
                    r.d.mean,
                    r.g.mean,
                    r.f.mean * 100.0
                )),
            }
        }
        outln!("{line}")?;
    }
    Ok(())
}
