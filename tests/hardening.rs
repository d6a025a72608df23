//! Hostile inputs, one reproduction each: every one ends with a clear error (exit 2, naming the flag or
//! the file, line and field) or runs normally — never a panic (101), an abort (134) or a hang.

use crate::serverbench;
use std::path::PathBuf;
use std::process::Output;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sb-hard-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The command fails cleanly with exit 2 and its error mentions every one of `needles`.
fn refused(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(2),
        "exit {:?}: {err}",
        o.status.code()
    );
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} missing from: {err}");
    }
}

fn write(d: &std::path::Path, name: &str, text: &str) -> String {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_workload_that_only_overflows_the_context_stops_with_an_error() {
    let d = dir("overflow");
    let trace = write(
        &d,
        "o.jsonl",
        "{\"timestamp\":0,\"input_length\":2000000,\"output_length\":10,\"hash_ids\":[]}\n",
    );
    let o = serverbench(["simulate", "--trace", &trace, "-c", "1", "-w", "60"]);
    refused(&o, &["no progress", "overflowed the context limit"]);
    let o = serverbench([
        "sweep", "--trace", &trace, "-c", "1", "--seeds", "2", "-w", "60",
    ]);
    refused(&o, &["no progress"]);
    // A deployment whose context limit every Mooncake request passes.
    let dep = write(&d, "d.yaml", "base: qwen3-8b-1xh200\ncontext_limit: 100\n");
    let mooncake = crate::fixture("mooncake/sample_200.jsonl");
    let o = serverbench([
        "simulate",
        "-d",
        &dep,
        "--trace",
        mooncake.to_str().unwrap(),
        "-w",
        "60",
    ]);
    refused(&o, &["no progress", "100 tokens"]);
}

#[test]
fn numbers_that_would_exhaust_memory_are_refused_at_parse_time() {
    let d = dir("numbers");
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            vec!["simulate".into(), "-c".into(), "1000000".into()],
            vec!["--concurrency", "16384"],
        ),
        (
            vec!["sweep".into(), "--seeds".into(), "1000000000".into()],
            vec!["--seeds", "100000"],
        ),
        (
            vec![
                "sweep".into(),
                "-w".into(),
                "120".into(),
                "--seeds".into(),
                "0..18446744073709551615".into(),
                "-c".into(),
                "1".into(),
            ],
            vec!["--seeds"],
        ),
        (
            vec![
                "workload".into(),
                "stats".into(),
                "--trees".into(),
                "1000000000000".into(),
            ],
            vec!["--trees"],
        ),
        (
            vec![
                "workload".into(),
                "export".into(),
                "--trees".into(),
                "1000000000000".into(),
            ],
            vec!["--trees"],
        ),
        (
            vec!["simulate".into(), "--trace".into(), "/dev/zero".into()],
            vec!["/dev/zero", "not a text file"],
        ),
        (
            vec!["simulate".into(), "-w".into(), "1e12".into()],
            vec!["--window"],
        ),
        (
            vec!["sweep".into(), "--threads".into(), "10000".into()],
            vec!["--threads"],
        ),
        (
            vec!["workload".into(), "scan".into(), "-c".into(), "0".into()],
            vec!["--concurrency"],
        ),
        (
            vec!["workload".into(), "scan".into(), "-w".into(), "0".into()],
            vec!["--window"],
        ),
        (
            vec!["workload".into(), "scan".into(), "-w".into(), "NaN".into()],
            vec!["--window"],
        ),
        (
            vec!["workload".into(), "scan".into(), "--window=-5".into()],
            vec!["--window"],
        ),
        (
            vec![
                "replay".into(),
                "--url".into(),
                "http://127.0.0.1:1".into(),
                "--timeout".into(),
                "inf".into(),
            ],
            vec!["--timeout"],
        ),
        (
            vec![
                "replay".into(),
                "--url".into(),
                "http://127.0.0.1:1".into(),
                "--timeout".into(),
                "1e30".into(),
            ],
            vec!["--timeout"],
        ),
        (
            vec!["serve".into(), "--time-scale".into(), "1e300".into()],
            vec!["--time-scale"],
        ),
    ];
    for (args, needles) in cases {
        refused(&serverbench(&args), &needles);
    }
    // Deployment and workload-spec numbers: each names the file, the line and the field.
    let files = [
        ("dp.yaml", "dp: 4294967295\n", "dp"),
        ("tpdp.yaml", "tp: 65536\ndp: 65536\n", "tp"),
        (
            "draft.yaml",
            "engine: {speculative: {method: draft, k: 4, acceptance: 0.8, draft_params: 1.0e30}}\n",
            "engine.speculative.draft_params",
        ),
        (
            "negdraft.yaml",
            "engine: {speculative: {method: draft, k: 4, acceptance: 0.8, draft_params: -1.0e9}}\n",
            "engine.speculative.draft_params",
        ),
        (
            "price.yaml",
            "prices: {input_per_m: .inf}\n",
            "prices.input_per_m",
        ),
        ("gpu.yaml", "gpu_hour_dollars: .inf\n", "gpu_hour_dollars"),
        ("slo.yaml", "slo: {ttft_s: .inf}\n", "slo.ttft_s"),
        (
            "mem.yaml",
            "engine:\n  gpu_memory_utilization: 0.2\n",
            "engine.gpu_memory_utilization",
        ),
        ("ctx.yaml", "context_limit: 16000000\n", "context_limit"),
    ];
    for (name, text, field) in files {
        let p = write(&d, name, text);
        let o = serverbench(["simulate", "-d", &p, "-w", "60"]);
        refused(&o, &[name, field]);
    }
    let specs = [
        (
            "turns.yaml",
            "root_turns: {dist: constant, value: 1000000000}\n",
            "root_turns.value",
        ),
        (
            "nan.yaml",
            "subagents: {fanout: {dist: geometric, p: 0.5, offset: .nan}}\n",
            "subagents.fanout.offset",
        ),
        (
            "prefix.yaml",
            "system_prefix_tokens: 4294967295\n",
            "system_prefix_tokens",
        ),
        (
            "tail.yaml",
            "output_tokens: {dist: lognormal, median: 100, sigma: 1, max: .inf}\n",
            "output_tokens.max",
        ),
    ];
    for (name, text, field) in specs {
        let p = write(&d, name, text);
        let o = serverbench(["simulate", "--workload", &p, "-w", "60"]);
        refused(&o, &[name, field]);
    }
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    for args in [
        vec!["workload", "stats", "--trees", "3000"],
        vec!["screen", "-c", "4", "--seeds", "16", "-w", "60"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_serverbench"))
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut one = [0u8; 1];
        child.stdout.as_mut().unwrap().read_exact(&mut one).unwrap();
        drop(child.stdout.take()); // the reader goes away, as `head -c 1` does
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn a_second_record_on_a_line_is_an_error_in_every_line_format() {
    let d = dir("lines");
    let mooncake = "{\"timestamp\":0,\"input_length\":600,\"output_length\":5,\"hash_ids\":[1,2]}";
    let bailian = "{\"chat_id\":1,\"parent_chat_id\":-1,\"timestamp\":0,\"input_length\":40,\"output_length\":5,\"hash_ids\":[1,2]}";
    let native = std::fs::read_to_string(crate::fixture("bailian_small.jsonl")).unwrap();
    let export = serverbench([
        "workload",
        "export",
        "--trace",
        crate::fixture("bailian_small.jsonl").to_str().unwrap(),
    ]);
    let native_line = String::from_utf8(export.stdout).unwrap();
    let native_line = native_line.lines().next().unwrap().to_string();
    assert!(!native.is_empty());
    for (name, line) in [
        ("m.jsonl", mooncake.to_string()),
        ("b.jsonl", bailian.to_string()),
        ("n.jsonl", native_line),
    ] {
        // The first line is fine; the second carries two records.
        let text = format!("{line}\n{line} {line}\n");
        let p = write(&d, name, &text);
        let o = serverbench(["workload", "stats", "--trace", &p]);
        refused(&o, &[name, "line 2", "text after the record"]);
    }
}

#[test]
fn weka_line_numbers_stay_right_deep_into_a_long_file() {
    // Lines are counted incrementally (the count from the start for every trace made the import
    // quadratic); the error must still name the right line.
    let d = dir("weka");
    let good = std::fs::read_to_string(crate::fixture("weka/sample_trace.json")).unwrap();
    let one_line: serde_json::Value = serde_json::from_str(&good).unwrap();
    let line = one_line.to_string();
    let bad = line.replacen("\"in\":", "\"in\":-", 1);
    let mut text = String::new();
    for _ in 0..2000 {
        text.push_str(&line);
        text.push('\n');
    }
    text.push_str(&good); // a multi-line trace
    text.push('\n');
    let first_bad = 2000 + good.lines().count() + 1;
    text.push_str(&bad);
    text.push('\n');
    let p = write(&d, "w.jsonl", &text);
    let o = serverbench(["workload", "stats", "--trace", &p]);
    refused(&o, &[&format!("line {first_bad}"), ".in"]);
    // A malformed api_time is an error, not ignored.
    let bad_api = line.replacen("\"api_time\":", "\"api_time\":-", 1);
    assert_ne!(bad_api, line, "the sample has api_time");
    let p = write(&d, "a.jsonl", &format!("{bad_api}\n"));
    refused(
        &serverbench(["workload", "stats", "--trace", &p]),
        &["api_time"],
    );
}

/// Starts the binary with `args`, sends `signal` (`TERM`, `INT`) after `after`, and returns what it
/// did and how long it took to end after the signal.
fn signalled(
    args: &[&str],
    signal: &str,
    after: std::time::Duration,
) -> (Output, std::time::Duration) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    let sent = std::time::Instant::now();
    let o = child.wait_with_output().unwrap();
    (o, sent.elapsed())
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn sigterm_or_ctrl_c_during_a_sweep_or_screen_writes_what_finished_marked_partial() {
    let d = dir("partial-sweep");
    let out = d.join("out");
    std::fs::create_dir_all(&out).unwrap();
    // A plot an earlier run left: it must not stand beside this run's files.
    std::fs::write(out.join("sweep.svg"), "stale").unwrap();
    let out_s = out.to_str().unwrap();
    let args = [
        "sweep",
        "-c",
        "1,4,16,64",
        "--seeds",
        "0..2000",
        "--threads",
        "2",
        "--out",
        out_s,
    ];
    let (o, took) = signalled(&args, "TERM", std::time::Duration::from_millis(1500));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    assert!(
        err.contains("SIGTERM") && err.contains("marked partial"),
        "{err}"
    );
    let sweep = json(&out.join("sweep.json"));
    assert_eq!(sweep["partial"], true);
    let cells = sweep["cells"].as_array().unwrap().len();
    assert!(cells > 0 && cells < 8000, "{cells} cells");
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        sweep["levels"].as_array().unwrap().len() + 1
    );
    let svg = std::fs::read_to_string(out.join("sweep.svg")).unwrap_or_default();
    assert!(svg != "stale", "the old plot was left beside the new files");
    assert!(String::from_utf8_lossy(&o.stdout).contains("PARTIAL: stopped by SIGTERM"));
    // Ctrl-C during a screen: the seeds that finished, ranked, marked partial.
    let out = d.join("screen");
    let out_s = out.to_str().unwrap();
    let args = [
        "screen",
        "-c",
        "16",
        "--seeds",
        "0..20000",
        "--threads",
        "2",
        "--out",
        out_s,
    ];
    let (o, took) = signalled(&args, "INT", std::time::Duration::from_millis(1500));
    assert_eq!(
        o.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    let screen = json(&out.join("screen.json"));
    assert_eq!(screen["partial"], true);
    let seeds = screen["seeds"].as_array().unwrap().len();
    assert!(seeds > 0 && seeds < 20000, "{seeds} seeds");
    assert_eq!(screen["seeds"][0]["rank"], 1);
}

#[test]
fn out_folders_are_checked_before_the_work_and_keep_no_stale_file() {
    // A folder that cannot be made is found before 16,000 replays, not after them.
    let started = std::time::Instant::now();
    let o = serverbench(["sweep", "--seeds", "0..4000", "--out", "/dev/null/out"]);
    refused(&o, &["--out /dev/null/out"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // A run without --timeline removes the timeline an earlier run left beside its files.
    let d = dir("stale");
    let out = d.to_str().unwrap();
    let o = serverbench(["simulate", "-w", "60", "--timeline", "--out", out]);
    assert!(o.status.success() && d.join("timeline.svg").exists());
    let o = serverbench(["simulate", "-w", "60", "--out", out]);
    assert!(o.status.success());
    assert!(!d.join("timeline.csv").exists() && !d.join("timeline.svg").exists());
    assert!(d.join("summary.json").exists());
}
