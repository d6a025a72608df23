//! Printing tables and writing result files.

use crate::meta::Meta;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serverbench_sim::Summary;
use std::io::Write;
use std::path::Path;

/// A progress bar over `n` replays (hidden unless `show`).
pub fn replays_bar(n: usize, show: bool) -> ProgressBar {
    let bar = if show {
        ProgressBar::new(n as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "  {bar:40} {pos}/{len} replays  {elapsed} elapsed, ETA {eta}",
        )
        .expect("valid template"),
    );
    bar
}

/// Creates `dir` and writes `name` in it with `write`, whole or not at all: the text goes to a
/// temporary file beside it, renamed over `name` once written (a full disk leaves no half-written
/// file, and an older `name` only if the new one could not be written).
pub fn write_file(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    let path = dir.join(name);
    let partial = dir.join(format!(".{name}.partial"));
    let written = std::fs::File::create(&partial).and_then(|file| {
        let mut w = std::io::BufWriter::new(file);
        write(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    });
    if let Err(e) = written.and_then(|_| std::fs::rename(&partial, &path)) {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("{}: cannot write", path.display()));
    }
    Ok(())
}

/// Writes the file at `path` whole or not at all ([`write_file`] in its folder).
pub fn write_path(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.display()))?
        .to_string_lossy()
        .into_owned();
    write_file(dir, &name, write)
}

/// Makes `dir` ready for a command's files before the command does its work: creates it, checks that
/// a file can be written there, and removes the files named in `owned` that an earlier run left, so
/// that no stale file stands beside this run's (a run that ends early writes fewer).
pub fn prepare_out(dir: &Path, owned: &[&str]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out {}: cannot create directory", dir.display()))?;
    let probe = dir.join(format!(".serverbench-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|_| std::fs::remove_file(&probe))
        .with_context(|| format!("--out {}: cannot write there", dir.display()))?;
    for name in owned {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| {
                    format!("{}: cannot remove the previous run's file", path.display())
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes `value` as pretty JSON in `dir/name`, with `meta` added as its `meta` field (an object's; anything
/// else is written as `{"meta": …, "value": …}`).
pub fn write_json<T: Serialize>(dir: &Path, name: &str, meta: &Meta, value: &T) -> Result<()> {
    let mut v = serde_json::to_value(value)?;
    let meta = serde_json::to_value(meta)?;
    match &mut v {
        serde_json::Value::Object(m) => {
            m.insert("meta".into(), meta);
        }
        other => v = serde_json::json!({ "meta": meta, "value": other.take() }),
    }
    write_file(dir, name, |w| {
        serde_json::to_writer_pretty(&mut *w, &v)?;
        w.write_all(b"\n")
    })
}

/// How a run's load is described in headers: `c = N` for the closed loop; the arrival mode (and its
/// cap, when one was given) for the open loop, whose lane count is only a cap.
pub fn load_label(cfg: &serverbench_sim::RunConfig) -> String {
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

/// `println!` that returns an `io::Result` instead of panicking when standard output is closed (a
/// command piped into `head`); `main` ends quietly on that error.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `print!` that returns an `io::Result` (see [`outln!`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// A line saying that the deployment's profile was not fitted to measurements (a catalog GPU's
/// datasheet profile, or one a user chose): its step times are the datasheet's peaks at assumed
/// efficiencies. `None` for a fitted profile.
pub fn unfitted_profile_note(d: &serverbench_sim::Deployment) -> Option<String> {
    (!d.profile.fitted).then(|| {
        format!(
            "  profile {} is not fitted to measurements: {}\n",
            d.profile.name, d.profile.source
        )
    })
}
