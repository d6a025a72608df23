//! The transformers serve measurements (results/h200-transformers/) reproduce: the black-box profile from
//! its probe log, and the fidelity tables from the stored runs, re-scored for the transformers deployment.

use crate::{serverbench, stdout};
use serverbench_calibration::{AttentionLayout, Profile};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sb-third-party-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_transformers_profile_reproduces_from_its_probe_log() {
    let dir = temp("probes");
    let out = dir.join("p.yaml");
    let o = serverbench(
        [
            "calibrate",
            "--from-probes",
            "results/h200-transformers/calibrate/probes.jsonl",
            "--name",
            "h200-qwen3-8b-transformers",
            "--out",
        ]
        .iter()
        .map(OsStr::new)
        .chain([out.as_os_str()]),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    // Both layouts were fitted and the packed one explains the probes better.
    assert!(stderr.contains("kept attention Packed"), "{stderr}");
    let fresh = Profile::from_yaml("p.yaml", &std::fs::read_to_string(&out).unwrap()).unwrap();
    let shipped = Profile::preset("h200-qwen3-8b-transformers").unwrap();
    assert_eq!(fresh.attention_layout, AttentionLayout::Packed);
    for (name, a, b) in [
        ("gemm", fresh.gemm_efficiency, shipped.gemm_efficiency),
        (
            "attention",
            fresh.attention_efficiency,
            shipped.attention_efficiency,
        ),
        ("memory", fresh.memory_efficiency, shipped.memory_efficiency),
        (
            "kv",
            fresh.kv_efficiency.unwrap(),
            shipped.kv_efficiency.unwrap(),
        ),
        ("overhead", fresh.step_overhead_s, shipped.step_overhead_s),
        (
            "per sequence",
            fresh.per_sequence_overhead_s,
            shipped.per_sequence_overhead_s,
        ),
        (
            "latency",
            fresh.request_latency_s,
            shipped.request_latency_s,
        ),
    ] {
        assert!(
            (a - b).abs() <= 1e-9 * b.abs().max(1e-9),
            "{name}: {a} vs {b}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Copies a stored compare folder's runs (summaries and records) to `dir/real`.
fn copy_runs(from: &Path, dir: &Path) {
    for e in std::fs::read_dir(from.join("real")).unwrap() {
        let e = e.unwrap();
        let to = dir.join("real").join(e.file_name());
        std::fs::create_dir_all(&to).unwrap();
        for f in ["summary.json", "records.jsonl.gz"] {
            std::fs::copy(e.path().join(f), to.join(f)).unwrap();
        }
    }
}

#[test]
fn the_transformers_fidelity_tables_reproduce_from_the_stored_runs() {
    for (part, args) in [
        ("levels", ["-c", "1,4,8,16", "-s", "0", "-w", "120"]),
        ("seeds", ["-c", "4", "-s", "1,2,3,4,5,6,7,8", "-w", "60"]),
    ] {
        let dir = temp(part);
        let stored = repo(&format!("results/h200-transformers/{part}"));
        copy_runs(&stored, &dir);
        let o = serverbench(
            [
                "compare",
                "-d",
                "qwen3-8b-1xh200-transformers",
                "--start",
                "steady",
                "--reuse",
            ]
            .iter()
            .chain(args.iter())
            .map(OsStr::new)
            .chain([OsStr::new("--out"), dir.as_os_str()]),
        );
        let table = stdout(&o);
        // The runs were measured under the benchmark deployment's name and targets: they are re-scored
        // under the transformers deployment's (at c = 4 the measured D is not 0 under its targets).
        assert!(table.contains("qwen3-8b-1xh200-transformers"), "{table}");
        let fresh = std::fs::read_to_string(dir.join("compare.md")).unwrap();
        let want = std::fs::read_to_string(stored.join("compare.md")).unwrap();
        assert_eq!(
            fresh, want,
            "results/h200-transformers/{part}/compare.md is stale: re-run its compare --reuse command"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("results/h200-transformers/levels/compare.json")).unwrap(),
    )
    .unwrap();
    let d_at_4 = v["rows"][1]["metrics"][0]["real"].as_f64().unwrap();
    assert!(
        d_at_4 > 0.2,
        "measured D at c = 4 under the frozen targets: {d_at_4}"
    );
}

/// The vLLM measurements (results/h200-vllm/) reproduce: the black-box profile from its probe log, with
/// the front end fitted over the host gaps the shipped profile gives (`--graph-max-tokens 512`, itself as
/// the base), and the compare tables from the stored runs under the vLLM deployments.
#[test]
fn the_vllm_profile_reproduces_from_its_probe_log() {
    let dir = temp("vllm-probes");
    let out = dir.join("p.yaml");
    let o = serverbench(
        [
            "calibrate",
            "--from-probes",
            "results/h200-vllm/calibrate/probes_fit.jsonl",
            "--fit-frontend",
            "--graph-max-tokens",
            "512",
            "--base-profile",
            "presets/profiles/h200-qwen3-8b-vllm.yaml",
            "--name",
            "h200-qwen3-8b-vllm",
            "--out",
        ]
        .iter()
        .map(OsStr::new)
        .chain([out.as_os_str()]),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let fresh = Profile::from_yaml("p.yaml", &std::fs::read_to_string(&out).unwrap()).unwrap();
    let shipped = Profile::preset("h200-qwen3-8b-vllm").unwrap();
    for (name, a, b) in [
        ("gemm", fresh.gemm_efficiency, shipped.gemm_efficiency),
        (
            "attention",
            fresh.attention_efficiency,
            shipped.attention_efficiency,
        ),
        ("memory", fresh.memory_efficiency, shipped.memory_efficiency),
        (
            "kv",
            fresh.kv_efficiency.unwrap(),
            shipped.kv_efficiency.unwrap(),
        ),
        (
            "per sequence",
            fresh.per_sequence_overhead_s,
            shipped.per_sequence_overhead_s,
        ),
        (
            "latency",
            fresh.request_latency_s,
            shipped.request_latency_s,
        ),
        (
            "front end",
            fresh.frontend_s_per_token,
            shipped.frontend_s_per_token,
        ),
    ] {
        assert!(
            (a - b).abs() <= 1e-9 * b.abs().max(1e-9),
            "{name}: {a} vs {b}"
        );
    }
    // What vLLM's front end costs once the host gaps of its prompt's piecewise and eager steps are
    // taken off: about 1.3 ms a request (9.7 with them left in) and 2.2 µs a prompt token (a
    // 31,257-token prompt with 9 tokens to compute waited 80 ms for its first token at c = 1).
    assert!((0.0005..0.003).contains(&fresh.request_latency_s));
    assert!((1.5e-6..3e-6).contains(&fresh.frontend_s_per_token));
    assert!(fresh.piecewise_gap_s_per_layer > 0.0 && fresh.eager_gap_s_per_layer > 0.0);
    std::fs::remove_dir_all(&dir).ok();
}

/// A front end fixed in a base profile file (`--base-profile FILE`, with `--request-latency-ms`) is taken
/// off every time-to-first-token probe before the fit and kept in the fitted profile: on vLLM's probes with
/// the step traces' lone front end (10 ms and 1.1 µs a prompt token, docs/simulator.md) the probes fit
/// within a few per cent. Counted in the profile but left in the probes, the front end's time per token
/// would be priced twice. A base that is neither a preset nor a file is an error naming it.
#[test]
fn a_front_end_fixed_in_a_base_profile_file_is_taken_off_the_probes() {
    let dir = temp("vllm-fixed-front-end");
    let base = dir.join("base.yaml");
    let shipped =
        std::fs::read_to_string(repo("presets/profiles/h200-qwen3-8b-vllm.yaml")).unwrap();
    let line = shipped
        .lines()
        .find(|l| l.starts_with("frontend_s_per_token:"))
        .unwrap();
    std::fs::write(&base, shipped.replace(line, "frontend_s_per_token: 1.1e-6")).unwrap();
    let out = dir.join("p.yaml");
    let run = |base: &std::path::Path| {
        serverbench(
            [
                "calibrate",
                "--from-probes",
                "results/h200-vllm/calibrate/probes_fit.jsonl",
                "--request-latency-ms",
                "10",
                "--base-profile",
            ]
            .iter()
            .map(OsStr::new)
            .chain([base.as_os_str(), OsStr::new("--out"), out.as_os_str()]),
        )
    };
    let o = run(&base);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let fresh = Profile::from_yaml("p.yaml", &std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(fresh.frontend_s_per_token, 1.1e-6);
    assert_eq!(fresh.request_latency_s, 0.01);
    let rms: f64 = stderr
        .lines()
        .filter_map(|l| l.split("RMS error over the probes ").nth(1))
        .map(|v| v.trim_end_matches(" %").parse::<f64>().unwrap())
        .fold(f64::INFINITY, f64::min);
    assert!(rms < 4.0, "RMS error {rms} %: {stderr}");
    let missing = dir.join("none.yaml");
    let o = run(&missing);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        stderr.contains("--base-profile") && stderr.contains("none.yaml"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_vllm_fidelity_tables_reproduce_from_the_stored_runs() {
    let sets: [(&str, &[&str]); 3] = [
        (
            "syn-steady",
            &[
                "-d",
                "qwen3-8b-1xh200-vllm",
                "--start",
                "steady",
                "-c",
                "1,4,8,16,32,64",
            ],
        ),
        (
            "fit-cold",
            &[
                "-d",
                "qwen3-8b-200k-1xh200-vllm",
                "--start",
                "cold",
                "-c",
                "1,4,16",
                // The fitted spec as these runs replayed it (the shipped one has been refitted since).
                "--workload",
                "results/h200-vllm/agentic-coding-as-replayed.yaml",
            ],
        ),
        (
            "real-cold",
            &[
                "-d",
                "qwen3-8b-200k-1xh200-vllm",
                "--start",
                "cold",
                "-c",
                "4",
                // The corpus's Claude Code logs as these runs replayed them (the shipped file has
                // since left out calls whose usage was logged before the answer finished).
                "--trace",
                "results/h200-vllm/claude-code-as-replayed",
                "--trace-format",
                "corpus",
                // Sent as recorded: the runs predate compaction at the deployment's context.
                "--trace-as-recorded",
            ],
        ),
    ];
    for (part, args) in sets {
        let dir = temp(part);
        let stored = repo(&format!("results/h200-vllm/{part}"));
        copy_runs(&stored, &dir);
        let o = serverbench(
            ["compare", "--reuse", "-s", "0", "-w", "120"]
                .iter()
                .chain(args.iter())
                .map(OsStr::new)
                .chain([OsStr::new("--out"), dir.as_os_str()]),
        );
        stdout(&o);
        let fresh = std::fs::read_to_string(dir.join("compare.md")).unwrap();
        let want = std::fs::read_to_string(stored.join("compare.md")).unwrap();
        assert_eq!(
            fresh, want,
            "results/h200-vllm/{part}/compare.md is stale: re-run its compare --reuse command (results/h200-vllm/README.md)"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// The H100 run (results/h100-vllm/) reproduces: its profile is what `calibrate --derive-from` makes of the
/// shipped H200 vLLM profile today (re-derive it when that profile changes), and its compare table is the
/// one the stored deployment file and measured run give.
#[test]
fn the_h100_run_reproduces_from_the_h200_profile_moved_to_it() {
    let dir = temp("h100");
    let derived = dir.join("derived.yaml");
    let o = serverbench(
        [
            "calibrate",
            "--derive-from",
            "h200-qwen3-8b-vllm",
            "--hardware",
            "h100-sxm",
            "--name",
            "h100-sxm-qwen3-8b-vllm-derived",
            "--out",
        ]
        .iter()
        .map(OsStr::new)
        .chain([derived.as_os_str()]),
    );
    stdout(&o);
    let stored = repo("results/h100-vllm");
    // Everything but the time it was written.
    let without_date = |p: &Path| {
        let text = std::fs::read_to_string(p).unwrap();
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("fitted_at:"))
            .collect();
        kept.join("\n")
    };
    assert_eq!(
        without_date(&derived),
        without_date(&stored.join("h100-sxm-qwen3-8b-vllm-derived.yaml")),
        "results/h100-vllm/h100-sxm-qwen3-8b-vllm-derived.yaml is stale: re-derive it (results/h100-vllm/README.md)"
    );
    copy_runs(&stored.join("agentx-real-knee"), &dir);
    let deployment = stored.join("qwen3-8b-200k-1xh100-vllm.yaml");
    let trace = repo("results/h200-vllm/claude-code-as-replayed/logs.jsonl");
    let o = serverbench(
        [
            OsStr::new("compare"),
            OsStr::new("-d"),
            deployment.as_os_str(),
            OsStr::new("--trace"),
            trace.as_os_str(),
        ]
        .into_iter()
        .chain(
            [
                "--protocol",
                "agentx",
                "--trace-format",
                "corpus",
                "--max-context-length",
                "200000",
                "--trace-as-recorded",
                "--reuse",
                "-c",
                "4,6,8",
                "-s",
                "0",
                "-w",
                "120",
                "--out",
            ]
            .iter()
            .map(OsStr::new),
        )
        .chain([dir.as_os_str()]),
    );
    stdout(&o);
    let fresh = std::fs::read_to_string(dir.join("compare.md")).unwrap();
    let want = std::fs::read_to_string(stored.join("agentx-real-knee/compare.md")).unwrap();
    assert_eq!(
        fresh, want,
        "results/h100-vllm/agentx-real-knee/compare.md is stale: re-run its compare --reuse command (README.md)"
    );
    // Its sweep says whose error the band is: measured for the H200 profile, not on the H100.
    let o = serverbench(
        [
            OsStr::new("sweep"),
            OsStr::new("-d"),
            deployment.as_os_str(),
        ]
        .into_iter()
        .chain(["-c", "1,2", "-w", "30"].iter().map(OsStr::new)),
    );
    let text = stdout(&o);
    assert!(
        text.contains("profile h100-sxm-qwen3-8b-vllm-derived's stated error, measured for h200-qwen3-8b-vllm, which it was derived from, not on this GPU:"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The knee of `synthetic-v1` steady on the vLLM deployment (vLLM measured 8 best of 1, 4, 8, 16:
/// results/h200-vllm/regret.md): the simulator puts 14 ahead of 12 and 10; under the profile's measured
/// error `sweep` picks 12, the level that gives up least wherever in the band the server lies (5.78 %
/// against 10's 7.05 % and 14's 11.92 %), which planning for the slow end alone would take too (so
/// `sweep` does not print it apart), and says that 14 hangs on TPOT.
#[test]
fn sweep_picks_the_level_that_survives_the_profiles_measured_error() {
    let dir = temp("under-error");
    let o = serverbench(
        [
            "sweep",
            "-d",
            "qwen3-8b-1xh200-vllm",
            "--start",
            "steady",
            "-c",
            "10,12,14",
            "--seeds",
            "0..1",
            "-w",
            "120",
            "--out",
        ]
        .iter()
        .map(OsStr::new)
        .chain([dir.as_os_str()]),
    );
    let text = stdout(&o);
    assert!(
        text.contains("Recommendation: accept 14 concurrent sessions"),
        "{text}"
    );
    assert!(
        text.contains("profile h200-qwen3-8b-vllm's stated error: compute ±24 %, bandwidth ±5 %, host ±5 %): accept 12: wherever in the band the server lies, it gives up at most 6 % of the best level's mean D"),
        "{text}"
    );
    assert!(!text.contains("Planning for the slow end alone"), "{text}");
    assert!(
        text.contains("At 14 the score hangs on a TPOT within"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap();
    let u = &json["under_model_error"];
    assert_eq!(u["least_regret"], 12);
    assert_eq!(u["best_worst_case"], 12);
    assert_eq!(u["best_nominal"], 14);
    assert_eq!(u["stated"], true);
    for l in u["levels"].as_array().unwrap() {
        let (n, s, f, w) = (
            l["d_nominal"].as_f64().unwrap(),
            l["d_slow"].as_f64().unwrap(),
            l["d_fast"].as_f64().unwrap(),
            l["d_worst"].as_f64().unwrap(),
        );
        assert_eq!(w, n.min(s).min(f));
        let r = l["regret_worst"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&r), "{l}");
        if l["concurrency"] == 12 {
            assert!((0.055..0.065).contains(&r), "{l}");
        }
    }
    let svg = std::fs::read_to_string(dir.join("sweep.svg")).unwrap();
    assert!(
        svg.contains("D under the cost model"),
        "the SVG shows the band"
    );
    std::fs::remove_dir_all(&dir).ok();
}
