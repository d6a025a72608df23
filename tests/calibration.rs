//! The shipped fitted profile reproduces from the shipped step logs; `calibrate` reports bad logs by line.

use crate::{serverbench, stdout};
use serverbench_calibration::{
    fit_profile, parse_step_log, FitTarget, HardwareSpec, ModelSpec, Profile, StepSample,
};
use std::ffi::OsStr;
use std::io::Read;
use std::path::PathBuf;

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn shipped_steps(inputs: &[String]) -> Vec<StepSample> {
    let mut all = Vec::new();
    for input in inputs {
        // "results/h200-profile-fit/steps_c1.jsonl.gz (2441 steps)"
        let (file, count) = input
            .split_once(" (")
            .expect("input names a file and a count");
        let count: usize = count.trim_end_matches(" steps)").parse().unwrap();
        let mut text = String::new();
        let bytes = std::fs::read(repo(file)).unwrap();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .unwrap();
        let steps = parse_step_log(file, &text, FitTarget::Wall).unwrap();
        assert_eq!(
            steps.len(),
            count,
            "{file}: the profile names its step count"
        );
        all.extend(steps);
    }
    all
}

#[test]
fn the_shipped_h200_fit_reproduces_from_the_shipped_step_logs() {
    let shipped = Profile::preset("h200-qwen3-8b-cuda").unwrap();
    let record = shipped.fit.clone().unwrap();
    let samples = shipped_steps(&record.inputs);
    let (model, hardware) = (
        ModelSpec::preset(&record.model).unwrap(),
        HardwareSpec::preset(&shipped.hardware).unwrap(),
    );
    let base = Profile::preset("h200-datasheet").unwrap();
    let setup = serverbench_calibration::FitSetup {
        model: &model,
        hardware: &hardware,
        base: &base,
        name: shipped.name.clone(),
        attention_tile: shipped.attention_tile_tokens,
        memory_efficiency: record.memory_efficiency_fixed,
        single_row_memory_efficiency: record.single_row_memory_efficiency_fixed,
        front_end: false,
        graphs: None,
        record: record.clone(),
    };
    let refit = fit_profile(&samples, &setup).unwrap().profile;
    let pairs = [
        (
            "gemm_efficiency",
            refit.gemm_efficiency,
            shipped.gemm_efficiency,
        ),
        (
            "memory_efficiency",
            refit.memory_efficiency,
            shipped.memory_efficiency,
        ),
        (
            "single_row_memory_efficiency",
            refit.single_row_memory_efficiency.unwrap(),
            shipped.single_row_memory_efficiency.unwrap(),
        ),
        (
            "attention_efficiency",
            refit.attention_efficiency,
            shipped.attention_efficiency,
        ),
        (
            "kv_efficiency",
            refit.kv_efficiency.unwrap(),
            shipped.kv_efficiency.unwrap(),
        ),
        (
            "shared_kv_efficiency",
            refit.shared_kv_efficiency.unwrap(),
            shipped.shared_kv_efficiency.unwrap(),
        ),
        (
            "step_overhead_s",
            refit.step_overhead_s,
            shipped.step_overhead_s,
        ),
        (
            "per_sequence_overhead_s",
            refit.per_sequence_overhead_s,
            shipped.per_sequence_overhead_s,
        ),
        (
            "attention_sweep_s_per_token",
            refit.attention_sweep_s_per_token,
            shipped.attention_sweep_s_per_token,
        ),
        (
            "attention_span_s_per_token",
            refit.attention_span_s_per_token,
            shipped.attention_span_s_per_token,
        ),
        (
            "attention_parallel_tiles",
            refit.attention_parallel_tiles,
            shipped.attention_parallel_tiles,
        ),
    ];
    for (name, got, want) in pairs {
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1e-12),
            "{name}: refit {got}, shipped {want}"
        );
    }
    let (r, s) = (refit.fit.unwrap(), record);
    assert_eq!(
        (r.steps_fitted, r.steps_held_out),
        (s.steps_fitted, s.steps_held_out)
    );
    assert!((r.held_out_median_ape.unwrap() - s.held_out_median_ape.unwrap()).abs() < 1e-9);
    assert!(
        s.held_out_median_ape.unwrap() < 0.05,
        "the fit predicts held-out steps"
    );
}

/// Time to first token of each completed request, by (tree, request), from records JSON lines.
fn ttfts(text: &str) -> std::collections::HashMap<(u64, u64), f64> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["outcome"] == "completed")
        .map(|r| {
            let ns = |k: &str| r[k].as_u64().unwrap() as f64;
            let key = (r["tree"].as_u64().unwrap(), r["request"].as_u64().unwrap());
            (key, (ns("first_token_ns") - ns("send_ns")) / 1e6)
        })
        .collect()
}

/// The median of measured − simulated TTFT (ms) over the fit's four replays, simulated with `profile`.
fn ttft_offset_ms(profile: &std::path::Path, dir: &std::path::Path) -> f64 {
    let mut diffs = Vec::new();
    for c in [1, 4, 16, 64] {
        let out = dir.join(format!("c{c}"));
        stdout(&serverbench(
            [
                "simulate",
                "-d",
                "qwen3-8b-1xh200",
                "--start",
                "steady",
                "-w",
                "45",
                "-s",
                "0",
                "-c",
                &c.to_string(),
            ]
            .iter()
            .map(OsStr::new)
            .chain([
                OsStr::new("--profile"),
                profile.as_os_str(),
                OsStr::new("--out"),
                out.as_os_str(),
            ]),
        ));
        let sim = ttfts(&std::fs::read_to_string(out.join("records.jsonl")).unwrap());
        let mut text = String::new();
        let bytes = std::fs::read(repo(&format!(
            "results/h200-profile-fit/records_c{c}.jsonl.gz"
        )))
        .unwrap();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .unwrap();
        for (key, real) in ttfts(&text) {
            if let Some(s) = sim.get(&key) {
                diffs.push(real - s);
            }
        }
    }
    assert_eq!(diffs.len(), 246, "requests completed in both");
    diffs.sort_by(f64::total_cmp);
    (diffs[122] + diffs[123]) / 2.0
}

/// The shipped profile's request latency is where the fit's replays put it (docs/calibration.md): with
/// it, measured and simulated TTFT agree at the median; without it the simulator is ~9.5 ms early.
#[test]
fn the_request_latency_reproduces_from_the_fit_replays() {
    let dir = std::env::temp_dir().join(format!("sb-latency-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shipped = Profile::preset("h200-qwen3-8b-cuda").unwrap();
    assert_eq!(shipped.request_latency_s, 0.0025);
    let write = |name: &str, p: &Profile| {
        let path = dir.join(name);
        std::fs::write(&path, serde_yaml::to_string(p).unwrap()).unwrap();
        path
    };
    let with = ttft_offset_ms(&write("with.yaml", &shipped), &dir.join("with"));
    assert!(with.abs() < 0.5, "median offset {with} ms with the latency");
    let none = Profile {
        request_latency_s: 0.0,
        ..shipped
    };
    let without = ttft_offset_ms(&write("none.yaml", &none), &dir.join("none"));
    assert!(without > 3.0, "median offset {without} ms without it");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn calibrate_names_the_line_and_field_of_a_bad_step_log() {
    let dir = std::env::temp_dir().join(format!("sb-calib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("bad.jsonl");
    let good =
        r#"{"step":0,"start_s":0.0,"gpu_ms":6.7,"wall_ms":6.8,"prefill":[],"decode":[4096]}"#;
    std::fs::write(
        &log,
        format!("{good}\n{good}\n{}\n", good.replace("6.8", "\"6.8\"")),
    )
    .unwrap();
    let out = serverbench([
        OsStr::new("calibrate"),
        "--from-steps".as_ref(),
        log.as_ref(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.jsonl: line 3: wall_ms"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `calibrate --check` predicts held-out steps (a fidelity run's step log, never fitted) per class of
/// step, within the errors docs/calibration.md reports; a profile that is neither preset nor file is named.
#[test]
fn calibrate_check_reports_the_shipped_profile_on_held_out_steps() {
    let log = repo("results/h200-fidelity/levels/real/c8_s0/steps.jsonl.gz");
    let check = |profile: &str| {
        serverbench([
            OsStr::new("calibrate"),
            "--check".as_ref(),
            profile.as_ref(),
            "--from-steps".as_ref(),
            log.as_ref(),
        ])
    };
    let text = stdout(&check("h200-qwen3-8b-cuda"));
    // | class | count | median error | median abs error | p90 abs error |
    let row = |class: &str| -> Vec<f64> {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("| {class} |")))
            .unwrap_or_else(|| panic!("no {class} row in\n{text}"));
        line.split('|')
            .skip(2)
            .filter_map(|c| c.trim().trim_end_matches(" %").parse().ok())
            .collect()
    };
    let all = row("all steps");
    assert_eq!(all[0], 10412.0, "{text}");
    // 1.54 % / 3.07 % (docs/fidelity.md); the profile fitted to the previous (mma.sync) prefill kernel,
    // predicts this run's prefill steps 38-86 % slow (median per class).
    assert!(all[2] < 2.0 && all[3] < 4.0, "{text}");
    // Decode steps by batch size partition the decode-only steps.
    let by_batch: f64 = ["1", "2-8", "9-32", "> 32"]
        .iter()
        .filter(|b| text.contains(&format!("| decode batch {b} |")))
        .map(|b| row(&format!("decode batch {b}"))[0])
        .sum();
    assert_eq!(by_batch, row("decode only")[0], "{text}");
    assert!(row("decode batch 2-8")[0] > 1000.0, "{text}");
    let mid = row("prefill 513-2048");
    assert!(mid[2] < 8.0 && mid[3] < 15.0, "{text}");
    // --per-step writes one CSV row per step whose error column is (predicted − measured) / measured.
    let csv = std::env::temp_dir().join(format!("sb-per-step-{}.csv", std::process::id()));
    stdout(&serverbench([
        OsStr::new("calibrate"),
        "--check".as_ref(),
        "h200-qwen3-8b-cuda".as_ref(),
        "--from-steps".as_ref(),
        log.as_ref(),
        "--per-step".as_ref(),
        csv.as_os_str(),
    ]));
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<f64>> = lines
        .map(|l| l.split(',').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 10412);
    let (m, p, e) = (col("measured_ms"), col("predicted_ms"), col("error_pct"));
    for r in &rows {
        assert!((r[e] - 100.0 * (r[p] - r[m]) / r[m]).abs() < 0.01, "{r:?}");
    }
    let mut abs: Vec<f64> = rows.iter().map(|r| r[e].abs()).collect();
    abs.sort_by(f64::total_cmp);
    assert!(
        (abs[abs.len() / 2] - all[2]).abs() < 0.01,
        "the table's median"
    );
    std::fs::remove_file(&csv).ok();
    let out = check("no-such-profile");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--check: \"no-such-profile\" is not a profile preset"),
        "{err}"
    );
}

/// `compare --reuse` on the stored H200 measurements reproduces docs/fidelity.md's headline numbers.
#[test]
fn compare_reproduces_the_documented_fidelity_from_stored_measurements() {
    let dir = std::env::temp_dir().join(format!("sb-compare-{}", std::process::id()));
    crate::compare_stored_seeds(&dir, &[]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("compare.json")).unwrap()).unwrap();
    let rho = v["seed_rankings"][0]["spearman_d"].as_f64().unwrap();
    assert!((rho - 0.976).abs() < 5e-4, "Spearman {rho}");
    assert!(rho >= 0.9, "the seed-screening target");
    // The simulated side is deterministic: the table in the docs is exactly what the tool prints.
    let fresh = std::fs::read_to_string(dir.join("compare.md")).unwrap();
    let stored = std::fs::read_to_string(repo("results/h200-fidelity/seeds/compare.md")).unwrap();
    assert_eq!(
        fresh, stored,
        "results/h200-fidelity/seeds/compare.md is stale: re-run the compare --reuse command"
    );
    assert!(dir.join("compare.svg").exists() && dir.join("compare.md").exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs an operator-table fit script (`BIN OUTDIR REPORTDIR`) into a fresh temporary folder.
fn run_ops_script(script: &str, tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("serverbench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let o = std::process::Command::new("bash")
        .arg(repo(script))
        .arg(env!("CARGO_BIN_EXE_serverbench"))
        .arg(&dir)
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    dir
}

/// A profile file as parsed, its fit's timestamp cleared (the one field a refit changes).
fn profile_without_timestamp(path: std::path::PathBuf) -> serverbench_calibration::Profile {
    let text = std::fs::read_to_string(&path).unwrap();
    let mut p =
        serverbench_calibration::Profile::from_yaml(&path.display().to_string(), &text).unwrap();
    p.fit.as_mut().unwrap().fitted_at.clear();
    p
}

/// The shipped L40 profiles are what `scripts/fit_l40_profiles.sh` fits from the shipped operator
/// tables (and their per-class reports are the stored ones).
#[test]
fn the_shipped_l40_profiles_reproduce_from_the_shipped_operator_tables() {
    let dir = run_ops_script("scripts/fit_l40_profiles.sh", "l40-ops");
    for fw in ["sglang", "vllm"] {
        let name = format!("l40-ops-{fw}.yaml");
        assert_eq!(
            profile_without_timestamp(dir.join(&name)),
            profile_without_timestamp(repo(&format!("presets/profiles/{name}"))),
            "presets/profiles/{name} is stale: run scripts/fit_l40_profiles.sh"
        );
        let report = format!("fit_{fw}.md");
        assert_eq!(
            std::fs::read_to_string(dir.join(&report)).unwrap(),
            std::fs::read_to_string(repo(&format!("results/l40-ops/{report}"))).unwrap(),
            "results/l40-ops/{report} is stale"
        );
    }
}

/// `h200-ops-vllm` is what `scripts/fit_h200_ops_profile.sh` fits from the published H200 tables, its
/// report the stored one; its experts' terms come from the fused-MoE rows (on padded rows: the kernel
/// alone reaches about half of peak) and its tile table and host terms from the measured MoE profile.
#[test]
fn the_h200_ops_profile_reproduces_from_the_published_tables() {
    let dir = run_ops_script("scripts/fit_h200_ops_profile.sh", "h200-ops");
    let fitted = profile_without_timestamp(dir.join("h200-ops-vllm.yaml"));
    assert_eq!(
        fitted,
        profile_without_timestamp(repo("presets/profiles/h200-ops-vllm.yaml")),
        "presets/profiles/h200-ops-vllm.yaml is stale: run scripts/fit_h200_ops_profile.sh"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("fit.md")).unwrap(),
        std::fs::read_to_string(repo("results/published-moe/ops-profile/fit.md")).unwrap(),
        "results/published-moe/ops-profile/fit.md is stale"
    );
    let moe = serverbench_calibration::Profile::preset("h200-qwen3-30b-a3b-vllm").unwrap();
    let gemm = fitted.expert_gemm_efficiency.unwrap();
    assert!((0.45..0.55).contains(&gemm), "{gemm}");
    assert_ne!(
        fitted.expert_memory_efficiency,
        moe.expert_memory_efficiency
    );
    assert_eq!(fitted.expert_tile_rows, moe.expert_tile_rows);
    assert_eq!(fitted.moe_layer_s, moe.moe_layer_s);
    let classes: Vec<_> = fitted
        .fit
        .unwrap()
        .op_classes
        .into_iter()
        .map(|c| c.field)
        .collect();
    assert!(
        classes.contains(&"expert_gemm_efficiency".to_string()),
        "{classes:?}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The L40 validation table in docs/fidelity.md and results/l40-ops/validation.md is what
/// `scripts/l40_validation.sh` prints now.
#[test]
fn the_l40_validation_table_reproduces() {
    let o = std::process::Command::new("bash")
        .arg(repo("scripts/l40_validation.sh"))
        .arg(env!("CARGO_BIN_EXE_serverbench"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        std::fs::read_to_string(repo("results/l40-ops/validation.md")).unwrap(),
        "results/l40-ops/validation.md is stale: scripts/l40_validation.sh > results/l40-ops/validation.md"
    );
}

/// `calibrate --check` takes the model as a `config.json`, as every other command does: a mixture of
/// experts' steps checked against its profile (issue 40).
#[test]
fn a_step_check_reads_its_model_from_a_config_json() {
    let log = std::env::temp_dir().join(format!("sb-moe-steps-{}.jsonl", std::process::id()));
    std::fs::write(
        &log,
        "{\"decode\": [2048], \"prefill\": [], \"wall_ms\": 4.2, \"gpu_ms\": 4.2}\n\
         {\"decode\": [2048, 2048, 2048, 2048], \"prefill\": [], \"wall_ms\": 6.6, \"gpu_ms\": 6.6}\n\
         {\"decode\": [], \"prefill\": [[8192, 8192]], \"wall_ms\": 232.2, \"gpu_ms\": 232.2}\n",
    )
    .unwrap();
    let model = repo("tests/fixtures/hf/qwen3-30b-a3b.json");
    let o = serverbench([
        OsStr::new("calibrate"),
        "--check".as_ref(),
        "h200-qwen3-30b-a3b-vllm".as_ref(),
        "--from-steps".as_ref(),
        log.as_os_str(),
        "--model".as_ref(),
        model.as_os_str(),
        "--hardware".as_ref(),
        "h200".as_ref(),
    ]);
    let text = stdout(&o);
    assert!(
        text.contains("profile h200-qwen3-30b-a3b-vllm against 3 steps"),
        "{text}"
    );
    std::fs::remove_file(&log).ok();
}
