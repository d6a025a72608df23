//! Importers against the real samples and against malformed input.

use crate::fixture;
use serde_json::Value;
use serverbench_workloads::{
    parse_trace, read_trace, write_native, InputError, RequestKind, TraceFormat, TreeSource,
};

/// (requests, sub-agents, background sub-agents) counted straight from the JSON.
fn weka_counts(v: &Value) -> (usize, usize, usize) {
    let mut c = (0, 0, 0);
    for r in v["requests"].as_array().unwrap() {
        if r["type"] == "subagent" {
            let (a, b, d) = weka_counts(r);
            c = (
                c.0 + a,
                c.1 + b + 1,
                c.2 + d + usize::from(r["status"] == "async_launched"),
            );
        } else {
            c.0 += 1;
        }
    }
    c
}

#[test]
fn weka_samples_import_with_the_source_counts() {
    for name in [
        "weka/sample_trace.json",
        "weka/sample_trace_with_subagent.json",
    ] {
        let path = fixture(name);
        let raw: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let (requests, subagents, background) = weka_counts(&raw);
        let trace = read_trace(&path, None).unwrap();
        assert_eq!(trace.trees().len(), 1, "{name}");
        let t = &trace.trees()[0];
        assert_eq!(t.len(), requests, "{name}: requests");
        assert_eq!(t.agents() - 1, subagents, "{name}: sub-agents");
        let bg_agents: std::collections::HashSet<u32> = t
            .requests()
            .iter()
            .filter(|r| r.background)
            .map(|r| r.agent)
            .collect();
        assert_eq!(bg_agents.len(), background, "{name}: background sub-agents");
        assert_eq!(t.block_size, 64);
        let inputs: u64 = t.requests().iter().map(|r| r.input_tokens as u64).sum();
        let want = raw
            .get("totals")
            .map(|x| x["combined_tokens"]["input"].as_u64().unwrap());
        if let Some(want) = want {
            assert_eq!(inputs, want, "{name}: input tokens conserved");
        }
    }
}

#[test]
fn weka_subagents_join_their_parent() {
    let trace = read_trace(&fixture("weka/sample_trace_with_subagent.json"), None).unwrap();
    let t = &trace.trees()[0];
    let roots: Vec<_> = t
        .requests()
        .iter()
        .filter(|r| r.kind == RequestKind::RootTurn)
        .collect();
    assert_eq!(roots.len(), 6);
    // As AgentX joins them: each sub-agent's last request gates the first root turn that starts after
    // the sub-agent ended (two pairs, spawned together, ending before two successive root turns).
    let joins: Vec<Vec<u32>> = roots
        .iter()
        .map(|r| {
            r.deps
                .iter()
                .map(|&d| t.requests()[d as usize].agent)
                .filter(|&a| a > 0)
                .collect()
        })
        .filter(|a: &Vec<u32>| !a.is_empty())
        .collect();
    assert_eq!(joins, vec![vec![1, 2], vec![3, 4]]);
    let rec = t.recorded().unwrap();
    for r in t
        .requests()
        .iter()
        .filter(|r| r.kind == RequestKind::RootTurn)
    {
        for &d in r
            .deps
            .iter()
            .filter(|&&d| t.requests()[d as usize].agent > 0)
        {
            assert!(
                rec.start_ns[r.id as usize] >= rec.end_ns(d),
                "joins after the sub-agent ended"
            );
        }
    }
    // Sub-agents share only the global prefix with the root: their first block differs from the root's.
    let sub_first = t.requests().iter().find(|r| r.agent == 1).unwrap();
    assert_ne!(
        sub_first.blocks.as_slice()[0],
        roots[0].blocks.as_slice()[0]
    );
    // Consecutive root turns share a growing prefix.
    assert_eq!(
        roots[1].blocks.as_slice()[..300],
        roots[0].blocks.as_slice()[..300]
    );
}

#[test]
fn mooncake_sample_imports_every_line() {
    let path = fixture("mooncake/sample_200.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let trace = read_trace(&path, None).unwrap();
    assert_eq!(trace.trees().len(), text.lines().count());
    for (t, line) in trace.trees().iter().zip(text.lines()) {
        let v: Value = serde_json::from_str(line).unwrap();
        let r = &t.requests()[0];
        assert_eq!(r.input_tokens as u64, v["input_length"].as_u64().unwrap());
        assert_eq!(r.output_tokens as u64, v["output_length"].as_u64().unwrap());
        assert_eq!(
            r.blocks.len() as u64,
            v["input_length"].as_u64().unwrap() / 512,
            "the partial last block is not cacheable"
        );
    }
    // Shared leading ids stay shared after re-chaining.
    let (a, b) = (
        &trace.trees()[0].requests()[0],
        &trace.trees()[1].requests()[0],
    );
    assert_eq!(a.blocks.as_slice()[0], b.blocks.as_slice()[0]);
    assert_ne!(a.blocks.as_slice()[1], b.blocks.as_slice()[1]);
}

#[test]
fn bailian_fixture_forms_trees_by_parent() {
    let trace = read_trace(&fixture("bailian_small.jsonl"), None).unwrap();
    assert_eq!(trace.trees().len(), 2);
    let (a, b) = (&trace.trees()[0], &trace.trees()[1]);
    assert_eq!((a.len(), b.len()), (3, 2));
    assert_eq!(a.requests()[1].deps, vec![0]);
    assert_eq!(a.requests()[1].think_ns, 3_250_000_000);
    assert_eq!(a.requests()[2].blocks.len(), 7);
    assert_eq!(
        a.requests()[2].blocks.as_slice()[..4],
        a.requests()[1].blocks.as_slice()[..4]
    );
    assert_eq!(a.block_size, 16);
}

#[test]
fn native_format_round_trips_exactly() {
    for source in [
        read_trace(&fixture("weka/sample_trace_with_subagent.json"), None).unwrap(),
        read_trace(&fixture("bailian_small.jsonl"), None).unwrap(),
    ] {
        let mut bytes = Vec::new();
        write_native(source.trees().to_vec(), &mut bytes).unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let back = parse_trace("x.jsonl", &text, None).unwrap();
        assert_eq!(back.trees(), source.trees());
        let mut again = Vec::new();
        write_native(back.trees().to_vec(), &mut again).unwrap();
        assert_eq!(again, bytes);
    }
    let g = serverbench_workloads::Generator::new(Default::default(), 4, 1_048_576).unwrap();
    let trees: Vec<_> = (0..20).map(|k| g.tree(k)).collect();
    let mut bytes = Vec::new();
    write_native(trees.clone(), &mut bytes).unwrap();
    let back = parse_trace(
        "g.jsonl",
        std::str::from_utf8(&bytes).unwrap(),
        Some(TraceFormat::NATIVE),
    )
    .unwrap();
    assert!(back.trees().iter().zip(&trees).all(|(a, b)| **a == **b));
}

fn err(format: Option<TraceFormat>, text: &str) -> InputError {
    parse_trace("bad.jsonl", text, format).expect_err("malformed input must be rejected")
}

#[test]
fn malformed_inputs_name_file_line_and_field() {
    let cases: Vec<(Option<TraceFormat>, String, usize, &str, &str)> = vec![
        // Mooncake: negative count, missing field, chain longer than the input, truncated JSON.
        (None, "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [1]}\n{\"timestamp\": 1, \"input_length\": -3, \"output_length\": 5, \"hash_ids\": []}".into(), 2, "input_length", "invalid value"),
        (Some(TraceFormat::MOONCAKE), "{\"timestamp\": 0, \"input_length\": 100, \"hash_ids\": []}".into(), 1, "", "output_length"),
        (None, "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 5, \"hash_ids\": [1, 2, 3]}".into(), 1, "hash_ids", "exceed"),
        (Some(TraceFormat::MOONCAKE), "{\"timestamp\": 0, \"input_length\": 6".into(), 1, "", "EOF"),
        // Weka: negative count, missing field, a chain longer than in / block_size, truncated JSON.
        (None, "{\"requests\": [{\"type\": \"n\", \"t\": 0, \"in\": 128, \"out\": 5}, {\"type\": \"n\", \"t\": 1, \"in\": -1, \"out\": 5}]}".into(), 1, "requests[1].in", "non-negative"),
        (None, "{\"requests\": [{\"type\": \"n\", \"t\": 0, \"in\": 128}]}".into(), 1, "requests[0].out", "missing"),
        (None, "{\"requests\": [{\"type\": \"n\", \"in\": 128, \"out\": 5}]}".into(), 1, "requests[0].t", "missing"),
        (None, "{\"block_size\": 64, \"requests\": [{\"type\": \"n\", \"t\": 0, \"in\": 100, \"out\": 5, \"hash_ids\": [1, 2]}]}".into(), 1, "requests[0].hash_ids", "exceed"),
        (Some(TraceFormat::WEKA), "{\"requests\": [{\"type\": \"n\", \"in\": 1".into(), 1, "", "malformed JSON"),
        // Weka: a declared prefix that is not a count, at the trace and in a sub-agent.
        (None, "{\"system_tokens\": -5, \"requests\": [{\"type\": \"n\", \"t\": 0, \"in\": 128, \"out\": 5}]}".into(), 1, "system_tokens", "non-negative"),
        (None, "{\"requests\": [{\"type\": \"subagent\", \"t\": 0, \"agent_id\": \"a\", \"tool_tokens\": \"many\", \"requests\": [{\"type\": \"n\", \"t\": 0, \"in\": 5, \"out\": 1}]}]}".into(), 1, "requests[0].tool_tokens", "non-negative"),
        // Weka: what AgentX refuses: a sub-agent's agent_id used twice, a subagent_type that is no string.
        (None, "{\"requests\": [{\"t\": 0, \"in\": 5, \"out\": 1}, {\"type\": \"subagent\", \"t\": 1, \"agent_id\": \"a\", \"requests\": [{\"t\": 1, \"in\": 5, \"out\": 1}]}, {\"type\": \"subagent\", \"t\": 2, \"agent_id\": \"a\", \"requests\": [{\"t\": 2, \"in\": 5, \"out\": 1}]}]}".into(), 1, "requests[2].agent_id", "duplicate"),
        (None, "{\"requests\": [{\"t\": 0, \"in\": 5, \"out\": 1}, {\"type\": \"subagent\", \"t\": 1, \"agent_id\": \"a\", \"subagent_type\": 3, \"requests\": []}]}".into(), 1, "requests[1].subagent_type", "string"),
        (None, "{\"requests\": [{\"t\": 0, \"in\": 5, \"out\": 1, \"api_time\": -2}]}".into(), 1, "requests[0].api_time", "non-negative"),
        // Bailian: unknown parent.
        (None, "{\"chat_id\": 1, \"parent_chat_id\": 7, \"timestamp\": 0, \"input_length\": 5, \"output_length\": 5, \"hash_ids\": []}".into(), 1, "parent_chat_id", "earlier line"),
        // Mooncake: a negative timestamp.
        (None, "{\"timestamp\": -4, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": []}".into(), 1, "timestamp", "non-negative"),
        // Requests: a negative arrival, no output length, a zero block size, a chain too long, NaN-like text.
        (None, "{\"arrival_s\": 0, \"input_tokens\": 10, \"output_tokens\": 2}\n{\"arrival_s\": -1, \"input_tokens\": 10, \"output_tokens\": 2}".into(), 2, "arrival_s", "non-negative"),
        (None, "{\"arrival_s\": 0, \"input_tokens\": 10}".into(), 1, "", "output_tokens"),
        (None, "{\"arrival_s\": 0, \"input_tokens\": 10, \"output_tokens\": 0}".into(), 1, "output_tokens", "at least 1"),
        (None, "{\"arrival_s\": 0, \"input_tokens\": 10, \"output_tokens\": 3, \"block_size\": 0}".into(), 1, "block_size", "between 1"),
        (None, "{\"arrival_s\": 0, \"input_tokens\": 20, \"output_tokens\": 3, \"hash_ids\": [1, 2]}".into(), 1, "hash_ids", "exceed"),
        (Some(TraceFormat::REQUESTS), "{\"arrival_s\": \"soon\", \"input_tokens\": 20, \"output_tokens\": 3}".into(), 1, "arrival_s", "invalid type"),
        // Native: a dependency that is not earlier.
        (
            Some(TraceFormat::NATIVE),
            "{\"session_id\": 0, \"block_size\": 64, \"requests\": [{\"id\": 0, \"agent\": 0, \"kind\": \"root_turn\", \"deps\": [3], \"think_ns\": 0, \"input_tokens\": 5, \"output_tokens\": 1, \"background\": false, \"turn\": 0, \"blocks\": []}]}".into(),
            1,
            "",
            "deps",
        ),
    ];
    for (format, text, line, field, reason) in cases {
        let e = err(format, &text);
        assert_eq!(e.file, "bad.jsonl");
        assert_eq!(e.line, line, "{e}");
        assert_eq!(e.field, field, "{e}");
        assert!(
            e.reason.contains(reason) || e.to_string().contains(reason),
            "{e} should mention {reason:?}"
        );
    }
}

#[test]
fn weka_jsonl_corpus_reports_the_line_of_the_bad_trace() {
    let good = std::fs::read_to_string(fixture("weka/sample_trace.json")).unwrap();
    let other = good.replacen("\"02f3098e-6bc\"", "\"another\"", 1);
    let text = format!(
        "{good}\n{other}\n{{\"requests\": [{{\"type\": \"n\", \"t\": 0, \"in\": 3, \"out\": -2}}]}}\n"
    );
    let e = err(None, &text);
    let lines = good.lines().count();
    assert_eq!(
        (e.line, e.field.as_str()),
        (2 * lines + 1, "requests[0].out")
    );
    assert_eq!(
        parse_trace("ok.jsonl", &format!("{good}\n{other}\n"), None)
            .unwrap()
            .trees()
            .len(),
        2
    );
    // AgentX refuses a trace id used twice: so do we, naming both lines.
    let e = err(None, &format!("{good}\n{good}\n"));
    assert_eq!((e.line, e.field.as_str()), (lines + 1, "id"));
    assert!(e.reason.contains("duplicate trace id"), "{e}");
}

/// Sub-agents nested past what the JSON reader takes are "nesting too deep", with the limit, file and
/// line (they were "malformed JSON"); one level less still imports.
#[test]
fn weka_subagents_nested_too_deep_say_so() {
    fn nested(levels: usize) -> String {
        let mut agent = String::from("[{\"t\": 0, \"in\": 100, \"out\": 5, \"hash_ids\": [1]}]");
        for n in 0..levels {
            agent = format!(
                "[{{\"t\": 0, \"in\": 100, \"out\": 5, \"hash_ids\": [1]}}, {{\"type\": \"subagent\", \"t\": 0, \"agent_id\": \"a{n}\", \"requests\": {agent}}}]"
            );
        }
        format!("{{\"requests\": {agent}}}")
    }
    let limit = serverbench_workloads::import::MAX_SUBAGENT_DEPTH;
    let ok = parse_trace("ok.json", &nested(limit), None).unwrap();
    assert_eq!(ok.trees()[0].requests().len(), limit + 1);
    let text = format!("{}\n{}\n", nested(1), nested(limit + 1));
    let e = parse_trace("deep.jsonl", &text, None).unwrap_err();
    assert_eq!((e.file.as_str(), e.line), ("deep.jsonl", 2), "{e}");
    assert!(
        e.reason.contains("nesting too deep") && e.reason.contains(&limit.to_string()),
        "{e}"
    );
    assert!(!e.reason.contains("malformed"), "{e}");
}

/// `workload export --format aiperf`: one line per request in session order, AIPerf's field names, equal
/// blocks under equal small ids, think times as delays in ms.
#[test]
fn the_aiperf_export_keeps_requests_shares_and_think_times() {
    let g = serverbench_workloads::Generator::new(
        serverbench_workloads::WorkloadSpec::synthetic_v1(),
        4,
        1_048_576,
    )
    .unwrap();
    let trees: Vec<_> = (0..3)
        .map(|k| serverbench_workloads::TreeSource::tree(&g, k))
        .collect();
    let mut out = Vec::new();
    serverbench_workloads::write_aiperf(trees.iter().cloned(), &mut out).unwrap();
    let lines: Vec<serde_json::Value> = std::str::from_utf8(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let requests: Vec<_> = trees
        .iter()
        .flat_map(|t| t.requests().iter().map(move |r| (t.clone(), r.clone())))
        .collect();
    assert_eq!(lines.len(), requests.len());
    let mut by_block: std::collections::HashMap<u64, u64> = Default::default();
    for (line, (_, r)) in lines.iter().zip(&requests) {
        assert_eq!(line["input_length"], r.input_tokens);
        assert_eq!(line["output_length"], r.output_tokens);
        match r.id {
            0 => assert!(line.get("delay").is_none()),
            _ => assert_eq!(line["delay"], r.think_ns / 1_000_000),
        }
        let ids = line["hash_ids"].as_array().unwrap();
        assert_eq!(ids.len(), r.blocks.len());
        for (id, block) in ids.iter().zip(r.blocks.as_slice()) {
            let id = id.as_u64().unwrap();
            assert_eq!(
                *by_block.entry(*block).or_insert(id),
                id,
                "one id per block, everywhere"
            );
        }
    }
    let sessions: std::collections::BTreeSet<&str> = lines
        .iter()
        .map(|l| l["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(sessions.len(), 3);
    assert!(
        by_block.values().all(|&id| id < by_block.len() as u64),
        "ids are 0, 1, 2, …"
    );
}

/// `workload export --format weka` read back by the Weka importer is the same workload: every request's
/// tokens, think time, background flag and dependencies (renumbered in the order written), and the same
/// prefix sharing (equal blocks, equal ids, across trees); sub-agents nested where they were spawned.
#[test]
fn the_weka_export_reads_back_as_the_same_trees() {
    let g = serverbench_workloads::Generator::new(
        serverbench_workloads::WorkloadSpec::synthetic_v1(),
        7,
        1_048_576,
    )
    .unwrap();
    let trees: Vec<_> = (0..40)
        .map(|k| serverbench_workloads::TreeSource::tree(&g, k))
        .collect();
    let mut out = Vec::new();
    serverbench_workloads::write_weka(trees.iter().cloned(), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("\"type\":\"subagent\""),
        "the sample has sub-agents"
    );
    let back = serverbench_workloads::parse_trace(
        "export.jsonl",
        &text,
        Some(serverbench_workloads::TraceFormat::WEKA),
    )
    .unwrap();
    assert_eq!(
        serverbench_workloads::TreeSource::finite_len(&back),
        Some(trees.len() as u64)
    );
    let mut ours_to_theirs: std::collections::HashMap<u64, u64> = Default::default();
    for (k, t) in trees.iter().enumerate() {
        let b = serverbench_workloads::TreeSource::tree(&back, k as u64);
        assert_eq!(b.requests().len(), t.requests().len(), "tree {k}");
        // The importer numbers requests in the order written: each agent's requests, sub-agents after
        // the request that spawned them. Match them by that walk.
        let mut order = Vec::new();
        fn walk(t: &serverbench_workloads::SessionTree, agent: u32, order: &mut Vec<u32>) {
            for r in t.requests().iter().filter(|r| r.agent == agent) {
                order.push(r.id);
                let mut spawned = Vec::new();
                for s in t.requests() {
                    let first =
                        t.requests().iter().find(|x| x.agent == s.agent).unwrap().id == s.id;
                    if s.agent != agent
                        && first
                        && s.deps.first() == Some(&r.id)
                        && !spawned.contains(&s.agent)
                    {
                        spawned.push(s.agent);
                    }
                }
                for a in spawned {
                    walk(t, a, order);
                }
            }
        }
        walk(t, 0, &mut order);
        let mut position = vec![0u32; order.len()];
        for (i, &id) in order.iter().enumerate() {
            position[id as usize] = i as u32;
        }
        // A sub-agent nothing waits for runs in the background as a reader sees it.
        let reqs = t.requests();
        let waited_for = |agent: u32| {
            reqs.iter().any(|r| {
                r.agent != agent
                    && reqs.iter().find(|x| x.agent == r.agent).unwrap().id != r.id
                    && r.deps.iter().any(|&d| reqs[d as usize].agent == agent)
            })
        };
        for (i, &id) in order.iter().enumerate() {
            let (o, n) = (&t.requests()[id as usize], &b.requests()[i]);
            let background = o.background || (o.agent > 0 && !waited_for(o.agent));
            assert_eq!(
                (o.input_tokens, o.output_tokens, background),
                (n.input_tokens, n.output_tokens, n.background),
                "tree {k} request {id}"
            );
            // A turn that joins sub-agents is timed from its own agent's previous turn when read
            // back (AgentX's rule), so its gap holds the wait for the sub-agents too.
            let joins = o.deps.len() > 1;
            assert!(
                o.think_ns.abs_diff(n.think_ns) <= 1 || (joins && n.think_ns >= o.think_ns),
                "tree {k} request {id}: think {} vs {}",
                o.think_ns,
                n.think_ns
            );
            let mut want: Vec<u32> = o.deps.iter().map(|&d| position[d as usize]).collect();
            let mut got = n.deps.clone();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(want, got, "tree {k} request {id}: dependencies");
            assert_eq!(
                (o.agent == 0),
                (n.agent == 0),
                "tree {k} request {id}: root or sub-agent"
            );
            assert_eq!(o.blocks.len(), n.blocks.len());
            for (x, y) in o.blocks.as_slice().iter().zip(n.blocks.as_slice()) {
                assert_eq!(
                    *ours_to_theirs.entry(*x).or_insert(*y),
                    *y,
                    "one block, one id"
                );
            }
        }
    }
}

/// A tree whose dependencies a Weka trace cannot say is refused, naming the tree and the request.
#[test]
fn the_weka_export_refuses_what_the_format_cannot_say() {
    use serverbench_workloads::{Blocks, Request, SessionTree};
    let req = |id: u32, agent: u32, deps: Vec<u32>| Request {
        id,
        agent,
        kind: RequestKind::turn_of(agent),
        deps,
        think_ns: 0,
        input_tokens: 100,
        output_tokens: 10,
        background: false,
        turn: 0,
        blocks: Blocks::from_vec(vec![]),
    };
    // The parent's next turn waits for the sub-agent's first request, not for its end.
    let t = SessionTree::new(
        0,
        64,
        vec![
            req(0, 0, vec![]),
            req(1, 1, vec![0]),
            req(2, 1, vec![1]),
            req(3, 0, vec![0, 1]),
        ],
    )
    .unwrap();
    let e = serverbench_workloads::write_weka([std::sync::Arc::new(t)], Vec::new()).unwrap_err();
    assert!(e.to_string().contains("tree 0: request 3"), "{e}");
    // A sub-agent nothing waits for is written as one running in the background, and reads back so.
    let t = SessionTree::new(
        0,
        64,
        vec![req(0, 0, vec![]), req(1, 1, vec![0]), req(2, 0, vec![0])],
    )
    .unwrap();
    let mut out = Vec::new();
    serverbench_workloads::write_weka([std::sync::Arc::new(t)], &mut out).unwrap();
    let back = parse_trace("x.jsonl", &String::from_utf8(out).unwrap(), None).unwrap();
    assert!(back.trees()[0].requests()[1].background);
}

/// A closed loop replaying a trace runs out of trees (here: two lanes, one tree). Repeated `same`, the
/// second lane finds the first lane's prompts cached; repeated `fresh`, each repeat is a new session and
/// hits the cache as much as the trace's own prompts reuse each other (what `workload stats` calls
/// prefix reuse), plus the application prefix the trace declares.
#[test]
fn a_trace_repeated_fresh_hits_the_cache_as_a_new_session_would() {
    use serverbench_sim::{simulate, Deployment, Protocol, RunConfig};
    use serverbench_workloads::{workload_stats, Trace, TraceRepeat, Workload};
    let trace = read_trace(&fixture("weka/sample_trace.json"), None).unwrap();
    let reuse = workload_stats(trace.trees().iter().map(|t| &**t)).prefix_reuse_ratio;
    let undeclared = Trace::new(vec![(*trace.trees()[0]).clone().with_app_prefix(vec![])]).unwrap();
    let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
    let cfg = RunConfig {
        protocol: Protocol::Cold,
        ..RunConfig::new(2, 0, 600.0)
    };
    let hit = |trace: &Trace, repeat| {
        let w = Workload::trace(trace.clone(), repeat);
        let out = simulate(&d, &d.cost_model(), &*w.source(0, 1_048_576).unwrap(), &cfg).unwrap();
        assert!(
            out.records.len() > 12,
            "the tree repeats: {}",
            out.records.len()
        );
        out.summary.prefix_hit_rate
    };
    let bare = hit(&undeclared, TraceRepeat::Fresh);
    assert!(
        (bare - reuse).abs() < 0.02,
        "fresh {bare} against the trace's reuse {reuse}"
    );
    let fresh = hit(&trace, TraceRepeat::Fresh);
    assert!(
        fresh > bare + 0.03,
        "the declared prefix hits: {fresh} against {bare}"
    );
    let same = hit(&trace, TraceRepeat::Same);
    assert!(same > fresh + 0.05, "same {same} against fresh {fresh}");
}

/// Fresh repeats keep what the trace's agents share (the four sub-agents of the Claude Code session
/// start with one system prompt) and what it declares the application's (the root's system + tools
/// prompt), and re-salt the rest (the root shares nothing with the sub-agents); they are
/// the same for the same seed and differ between seeds (each seed starts its lanes at another tree).
#[test]
fn fresh_repeats_keep_what_agents_share_and_follow_the_seed() {
    use serverbench_sim::{simulate, Deployment, Protocol, RunConfig};
    use serverbench_workloads::{RequestKind, SharedIds, TraceRepeat, Workload};
    let trace = read_trace(&fixture("weka/sample_trace_with_subagent.json"), None).unwrap();
    let tree = &trace.trees()[0];
    let shared = SharedIds::of(trace.trees());
    let first_of = |t: &serverbench_workloads::SessionTree, agent| {
        t.requests()
            .iter()
            .find(|r| r.agent == agent)
            .unwrap()
            .blocks
            .clone()
    };
    let sub_ids: std::collections::HashSet<u64> = tree
        .requests()
        .iter()
        .filter(|r| r.agent > 0)
        .flat_map(|r| r.blocks.as_slice().iter().copied())
        .collect();
    assert!(first_of(tree, 0)
        .as_slice()
        .iter()
        .all(|id| !sub_ids.contains(id)));
    let sub = tree
        .requests()
        .iter()
        .find(|r| r.kind == RequestKind::SubagentTurn)
        .unwrap();
    let common = sub
        .blocks
        .as_slice()
        .iter()
        .take_while(|&&id| shared.contains(id))
        .count();
    assert!(
        common > 100,
        "the sub-agents' system prompt: {common} blocks"
    );
    let again = Workload::trace(trace.clone(), TraceRepeat::Fresh)
        .source(0, 1_048_576)
        .unwrap()
        .tree(1);
    // The root declares 5,930 system + 14,901 tool tokens: its first 325 blocks are the application's.
    let (root, root_again) = (first_of(tree, 0), first_of(&again, 0));
    assert_eq!(root.as_slice()[..325], root_again.as_slice()[..325]);
    assert!(root.as_slice()[325..]
        .iter()
        .zip(&root_again.as_slice()[325..])
        .all(|(a, b)| a != b));
    assert!(
        tree.app_prefix().len() > 325,
        "the root's and the sub-agents' declared prefixes"
    );
    let sub_again = first_of(&again, sub.agent);
    assert_eq!(
        sub_again.as_slice()[..common],
        sub.blocks.as_slice()[..common]
    );
    assert!(sub_again.as_slice()[common..] != sub.blocks.as_slice()[common..]);

    let trace = read_trace(&fixture("mooncake/sample_200.jsonl"), None).unwrap();
    let w = Workload::trace(trace, TraceRepeat::Fresh);
    let d = Deployment::preset("gemma4-e4b-1xl40").unwrap();
    let run = |seed| {
        let cfg = RunConfig {
            protocol: Protocol::Cold,
            ..RunConfig::new(3, seed, 300.0)
        };
        simulate(
            &d,
            &d.cost_model(),
            &*w.source(seed, 131_072).unwrap(),
            &cfg,
        )
        .unwrap()
        .records
    };
    assert_eq!(run(0), run(0), "same seed, same records");
    assert_ne!(run(0), run(1), "another seed starts at another tree");
}
