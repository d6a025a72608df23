//! `what-if`'s rendering: the Markdown table of D, G and f per knob and level (docs/what-if.md is
//! one). Pure: a `WhatIf` in, text out.

use crate::{KnobRow, WhatIf};
use serverbench_sim::Deployment;

/// The line above the table.
pub fn header(r: &WhatIf, d: &Deployment) -> String {
    let mut h = format!(
        "serverbench what-if — {} ({} × {} GPU), each knob alone, mean over {} seeds, window {} s\n",
        r.deployment,
        d.gpus(),
        d.hardware.name,
        r.seeds.len(),
        r.window_s
    );
    h.extend(super::summary::unfitted_profile_note(d));
    h
}

/// The Markdown table: a row per knob, D, G and f per level.
pub fn table(r: &WhatIf) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{what_if, Study, KNOBS};
    use serverbench_sim::RunConfig;
    use serverbench_workloads::Workload;

    #[test]
    fn a_row_per_knob_and_three_columns_per_level() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = Workload::builtin(d.workload.as_deref());
        let study = Study::new(d.clone(), w, RunConfig::new(1, 0, 60.0));
        let r = what_if(&study, &KNOBS[..2], &[2, 4], &[0], &|| {}).unwrap();
        let t = table(&r);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "| knob | D (c=2) | G (c=2) | f (c=2) | D (c=4) | G (c=4) | f (c=4) |"
        );
        assert_eq!(lines[1], "|---|---:|---:|---:|---:|---:|---:|");
        assert_eq!(lines.len(), 4, "{t}");
        assert!(
            lines[2].starts_with("| default | ") && lines[2].ends_with(" % |"),
            "{t}"
        );
        assert!(header(&r, &d).starts_with("serverbench what-if — qwen3-8b-1xh200 (1 × h200 GPU)"));
    }
}
