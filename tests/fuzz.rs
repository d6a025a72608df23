//! Property-based fuzzing of everything that reads untrusted text: every trace importer, the
//! configuration files (deployment, engine, profile, workload spec) and the SSE parser. Inputs are built
//! from the formats' own keys with hostile values (negative, huge, fractional, NaN-like, wrong types,
//! deep nesting, truncation), so most reach the importers' checks rather than the JSON parser. Each
//! property runs a bounded number of cases (CI's budget); none may panic, and every error names the
//! file. `serve`'s request parsing has its own in `backends/src/server/params.rs`.

use proptest::prelude::*;
use serde_json::{json, Value};
use serverbench_backends::sse::{SseEvent, SseParser};
use serverbench_workloads::{parse_spec, parse_trace, TraceFormat};

/// A hostile JSON scalar.
fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|v| json!(v)),
        (0u64..100_000).prop_map(|v| json!(v)),
        any::<f64>().prop_map(|v| json!(v)),
        Just(json!(1e30)),
        Just(json!(-1)),
        Just(json!(u64::MAX)),
        "[a-z0-9 ]{0,8}".prop_map(Value::String),
        Just(json!("NaN")),
    ]
}

/// A JSON value built from `keys` (the format's field names) and hostile scalars, nested a few deep.
fn value(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(keys), inner), 0..8).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// A record with every key of the format, some of them replaced by hostile values.
fn record(keys: &'static [&'static str], base: Value) -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(keys), value(keys)), 0..4).prop_map(move |subs| {
        let mut v = base.clone();
        for (k, x) in subs {
            v[k] = x;
        }
        v
    })
}

const MOONCAKE: &[&str] = &["timestamp", "input_length", "output_length", "hash_ids"];
const REQUESTS: &[&str] = &[
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "hash_ids",
    "block_size",
];
const BAILIAN: &[&str] = &[
    "chat_id",
    "parent_chat_id",
    "timestamp",
    "input_length",
    "output_length",
    "type",
    "turn",
    "hash_ids",
];
const WEKA: &[&str] = &[
    "id",
    "block_size",
    "hash_id_scope",
    "requests",
    "type",
    "t",
    "in",
    "out",
    "hash_ids",
    "think_time",
    "api_time",
    "status",
    "agent_id",
    "subagent_type",
];
const NATIVE: &[&str] = &[
    "session_id",
    "block_size",
    "requests",
    "id",
    "agent",
    "kind",
    "deps",
    "think_ns",
    "input_tokens",
    "output_tokens",
    "background",
    "turn",
    "blocks",
];

const CLAUDE: &[&str] = &[
    "parentUuid",
    "isSidechain",
    "type",
    "uuid",
    "timestamp",
    "sessionId",
    "requestId",
    "message",
    "usage",
    "input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
    "content",
    "id",
    "toolUseResult",
    "agentId",
    "subtype",
    "compactMetadata",
    "preTokens",
    "isCompactSummary",
];
const CODEX: &[&str] = &[
    "timestamp",
    "type",
    "payload",
    "session_meta",
    "event_msg",
    "token_count",
    "info",
    "last_token_usage",
    "total_token_usage",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "function_call_output",
    "role",
];
const TRAJECTORY: &[&str] = &[
    "trajectory",
    "history",
    "info",
    "role",
    "content",
    "query",
    "execution_time",
    "is_demo",
    "messages",
    "extra",
    "response",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "trajectory_format",
];
const CORPUS: &[&str] = &[
    "format",
    "version",
    "id",
    "source",
    "calls",
    "agent",
    "deps",
    "input",
    "output",
    "prefix",
    "app",
    "cached",
    "sent_s",
    "done_s",
    "think_s",
    "kind",
    "background",
];

/// Lines of records, sometimes cut short, sometimes with two on a line.
fn lines(records: impl Strategy<Value = Value>) -> impl Strategy<Value = String> {
    (
        prop::collection::vec(records, 1..6),
        0usize..3,
        any::<u16>(),
    )
        .prop_map(|(rs, how, cut)| {
            let mut text: String = rs.iter().map(|r| format!("{r}\n")).collect();
            match how {
                1 => text.truncate(cut as usize % (text.len() + 1)),
                2 => text = text.replace('\n', " "),
                _ => {}
            }
            text
        })
}

/// Parses `text` as `format` (and detected); on error the message names the file.
fn survives(text: &str, format: TraceFormat) {
    for f in [Some(format), None] {
        if let Err(e) = parse_trace("fuzz.jsonl", text, f) {
            assert_eq!(e.file, "fuzz.jsonl");
            assert!(!e.reason.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(crate::property_config(1024))]

    #[test]
    fn the_mooncake_importer_never_panics(text in lines(record(MOONCAKE, json!({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]})))) {
        survives(&text, TraceFormat::MOONCAKE);
    }

    #[test]
    fn the_requests_importer_never_panics(text in lines(record(REQUESTS, json!({"arrival_s": 1.5, "input_tokens": 40, "output_tokens": 5, "block_size": 16, "hash_ids": [1, 2]})))) {
        survives(&text, TraceFormat::REQUESTS);
    }

    #[test]
    fn the_bailian_importer_never_panics(text in lines(record(BAILIAN, json!({"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 40, "output_length": 5, "turn": 1, "hash_ids": [1, 2]})))) {
        survives(&text, TraceFormat::BAILIAN);
    }

    #[test]
    fn the_weka_importer_never_panics(text in lines(record(WEKA, json!({"id": "x", "block_size": 64, "requests": [
        {"type": "n", "t": 0.0, "in": 130, "out": 5, "hash_ids": [1, 2]},
        {"type": "subagent", "t": 1.0, "status": "completed", "requests": [{"t": 1.0, "in": 70, "out": 2, "hash_ids": [3]}]},
        {"type": "n", "t": 2.0, "in": 200, "out": 5, "hash_ids": [1, 2, 4], "api_time": 0.5}
    ]})))) {
        survives(&text, TraceFormat::WEKA);
    }

    #[test]
    fn the_native_importer_never_panics(text in lines(record(NATIVE, json!({"session_id": 0, "block_size": 64, "requests": [
        {"id": 0, "agent": 0, "kind": "root_turn", "deps": [], "think_ns": 0, "input_tokens": 130, "output_tokens": 5, "background": false, "turn": 0, "blocks": [1, 2]}
    ]})))) {
        survives(&text, TraceFormat::NATIVE);
    }

    #[test]
    fn the_claude_code_importer_never_panics(text in lines(record(CLAUDE, json!({"parentUuid": "u1", "isSidechain": false, "type": "assistant", "uuid": "a1", "timestamp": "2026-01-05T10:00:02.000Z", "sessionId": "s", "requestId": "r",
        "message": {"id": "m1", "model": "x", "content": [{"type": "tool_use", "id": "t1", "input": {}}], "usage": {"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": 5}},
        "toolUseResult": {"agentId": "a", "status": "completed"}, "agentId": "a", "subtype": "compact_boundary", "compactMetadata": {"preTokens": 120, "postTokens": 10, "durationMs": 5}})))) {
        survives(&text, TraceFormat::CLAUDE_CODE);
    }

    #[test]
    fn the_codex_importer_never_panics(text in lines(record(CODEX, json!({"timestamp": "2026-09-21T11:14:20.000Z", "type": "event_msg",
        "payload": {"type": "token_count", "id": "s", "role": "user", "info": {"total_token_usage": {"input_tokens": 9},
        "last_token_usage": {"input_tokens": 12, "cached_input_tokens": 4, "output_tokens": 3}}}})))) {
        survives(&text, TraceFormat::CODEX);
    }

    #[test]
    fn the_trajectory_importer_never_panics(text in lines(record(TRAJECTORY, json!({"trajectory": [{"action": "ls", "execution_time": 1.5, "query": [{"role": "system", "content": "s"}]}], "info": {},
        "history": [{"role": "system", "content": "s"}, {"role": "user", "content": "t"}, {"role": "assistant", "content": [{"type": "text", "text": "a"}], "tool_calls": [{"id": 1}]}],
        "trajectory_format": "mini-swe-agent-1", "messages": [{"role": "assistant", "content": "x", "extra": {"response": {"usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}}}]})))) {
        survives(&text, TraceFormat::TRAJECTORY);
    }

    #[test]
    fn the_corpus_importer_never_panics(text in lines(record(CORPUS, json!({"format": "serverbench-corpus", "version": 1, "id": "a", "source": "s", "calls": [
        {"agent": 0, "deps": [], "input": 130, "output": 5, "app": 64, "sent_s": 0.0, "think_s": 0.0},
        {"agent": 1, "deps": [0], "input": 70, "output": 2, "cached": 10, "background": true},
        {"agent": 0, "deps": [0, 1], "input": 200, "output": 5, "prefix": [0, 128], "kind": "compaction"}
    ]})))) {
        survives(&text, TraceFormat::CORPUS);
    }

    #[test]
    fn arbitrary_bytes_never_panic_an_importer(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        for f in TraceFormat::all() {
            let _ = parse_trace("bytes", &text, Some(f));
        }
    }
}

/// YAML of `keys` with hostile values, nested.
fn yaml(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    value(keys).prop_map(|v| serde_yaml::to_string(&v).unwrap_or_default())
}

const DEPLOYMENT: &[&str] = &[
    "base",
    "name",
    "model",
    "hardware",
    "profile",
    "tp",
    "dp",
    "router",
    "weights",
    "quant_group_size",
    "state_dtype",
    "context_limit",
    "prices",
    "input_per_m",
    "output_per_m",
    "gpu_hour_dollars",
    "slo",
    "ttft_s",
    "tpot_s",
    "engine",
    "policy",
    "block_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "gpu_memory_utilization",
    "preemption",
    "speculative",
    "k",
    "acceptance",
    "method",
    "draft_params",
    "layers",
    "hidden",
    "memory_bandwidth",
    "gemm_efficiency",
];
const SPEC: &[&str] = &[
    "profile",
    "block_size",
    "system_prefix_tokens",
    "first_prompt_tokens",
    "root_turns",
    "output_tokens",
    "tool_result_tokens",
    "think_time_s",
    "subagents",
    "compaction",
    "dist",
    "value",
    "median",
    "sigma",
    "min",
    "max",
    "low",
    "high",
    "p",
    "offset",
    "fanout",
    "turns",
    "spawn_probability",
    "background_fraction",
    "context_fraction",
    "max_tokens",
    "summary_tokens",
];

proptest! {
    #![proptest_config(crate::property_config(1024))]

    #[test]
    fn deployment_files_never_panic(text in yaml(DEPLOYMENT)) {
        match serverbench_sim::Deployment::from_yaml("d.yaml", &text) {
            Ok(d) => {
                // A file that reads is a deployment that can run: its numbers pass every check.
                prop_assert!(d.check().is_ok());
                prop_assert!(d.gpus() >= 1);
            }
            Err(e) => prop_assert_eq!(e.file, "d.yaml"),
        }
        let base = serverbench_sim::Deployment::preset("qwen3-8b-1xh200").unwrap();
        if let Err(e) = base.with_engine_yaml("e.yaml", &text) {
            prop_assert_eq!(e.file, "e.yaml");
        }
        if let Err(e) = serverbench_calibration::Profile::from_yaml("p.yaml", &text) {
            prop_assert_eq!(e.file, "p.yaml");
        }
    }

    #[test]
    fn workload_specs_never_panic_and_the_valid_ones_generate(text in yaml(SPEC)) {
        match parse_spec("w.yaml", &text) {
            Ok(spec) => {
                if let Ok(g) = serverbench_workloads::Generator::new(spec, 1, 131_072) {
                    let t = serverbench_workloads::TreeSource::tree(&g, 0);
                    prop_assert!(!t.requests().is_empty());
                }
            }
            Err(e) => prop_assert_eq!(e.file, "w.yaml"),
        }
    }

    #[test]
    fn the_sse_parser_gives_the_same_events_however_the_bytes_are_cut(
        events in prop::collection::vec(("[a-z{}\":0-9 ]{0,12}", 0usize..3), 0..8),
        cuts in prop::collection::vec(1usize..9, 1..30),
        noise in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let seps = ["\n\n", "\r\n\r\n", "\r\r"];
        let mut text = String::new();
        for (data, sep) in &events {
            text.push_str(": keep-alive\n");
            text.push_str(&format!("data: {data}{}", seps[*sep]));
        }
        let whole = feed_all(text.as_bytes(), &[text.len().max(1)]);
        let pieces = feed_all(text.as_bytes(), &cuts);
        prop_assert_eq!(&whole, &pieces);
        prop_assert_eq!(whole.len(), events.len(), "one event per data line");
        // Arbitrary bytes never panic it.
        let mut p = SseParser::new();
        let _ = p.feed(&noise, &mut Vec::new());
    }
}

/// Feeds `bytes` to a parser in pieces of the sizes in `cuts` (cycled).
fn feed_all(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    let (mut at, mut i) = (0, 0);
    while at < bytes.len() {
        let n = cuts[i % cuts.len()].min(bytes.len() - at);
        p.feed(&bytes[at..at + n], &mut out).unwrap();
        at += n;
        i += 1;
    }
    out
}
