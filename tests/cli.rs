//! The binary as a user runs it.

use std::path::Path;
use std::process::{Command, Output};

fn serverbench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_serverbench")).args(args).output().expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    assert!(o.status.success(), "failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn simulate_writes_records_and_summary_that_parse() {
    let dir = tempdir("simulate");
    let o = serverbench(&["simulate", "-c", "4", "-w", "300", "--out", dir.to_str().unwrap()]);
    let text = stdout(&o);
    assert!(text.contains("D = ") && text.contains("TTFT") && text.contains("prefix hit rate"), "{text}");
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let n = records.lines().map(|l| serde_json::from_str::<serverbench_sim::Record>(l).unwrap()).count();
    let summary: serverbench_sim::Summary = serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary.requests, n);
}

#[test]
fn print_config_is_a_valid_deployment_file() {
    let text = stdout(&serverbench(&["simulate", "--deployment", "gemma4-e4b-1xl40", "--print-config"]));
    let d = serverbench_sim::Deployment::from_yaml("printed.yaml", &text).unwrap();
    assert_eq!(d, serverbench_sim::Deployment::preset("gemma4-e4b-1xl40").unwrap());
}

#[test]
fn bad_files_get_an_error_naming_file_and_field_and_exit_2() {
    let dir = tempdir("bad");
    let yaml = dir.join("dep.yaml");
    std::fs::write(&yaml, "base: qwen3.5-9b-2xl40\nengine:\n  max_num_seqs: lots\n").unwrap();
    let o = serverbench(&["simulate", "--deployment", yaml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("dep.yaml") && err.contains("engine.max_num_seqs"), "{err}");
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}\n{\"timestamp\": 0, \"input_length\": 10}\n").unwrap();
    let o = serverbench(&["simulate", "--trace", trace.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("t.jsonl: line 2") && err.contains("output_length"), "{err}");
    let spec = dir.join("w.yaml");
    std::fs::write(&spec, "root_turns:\n  dist: lognormal\n  median: 40\n  sigmaa: 1\n").unwrap();
    let err = String::from_utf8_lossy(&serverbench(&["workload", "stats", "--workload", spec.to_str().unwrap()]).stderr).to_string();
    assert!(err.contains("w.yaml") && err.contains("root_turns") && err.contains("sigmaa"), "{err}");
}

#[test]
fn workload_commands_run_on_samples_and_generator() {
    let text = stdout(&serverbench(&["workload", "stats", "--seed", "3", "--trees", "50"]));
    assert!(text.contains("prefix reuse"), "{text}");
    let weka = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/data/weka/sample_trace_with_subagent.json");
    let text = stdout(&serverbench(&["workload", "stats", "--trace", weka.to_str().unwrap()]));
    assert!(text.contains("sub-agents 4"), "{text}");
    let dir = tempdir("scan");
    let text = stdout(&serverbench(&["workload", "scan", "--seeds", "4", "-c", "4", "-w", "600", "--out", dir.to_str().unwrap()]));
    assert!(text.contains("value offered"), "{text}");
    let csv = std::fs::read_to_string(dir.join("scan.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5);
    let a = stdout(&serverbench(&["workload", "export", "--seed", "9", "--trees", "5"]));
    let b = stdout(&serverbench(&["workload", "export", "--seed", "9", "--trees", "5"]));
    assert_eq!(a, b);
    assert_eq!(serverbench_workloads::parse_trace("x", &a, None).unwrap().trees().len(), 5);
}

#[test]
fn sweep_output_does_not_depend_on_thread_count() {
    let run = |threads: &str| {
        let dir = tempdir(&format!("sweep{threads}"));
        stdout(&serverbench(&["sweep", "--concurrency", "1,4,8", "--seeds", "3", "-w", "300", "--threads", threads, "--out", dir.to_str().unwrap()]));
        (std::fs::read_to_string(dir.join("sweep.csv")).unwrap(), std::fs::read_to_string(dir.join("sweep.json")).unwrap())
    };
    let (one, two) = (run("1"), run("2"));
    assert_eq!(one, two);
    assert_eq!(one.0.lines().count(), 4);
    let _: serde_json::Value = serde_json::from_str(&one.1).unwrap();
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("serverbench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
