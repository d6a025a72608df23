//! The binary as a user runs it.

use crate::{serverbench, stdout};
use std::path::Path;

#[test]
fn simulate_writes_records_and_summary_that_parse() {
    let dir = tempdir("simulate");
    // An `--out` given with a trailing slash names its files without a doubled one.
    let o = serverbench([
        "simulate",
        "-c",
        "4",
        "-w",
        "300",
        "--out",
        &format!("{}/", dir.display()),
    ]);
    let text = stdout(&o);
    assert!(
        text.contains("D = ") && text.contains("TTFT") && text.contains("prefix hit rate"),
        "{text}"
    );
    assert!(
        text.contains(&format!("wrote {}/records.jsonl", dir.display())) && !text.contains("//"),
        "{text}"
    );
    let records = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let parsed: Vec<serverbench_sim::Record> = records
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = parsed.len();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let summary: serverbench_sim::Summary =
        serde_json::from_value(file["summary"].clone()).unwrap();
    assert_eq!(summary.requests, n);
    // The metadata every JSON output carries: what made it, from which commit, with which deployment.
    let meta = &file["meta"];
    assert_eq!(meta["tool"], "serverbench");
    assert_eq!(meta["version"], env!("CARGO_PKG_VERSION"));
    assert!(
        meta["commit"]
            .as_str()
            .is_some_and(|c| c == "unknown" || c.len() == 40),
        "{meta}"
    );
    assert_eq!(meta["command"][1], "simulate");
    assert!(meta["created_utc"].as_str().unwrap().ends_with('Z'));
    assert_eq!(meta["deployment"]["name"], "qwen3.5-9b-2xl40");
    let sha = meta["deployment"]["sha256"].as_str().unwrap();
    assert!(
        sha.len() == 64 && sha.chars().all(|c| c.is_ascii_hexdigit()),
        "{sha}"
    );
    // The same deployment printed and read back hashes the same; a changed one does not.
    let again = tempdir("simulate-again");
    let yaml = again.join("d.yaml");
    std::fs::write(&yaml, stdout(&serverbench(["simulate", "--print-config"]))).unwrap();
    let hash = |args: &[&str]| {
        let out = again.join("o");
        let mut all = vec![
            "simulate",
            "-c",
            "1",
            "-w",
            "10",
            "--out",
            out.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        stdout(&serverbench(&all));
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        v["meta"]["deployment"]["sha256"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(hash(&["-d", yaml.to_str().unwrap()]), sha);
    let engine = again.join("e.yaml");
    std::fs::write(&engine, "max_num_seqs: 8\n").unwrap();
    assert_ne!(hash(&["--engine-config", engine.to_str().unwrap()]), sha);
}

#[test]
fn print_config_is_a_valid_deployment_file() {
    let text = stdout(&serverbench([
        "simulate",
        "--deployment",
        "gemma4-e4b-1xl40",
        "--print-config",
    ]));
    let d = serverbench_sim::Deployment::from_yaml("printed.yaml", &text).unwrap();
    assert_eq!(
        d,
        serverbench_sim::Deployment::preset("gemma4-e4b-1xl40").unwrap()
    );
}

/// A deployment whose context holds less than the spec's measured sessions says so, once, on
/// standard error; a spec without measured session shapes gets no note.
#[test]
fn a_context_that_cuts_the_specs_sessions_gets_a_note() {
    let o = serverbench([
        "simulate",
        "-d",
        "gemma4-e4b-1xl40",
        "-w",
        "60",
        "--protocol",
        "cold",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let note = "note: workload spec agentx-062126-256k on a 131,072-token context: sessions compact at 112,877 tokens at most; of the spec's 419 measured session shapes, 76 compacted later than that in their corpus and 66 began with a longer first prompt (cut to fit)";
    assert_eq!(err.matches(note).count(), 1, "{err}");
    // Under AgentX's protocol (the deployment's own) sessions are not cut: those that do not fit are
    // left out whole, and the note counts how many of the first ones fit.
    let o = serverbench(["simulate", "-d", "gemma4-e4b-1xl40", "-w", "60"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    let note = "note: workload spec agentx-062126-256k on a 131,072-token context under AgentX's protocol: its sessions run as recorded, and those with a request longer than the context (prompt plus output) are left out whole, as --max-context-length leaves a corpus's traces out; 10 of its first 200 sessions fit";
    assert_eq!(err.matches(note).count(), 1, "{err}");
    let o = serverbench([
        "simulate",
        "-d",
        "gemma4-e4b-1xl40",
        "--workload",
        "synthetic-v1",
        "-w",
        "60",
        "--protocol",
        "cold",
    ]);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("note:"));
}

/// `simulate` on Gemma's 131,072-token context at c = 5 for 7,200 s with the five WEKA traces of
/// `tests/fixtures/weka-kvt` and `extra`: whether it succeeded, its standard output and error.
fn gemma_on_the_weka_traces(extra: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        "simulate",
        "-d",
        "gemma4-e4b-1xl40",
        "-c",
        "5",
        "-w",
        "7200",
        "--trace",
        "tests/fixtures/weka-kvt/traces",
    ];
    args.extend_from_slice(extra);
    let o = serverbench(&args);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A trace recorded against a longer context compacts where the deployment's context forces its agents
/// to (outside AgentX's protocols), saying so once; `--trace-as-recorded` sends its prompts as recorded,
/// and those past the context fail.
#[test]
fn a_trace_compacts_at_the_deployments_context_unless_replayed_as_recorded() {
    let run = |extra: &[&str]| {
        let (ok, out, err) = gemma_on_the_weka_traces(extra);
        assert!(ok, "{err}");
        (out, err)
    };
    let (out, err) = run(&["--protocol", "cold"]);
    let note = "note: trace on a 131,072-token context: 2 of 5 sessions compact where a prompt would pass 112,877 tokens, as the agentic-coding spec's agents do (5 compaction requests of 2,705-token summaries inserted, each followed by the files its agents read again, drawn from its carried_tokens; cut to fit: 1 first prompts of an agent, 0 later ones that could not be compacted); --trace-as-recorded replays them as recorded";
    assert_eq!(err.matches(note).count(), 1, "{err}");
    assert!(
        out.contains(" 0 context overflow") && out.contains("· valid"),
        "{out}"
    );
    let (out, err) = run(&["--protocol", "cold", "--trace-as-recorded"]);
    assert!(!err.contains("compact"), "{err}");
    let overflows: u32 = out
        .split(" context overflow")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("the summary counts overflows");
    assert!(overflows > 100 && out.contains("INVALID"), "{out}");
    // AgentX's protocols replay a trace as recorded (the benchmark leaves long traces out instead).
    let (_, err) = run(&["--protocol", "agentx"]);
    assert!(!err.contains("compact where"), "{err}");
}

/// `--compact-as` compacts a trace as another spec's agents do: a spec file whose agents keep a longer
/// reserve compacts earlier, a built-in spec without one at `context_fraction` alone, and the note names
/// the spec; an unknown spec is an error naming the flag, and the flag needs a trace.
#[test]
fn a_trace_compacts_as_the_spec_compact_as_names() {
    let dir = tempdir("compact-as");
    let spec = dir.join("wider-reserve.yaml");
    let shipped = std::fs::read_to_string("presets/workloads/agentic-coding.yaml").unwrap();
    assert!(shipped.contains("reserve_tokens: 18195"));
    std::fs::write(
        &spec,
        shipped.replace("reserve_tokens: 18195", "reserve_tokens: 26230"),
    )
    .unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["--protocol", "cold"];
        args.extend_from_slice(extra);
        gemma_on_the_weka_traces(&args)
    };
    let (ok, default_out, _) = run(&[]);
    assert!(ok);
    let (ok, out, err) = run(&["--compact-as", spec.to_str().unwrap()]);
    assert!(ok, "{err}");
    let named = format!(
        "compact where a prompt would pass 104,842 tokens, as the {} spec's agents do",
        spec.display()
    );
    assert!(err.contains(&named), "{err}");
    assert_ne!(simulated_d(&out), simulated_d(&default_out));
    let (ok, _, err) = run(&["--compact-as", "synthetic-v1"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("would pass 117,964 tokens, as the synthetic-v1 spec's agents do (")
            && err.contains("2,000-token summaries"),
        "{err}"
    );
    let (ok, _, err) = run(&["--compact-as", "no-such-spec"]);
    assert!(!ok);
    assert!(
        err.contains("--compact-as no-such-spec: not a built-in spec (")
            && err.contains("no such file"),
        "{err}"
    );
    let o = serverbench(["simulate", "--compact-as", "synthetic-v1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--trace"));
}

/// `--first-rows` starts a spec's corpus under AgentX's protocols with a corpus's own rows: those that
/// fit the deployment's context run first (one of the benchmark corpus's four on Gemma's context), the
/// note says how many; outside AgentX's protocols, with a trace, or from a missing file it is an error
/// naming the flag.
#[test]
fn first_rows_start_a_specs_corpus_under_agentx() {
    let rows = "corpus/agentx-062126-256k/rows-0-3.jsonl.gz";
    let run = |extra: &[&str]| {
        let mut args = vec!["simulate", "-d", "gemma4-e4b-1xl40", "-c", "2", "-w", "600"];
        args.extend_from_slice(extra);
        let o = serverbench(&args);
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (ok, plain, err) = run(&["--protocol", "agentx"]);
    assert!(ok, "{err}");
    let (ok, out, err) = run(&["--protocol", "agentx", "--first-rows", rows]);
    assert!(ok, "{err}");
    let note = format!(
        "note: first rows from {rows}: 1 of its 4 rows fit the 131,072-token context whole and run as rows 0 … 0, the spec's rows after them"
    );
    assert_eq!(err.matches(&note).count(), 1, "{err}");
    assert_ne!(simulated_d(&out), simulated_d(&plain));
    let (ok, _, err) = run(&["--protocol", "cold", "--first-rows", rows]);
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "--first-rows {rows}: a corpus's rows are read in order under AgentX's protocols only"
        )),
        "{err}"
    );
    let (ok, _, err) = run(&["--protocol", "agentx", "--first-rows", "no/such/rows.jsonl"]);
    assert!(!ok);
    assert!(err.contains("no/such/rows.jsonl"), "{err}");
    let trace = "tests/fixtures/weka-kvt/traces";
    let (ok, _, err) = run(&[
        "--protocol",
        "agentx",
        "--trace",
        trace,
        "--first-rows",
        rows,
    ]);
    assert!(!ok);
    assert!(
        err.contains("--first-rows") && err.contains("--trace"),
        "{err}"
    );
    // Commands that read the spec's stream, not a corpus's rows, refuse it rather than ignore it.
    for command in [
        &["workload", "export", "--trees", "1"][..],
        &["workload", "stats"][..],
    ] {
        let o = serverbench([command, &["--first-rows", rows]].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{command:?}");
        assert!(
            err.contains(&format!("--first-rows {rows}: only a replay reads")),
            "{err}"
        );
    }
    let o = serverbench([
        "workload",
        "stats",
        "--trace",
        trace,
        "--compact-as",
        "synthetic-v1",
    ]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--compact-as synthetic-v1: only a replay"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A freshly started vLLM server compiles a fused-MoE kernel variant the first time an eager step needs
/// it (`expert_compile_s` of the Qwen3-30B-A3B profile, measured on vLLM's step traces): a cold run at
/// c = 1 pays three compiles in its first prefills (as vLLM did, results/h200-vllm-moe/compiles.md) and
/// its longest first token waits for one; `--kernels-warm` (a server that served before) and the steady
/// start pay none, and the summary leaves the count out.
#[test]
fn a_fresh_moe_server_waits_for_its_kernel_compiles() {
    let dir = tempdir("compiles");
    let run = |extra: &[&str]| {
        let out = dir.join(extra.join("_"));
        let mut args = vec![
            "simulate",
            "-d",
            "scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml",
            "-c",
            "1",
            "-w",
            "30",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = serverbench(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        (v["summary"].clone(), stdout(&o))
    };
    let (fresh, text) = run(&["--start", "cold"]);
    assert_eq!(fresh["kernel_compiles"], 3, "{fresh}");
    assert!(
        text.contains("3 of them waiting for a kernel compile"),
        "{text}"
    );
    let (warm, text) = run(&["--start", "cold", "--kernels-warm"]);
    assert!(warm.get("kernel_compiles").is_none(), "{warm}");
    assert!(!text.contains("kernel compile"), "{text}");
    let slowest = |s: &serde_json::Value| s["ttft_s"]["max"].as_f64().unwrap();
    assert!(slowest(&fresh) - slowest(&warm) > 1.2, "{fresh} {warm}");
    let (steady, _) = run(&["--start", "steady"]);
    assert!(steady.get("kernel_compiles").is_none(), "{steady}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A GPU file's `varlen_tiles` prices the steps that prefill and decode in one FlashAttention 3 call:
/// the same run then differs from the deployment without it, and repeats byte for byte; a value out of
/// range is refused by field.
#[test]
fn varlen_tiles_price_mixed_steps_and_are_checked() {
    let dir = tempdir("varlen");
    let tiles = "hardware:\n  varlen_tiles:\n    mma_block_s: 1.818e-6\n    sm_read_bandwidth: 114200000000.0\n    memory_bandwidth: 4426000000000.0\n    tile_overhead_s: 1.95e-6\n";
    let file = dir.join("varlen.yaml");
    std::fs::write(
        &file,
        format!("base: qwen3-8b-1xh200-vllm\n{tiles}    overlap: 0.045\n"),
    )
    .unwrap();
    let run = |d: &str| {
        let o = serverbench([
            "simulate", "-d", d, "-c", "8", "-w", "120", "--start", "steady",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = stdout(&o);
        text.lines()
            .filter(|l| !l.contains("wall time"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let with = run(file.to_str().unwrap());
    assert_eq!(with, run(file.to_str().unwrap()), "deterministic");
    assert_ne!(with, run("qwen3-8b-1xh200-vllm"));
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        format!("base: qwen3-8b-1xh200-vllm\n{tiles}    overlap: 2\n"),
    )
    .unwrap();
    let o = serverbench(["simulate", "-d", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.yaml") && err.contains("hardware.varlen_tiles.overlap"),
        "{err}"
    );
}

#[test]
fn bad_files_get_an_error_naming_file_and_field_and_exit_2() {
    let dir = tempdir("bad");
    let yaml = dir.join("dep.yaml");
    std::fs::write(
        &yaml,
        "base: qwen3.5-9b-2xl40\nengine:\n  max_num_seqs: lots\n",
    )
    .unwrap();
    let o = serverbench(["simulate", "--deployment", yaml.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("dep.yaml") && err.contains("engine.max_num_seqs"),
        "{err}"
    );
    // An engine override is merged into the deployment before it is read: the error names the user's
    // file, the line there and the field as that file writes it.
    let engine = dir.join("engine.yaml");
    std::fs::write(&engine, "policy: vllm\nmax_num_seqz: 8\n").unwrap();
    let o = serverbench(["simulate", "--engine-config", engine.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("engine.yaml: line 2: max_num_seqz: unknown field `max_num_seqz`"),
        "{err}"
    );
    let trace = dir.join("t.jsonl");
    std::fs::write(&trace, "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}\n{\"timestamp\": 0, \"input_length\": 10}\n").unwrap();
    let o = serverbench(["simulate", "--trace", trace.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("t.jsonl: line 2") && err.contains("output_length"),
        "{err}"
    );
    let spec = dir.join("w.yaml");
    std::fs::write(
        &spec,
        "root_turns:\n  dist: lognormal\n  median: 40\n  sigmaa: 1\n",
    )
    .unwrap();
    let err = String::from_utf8_lossy(
        &serverbench(["workload", "stats", "--workload", spec.to_str().unwrap()]).stderr,
    )
    .to_string();
    assert!(
        err.contains("w.yaml") && err.contains("root_turns") && err.contains("sigmaa"),
        "{err}"
    );
}

/// `freeze`'s fidelity thresholds are checked before anything is written, each error naming its flag.
#[test]
fn freeze_refuses_fidelity_thresholds_out_of_range() {
    let dir = tempdir("freeze-thresholds");
    let out = dir.join("f.json");
    for (flag, value) in [
        ("--max-regret", "0"),
        ("--max-regret", "inf"),
        ("--min-greedy-agreement", "1.5"),
        ("--fidelity-prompts", "0"),
    ] {
        let o = serverbench([
            "freeze",
            "-c",
            "2",
            "--url",
            "http://127.0.0.1:9",
            &format!("{flag}={value}"),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(flag), "{flag} {value}: {err}");
        assert!(!out.exists(), "nothing written for {flag} {value}");
    }
}

#[test]
fn workload_commands_run_on_samples_and_generator() {
    let text = stdout(&serverbench([
        "workload", "stats", "--seed", "3", "--trees", "50",
    ]));
    assert!(text.contains("prefix reuse"), "{text}");
    let weka = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/weka/sample_trace_with_subagent.json");
    let text = stdout(&serverbench([
        "workload",
        "stats",
        "--trace",
        weka.to_str().unwrap(),
    ]));
    assert!(text.contains("sub-agents 4"), "{text}");
    let dir = tempdir("scan");
    let text = stdout(&serverbench([
        "workload",
        "scan",
        "--seeds",
        "4",
        "-c",
        "4",
        "-w",
        "600",
        "--out",
        dir.to_str().unwrap(),
    ]));
    assert!(text.contains("value offered"), "{text}");
    let csv = std::fs::read_to_string(dir.join("scan.csv")).unwrap();
    assert_eq!(csv.lines().count(), 5);
    let a = stdout(&serverbench([
        "workload", "export", "--seed", "9", "--trees", "5",
    ]));
    let b = stdout(&serverbench([
        "workload", "export", "--seed", "9", "--trees", "5",
    ]));
    assert_eq!(a, b);
    assert_eq!(
        serverbench_workloads::parse_trace("x", &a, None)
            .unwrap()
            .trees()
            .len(),
        5
    );
}

/// Parses a CSV file: a header and rows of the same width; returns the rows as maps.
fn csv(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            assert_eq!(
                cells.len(),
                header.len(),
                "{}: row {l:?} has the wrong width",
                path.display()
            );
            header
                .iter()
                .zip(cells)
                .map(|(h, c)| (h.to_string(), c.to_string()))
                .collect()
        })
        .collect()
}

fn svg(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text)
        .unwrap_or_else(|e| panic!("{}: not XML: {e}", path.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(
        doc.descendants().count() > 20,
        "{}: an empty plot",
        path.display()
    );
    // No label is drawn twice at one place (the log axis drew its tick "10" twice).
    let mut seen = std::collections::HashSet::new();
    for t in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let at = (t.attribute("x"), t.attribute("y"), t.text().map(str::trim));
        assert!(seen.insert(at), "{}: {at:?} twice", path.display());
    }
}

#[test]
fn sweep_output_does_not_depend_on_thread_count_and_parses() {
    let run = |threads: &str| {
        let dir = tempdir(&format!("sweep{threads}"));
        stdout(&serverbench([
            "sweep",
            "--concurrency",
            "1,4,16",
            "--seeds",
            "3",
            "--windows",
            "150,300",
            "--threads",
            threads,
            "--out",
            dir.to_str().unwrap(),
        ]));
        dir
    };
    let (one, two) = (run("1"), run("2"));
    for f in ["sweep.csv", "sweep.svg"] {
        assert!(
            std::fs::read(one.join(f)).unwrap() == std::fs::read(two.join(f)).unwrap(),
            "{f} depends on the thread count"
        );
    }
    // sweep.json too, but for its metadata (the command line, with --threads, and the time).
    let without_meta = |dir: &Path| {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap())
                .unwrap();
        assert!(v["meta"]["command"].as_array().unwrap().len() > 2);
        v.as_object_mut().unwrap().remove("meta");
        v
    };
    assert!(
        without_meta(&one) == without_meta(&two),
        "sweep.json depends on the thread count"
    );
    let rows = csv(&one.join("sweep.csv"));
    assert_eq!(rows.len(), 3);
    for r in &rows {
        let (d, g, f): (f64, f64, f64) = (
            r["d_mean"].parse().unwrap(),
            r["g_mean"].parse().unwrap(),
            r["f_mean"].parse().unwrap(),
        );
        assert!(d <= g + 1e-12 && (0.0..=1.0).contains(&f));
        assert_eq!(
            r["d_mean_w300"], r["d_mean"],
            "the longest window is the run itself"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(one.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(json["cells"].as_array().unwrap().len(), 9);
    svg(&one.join("sweep.svg"));
}

#[test]
fn screen_rankings_are_stable_and_files_parse() {
    let run = |name: &str| {
        let dir = tempdir(name);
        let text = stdout(&serverbench([
            "screen",
            "--seeds",
            "10",
            "-c",
            "6",
            "-w",
            "300",
            "--out",
            dir.to_str().unwrap(),
        ]));
        assert!(
            text.contains("representative seeds") && text.contains("hardest seeds"),
            "{text}"
        );
        dir
    };
    let (a, b) = (run("screen-a"), run("screen-b"));
    assert_eq!(
        std::fs::read(a.join("screen.csv")).unwrap(),
        std::fs::read(b.join("screen.csv")).unwrap()
    );
    let rows = csv(&a.join("screen.csv"));
    assert_eq!(rows.len(), 10);
    let ds: Vec<f64> = rows.iter().map(|r| r["d"].parse().unwrap()).collect();
    assert!(ds.windows(2).all(|w| w[0] <= w[1]), "ranked hardest first");
    assert!(rows.iter().any(|r| r["flag"] == "low") && rows.iter().any(|r| r["flag"] == "high"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("screen.json")).unwrap()).unwrap();
    assert_eq!(
        json["hardest"][0].as_u64().unwrap().to_string(),
        rows[0]["seed"]
    );
    svg(&a.join("screen.svg"));
}

#[test]
fn slo_freezes_the_maximum_p90_into_a_deployment_file() {
    let dir = tempdir("slo");
    let out = dir.join("frozen.yaml");
    let text = stdout(&serverbench([
        "slo",
        "--seeds",
        "3",
        "-c",
        "2",
        "-w",
        "300",
        "-o",
        out.to_str().unwrap(),
    ]));
    let d = serverbench_sim::Deployment::from_yaml(
        "frozen.yaml",
        &std::fs::read_to_string(&out).unwrap(),
    )
    .unwrap();
    // The per-seed table's p90 TTFTs; the frozen target is their maximum.
    let p90s: Vec<f64> = text
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() == 3 && cols[0].parse::<u64>().is_ok()).then(|| cols[1].parse().unwrap())
        })
        .collect();
    assert_eq!(p90s.len(), 3, "{text}");
    let header = std::fs::read_to_string(&out).unwrap();
    assert!(
        header.starts_with("# SLO targets frozen by `serverbench slo` from qwen3.5-9b-2xl40 at c = 2 over 3 seeds (0..3), window 300 s."),
        "{header}"
    );
    assert_eq!(
        d.name, "qwen3.5-9b-2xl40 with frozen SLO",
        "not the preset's name: its targets are not the preset's"
    );
    let max = p90s.iter().cloned().fold(0.0, f64::max);
    assert!(
        (d.slo.ttft_s - max).abs() < 1e-5,
        "{} vs {max}",
        d.slo.ttft_s
    );
}

#[test]
fn timeline_files_parse() {
    let dir = tempdir("timeline");
    stdout(&serverbench([
        "simulate",
        "-c",
        "6",
        "-w",
        "200",
        "--timeline",
        "--out",
        dir.to_str().unwrap(),
    ]));
    let rows = csv(&dir.join("timeline.csv"));
    assert!(rows.len() > 100);
    assert!(rows
        .iter()
        .all(|r| r["kv_occupancy"].parse::<f64>().unwrap() <= 1.0));
    svg(&dir.join("timeline.svg"));
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("serverbench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// D from `simulate`'s summary line (`D = 1.234 $/$`).
fn simulated_d(text: &str) -> String {
    let at = text.find("D = ").expect("a score line") + 4;
    text[at..].split_whitespace().next().unwrap().to_string()
}

/// D of what-if's `default` row (the deployment unchanged) at its only concurrency.
fn what_if_default_d(text: &str) -> String {
    let row = text
        .lines()
        .find(|l| l.starts_with("| default |"))
        .expect("a default row");
    row.split('|').nth(2).unwrap().trim().to_string()
}

#[test]
fn a_profile_file_is_the_profile_every_command_uses() {
    // A fitted profile under a name of its own, and one that keeps a preset's name with other numbers:
    // both are the profile `simulate` and `what-if` run with (what-if used to panic on the first and
    // silently use the preset on the second).
    let dir = tempdir("profile-file");
    let preset = serverbench_calibration::Profile::preset("l40-datasheet").unwrap();
    for (file, name) in [
        ("fit.yaml", "my-l40-fit"),
        ("same-name.yaml", "l40-datasheet"),
    ] {
        let p = serverbench_calibration::Profile {
            name: name.into(),
            step_overhead_s: 0.006,
            ..preset.clone()
        };
        let path = dir.join(file);
        std::fs::write(&path, serde_yaml::to_string(&p).unwrap()).unwrap();
        let path = path.to_str().unwrap();
        let common = ["-c", "4", "-w", "300", "--profile", path];
        let sim = stdout(&serverbench(["simulate", "-s", "0"].iter().chain(&common)));
        let what_if = stdout(&serverbench(
            ["what-if", "--seeds", "0..1"].iter().chain(&common),
        ));
        let preset_d = simulated_d(&stdout(&serverbench(["simulate", "-c", "4", "-w", "300"])));
        assert_eq!(simulated_d(&sim), what_if_default_d(&what_if), "{file}");
        assert_ne!(
            simulated_d(&sim),
            preset_d,
            "{file}: the file's numbers, not the preset's"
        );
    }
}

#[test]
fn open_loop_runs_from_the_command_line_and_bad_modes_name_their_flag() {
    let dir = tempdir("open");
    let trace = dir.join("requests.jsonl");
    let text: String = (0..40)
        .map(|i| {
            format!(
                "{{\"arrival_s\": {}, \"input_tokens\": 500, \"output_tokens\": 20}}\n",
                0.5 * i as f64
            )
        })
        .collect();
    std::fs::write(&trace, text).unwrap();
    let t = trace.to_str().unwrap();
    let out = dir.join("run");
    let o = serverbench([
        "simulate",
        "--trace",
        t,
        "--arrivals",
        "trace:2",
        "-w",
        "60",
        "--out",
        out.to_str().unwrap(),
    ]);
    let text = stdout(&o);
    assert!(text.contains("arrivals trace:2 (cold start)"), "{text}");
    // The header says how load arrives, not the lane cap an open loop runs under.
    assert!(
        text.starts_with("serverbench simulate — qwen3.5-9b-2xl40, recorded arrivals ×2, seed 0"),
        "{text}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["summary"]["arrivals"]["mode"], "trace");
    assert_eq!(summary["summary"]["requests"], 40);
    let records = std::fs::read_to_string(out.join("records.jsonl")).unwrap();
    let last: serverbench_sim::Record =
        serde_json::from_str(records.lines().last().unwrap()).unwrap();
    assert_eq!(
        last.send_ns, 9_750_000_000,
        "the 40th request at 19.5 s / 2"
    );
    let sweep = dir.join("sweep");
    let o = serverbench([
        "sweep",
        "--rates",
        "0.05,0.2",
        "--seeds",
        "2",
        "-w",
        "120",
        "--out",
        sweep.to_str().unwrap(),
    ]);
    assert!(stdout(&o).contains("Poisson arrival rates"));
    let rows = csv(&sweep.join("sweep.csv"));
    assert_eq!(
        rows.iter()
            .map(|r| r["rate_per_s"].as_str())
            .collect::<Vec<_>>(),
        ["0.05", "0.2"]
    );
    svg(&sweep.join("sweep.svg"));
    for (args, flag) in [
        (vec!["simulate", "--arrivals", "poisson:-2"], "--arrivals"),
        (vec!["simulate", "--arrivals", "trace"], "arrivals"),
        (vec!["simulate", "--max-open", "4"], "--max-open"),
        (
            vec!["simulate", "--arrivals", "poisson:1", "--max-open", "0"],
            "--max-open",
        ),
        (vec!["sweep", "--arrivals", "poisson:1"], "--rates"),
        (vec!["sweep", "--rates", "0"], "--rates"),
    ] {
        let o = serverbench(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

#[test]
fn sweep_band_runs_both_ends_of_the_profile_band() {
    let o = serverbench(["sweep", "-c", "1,4", "--seeds", "2", "-w", "300", "--band"]);
    let text = stdout(&o);
    for line in [
        "band of profile l40-ops-sglang",
        "slow end  best mean D at c =",
        "fast end  best mean D at c =",
    ] {
        assert!(text.contains(line), "{text}");
    }
    assert!(
        text.contains("does not move") || text.contains("moves within the band"),
        "{text}"
    );
    let o = serverbench([
        "sweep",
        "-d",
        "qwen3-8b-1xh200",
        "-c",
        "1",
        "--seeds",
        "1",
        "-w",
        "60",
        "--band",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--band: profile h200-qwen3-8b-cuda states no band"),
        "{err}"
    );
}

/// A stored run records how it started; `compare --reuse` refuses to set it against a simulation that
/// starts otherwise, and takes it when the flags agree.
#[test]
fn compare_reuse_refuses_a_stored_run_that_started_otherwise() {
    let dir = tempdir("reuse-start");
    let run = dir.join("real/c1_s0");
    stdout(&serverbench([
        "simulate",
        "-c",
        "1",
        "-s",
        "0",
        "-w",
        "60",
        "--start",
        "steady",
        "--out",
        run.to_str().unwrap(),
    ]));
    let compare = |start: &str| {
        serverbench([
            "compare",
            "-c",
            "1",
            "-s",
            "0",
            "-w",
            "60",
            "--reuse",
            "--start",
            start,
            "--out",
            dir.to_str().unwrap(),
        ])
    };
    let o = compare("cold");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the stored run replayed --protocol steady"),
        "{err}"
    );
    let table = stdout(&compare("steady"));
    assert!(table.contains("| 1 | 0 |"), "{table}");
}

/// `--engine-config vllm|sglang` replaces the engine section with that engine's own defaults for the
/// deployment; an unknown name that is no file either names the presets.
#[test]
fn engine_presets_follow_each_engines_defaults_for_the_deployment() {
    let config = |engine: &str| {
        let o = serverbench([
            "simulate",
            "-d",
            "qwen3.5-9b-2xl40",
            "--engine-config",
            engine,
            "--print-config",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let expected: [(&str, &[&str]); 2] = [
        (
            "vllm",
            &[
                "policy: vllm",
                "block_size: 272",
                "max_num_batched_tokens: 2048",
                "max_num_seqs: 256",
                "cuda_graph_max_tokens: 512",
                "gpu_memory_utilization: 0.92",
            ],
        ),
        (
            "sglang",
            &[
                "policy: sglang",
                "block_size: 16",
                "max_num_batched_tokens: 4096",
                "waiting_order: fcfs",
                "gpu_memory_utilization: 0.849",
                "cap_requests_at_pool: true",
                "cuda_graph_max_tokens: 32",
            ],
        ),
    ];
    for (engine, lines) in expected {
        let printed = config(engine);
        for line in lines {
            assert!(printed.contains(line), "{engine}: {line}\n{printed}");
        }
    }
    let o = serverbench(["simulate", "--engine-config", "tgi"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not an engine preset (vllm, sglang, vllm-0.28.0, sglang-0.5.19)"),
        "{err}"
    );
}

/// A fault only the CUDA engine can carry out is refused by the emulated server, with the reason.
#[test]
fn serve_refuses_a_fault_its_engine_cannot_commit() {
    let o = serverbench(["serve", "--port", "0", "--fault", "corrupt-prefix-cache"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("corrupt-prefix-cache: only the CUDA engine"),
        "{err}"
    );
    let o = serverbench(["serve", "--port", "0", "--fault", "stale"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("corrupt-prefix-cache"));
}

/// Built without the feature `cuda` (the default), everything that needs the CUDA engine stops at once
/// with an error that says how to build it in (exit 2).
#[cfg(not(feature = "cuda"))]
#[test]
fn what_needs_the_cuda_engine_says_how_to_build_it_in() {
    for args in [
        &["serve", "--port", "0", "--engine", "cuda"][..],
        &["replay", "--engine", "cuda", "-w", "10"],
        &["cuda-bench"],
        &[
            "cuda-check",
            "--model-dir",
            "m",
            "--cases",
            "c",
            "--out",
            "o",
        ],
        &["calibrate", "--microbench"],
    ] {
        let o = serverbench(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("built without the CUDA engine")
                && err.contains("cargo build --release --features cuda"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_level_given_twice_is_refused_not_run_twice() {
    for (args, want) in [
        (
            vec!["sweep", "-c", "4,4,8", "--seeds", "2", "-w", "60"],
            "--concurrency: 4 is given twice",
        ),
        (
            vec!["sweep", "--rates", "0.1,0.1", "--seeds", "2", "-w", "60"],
            "--rates: 0.1 is given twice",
        ),
    ] {
        let o = serverbench(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// Hostile inputs of the second hardening round: each refused at once with the file and field, or
/// (a byte-order mark) read as the text it is.
#[test]
fn hostile_inputs_are_refused_with_their_field_or_read_as_text() {
    let dir = tempdir("hostile2");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let tp3 = write("tp3.yaml", "base: qwen3.5-9b-2xl40\ntp: 3\n");
    let bom = write("bom.yaml", "\u{feff}base: qwen3.5-9b-2xl40\n");
    let deep = write("deep.yaml", &format!("root_turns: {}", "[".repeat(100_000)));
    let empty = write(
        "empty.jsonl",
        "{\"session_id\": 0, \"block_size\": 64, \"requests\": [{\"id\": 0, \"agent\": 0, \"kind\": \"root_turn\", \"deps\": [], \"think_ns\": 0, \"input_tokens\": 0, \"output_tokens\": 5, \"background\": false, \"turn\": 0, \"blocks\": []}]}\n",
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["simulate", "-w", "1e-300"],
            "--window: must be between 1 s",
        ),
        (
            vec!["simulate", "-d", &tp3, "-w", "60"],
            "tp: 3 does not divide the model's 16 query heads",
        ),
        (
            vec!["simulate", "--workload", &deep, "-w", "60"],
            "nested deeper than 64 levels",
        ),
        (
            vec!["simulate", "--trace", &empty, "-w", "60"],
            "requests[0].input_tokens: must be at least 1",
        ),
    ];
    for (args, want) in cases {
        let t = std::time::Instant::now();
        let o = serverbench(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(t.elapsed().as_secs() < 5, "{args:?} took {:?}", t.elapsed());
    }
    assert!(stdout(&serverbench(["simulate", "-d", &bom, "-w", "60"])).contains("qwen3.5-9b-2xl40"));
}

/// A deployment file naming a Hugging Face `config.json` (a mixture of experts) on a catalog GPU it did
/// not start from: `sweep` runs and recommends on the GPU's datasheet profile and price and says the
/// profile is not fitted; `model show` prints the experts; an architecture the reader cannot place
/// names the file and the field, a nested language model's field under `text_config` (issue 40).
#[test]
fn a_config_json_model_on_a_catalog_gpu_sweeps_and_says_its_profile_is_not_fitted() {
    let dir = tempdir("config-json");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf/qwen3-30b-a3b.json");
    std::fs::create_dir_all(dir.join("Qwen3-30B-A3B")).unwrap();
    std::fs::copy(&fixture, dir.join("Qwen3-30B-A3B/config.json")).unwrap();
    let dep = dir.join("moe.yaml");
    std::fs::write(
        &dep,
        "base: qwen3-8b-1xh200-vllm\nmodel: Qwen3-30B-A3B\nhardware: b200\n",
    )
    .unwrap();
    let text = stdout(&serverbench([
        "sweep",
        "-d",
        dep.to_str().unwrap(),
        "-c",
        "1,8",
        "--seeds",
        "1",
        "-w",
        "120",
    ]));
    assert!(
        text.contains("1 × b200 GPU, $6.50/GPU-h")
            && text.contains("profile b200-datasheet is not fitted to measurements")
            && text.contains("Recommendation: accept"),
        "{text}"
    );
    // The same model given on the command line instead of in a file.
    let folder = dir.join("Qwen3-30B-A3B");
    let printed = stdout(&serverbench([
        "simulate",
        "-d",
        "qwen3-8b-1xh200-vllm",
        "--model-config",
        folder.to_str().unwrap(),
        "--print-config",
    ]));
    assert!(
        printed.contains("name: Qwen3-30B-A3B") && printed.contains("per_token: 8"),
        "{printed}"
    );
    let missing = serverbench([
        "simulate",
        "--model-config",
        dir.join("nothing-here").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        missing.status.code() == Some(2)
            && err.contains("--model-config")
            && err.contains("nothing-here"),
        "{err}"
    );
    let shown = stdout(&serverbench([
        "model",
        "show",
        dir.join("Qwen3-30B-A3B").to_str().unwrap(),
    ]));
    assert!(
        shown.starts_with("Qwen3-30B-A3B: 48 layers") && shown.contains("8 of 128 per token"),
        "{shown}"
    );
    let bad = dir.join("gemma3n.json");
    std::fs::write(
        &bad,
        r#"{"architectures": ["Gemma3nForConditionalGeneration"], "hidden_size": 2560}"#,
    )
    .unwrap();
    let o = serverbench(["model", "show", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("gemma3n.json: architectures: \"Gemma3nForConditionalGeneration\" is not an architecture this build reads"),
        "{err}"
    );
    let nested = dir.join("gemma4.json");
    std::fs::write(
        &nested,
        r#"{"architectures": ["Gemma4ForConditionalGeneration"], "text_config": {"hidden_size": 2560}}"#,
    )
    .unwrap();
    let o = serverbench(["model", "show", nested.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2)
            && err.contains("gemma4.json: text_config.num_hidden_layers: missing"),
        "{err}"
    );
    let partial = dir.join("deepseek.json");
    std::fs::write(
        &partial,
        r#"{"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168}"#,
    )
    .unwrap();
    let o = serverbench(["model", "show", partial.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2) && err.contains("deepseek.json: num_hidden_layers: missing"),
        "{err}"
    );
}

/// Expert parallelism (`engine.expert_parallel`) on a mixture of experts over 4 GPUs: the experts held
/// whole, a one-token step waits for the busiest GPU, so TPOT at one session is above tensor
/// parallelism's; on a dense model the field is refused, naming it (issue 40).
#[test]
fn expert_parallelism_costs_a_lone_session_its_busiest_gpu() {
    let dir = tempdir("expert-parallel");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf");
    std::fs::copy(fixtures.join("qwen3-30b-a3b.json"), dir.join("moe.json")).unwrap();
    let tpot = |engine: &str| {
        let dep = dir.join("d.yaml");
        std::fs::write(
            &dep,
            format!("base: qwen3-8b-1xh200-vllm\nmodel: moe.json\ntp: 4\n{engine}"),
        )
        .unwrap();
        let o = serverbench([
            "simulate",
            "-d",
            dep.to_str().unwrap(),
            "-c",
            "1",
            "-w",
            "120",
            "--out",
            dir.join("run").to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("run/summary.json")).unwrap())
                .unwrap();
        s["summary"]["tpot_s"]["p50"].as_f64().unwrap()
    };
    let (tp, ep) = (tpot(""), tpot("engine:\n  expert_parallel: true\n"));
    assert!(
        ep > tp * 1.05,
        "expert parallel {ep} against tensor parallel {tp}"
    );
    dense_model_refuses(
        &dir,
        "engine:\n  expert_parallel: true\n",
        "engine.expert_parallel",
    );
}

/// Twenty public `config.json` files of fifteen architectures (dense, sliding-window, mixtures of
/// experts, latent attention, alternating sliding and full layers, Gemma's patterns with shared KV and
/// per-layer embeddings, Gated DeltaNet hybrids with and without experts), each on a GPU, weight format
/// and tensor-parallel degree that holds it, sweep end to end and recommend a level that scores, or none
/// where no level does (issue 40).
#[test]
fn twenty_public_configs_simulate_end_to_end() {
    let dir = tempdir("twenty-configs");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf");
    for (file, hardware, tp, weights) in [
        ("qwen3-8b.json", "h200", 1, "bf16"),
        ("qwen3-0.6b.json", "l4", 1, "bf16"),
        ("qwen2.5-7b-instruct.json", "l40s", 1, "bf16"),
        ("qwen2.5-0.5b-instruct.json", "rtx4090", 1, "bf16"),
        ("mistral-7b-v0.1.json", "a100-80gb", 1, "bf16"),
        ("mistral-nemo-base-2407.json", "h100-sxm", 1, "bf16"),
        ("qwen3-30b-a3b.json", "h200", 1, "bf16"),
        ("qwen3-235b-a22b.json", "b200", 4, "bf16"),
        ("mixtral-8x7b.json", "mi300x", 1, "bf16"),
        ("mixtral-8x22b.json", "h200", 4, "bf16"),
        ("deepseek-r1.json", "h200", 8, "fp8"),
        ("deepseek-v2.5.json", "h200", 4, "bf16"),
        ("gpt-oss-120b.json", "b200", 1, "int4"),
        ("gemma-2-2b-it.json", "l4", 1, "bf16"),
        ("gemma-3-12b-it.json", "h100-sxm", 1, "bf16"),
        ("gemma-4-e4b-it.json", "l40s", 1, "bf16"),
        ("qwen3.5-9b.json", "h200", 1, "bf16"),
        ("qwen3.8-27b.json", "h200", 1, "bf16"),
        ("qwen3.6-35b-a3b.json", "h200", 1, "bf16"),
        ("qwen3-coder-next.json", "b200", 1, "fp8"),
    ] {
        std::fs::copy(fixtures.join(file), dir.join(file)).unwrap();
        let dep = dir.join(format!("{file}.yaml"));
        std::fs::write(
            &dep,
            format!("base: qwen3-8b-1xh200\nmodel: {file}\nhardware: {hardware}\ntp: {tp}\nweights: {weights}\nworkload: synthetic-v1\ncontext_limit: 32768\n"),
        )
        .unwrap();
        let o = serverbench([
            "sweep",
            "-d",
            dep.to_str().unwrap(),
            "-c",
            "1,4",
            "--seeds",
            "1",
            "-w",
            "60",
        ]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && text.contains("Recommendation: "),
            "{file} on {tp} × {hardware}: {text}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        // A level is recommended only where it scores: D = 0 at every level recommends none.
        let scores = text
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .any(|d| d > 0.0);
        assert_eq!(
            text.contains("Recommendation: accept"),
            scores,
            "{file} on {tp} × {hardware}: {text}"
        );
        assert_eq!(text.contains("◀ best"), scores, "{file}: {text}");
    }
}

/// `calibrate --from-moe-probes` on the stored vLLM probes of Qwen3-30B-A3B (a `config.json` as the
/// model), with vLLM's graph limit, writes the shipped `h200-qwen3-30b-a3b-vllm` terms, its eager floor
/// included; a dense model is refused, naming why.
#[test]
fn moe_probes_fit_the_shipped_moe_profile() {
    let dir = tempdir("moe-probes");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = dir.join("p.yaml");
    let args = |model: &str| {
        vec![
            "calibrate".to_string(),
            "--from-moe-probes".into(),
            root.join("results/h200-vllm-moe/moe_probe.json")
                .display()
                .to_string(),
            root.join("results/h200-vllm-moe/moe_probe_run2.json")
                .display()
                .to_string(),
            root.join("results/h200-vllm-moe/warm/moe-probe/moe_probe.json")
                .display()
                .to_string(),
            "--moe-split-kv".into(),
            "--graph-max-tokens".into(),
            "512".into(),
            "--model".into(),
            model.into(),
            "--base-profile".into(),
            // The dense profile as it stood when the MoE profile was fitted over it.
            root.join("results/h200-vllm-moe/base-h200-qwen3-8b-vllm.yaml")
                .display()
                .to_string(),
            "--out".into(),
            out.display().to_string(),
        ]
    };
    let moe = root.join("tests/fixtures/hf/qwen3-30b-a3b.json");
    let o = serverbench(args(moe.to_str().unwrap()));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("held out 5") && err.contains("eager floor 1.276 ms per layer"),
        "{err}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let shipped =
        std::fs::read_to_string(root.join("presets/profiles/h200-qwen3-30b-a3b-vllm.yaml"))
            .unwrap();
    for field in [
        "moe_layer_s:",
        "expert_memory_efficiency:",
        "eager_s_per_layer:",
        "held_out_median_ape:",
    ] {
        let line = |t: &str| {
            t.lines()
                .find(|l| l.trim_start().starts_with(field))
                .map(str::to_string)
        };
        assert_eq!(line(&text), line(&shipped), "{field}");
    }
    let o = serverbench(args("qwen3-8b"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("has no routed experts"),
        "{err}"
    );
}

/// A DeepSeek-V3-shaped mixture of experts (DeepSeek-R1's `config.json`) over 8 H200s in fp8 with
/// expert parallelism and data-parallel attention sweeps end to end and recommends; the field on a
/// dense model is refused naming it (issue 40).
#[test]
fn deepseek_with_data_parallel_attention_sweeps_over_eight_gpus() {
    let dir = tempdir("dp-attention");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf");
    std::fs::copy(fixtures.join("deepseek-r1.json"), dir.join("ds.json")).unwrap();
    let dep = dir.join("d.yaml");
    std::fs::write(
        &dep,
        "base: qwen3-8b-1xh200-vllm\nmodel: ds.json\ntp: 8\nweights: fp8\nengine:\n  expert_parallel: true\n  data_parallel_attention: true\n",
    )
    .unwrap();
    let o = serverbench([
        "sweep",
        "-d",
        dep.to_str().unwrap(),
        "-c",
        "1,8",
        "--seeds",
        "1",
        "-w",
        "60",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && text.contains("Recommendation"),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    dense_model_refuses(
        &dir,
        "tp: 2\nengine:\n  data_parallel_attention: true\n",
        "engine.data_parallel_attention",
    );
}

/// `simulate` of the dense `qwen3-8b-1xh200-vllm` with `overrides` is refused with exit code 2,
/// naming `field` and that the model has no routed experts.
fn dense_model_refuses(dir: &Path, overrides: &str, field: &str) {
    let dense = dir.join("dense.yaml");
    std::fs::write(&dense, format!("base: qwen3-8b-1xh200-vllm\n{overrides}")).unwrap();
    let o = serverbench([
        "simulate",
        "-d",
        dense.to_str().unwrap(),
        "-c",
        "1",
        "-w",
        "60",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(2)
            && err.contains(&format!("{field}: the model has no routed experts")),
        "{err}"
    );
}

/// `slo --corpus-draws N` freezes on N corpora of the spec (the same rows for every seed of a draw) and
/// takes the median over draws of each target; a trace or a protocol that draws sessions per seed is
/// refused by the flag's name.
#[test]
fn slo_over_corpus_draws_freezes_the_median_draw() {
    let o = serverbench([
        "slo",
        "-d",
        "qwen3.5-9b-2xl40",
        "--corpus-draws",
        "3",
        "--seeds",
        "2",
        "-w",
        "300",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(text.contains("3 corpus draws × 2 seeds"), "{text}");
    let draws: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[0].parse::<u64>().is_ok())
                .then(|| (f[1].parse().unwrap(), f[2].parse().unwrap()))
        })
        .collect();
    assert_eq!(draws.len(), 3, "{text}");
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[1]
    };
    let ttft = median(draws.iter().map(|d| d.0).collect());
    let tpot = median(draws.iter().map(|d| d.1).collect());
    let frozen =
        format!("τ_first = {ttft:.5} s, τ_token = {tpot:.4} ms (the median over corpus draws");
    assert!(text.contains(&frozen), "{frozen}\n{text}");
    // Draw 0 is the corpus every other command replays: its line is the plain freeze's.
    let plain = serverbench(["slo", "-d", "qwen3.5-9b-2xl40", "--seeds", "2", "-w", "300"]);
    let plain = String::from_utf8_lossy(&plain.stdout).to_string();
    assert!(
        plain.contains(&format!(
            "τ_first = {:.5} s, τ_token = {:.4} ms",
            draws[0].0, draws[0].1
        )),
        "{plain}"
    );
    for (extra, why) in [
        (
            vec!["--protocol", "cold"],
            "only the AgentX protocols replay a corpus",
        ),
        (
            vec![
                "--protocol",
                "agentx",
                "--trace",
                "tests/fixtures/weka/sample_trace_with_subagent.json",
            ],
            "a trace is its own corpus",
        ),
    ] {
        let mut args = vec!["slo", "--corpus-draws", "2", "--seeds", "1", "-w", "60"];
        args.extend(extra);
        let o = serverbench(args);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(&format!("--corpus-draws: {why}")), "{err}");
    }
}
