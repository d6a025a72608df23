//! `serverbench simulate`.

use crate::cli::SimulateArgs;
use crate::inputs;
use crate::output::{summary_table, write_file, write_json};
use anyhow::Result;

pub fn run(a: SimulateArgs) -> Result<()> {
    let (d, cost) = inputs::resolved(&a.deployment)?;
    if inputs::print_config(&a.deployment, &d)? {
        return Ok(());
    }
    let cfg = inputs::run_config(&a.replay, a.concurrency, a.seed)?;
    let source = inputs::source(&a.workload, a.seed, d.context_limit)?;
    let started = std::time::Instant::now();
    let out = serverbench_sim::simulate(&d, &cost, source.as_ref(), &cfg)?;
    let elapsed = started.elapsed();
    println!("serverbench simulate — {}, c = {}, seed {}, window {} s\n", d.name, cfg.concurrency, cfg.seed, cfg.window_s);
    print!("{}", summary_table(&out.summary, d.gpus(), d.gpu_hour_dollars, &a.replay.start));
    println!("\n  simulated {:.0} s in {:.1} ms of wall time", cfg.window_s, elapsed.as_secs_f64() * 1e3);
    if let Some(dir) = &a.out {
        write_file(dir, "records.jsonl", |w| {
            for r in &out.records {
                serde_json::to_writer(&mut *w, r)?;
                w.write_all(b"\n")?;
            }
            Ok(())
        })?;
        write_json(dir, "summary.json", &out.summary)?;
        println!("  wrote {}/records.jsonl and summary.json", dir.display());
    }
    Ok(())
}
