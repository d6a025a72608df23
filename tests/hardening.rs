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

/// The command fails cleanly with exit 2 and its error mentions every one of `needles` (notes about
/// the inputs, such as what a deployment's context cuts from its workload, may come before it).
fn refused(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.code(),
        Some(2),
        "exit {:?}: {err}",
        o.status.code()
    );
    let first = err.lines().find(|l| !l.starts_with("note: ")).unwrap_or("");
    assert!(first.starts_with("error: "), "{err}");
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
    for n in 0..2000 {
        // Each trace its own id (AgentX refuses one used twice).
        text.push_str(&line.replacen("\"02f3098e-6bc\"", &format!("\"t{n}\""), 1));
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
    signalled_times(args, signal, after, 1)
}

/// As [`signalled`], the signal sent `times` times in a row (as GNU `timeout` sends its one SIGTERM
/// to the process and then to its group).
fn signalled_times(
    args: &[&str],
    signal: &str,
    after: std::time::Duration,
    times: usize,
) -> (Output, std::time::Duration) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    for _ in 0..times {
        std::process::Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
    }
    let sent = std::time::Instant::now();
    let o = child.wait_with_output().unwrap();
    (o, sent.elapsed())
}

/// A `screen` far longer than any test waits for, writing to `out`.
fn long_screen(out: &str) -> [&str; 9] {
    [
        "screen",
        "-c",
        "16",
        "--seeds",
        "0..20000",
        "--threads",
        "2",
        "--out",
        out,
    ]
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
    let args = long_screen(out_s);
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

// #32, configuration and messages (second round).

/// A context limit too small for the workload is the deployment file's fault: its line and
/// `context_limit` are named, once (it was "workload spec: compaction", without file or line, and
/// printed twice by `sweep`). Where the file does not set the limit, the spec is named as before.
#[test]
fn a_context_limit_too_small_for_the_workload_names_the_deployment_line() {
    let d = dir("ctx1");
    let dep = write(
        &d,
        "ctx1.yaml",
        "base: qwen3.5-9b-2xl40\n# far too small\ncontext_limit: 1\n",
    );
    let at = format!("{dep}: line 3: context_limit: too small for workload spec agentx-062126: a context of 1 tokens cannot hold these sessions");
    for args in [
        vec!["simulate", "-d", &dep, "-w", "60"],
        vec!["sweep", "-d", &dep, "-c", "1", "--seeds", "1", "-w", "60"],
        vec!["workload", "scan", "-d", &dep, "--seeds", "1"],
    ] {
        let o = serverbench(&args);
        refused(&o, &[&at]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.matches("cannot hold").count(), 1, "said once: {err}");
    }
    let big = write(&d, "big.yaml", "system_prefix_tokens: 2000000\n");
    let o = serverbench(["simulate", "--workload", &big, "-w", "60"]);
    refused(
        &o,
        &[&format!("workload spec {big}: compaction: a context of")],
    );
}

/// An alias bomb names the line where its expansion passes the limit (it named no line).
#[test]
fn a_yaml_alias_bomb_names_its_line() {
    let d = dir("bomb");
    let mut text = String::from("a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n");
    for (name, prev) in ["b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .zip(["a", "b", "c", "d", "e", "f", "g"])
    {
        let items = vec![format!("*{prev}"); 10].join(", ");
        text.push_str(&format!("{name}: &{name} [{items}]\n"));
    }
    let bomb = write(&d, "bomb.yaml", &text);
    let t = std::time::Instant::now();
    let o = serverbench(["simulate", "-d", &bomb]);
    refused(
        &o,
        &[&format!("{bomb}: line 5: e["), "aliases (`*name`) expand"],
    );
    assert!(t.elapsed().as_secs() < 5, "{:?}", t.elapsed());
}

/// `--vocab` past the model's vocabulary is refused before anything is sent (every request failed
/// with a 400 and the run was judged on its failures).
#[test]
fn a_vocab_past_the_models_is_refused_up_front() {
    let o = serverbench([
        "replay",
        "--url",
        "http://127.0.0.1:1",
        "--vocab",
        "4294967295",
        "-w",
        "60",
    ]);
    refused(
        &o,
        &["--vocab: must be between 101 and 248320 (the vocabulary of model qwen3.5-9b), got 4294967295"],
    );
    let o = serverbench(["replay", "--url", "http://127.0.0.1:1", "--vocab", "100"]);
    refused(&o, &["--vocab: must be between 101"]);
}

/// An L40 profile (the datasheet preset's numbers under a name of its own) written to `path`.
fn l40_profile(path: &std::path::Path, name: &str) {
    let p = serverbench_calibration::Profile {
        name: name.into(),
        step_overhead_s: 0.006,
        ..serverbench_calibration::Profile::preset("l40-datasheet").unwrap()
    };
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, serde_yaml::to_string(&p).unwrap()).unwrap();
}

/// A deployment names its profile by file, relative to its own folder (it was "unknown profile"),
/// and a file that is missing or bad is named.
#[test]
fn a_deployment_names_its_profile_by_file() {
    let d = dir("profile-by-file");
    l40_profile(&d.join("fits/my-fit.yaml"), "my-l40-fit");
    let dep = write(
        &d,
        "dep.yaml",
        "base: qwen3.5-9b-2xl40\nprofile: fits/my-fit.yaml\n",
    );
    // Run from another folder: the path is the deployment file's, not the working directory's.
    let printed = crate::stdout(&serverbench(["simulate", "-d", &dep, "--print-config"]));
    assert!(
        printed.contains("name: my-l40-fit") && printed.contains("step_overhead_s: 0.006"),
        "{printed}"
    );
    crate::stdout(&serverbench(["simulate", "-d", &dep, "-w", "60"]));
    let missing = write(&d, "missing.yaml", "tp: 2\nprofile: fits/nope.yaml\n");
    refused(
        &serverbench(["simulate", "-d", &missing]),
        &[
            &format!(
                "{missing}: line 2: profile: unknown profile \"fits/nope.yaml\": not a preset"
            ),
            "nor a profile file",
        ],
    );
    std::fs::write(
        d.join("fits/bad.yaml"),
        "name: x\nhardware: l40\nfitted: maybe\n",
    )
    .unwrap();
    let bad = write(&d, "bad.yaml", "profile: fits/bad.yaml\n");
    refused(
        &serverbench(["simulate", "-d", &bad]),
        &["bad.yaml: line 3: fitted"],
    );
}

/// `--profile` replaces the deployment file's profile before the file is checked: a file that moves
/// to another GPU runs with a profile of that GPU (the base's profile failed the GPU check first).
#[test]
fn a_profile_flag_applies_before_the_deployment_file_is_checked() {
    let d = dir("profile-order");
    let fit = d.join("l40-fit.yaml");
    l40_profile(&fit, "my-l40-fit");
    let fit = fit.to_str().unwrap();
    let dep = write(&d, "on-l40.yaml", "base: qwen3-8b-1xh200\nhardware: l40\n");
    // Without a profile it runs on the L40's datasheet profile, at the L40's price, and says so.
    let text = crate::stdout(&serverbench(["simulate", "-d", &dep, "-w", "60"]));
    assert!(
        text.contains("profile l40-datasheet is not fitted to measurements")
            && text.contains("× $0.82/h"),
        "{text}"
    );
    let kept = write(
        &d,
        "kept.yaml",
        "base: qwen3-8b-1xh200\nhardware: l40\nprofile: h200-qwen3-8b-cuda\n",
    );
    refused(
        &serverbench(["simulate", "-d", &kept, "-w", "60"]),
        &["profile \"h200-qwen3-8b-cuda\" describes hardware \"h200\""],
    );
    let printed = crate::stdout(&serverbench([
        "simulate",
        "-d",
        &dep,
        "--profile",
        fit,
        "--print-config",
    ]));
    assert!(printed.contains("name: my-l40-fit"), "{printed}");
    crate::stdout(&serverbench([
        "simulate",
        "-d",
        &dep,
        "--profile",
        fit,
        "-w",
        "60",
    ]));
    // A profile of another GPU is still refused, naming the profile's file.
    let h200 = write(&d, "h200.yaml", "base: qwen3-8b-1xh200\n");
    refused(
        &serverbench(["simulate", "-d", &h200, "--profile", fit]),
        &[&format!(
            "{fit}: profile: profile \"my-l40-fit\" describes hardware \"l40\""
        )],
    );
}

/// A deployment file that overrides fields of its base is named after the file in every header
/// (it kept the preset's name); one that only names its base, or names itself, keeps that name.
#[test]
fn an_edited_deployment_is_not_named_as_its_preset() {
    let d = dir("edited-name");
    let edited = write(
        &d,
        "small.yaml",
        "base: qwen3.5-9b-2xl40\nengine:\n  max_num_seqs: 8\n",
    );
    let out = d.join("out");
    let text = crate::stdout(&serverbench([
        "simulate",
        "-d",
        &edited,
        "-w",
        "60",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert!(
        text.starts_with("serverbench simulate — qwen3.5-9b-2xl40 edited by small.yaml,"),
        "{text}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["meta"]["deployment"]["name"],
        "qwen3.5-9b-2xl40 edited by small.yaml"
    );
    let named = write(&d, "named.yaml", "name: mine\ntp: 2\n");
    let text = crate::stdout(&serverbench(["simulate", "-d", &named, "-w", "60"]));
    assert!(text.starts_with("serverbench simulate — mine,"), "{text}");
    let same = write(&d, "same.yaml", "base: gemma4-e4b-1xl40\n");
    let text = crate::stdout(&serverbench(["simulate", "-d", &same, "-w", "60"]));
    assert!(
        text.starts_with("serverbench simulate — gemma4-e4b-1xl40,"),
        "{text}"
    );
}

/// A what-if row that cannot run gives the whole reason, numbers and all, as `simulate` does (it
/// was cut at the first parenthesis), once per row.
#[test]
fn a_what_if_row_that_cannot_run_keeps_its_numbers() {
    let text = crate::stdout(&serverbench([
        "what-if", "-c", "2,4", "--seeds", "1", "-w", "60",
    ]));
    let row = text
        .lines()
        .find(|l| l.starts_with("| tp 1 × dp 2"))
        .expect("the tp 1 row");
    assert!(
        row.contains(
            "cannot run: context_limit: one request at the context limit (1048576 tokens) needs"
        ) && row.contains("KV blocks but the pool holds"),
        "{row}"
    );
    assert!(row.contains("cannot run (the same reason)"), "{row}");
}

/// A malformed probe shape is refused before any request is sent (the endpoint here never answers).
#[test]
fn malformed_probe_shapes_are_refused_before_probing() {
    for (flag, value, why) in [
        ("--probe-ragged", "4:900:100", "1 ≤ SHORT ≤ LONG"),
        ("--probe-ragged", "4:900", "three numbers"),
        ("--probe-ragged", "0:100:900", "1 to 1024 streams"),
        ("--probe-ragged", "4:a:900", "whole numbers"),
        ("--probe-shared", "1:20480:8192", "2 to 1024 streams"),
        ("--probe-shared", "16:20480", "three numbers"),
        ("--probe-shared", "16:0:8192", "at least one token"),
        (
            "--probe-mixed",
            "16:8192:0:0",
            "prefills of at least one token",
        ),
    ] {
        let o = serverbench(["calibrate", "--endpoint", "http://127.0.0.1:1", flag, value]);
        refused(&o, &[flag, value, why]);
    }
}

/// Folder walks follow links but read every folder and file once: two links back to the folder itself
/// (a loop) end, and a second link to the same trace adds no session (issue 41, item 1c).
#[cfg(unix)]
#[test]
fn linked_folders_end_and_count_each_file_once() {
    let d = dir("links");
    std::fs::copy(
        crate::fixture("weka/sample_trace.json"),
        d.join("sample_trace.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink(".", d.join("a")).unwrap();
    std::os::unix::fs::symlink(".", d.join("b")).unwrap();
    std::os::unix::fs::symlink("sample_trace.json", d.join("again.json")).unwrap();
    let o = serverbench(["workload", "stats", "--trace", d.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("trees 1 · requests 6"), "{text}");
}

/// An error inside a list of a spec (`new_tokens.bands`) names its line instead of looping while it
/// looks for it; a geometric `p` too small to sample is refused (issue 41, items 1a and 1b).
#[test]
fn errors_inside_spec_lists_and_tiny_geometric_p_are_refused_at_once() {
    let d = dir("spec-lists");
    let bands = d.join("bands.yaml");
    std::fs::write(
        &bands,
        "new_tokens: {bands: [{dist: {dist: constant, value: -1}}]}\n",
    )
    .unwrap();
    let o = serverbench([
        "simulate",
        "--workload",
        bands.to_str().unwrap(),
        "-w",
        "60",
    ]);
    refused(&o, &["bands.yaml", "line 1"]);
    let p = d.join("p.yaml");
    std::fs::write(
        &p,
        "subagents: {fanout: {dist: geometric, p: 1.0e-17, offset: 1}}\n",
    )
    .unwrap();
    let o = serverbench(["simulate", "--workload", p.to_str().unwrap(), "-w", "60"]);
    refused(&o, &["p.yaml", "subagents.fanout.p", "1e-9"]);
}

/// A SIGTERM sent twice at once (as GNU `timeout` sends it, to the process and then its group) is one
/// request: the screen still writes the seeds that finished (issue 41, item 5).
#[cfg(unix)]
#[test]
fn a_doubled_sigterm_still_writes_what_finished() {
    let out = dir("double-term").join("screen");
    let out_s = out.to_str().unwrap();
    let args = long_screen(out_s);
    let (o, _) = signalled_times(&args, "TERM", std::time::Duration::from_millis(1500), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(!err.contains("again: stopping at once"), "{err}");
    assert_eq!(json(&out.join("screen.json"))["partial"], true, "{err}");
}

/// `workload export` stopped the way `timeout` stops it (SIGTERM twice at once) keeps every JSON line
/// it wrote to standard output whole, and writes no file (nor half of one) with `-o` (issue 41, item 5).
#[cfg(unix)]
#[test]
fn a_signalled_export_leaves_whole_lines_or_no_file() {
    let long = ["workload", "export", "--trees", "20000"];
    let after = std::time::Duration::from_millis(1500);
    let (o, _) = signalled_times(&long, "TERM", after, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("export stopped"), "{err}");
    assert!(o.stdout.is_empty() || o.stdout.ends_with(b"\n"), "{err}");
    for line in String::from_utf8(o.stdout).unwrap().lines() {
        serde_json::from_str::<serde_json::Value>(line).expect("a whole JSON line");
    }
    let d = dir("export-signal");
    let file = d.join("trees.jsonl");
    let args = [&long[..], &["-o", file.to_str().unwrap()]].concat();
    let (o, _) = signalled_times(&args, "TERM", after, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{err}");
    let left: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?} {err}");
}

/// Token counts are bounded by the longest context a deployment may have before any prompt is held as
/// blocks: a corpus line of 2³²−1 prompt tokens, or a Claude Code log whose usage says so, is refused
/// at once naming the file and field (issue 41, item 2); so is a call that finishes before it was sent,
/// or one sent before a call it waits for (item 6).
#[test]
fn imported_token_counts_beyond_any_context_are_refused_before_they_cost_memory() {
    let d = dir("huge-counts");
    let corpus = d.join("huge.jsonl");
    std::fs::write(
        &corpus,
        r#"{"format":"serverbench-corpus","version":1,"id":"x","source":"t","calls":[{"agent":0,"deps":[],"input":4294967295,"app":0,"output":5}]}
"#,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let o = serverbench(["workload", "stats", "--trace", corpus.to_str().unwrap()]);
    refused(&o, &["huge.jsonl", "line 1", "calls[0].input", "16777216"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let early = d.join("early.jsonl");
    std::fs::write(
        &early,
        r#"{"format":"serverbench-corpus","version":1,"id":"x","source":"t","calls":[{"agent":0,"deps":[],"sent_s":10.0,"done_s":4.0,"input":100,"app":0,"output":5}]}
"#,
    )
    .unwrap();
    let o = serverbench(["workload", "stats", "--trace", early.to_str().unwrap()]);
    refused(
        &o,
        &["early.jsonl", "calls[0].done_s", "before its send time"],
    );
    // A call sent before the call it waits for was sent.
    let before = d.join("before.jsonl");
    std::fs::write(
        &before,
        r#"{"format":"serverbench-corpus","version":1,"id":"x","source":"t","calls":[{"agent":0,"deps":[],"sent_s":10.0,"done_s":12.0,"input":100,"output":5},{"agent":1,"deps":[0],"sent_s":3.0,"done_s":4.0,"input":100,"output":5}]}
"#,
    )
    .unwrap();
    let o = serverbench(["workload", "stats", "--trace", before.to_str().unwrap()]);
    refused(&o, &["before.jsonl", "calls[1].deps", "sent after it"]);
    // A Claude Code log whose usage claims 4,000,000,000 prompt tokens.
    let main = std::fs::read_to_string(crate::fixture(
        "claude-code/project/11111111-2222-3333-4444-555555555555.jsonl",
    ))
    .unwrap();
    let huge = main.replace("\"input_tokens\":", "\"input_tokens\":4000000000,\"x\":");
    assert_ne!(huge, main);
    let project = d.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("11111111-2222-3333-4444-555555555555.jsonl"),
        huge,
    )
    .unwrap();
    let o = serverbench([
        "workload",
        "stats",
        "--trace",
        project.to_str().unwrap(),
        "--trace-format",
        "claude-code",
    ]);
    refused(
        &o,
        &[
            "11111111-2222-3333-4444-555555555555.jsonl",
            "input",
            "16777216",
        ],
    );
}

/// `what-if -c 0` is refused as the command line's error, and an empty folder is named with what it
/// lacks (issue 41, item 6).
#[test]
fn what_if_levels_and_empty_folders_are_refused_naming_them() {
    refused(
        &serverbench(["what-if", "-c", "0", "-w", "60"]),
        &["--concurrency", "between 1 and"],
    );
    let d = dir("empty-folder");
    refused(
        &serverbench(["workload", "stats", "--trace", d.to_str().unwrap()]),
        &[d.to_str().unwrap(), "no trace file in it"],
    );
}

/// A Claude Code log's usage counts are bounded one by one, so their sum cannot wrap (2⁶⁴−1 cached
/// plus 1,001 fresh tokens once became a 1,000-token prompt); a corpus holding copies of one session
/// keeps the first and says how many it left out; one session the generator cannot draw is left out
/// of a fit, by name, instead of refusing the corpus (issue 41, items 2 and 6).
#[test]
fn usage_sums_copies_and_one_outlier_session_neither_wrap_nor_fit_twice_nor_stop_a_fit() {
    let d = dir("usage-copies-outlier");
    let main = std::fs::read_to_string(crate::fixture(
        "claude-code/project/11111111-2222-3333-4444-555555555555.jsonl",
    ))
    .unwrap();
    let wrapped = main.replace(
        "\"cache_read_input_tokens\": 15000",
        "\"cache_read_input_tokens\": 18446744073709551615",
    );
    assert_ne!(wrapped, main);
    let project = d.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("11111111-2222-3333-4444-555555555555.jsonl"),
        wrapped,
    )
    .unwrap();
    let o = serverbench([
        "workload",
        "stats",
        "--trace",
        project.to_str().unwrap(),
        "--trace-format",
        "claude-code",
    ]);
    refused(&o, &["message.usage.cache_read_input_tokens", "16777216"]);
    let logs = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/claude-code/logs.jsonl"),
    )
    .unwrap();
    let first = logs.lines().next().unwrap();
    let copies = write(&d, "copies.jsonl", &format!("{first}\n").repeat(10));
    let o = serverbench(["workload", "stats", "--trace", &copies]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("9 × a copy of a session read before (the same id)"),
        "{err}"
    );
    let outlier = r#"{"format":"serverbench-corpus","version":1,"id":"outlier","source":"claude-code","calls":[{"agent":0,"deps":[],"input":2000000,"app":0,"output":5}]}"#;
    let mut text = format!("{outlier}\n");
    for l in logs.lines().take(24) {
        text.push_str(l);
        text.push('\n');
    }
    let corpus = write(&d, "outlier.jsonl", &text);
    let spec = d.join("fitted.yaml");
    let o = serverbench([
        "workload",
        "fit",
        &corpus,
        "--trees",
        "50",
        "-o",
        spec.to_str().unwrap(),
    ]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}{err}");
    assert!(
        out.contains("left out of the fit: session 0 (outlier): a first prompt of"),
        "{out}"
    );
    assert!(spec.exists());
    // A fifth that does not exist is refused by name, before anything is read.
    let o = serverbench(["workload", "fit", &corpus, "--fold", "5"]);
    refused(&o, &["--fold", "5 is not in 0..5"]);
}

/// `calibrate --endpoint` refuses probe sizes beyond any context before it connects or builds a
/// prompt (4,000,000,000 tokens once took 16 GB first), and a closed port is named as the endpoint it
/// is (issue 41, items 2 and 6).
#[test]
fn calibrate_refuses_probe_sizes_past_any_context_and_names_a_closed_endpoint() {
    for (flag, value, needle) in [
        (
            "--probe-prompts",
            "4000000000",
            "longer than any deployment's context",
        ),
        ("--probe-ragged", "1024:16:16000000", "more than 67108864"),
        (
            "--probe-long-context",
            "4000000000",
            "longer than any deployment's context",
        ),
    ] {
        let started = std::time::Instant::now();
        let o = serverbench(["calibrate", "--endpoint", "http://127.0.0.1:1", flag, value]);
        refused(&o, &[flag, needle]);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
    let o = serverbench(["calibrate", "--endpoint", "http://127.0.0.1:1"]);
    refused(
        &o,
        &["cannot reach the server at http://127.0.0.1:1 (--endpoint)"],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("--url") && !err.contains("answered"), "{err}");
}
