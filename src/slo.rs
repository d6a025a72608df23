//! `serverbench slo`: freezes τ_first and τ_token with `serverbench_study::freeze_slo` (on the
//! reference `serverbench_study::slo_reference` picks) and prints or writes the deployment with them
//! (docs/definitions.md; the text is `serverbench_study::report::slo`'s).

use crate::cli::SloArgs;
use crate::inputs;
use crate::output::replays_bar;
use anyhow::{Context, Result};
use serverbench_study::report::slo::{frozen_yaml, text, text_over_corpora};
use serverbench_study::{slo_reference, with_frozen_slo};

pub fn run(a: SloArgs) -> Result<()> {
    let d = inputs::resolved(&a.run.deployment)?;
    let own_engine = a.as_deployed || a.run.deployment.engine_config.is_some();
    let reference = slo_reference(&d, a.concurrency, own_engine)?;
    if inputs::print_config(&a.run.deployment, &reference.deployment)? {
        return Ok(());
    }
    let (deployment, workload, replay) = inputs::choices(&a.run);
    let on = reference.deployment.clone();
    let study = inputs::study_on(on, &deployment, &workload, &replay)?;
    let seeds = inputs::seeds(&a.seeds)?;
    let c = reference.concurrency;
    let window = a.run.replay.window;
    let slo = if a.corpus_draws == 1 {
        let bar = replays_bar(seeds.len(), true);
        let (rows, slo) = serverbench_study::freeze_slo(&study, c, &seeds, &|| bar.inc(1))?;
        bar.finish_and_clear();
        out!("{}", text(&d, &reference, &rows, window, &slo))?;
        slo
    } else {
        let bar = replays_bar(seeds.len() * a.corpus_draws as usize, true);
        let (draws, slo) =
            serverbench_study::freeze_over_corpora(&study, c, &seeds, a.corpus_draws, &|| {
                bar.inc(1)
            })?;
        bar.finish_and_clear();
        out!(
            "{}",
            text_over_corpora(&d, &reference, &draws, window, &slo)
        )?;
        slo
    };
    if let Some(path) = &a.out {
        let frozen = with_frozen_slo(&d, slo);
        let yaml = frozen_yaml(&d.name, &frozen, c, &seeds, window, a.corpus_draws);
        std::fs::write(path, yaml).with_context(|| format!("{}: cannot write", path.display()))?;
        outln!("  wrote {} (use it with --deployment)", path.display())?;
    }
    Ok(())
}
