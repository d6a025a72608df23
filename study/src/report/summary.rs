//! One run's summary as text: the table `simulate` and `replay` print (and a page shows as labelled
//! rows), the run's load in a header, why it is invalid, and the small number formats the other
//! renderings share. Pure: a summary in, text out.

use super::meta::Meta;
use super::page::Report;
use super::OutFiles;
use serverbench_sim::{Deployment, RunConfig, RunOutput, Summary};

/// How a run's load is described in headers: `c = N` for the closed loop; the arrival mode (and its
/// cap, when one was given) for the open loop, whose lane count is only a cap.
pub fn load_label(cfg: &RunConfig) -> String {
    use serverbench_sim::Arrivals;
    let cap = if cfg.concurrency < serverbench_sim::MAX_CONCURRENCY {
        format!(", at most {} open", cfg.concurrency)
    } else {
        String::new()
    };
    match cfg.arrivals {
        Arrivals::Closed => format!("c = {}", cfg.concurrency),
        Arrivals::Trace { speedup: 1.0 } => format!("recorded arrivals{cap}"),
        Arrivals::Trace { speedup } => format!("recorded arrivals ×{speedup}{cap}"),
        Arrivals::Poisson { rate } => format!("Poisson arrivals {rate} trees/s{cap}"),
    }
}

/// Seeds as a range `A..B` when they are consecutive, else listed.
pub fn seed_list(seeds: &[u64]) -> String {
    let consecutive = seeds.windows(2).all(|w| w[1] == w[0] + 1);
    match (seeds.first(), seeds.last()) {
        (Some(a), Some(b)) if consecutive => format!("{a}..{}", b + 1),
        _ => seeds
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A number with thousands separators.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Who measured a run: the simulator (it sees its engine: KV cache, steps) or a client of a real
/// server (it sees only the streams).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SeenBy {
    /// The simulator.
    Engine,
    /// A client (`replay`).
    Client,
}

/// Why a run is invalid, in words: each rate that passed its limit.
pub fn invalid_reason(s: &Summary) -> String {
    let why = s.invalid_reasons();
    let limit = if s.ended_early.is_some() && why.len() == 1 {
        ""
    } else {
        " (limit 1 % each)"
    };
    format!("INVALID: {}{limit}", why.join(" and "))
}

/// A run's records as `records.jsonl`'s text: one JSON object a line, in the order given.
pub fn records_jsonl(records: &[serverbench_sim::Record]) -> String {
    let mut text = String::new();
    for r in records {
        text += &serde_json::to_string(r).expect("a record serialises");
        text.push('\n');
    }
    text
}

/// The summary table `simulate` and `replay` print.
pub fn summary_table(s: &Summary, gpus: u32, gpu_hour: f64, start: &str, seen: SeenBy) -> String {
    summary_rows(s, gpus, gpu_hour, start, seen)
        .iter()
        .map(|(k, v)| format!("  {k:<13}{v}\n"))
        .collect()
}

/// The summary's rows: what each line is about, and what it says (a report shows them as a table).
pub fn summary_rows(
    s: &Summary,
    gpus: u32,
    gpu_hour: f64,
    start: &str,
    seen: SeenBy,
) -> Vec<(&'static str, String)> {
    let sc = &s.score;
    let mut t = Vec::new();
    let mut line = |k: &'static str, v: String| t.push((k, v));
    line(
        "score",
        format!(
            "D = {:.3} $/$    G = {:.3} $/$    f = {:.1} %",
            sc.d,
            sc.g,
            sc.f * 100.0
        ),
    );
    line("value", format!("${:.4} qualified of ${:.4} gross, over ${:.4} of GPU time ({gpus} GPU × ${gpu_hour:.2}/h × {:.0} s)", sc.qualified_value, sc.gross_value, sc.gpu_cost, s.window_s));
    line(
        "requests",
        format!(
            "{} sent · {} completed · {} qualified · {} cancelled at window end · {} context overflow · {} errors",
            s.requests, s.completed, s.qualified, s.cancelled, s.context_overflow, s.errors
        ),
    );
    line(
        "TTFT",
        format!(
            "p50 {:.3} s   p90 {:.3} s   p99 {:.3} s    (target ≤ {:.3} s)",
            s.ttft_s.p50, s.ttft_s.p90, s.ttft_s.p99, s.slo.ttft_s
        ),
    );
    line(
        "TPOT",
        format!(
            "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms   (target ≤ {:.2} ms)",
            s.tpot_s.p50 * 1e3,
            s.tpot_s.p90 * 1e3,
            s.tpot_s.p99 * 1e3,
            s.slo.tpot_s * 1e3
        ),
    );
    line(
        "ITL",
        format!(
            "p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms   max {:.1} ms (every gap between output chunks)",
            s.itl_s.p50 * 1e3,
            s.itl_s.p90 * 1e3,
            s.itl_s.p99 * 1e3,
            s.itl_s.max * 1e3
        ),
    );
    line(
        "throughput",
        format!(
            "{} prompt tok/s · {:.0} output tok/s",
            thousands(s.input_tokens_per_s as u64),
            s.output_tokens_per_s
        ),
    );
    line(
        "KV cache",
        match seen {
            SeenBy::Engine => format!(
                "occupancy mean {:.1} % / max {:.1} % · prefix hit rate {:.1} % · {} preemptions",
                s.kv_occupancy_mean * 100.0,
                s.kv_occupancy_max * 100.0,
                s.prefix_hit_rate * 100.0,
                s.preemptions
            ),
            SeenBy::Client => "not measured by a client".to_string(),
        },
    );
    let start = match s.open_loop {
        None => format!("protocol {start}"),
        Some(o) => format!(
            "arrivals {} (cold start) · {} requests sent late for their dependencies · {} trees waited for a slot",
            s.arrivals.label(),
            o.late_for_dependencies,
            o.waited_for_a_slot
        ),
    };
    let steps = match seen {
        SeenBy::Engine if s.kernel_compiles > 0 => format!(
            " · {} engine steps, {} of them waiting for a kernel compile",
            thousands(s.steps),
            s.kernel_compiles
        ),
        SeenBy::Engine => format!(" · {} engine steps", thousands(s.steps)),
        SeenBy::Client => String::new(),
    };
    if let Some(a) = &s.agentx {
        line(
            "AgentX",
            format!(
                "{} lanes · warm-up {} requests ({} primers) over {:.1} s, never scored · {} left running at the end of the grace · idle caps moved timers {} × per tree ({:.0} s), {} × globally ({:.0} s)",
                a.lanes,
                a.warmup_requests,
                a.primers,
                a.warmup_s,
                a.dropped_unfinished,
                a.tree_idle_jumps,
                a.tree_idle_skipped_s,
                a.global_idle_jumps,
                a.global_idle_skipped_s
            ),
        );
    }
    line(
        "run",
        format!(
            "{} trees started{steps} · {start} · {}",
            s.trees_started,
            if s.valid {
                "valid".to_string()
            } else {
                invalid_reason(s)
            }
        ),
    );
    t
}

/// A line saying that the deployment's profile was not fitted to measurements (a catalog GPU's
/// datasheet profile, or one a user chose): its step times are the datasheet's peaks at assumed
/// efficiencies. `None` for a fitted profile.
pub fn unfitted_profile_note(d: &Deployment) -> Option<String> {
    (!d.profile.fitted).then(|| {
        format!(
            "  profile {} is not fitted to measurements: {}\n",
            d.profile.name, d.profile.source
        )
    })
}

/// `simulate`'s title: the deployment, the load, the seed and the window.
pub fn simulate_title(d: &Deployment, cfg: &RunConfig) -> String {
    format!(
        "serverbench simulate — {}, {}, seed {}, window {} s",
        d.name,
        load_label(cfg),
        cfg.seed,
        cfg.window_s
    )
}

/// `simulate`'s HTML page: the summary's rows, and the timeline plot when the run has one.
pub fn simulate_page(
    title: &str,
    meta: Meta,
    rows: &[(&str, String)],
    timeline: Option<&str>,
) -> Report {
    let mut r = Report::new(title, meta);
    r.section("Summary", "").labelled(rows);
    if let Some(svg) = timeline {
        r.section(
            "Timeline",
            "Sequences running and waiting, KV occupancy, and each request's TTFT and TPOT at its send time.",
        )
        .svg("load, KV and latency over the window", svg);
    }
    r
}

/// Every file `simulate --out DIR` may write: none of an earlier run may stand beside this run's.
pub const SIMULATE_FILES: [&str; 5] = [
    "records.jsonl",
    "summary.json",
    "timeline.csv",
    "timeline.svg",
    "agentx_lanes.json",
];

/// What `simulate --out dir` writes, in order: records.jsonl and summary.json; agentx_lanes.json
/// for an AgentX run; timeline.csv and timeline.svg when the run kept a timeline. `meta` heads the
/// JSON files.
pub fn simulate_files(
    dir: &std::path::Path,
    d: &Deployment,
    cfg: &RunConfig,
    out: &RunOutput,
    meta: &Meta,
) -> anyhow::Result<Vec<OutFiles>> {
    let summary = meta.json(&serde_json::json!({ "summary": out.summary }))?;
    let mut all = vec![OutFiles {
        files: vec![
            ("records.jsonl", records_jsonl(&out.records)),
            ("summary.json", summary),
        ],
        line: format!(
            "  wrote {} and summary.json",
            dir.join("records.jsonl").display()
        ),
    }];
    if let Some(a) = &out.agentx {
        all.push(OutFiles {
            files: vec![(
                "agentx_lanes.json",
                meta.json(&serde_json::json!({ "lanes": a.lanes }))?,
            )],
            line: format!(
                "  wrote {} (each lane's row, start point, live streams and primers)",
                dir.join("agentx_lanes.json").display()
            ),
        });
    }
    if let Some(steps) = &out.timeline {
        let svg = super::timeline::plot(d, cfg, out)?.unwrap_or_default();
        all.push(OutFiles {
            files: vec![
                ("timeline.csv", super::timeline::csv(steps)),
                ("timeline.svg", svg),
            ],
            line: format!(
                "  wrote {} and timeline.svg",
                dir.join("timeline.csv").display()
            ),
        });
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulate_writes_records_summary_and_a_timeline_when_kept() {
        let d = serverbench_sim::Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = serverbench_workloads::Workload::builtin(d.workload.as_deref());
        let mut cfg = RunConfig::new(2, 0, 60.0);
        cfg.timeline = true;
        let study = crate::Study::new(d.clone(), w, cfg);
        let out = study.run(&cfg).unwrap();
        let dir = std::path::Path::new("out");
        let all = simulate_files(dir, &d, &cfg, &out, &crate::report::meta::test_meta()).unwrap();
        let names: Vec<&str> = all
            .iter()
            .flat_map(|g| g.files.iter().map(|f| f.0))
            .collect();
        assert_eq!(
            names,
            [
                "records.jsonl",
                "summary.json",
                "timeline.csv",
                "timeline.svg"
            ]
        );
        assert!(names.iter().all(|n| SIMULATE_FILES.contains(n)));
        assert_eq!(all[0].files[0].1, records_jsonl(&out.records));
        assert!(all[0].files[1].1.contains("\"summary\""));
        assert!(
            all[1].files[1].1.starts_with("<svg"),
            "{}",
            all[1].files[1].1
        );
        assert_eq!(
            all[0].line,
            format!(
                "  wrote {} and summary.json",
                dir.join("records.jsonl").display()
            )
        );
        cfg.timeline = false;
        let out = study.run(&cfg).unwrap();
        let all = simulate_files(dir, &d, &cfg, &out, &crate::report::meta::test_meta()).unwrap();
        assert_eq!(all.len(), 1);
    }
    use serverbench_sim::Arrivals;

    #[test]
    fn records_are_one_json_line_each_in_order() {
        let d = serverbench_sim::Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = serverbench_workloads::Workload::builtin(d.workload.as_deref());
        let study = crate::Study::new(d, w, RunConfig::new(2, 0, 60.0));
        let out = study.run(&study.config(2, 0)).unwrap();
        let text = records_jsonl(&out.records);
        assert_eq!(text.lines().count(), out.records.len());
        assert!(text.ends_with('\n') && !out.records.is_empty());
        let first: serverbench_sim::Record =
            serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first, out.records[0]);
    }

    #[test]
    fn numbers_and_seeds_read_as_printed() {
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(seed_list(&[3, 4, 5]), "3..6");
        assert_eq!(seed_list(&[1, 5]), "1, 5");
    }

    #[test]
    fn a_run_s_table_says_what_its_engine_saw_and_its_page_shows_the_rows() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let w = serverbench_workloads::Workload::builtin(d.workload.as_deref());
        let cfg = RunConfig::new(2, 0, 60.0);
        let out = crate::Study::new(d.clone(), w, cfg).run(&cfg).unwrap();
        let rows = summary_rows(
            &out.summary,
            d.gpus(),
            d.gpu_hour_dollars,
            "cold",
            SeenBy::Engine,
        );
        let keys: Vec<&str> = rows.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            keys,
            [
                "score",
                "value",
                "requests",
                "TTFT",
                "TPOT",
                "ITL",
                "throughput",
                "KV cache",
                "run"
            ]
        );
        let client = summary_table(&out.summary, 1, 3.5, "cold", SeenBy::Client);
        assert!(
            client.contains("  KV cache     not measured by a client\n"),
            "{client}"
        );
        assert!(client.starts_with("  score        D = "), "{client}");
        let title = simulate_title(&d, &cfg);
        assert_eq!(
            title,
            "serverbench simulate — qwen3-8b-1xh200, c = 2, seed 0, window 60 s"
        );
        let html = simulate_page(&title, super::super::meta::test_meta(), &rows, None).html();
        assert!(
            html.contains("<h2>Summary</h2>") && !html.contains("Timeline"),
            "{html}"
        );
        assert!(unfitted_profile_note(&d).is_none() == d.profile.fitted);
    }

    #[test]
    fn the_load_is_lanes_in_the_closed_loop_and_arrivals_in_the_open() {
        let closed = RunConfig::new(16, 0, 60.0);
        assert_eq!(load_label(&closed), "c = 16");
        let open = RunConfig {
            arrivals: Arrivals::Poisson { rate: 0.5 },
            concurrency: serverbench_sim::MAX_CONCURRENCY,
            ..closed
        };
        assert_eq!(load_label(&open), "Poisson arrivals 0.5 trees/s");
    }
}
