//! `serverbench what-if`: each serving knob alone (`serverbench_study::what_if`), printed as a Markdown
//! table.

use crate::cli::WhatIfArgs;
use crate::inputs;
use crate::output::replays_bar;
use anyhow::Result;
use serverbench_study::{KnobRow, WhatIf, KNOBS};

pub fn run(a: WhatIfArgs) -> Result<()> {
    // A level no run can have is the command line's error, not a row of the table.
    inputs::check_levels(&a.replay, &a.concurrency)?;
    let study = inputs::study(&a.deployment, &a.workload, &a.replay)?;
    let d = &study.deployment;
    let seeds = inputs::seeds(&a.seeds)?;
    let bar = replays_bar(KNOBS.len() * a.concurrency.len() * seeds.len(), true);
    let r = serverbench_study::what_if(&study, KNOBS, &a.concurrency, &seeds, &|| bar.inc(1))?;
    bar.finish_and_clear();
    outln!("serverbench what-if — {} ({} × {} GPU), each knob alone, mean over {} seeds, window {} s\n", r.deployment, d.gpus(), d.hardware.name, r.seeds.len(), r.window_s)?;
    outln!("{}", table(&r))?;
    Ok(())
}

/// The Markdown table: a row per knob, D, G and f per level.
fn table(r: &WhatIf) -> String {
    let mut header = String::from("| knob |");
    let mut rule = String::from("|---|");
    for c in &r.concurrency {
        header.push_str(&format!(" D (c={c}) | G (c={c}) | f (c={c}) |"));
        rule.push_str("---:|---:|---:|");
    }
    let lines: Vec<String> = r.knobs().map(knob_line).collect();
    format!("{header}\n{rule}\n{}", lines.join("\n"))
}

/// One knob's line; a reason it cannot run is given whole once, as `simulate` gives it.
fn knob_line(rows: &[KnobRow]) -> String {
    let mut line = format!("| {} |", rows[0].knob);
    let mut said: Option<&str> = None;
    for r in rows {
        match &r.error {
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
    line
}
