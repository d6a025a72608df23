//! The shipped fitted profile reproduces from the shipped step logs; `calibrate` reports bad logs by line.

use serverbench_calibration::{
    fit_profile, parse_step_log, FitTarget, HardwareSpec, ModelSpec, Profile, StepSample,
};
use std::io::Read;
use std::path::PathBuf;

fn repo(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn shipped_steps(inputs: &[String]) -> Vec<StepSample> {
    let mut all = Vec::new();
    for input in inputs {
        // "profiles/steps/steps_c1.jsonl.gz (2441 steps)"
        let (file, count) = input.split_once(" (").expect("input names a file and a count");
        let count: usize = count.trim_end_matches(" steps)").parse().unwrap();
        let mut text = String::new();
        let bytes = std::fs::read(repo(file)).unwrap();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_string(&mut text)
            .unwrap();
        let steps = parse_step_log(file, &text, FitTarget::Wall).unwrap();
        assert_eq!(steps.len(), count, "{file}: the profile names its step count");
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
        record: record.clone(),
    };
    let refit = fit_profile(&samples, &setup).unwrap().profile;
    let pairs = [
        ("gemm_efficiency", refit.gemm_efficiency, shipped.gemm_efficiency),
        ("memory_efficiency", refit.memory_efficiency, shipped.memory_efficiency),
        ("attention_efficiency", refit.attention_efficiency, shipped.attention_efficiency),
        ("kv_efficiency", refit.kv_efficiency.unwrap(), shipped.kv_efficiency.unwrap()),
        ("step_overhead_s", refit.step_overhead_s, shipped.step_overhead_s),
        ("per_sequence_overhead_s", refit.per_sequence_overhead_s, shipped.per_sequence_overhead_s),
    ];
    for (name, got, want) in pairs {
        assert!(
            (got - want).abs() <= 1e-9 * want.abs().max(1e-12),
            "{name}: refit {got}, shipped {want}"
        );
    }
    let (r, s) = (refit.fit.unwrap(), record);
    assert_eq!((r.steps_fitted, r.steps_held_out), (s.steps_fitted, s.steps_held_out));
    assert!((r.held_out_median_ape.unwrap() - s.held_out_median_ape.unwrap()).abs() < 1e-9);
    assert!(s.held_out_median_ape.unwrap() < 0.05, "the fit predicts held-out steps");
}

#[test]
fn calibrate_names_the_line_and_field_of_a_bad_step_log() {
    let dir = std::env::temp_dir().join(format!("sb-calib-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("bad.jsonl");
    let good = r#"{"step":0,"start_s":0.0,"gpu_ms":6.7,"wall_ms":6.8,"prefill":[],"decode":[4096]}"#;
    std::fs::write(&log, format!("{good}\n{good}\n{}\n", good.replace("6.8", "\"6.8\""))).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_serverbench"))
        .args(["calibrate", "--from-steps"])
        .arg(&log)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bad.jsonl: line 3: wall_ms"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
