//! The AgentX protocol against AgentX itself: the streams, branches, joins, delays and barriers our
//! importer builds, and the lanes, start points, live streams and primer schedule our replay plans,
//! compared with what AgentX 1.0.12's own code planned for the same traces, seed and concurrency
//! (`scripts/agentx/reference_plan.py` wrote the fixtures from the installed wheel).

use serde_json::Value;
use serverbench_sim::{AgentxParams, Arrivals, Protocol, Replay, ReplayConfig, Time};
use serverbench_workloads::{import, Recorded, SessionTree, TraceFormat};
use std::path::PathBuf;
use std::sync::Arc;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/weka-kvt")
        .join(rel)
}

/// The four kv-cache-tester traces with sub-agents, in the order AgentX reads a directory (by name).
const FOUR: [&str; 4] = ["trace_0274", "trace_0277", "trace_0282", "trace_0291"];
/// A trace with flat chains and replay barriers, then two of those.
const FLAT: [&str; 3] = ["trace_0004", "trace_0274", "trace_0291"];

fn traces(names: &[&str]) -> Vec<SessionTree> {
    let paths: Vec<PathBuf> = names
        .iter()
        .map(|n| fixture(&format!("traces/{n}.json.gz")))
        .collect();
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    import(&refs, Some(TraceFormat::WEKA)).unwrap().trees
}

fn plan(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Our stream `name` in the trees: (tree, its recording, agent).
fn stream<'a>(trees: &'a [SessionTree], name: &str) -> (&'a SessionTree, Arc<Recorded>, u32) {
    for t in trees {
        let rec = t.recorded().expect("weka trees are recorded").clone();
        if let Some(a) = rec.streams.iter().position(|s| s.name == name) {
            return (t, rec, a as u32);
        }
    }
    panic!("no stream {name}")
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-6 * b.abs().max(1.0),
        "{what}: ours {a}, AgentX {b}"
    );
}

#[test]
fn streams_branches_delays_and_barriers_equal_agentxs() {
    check_streams(&FOUR, "agentx_plan_seed42_c6.json");
}

#[test]
fn flat_chains_and_barriers_equal_agentxs() {
    check_streams(&FLAT, "agentx_plan_flat_seed3_c5.json");
    check_lanes(
        &FLAT,
        "agentx_plan_flat_seed3_c5.json",
        Protocol::Agentx,
        3,
        5,
    );
}

fn check_streams(names: &[&str], fixture_name: &str) {
    let trees = traces(names);
    let p = plan(fixture_name);
    let convs = p["conversations"].as_array().unwrap();
    let ours: usize = trees
        .iter()
        .map(|t| t.recorded().unwrap().streams.len())
        .sum();
    assert_eq!(ours, convs.len(), "one stream per AgentX conversation");
    for c in convs {
        let name = c["session_id"].as_str().unwrap();
        let (tree, rec, agent) = stream(&trees, name);
        let ids: Vec<u32> = tree
            .requests()
            .iter()
            .filter(|r| r.agent == agent)
            .map(|r| r.id)
            .collect();
        let turns = c["turns"].as_array().unwrap();
        assert_eq!(ids.len(), turns.len(), "{name}: turns");
        for (k, (turn, &id)) in turns.iter().zip(&ids).enumerate() {
            let r = &tree.requests()[id as usize];
            let what = format!("{name} turn {k}");
            close(
                rec.start_ns[id as usize] as f64 / 1e6,
                turn["timestamp_ms"].as_f64().unwrap(),
                &what,
            );
            assert_eq!(
                r.output_tokens as u64,
                turn["max_tokens"].as_u64().unwrap(),
                "{what}"
            );
            assert_eq!(
                r.input_tokens as u64,
                turn["in"].as_u64().unwrap(),
                "{what}"
            );
            match turn["api_time_ms"].as_f64() {
                Some(api) => close(rec.api_ns[id as usize].unwrap() as f64 / 1e6, api, &what),
                None => assert!(rec.api_ns[id as usize].is_none(), "{what}"),
            }
            if let Some(d) = turn["delay_ms"].as_f64() {
                close(r.think_ns as f64 / 1e6, d, &format!("{what} delay"));
            }
            let preds: Vec<(String, u64)> = turn["replay_predecessors"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    (
                        p["conversation_id"].as_str().unwrap().to_string(),
                        p["turn_index"].as_u64().unwrap(),
                    )
                })
                .collect();
            let mut theirs: Vec<u32> = preds
                .iter()
                .map(|(conv, k)| {
                    let (t, _, a) = stream(&trees, conv);
                    assert!(std::ptr::eq(t, tree), "{what}: a barrier across trees");
                    t.requests()
                        .iter()
                        .filter(|r| r.agent == a)
                        .nth(*k as usize)
                        .unwrap()
                        .id
                })
                .collect();
            theirs.sort_unstable();
            assert_eq!(rec.barriers[id as usize], theirs, "{what}: barriers");
        }
        // The branches this conversation declares: spawned by one turn, joined by another (or none).
        for b in c["branches"].as_array().unwrap() {
            let id = b["branch_id"].as_str().unwrap();
            let spawn = turns
                .iter()
                .position(|t| t["branch_ids"].as_array().unwrap().iter().any(|x| x == id))
                .unwrap();
            let join = turns.iter().position(|t| {
                t["prerequisites"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["branch_id"] == id)
            });
            assert_eq!(join.is_none(), b["is_background"].as_bool().unwrap());
            for child in b["child_conversation_ids"].as_array().unwrap() {
                let (_, crec, ca) = stream(&trees, child.as_str().unwrap());
                let sp = crec.streams[ca as usize].spawn.unwrap();
                assert_eq!(sp.parent, ids[spawn], "{child}: spawned by turn {spawn}");
                assert_eq!(
                    sp.join,
                    join.map(|j| ids[j]),
                    "{child}: joined by turn {join:?}"
                );
                close(
                    sp.branch_start_ns as f64 / 1e6,
                    b["start_timestamp_ms"].as_f64().unwrap(),
                    &format!("{child} branch start"),
                );
            }
        }
    }
}

/// Our replay's lane plans for `trees`, AgentX's seeding.
fn lanes(
    trees: Vec<SessionTree>,
    protocol: Protocol,
    seed: u64,
    c: u32,
) -> serverbench_sim::AgentxStats {
    let trace = serverbench_workloads::Trace::new(trees).unwrap();
    let cfg = ReplayConfig {
        concurrency: c,
        idle_gap_cap_ns: 10_000_000_000,
        protocol,
        seed,
        arrivals: Arrivals::Closed,
        agentx: protocol.agentx_defaults().unwrap(),
        window_ns: 1_800_000_000_000,
    };
    let mut r = Replay::new(&trace, cfg).unwrap();
    let mut out = Vec::new();
    r.start(Time::ZERO, &mut out);
    r.agentx_stats().unwrap().clone()
}

fn check_lanes(names: &[&str], fixture_name: &str, protocol: Protocol, seed: u64, c: u32) {
    let p = plan(fixture_name);
    let ours = lanes(traces(names), protocol, seed, c);
    let theirs = p["lanes"].as_array().unwrap();
    assert_eq!(ours.lanes.len(), theirs.len());
    for (o, t) in ours.lanes.iter().zip(theirs) {
        let what = format!("lane {}", o.lane);
        assert_eq!(
            o.trace,
            t["conversation_id"].as_str().unwrap(),
            "{what}: row"
        );
        close(
            o.t_star_ms,
            t["t_star_ms"].as_f64().unwrap(),
            &format!("{what} t*"),
        );
        let states = t["states"].as_array().unwrap();
        assert_eq!(o.states.len(), states.len(), "{what}: live streams");
        for (os, ts) in o.states.iter().zip(states) {
            assert_eq!(os.stream, ts["conversation_id"].as_str().unwrap(), "{what}");
            assert_eq!(
                os.next_turn as u64,
                ts["next_turn_index"].as_u64().unwrap(),
                "{what}"
            );
            close(
                os.offset_ms,
                ts["next_dispatch_offset_ms"].as_f64().unwrap(),
                &what,
            );
            assert_eq!(
                os.waiting,
                ts["waiting_on_children"].as_bool().unwrap(),
                "{what}"
            );
            assert_eq!(
                os.primer_turn.map(u64::from),
                ts["warmup_turn_index"].as_u64(),
                "{what}: primer"
            );
        }
    }
    // The primer schedule, lane by lane in AgentX's order.
    let schedule = p["primer_schedule"].as_array().unwrap();
    let ours: Vec<f64> = ours
        .lanes
        .iter()
        .flat_map(|l| l.primer_offsets_s.iter().copied())
        .collect();
    assert_eq!(ours.len(), schedule.len(), "primers");
    for (o, t) in ours.iter().zip(schedule) {
        close(*o, t["offset_s"].as_f64().unwrap(), "primer offset");
    }
}

#[test]
fn agentx_lanes_start_points_and_primers_equal_agentxs() {
    check_lanes(&FOUR, "agentx_plan_seed42_c6.json", Protocol::Agentx, 42, 6);
}

#[test]
fn mvp_lanes_start_points_and_primers_equal_agentxs() {
    check_lanes(
        &FOUR,
        "agentx_plan_seed7_c4_mvp.json",
        Protocol::AgentxMvp,
        7,
        4,
    );
}

#[test]
fn agentx_defaults_are_the_scenarios() {
    let a = AgentxParams::agentx();
    assert_eq!((a.start_min, a.start_max), (0.25, 0.75));
    assert_eq!(a.tree_idle_cap_ns, Some(300_000_000_000));
    assert_eq!(a.warmup_per_lane, Some(10));
    assert_eq!(a.grace_ns, 30_000_000_000);
    let m = AgentxParams::mvp();
    assert_eq!((m.start_min, m.start_max), (0.0, 1.0));
    assert_eq!((m.tree_idle_cap_ns, m.warmup_per_lane), (None, None));
}

/// One request as a walk saw it.
#[derive(Clone, Copy, Debug)]
struct Sent {
    lane: u32,
    row: u64,
    request: u32,
    warmup: bool,
    sent: u64,
    done: u64,
}

/// Walks an AgentX replay of `trees` with every request served in `service_ns` (a server that is
/// never the bottleneck), until `until_ns`; returns every request sent and the window's origin.
fn walk(
    trees: Vec<SessionTree>,
    protocol: Protocol,
    c: u32,
    service_ns: u64,
    window_ns: u64,
) -> (Vec<Sent>, Vec<Arc<SessionTree>>, Time) {
    let trace = serverbench_workloads::Trace::new(trees).unwrap();
    let cfg = ReplayConfig {
        concurrency: c,
        idle_gap_cap_ns: 10_000_000_000,
        protocol,
        seed: 5,
        arrivals: Arrivals::Closed,
        agentx: protocol.agentx_defaults().unwrap(),
        window_ns,
    };
    let mut r = Replay::new(&trace, cfg).unwrap();
    let mut q: serverbench_sim::EventQueue<(bool, serverbench_sim::Handle, usize)> =
        serverbench_sim::EventQueue::new();
    let mut out = Vec::new();
    let mut log: Vec<Sent> = Vec::new();
    let mut seen_trees: Vec<Arc<SessionTree>> = Vec::new();
    r.start(Time::ZERO, &mut out);
    let mut wake: Option<Time> = None;
    loop {
        for x in out.drain(..) {
            q.schedule(x.at, (false, x.handle, 0)).unwrap();
        }
        if let Some(at) = r.next_arrival() {
            if wake.map_or(true, |w| at < w) {
                wake = Some(at);
                q.schedule(
                    at,
                    (
                        false,
                        serverbench_sim::Handle {
                            lane: u32::MAX,
                            request: 0,
                        },
                        0,
                    ),
                )
                .unwrap();
            }
        }
        let Some((t, (done, h, tag))) = q.pop() else {
            break;
        };
        if let Some(o) = r.window_origin() {
            if t.0 > o.0 + window_ns + r.grace_ns() {
                break;
            }
        }
        if h.lane == u32::MAX {
            if wake == Some(t) {
                wake = None;
            }
            r.arrive(t, &mut out);
            continue;
        }
        if done {
            log[tag].done = t.0;
            r.complete(h, t, &mut out);
            continue;
        }
        let (tree, row) = r.tree(h.lane);
        if !seen_trees.iter().any(|x| Arc::ptr_eq(x, tree)) {
            seen_trees.push(tree.clone());
        }
        log.push(Sent {
            lane: h.lane,
            row,
            request: h.request,
            warmup: r.is_warmup(h),
            sent: t.0,
            done: u64::MAX,
        });
        q.schedule(t.plus(service_ns), (true, h, log.len() - 1))
            .unwrap();
    }
    (
        log,
        seen_trees,
        r.window_origin().expect("the window opened"),
    )
}

#[test]
fn the_replay_keeps_streams_joins_and_barriers_in_order_and_warms_up_unscored() {
    let trees = traces(&FLAT);
    let window = 3_600_000_000_000;
    let (log, _, origin) = walk(trees.clone(), Protocol::Agentx, 5, 2_000_000_000, window);
    let recs: Vec<Arc<Recorded>> = trees
        .iter()
        .map(|t| t.recorded().unwrap().clone())
        .collect();
    // Warm-up: primers (one per live stream with history) and 10 per lane, all before the window.
    let warm: Vec<&Sent> = log.iter().filter(|s| s.warmup).collect();
    assert!(warm.iter().all(|s| s.sent < origin.0));
    assert!(log.iter().filter(|s| !s.warmup).all(|s| s.sent >= origin.0));
    let per_lane = |lane| warm.iter().filter(|s| s.lane == lane).count();
    for lane in 0..5 {
        assert!(
            (10..=13).contains(&per_lane(lane)),
            "lane {lane}: {} warm-up requests",
            per_lane(lane)
        );
    }
    // Within each tree instance: a stream's turns in order, each after the previous one returned; a
    // join after every stream it waits for; a request after its barrier predecessors.
    let mut by_instance: std::collections::BTreeMap<(u32, u64), Vec<&Sent>> = Default::default();
    for s in &log {
        by_instance.entry((s.lane, s.row)).or_default().push(s);
    }
    for ((lane, row), sent) in by_instance {
        let t = &trees[(row % trees.len() as u64) as usize];
        let rec = &recs[(row % trees.len() as u64) as usize];
        let done = |r: u32| sent.iter().find(|s| s.request == r).map(|s| s.done);
        for s in &sent {
            let r = &t.requests()[s.request as usize];
            for &d in &r.deps {
                if let Some(f) = done(d) {
                    assert!(
                        f <= s.sent,
                        "lane {lane} row {row}: request {} before its dependency {d}",
                        s.request
                    );
                }
            }
            for &p in &rec.barriers[s.request as usize] {
                if let Some(f) = done(p) {
                    assert!(
                        f <= s.sent,
                        "lane {lane} row {row}: request {} before barrier {p}",
                        s.request
                    );
                }
            }
        }
    }
    // Nothing is sent after the window closes.
    assert!(log.iter().all(|s| s.sent < origin.0 + window));
}

#[test]
fn the_global_idle_cap_bounds_every_quiet_stretch() {
    // One lane: nothing else is ever on the wire, so every gap longer than 10 s is cut to 10 s.
    let (log, _, origin) = walk(
        traces(&FOUR),
        Protocol::AgentxMvp,
        1,
        500_000_000,
        7_200_000_000_000,
    );
    let mut measured: Vec<&Sent> = log.iter().filter(|s| !s.warmup).collect();
    measured.sort_by_key(|s| s.sent);
    assert!(measured.len() > 50, "{} requests", measured.len());
    let mut busy_until = origin.0;
    for s in &measured {
        if s.sent > busy_until {
            let quiet = s.sent - busy_until;
            assert!(
                quiet <= 10_000_000_000 + 1,
                "quiet for {} s",
                quiet as f64 / 1e9
            );
        }
        busy_until = busy_until.max(s.done);
    }
}

#[test]
fn lanes_take_rows_in_order_and_recycle_to_the_next_rows() {
    let (log, _, _) = walk(
        traces(&FOUR),
        Protocol::Agentx,
        3,
        1_000_000_000,
        20_000_000_000_000,
    );
    let mut first_row: Vec<(u64, u32)> = Vec::new();
    for s in &log {
        if !first_row.iter().any(|&(r, _)| r == s.row) {
            first_row.push((s.row, s.lane));
        }
    }
    let rows: Vec<u64> = first_row.iter().map(|&(r, _)| r).collect();
    assert_eq!(rows[..3], [0, 1, 2], "lane i starts at row i");
    let mut sorted = rows.clone();
    sorted.sort_unstable();
    assert_eq!(rows, sorted, "recycles continue at rows C, C+1, ...");
    assert!(rows.len() > 6, "trees recycled: {rows:?}");
}

#[test]
fn an_agentx_simulation_is_deterministic_and_scores_only_the_window() {
    use serverbench_sim::{simulate, Deployment, RunConfig};
    let trace = serverbench_workloads::Trace::new(traces(&FOUR)).unwrap();
    let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
    let cfg = RunConfig {
        protocol: Protocol::Agentx,
        agentx: AgentxParams::agentx(),
        ..RunConfig::new(4, 42, 600.0)
    };
    let a = simulate(&d, &d.cost_model(), &trace, &cfg).unwrap();
    let b = simulate(&d, &d.cost_model(), &trace, &cfg).unwrap();
    assert_eq!(
        serde_json::to_string(&a.records).unwrap(),
        serde_json::to_string(&b.records).unwrap()
    );
    let ax = a.summary.agentx.as_ref().unwrap();
    assert_eq!(ax.lanes, 4);
    assert!(ax.warmup_requests >= 40, "{}", ax.warmup_requests);
    let grace = 30_000_000_000;
    assert!(a.records.iter().all(|r| r.send_ns < 600_000_000_000));
    assert!(a
        .records
        .iter()
        .all(|r| r.finish_ns.unwrap() <= 600_000_000_000 + grace));
    assert!(a
        .records
        .iter()
        .all(|r| r.output_requested == r.output_tokens
            || r.outcome != serverbench_sim::Outcome::Completed));
    assert_eq!(a.summary.requests, a.records.len());
    // The same run's lanes are the lanes AgentX plans (checked above against AgentX's own code).
    assert_eq!(a.agentx.unwrap().lanes.len(), 4);
}

#[test]
fn the_per_tree_idle_cap_bounds_each_trees_quiet_stretches() {
    // Four lanes of sessions with gaps of up to hours: within each tree, once the window is open,
    // nothing stays quiet much longer than the 300 s cap.
    let (log, _, origin) = walk(
        traces(&FOUR),
        Protocol::Agentx,
        4,
        500_000_000,
        7_200_000_000_000,
    );
    let mut by_instance: std::collections::BTreeMap<(u32, u64), Vec<&Sent>> = Default::default();
    for s in log.iter().filter(|s| !s.warmup) {
        by_instance.entry((s.lane, s.row)).or_default().push(s);
    }
    let mut longest = 0;
    for sent in by_instance.values_mut() {
        sent.sort_by_key(|s| s.sent);
        let mut busy_until = sent[0].sent;
        for s in sent.iter() {
            if s.sent > busy_until {
                longest = longest.max(s.sent - busy_until);
            }
            busy_until = busy_until.max(s.done);
        }
    }
    assert!(
        longest > 60_000_000_000,
        "the traces have long gaps: {} s",
        longest as f64 / 1e9
    );
    assert!(
        longest <= 300_000_000_000 + 1,
        "quiet for {} s",
        longest as f64 / 1e9
    );
    assert!(origin.0 > 0);
}

#[test]
fn parquet_rows_read_as_the_same_traces_as_their_json() {
    let parquet = fixture("trace_0291_0277.parquet");
    let from_parquet = import(&[parquet.as_path()], None).unwrap();
    assert_eq!(
        from_parquet.format,
        TraceFormat::WEKA,
        "detected from the rows"
    );
    let json = traces(&["trace_0291", "trace_0277"]);
    assert_eq!(from_parquet.trees.len(), 2);
    for (p, j) in from_parquet.trees.iter().zip(&json) {
        // Block ids are salted by each trace's place among the inputs; the rest is the same.
        let shape = |t: &SessionTree| -> Vec<(u32, Vec<u32>, u64, u32, u32, usize)> {
            t.requests()
                .iter()
                .map(|r| {
                    (
                        r.agent,
                        r.deps.clone(),
                        r.think_ns,
                        r.input_tokens,
                        r.output_tokens,
                        r.blocks.len(),
                    )
                })
                .collect()
        };
        assert!(shape(p) == shape(j), "the same requests");
        assert!(p.recorded() == j.recorded(), "the same recorded clock");
    }
    // Not Parquet at all: the file is named.
    let d = std::env::temp_dir().join(format!("sb-parquet-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let bad = d.join("bad.parquet");
    std::fs::write(&bad, b"PAR1 not really").unwrap();
    let e = import(&[bad.as_path()], Some(TraceFormat::WEKA)).unwrap_err();
    assert!(
        e.file.ends_with("bad.parquet") && e.reason.contains("Parquet"),
        "{e}"
    );
}

#[test]
fn max_context_length_drops_whole_traces_as_agentx_does() {
    let paths: Vec<PathBuf> = FOUR
        .iter()
        .map(|n| fixture(&format!("traces/{n}.json.gz")))
        .collect();
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let mut i = import(&refs, Some(TraceFormat::WEKA)).unwrap();
    // trace_0282 peaks at 167,695 tokens (prompt + output): AgentX's own fixture run dropped it too.
    assert_eq!(i.keep_within(150_000).unwrap(), 1);
    assert_eq!(i.trees.len(), 3);
    let names: Vec<String> = i
        .trees
        .iter()
        .map(|t| t.recorded().unwrap().trace_id.clone())
        .collect();
    assert_eq!(names, ["trace_0274", "trace_0277", "trace_0291"]);
    assert!(i.keep_within(1_000).is_err(), "nothing left is an error");
}

/// `text` read as one Weka trace file, `t.jsonl`.
fn read_weka(
    text: &str,
) -> Result<serverbench_workloads::Imported, serverbench_workloads::InputError> {
    serverbench_workloads::import_files(
        vec![serverbench_workloads::SourceFile {
            name: "t.jsonl".into(),
            text: text.into(),
        }],
        Some(TraceFormat::WEKA),
        false,
    )
}

#[test]
fn what_agentx_refuses_or_leaves_out_is_refused_or_counted_here_too() {
    let read = read_weka;
    // A sub-agent with no main-agent call before it is left out (AgentX drops it) and counted.
    let i = read(r#"{"id": "a", "requests": [{"type": "subagent", "t": 0, "agent_id": "x", "requests": [{"t": 0, "in": 10, "out": 1}]}, {"t": 1, "in": 20, "out": 2}]}"#).unwrap();
    assert_eq!(i.trees[0].len(), 1, "only the main call");
    let skips = i.reduced.unwrap().skip_counts();
    assert_eq!(
        skips,
        vec![(
            1,
            "a sub-agent with no call of its parent before it".to_string()
        )]
    );
    // A non-finite time cannot be written in JSON: a NaN is malformed, named by its line.
    let e = read("{\"id\": \"a\", \"requests\": [{\"t\": 0, \"in\": 10, \"out\": 1}]}\n{\"id\": \"b\", \"requests\": [{\"t\": NaN, \"in\": 10, \"out\": 1}]}").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.reason.contains("malformed JSON"), "{e}");
    // A number too large to be a finite time is refused, and so is a time of more than a billion
    // seconds (nanoseconds of it would not fit), named by its field.
    let e = read(r#"{"id": "a", "requests": [{"t": 0, "in": 10, "out": 1, "api_time": 1e999}]}"#);
    assert!(e.is_err(), "an infinite api_time");
    let e = read(r#"{"id": "a", "requests": [{"t": 1e300, "in": 10, "out": 1}]}"#).unwrap_err();
    assert_eq!(e.field, "requests[0].t", "{e}");
    let e = read(r#"{"id": "a", "requests": [{"t": 0, "in": 10, "out": 1}, {"type": "subagent", "t": 1, "agent_id": "x", "duration_ms": 1e20, "requests": [{"t": 1, "in": 5, "out": 1}]}]}"#).unwrap_err();
    assert_eq!(e.field, "requests[1].duration_ms", "{e}");
    // A duplicate agent_id among kept sub-agents, a duplicate trace id: refused, as AgentX does.
    let e = read(r#"{"id": "a", "requests": [{"t": 0, "in": 10, "out": 1}, {"type": "subagent", "t": 1, "agent_id": "x", "requests": [{"t": 1, "in": 5, "out": 1}]}, {"type": "subagent", "t": 2, "agent_id": "x", "requests": [{"t": 2, "in": 5, "out": 1}]}]}"#).unwrap_err();
    assert_eq!(e.field, "requests[2].agent_id", "{e}");
    let e = read("{\"id\": \"a\", \"requests\": [{\"t\": 0, \"in\": 10, \"out\": 1}]}\n{\"id\": \"a\", \"requests\": [{\"t\": 0, \"in\": 10, \"out\": 1}]}").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (2, "id"), "{e}");
    // The fields AgentX's schema types and the replay does not use are typed here too, by name.
    for (field, call) in [
        ("requests[0].input_types", r#""input_types": "text""#),
        (
            "requests[0].output_types[1]",
            r#""output_types": ["text", 7]"#,
        ),
        ("requests[0].stop", r#""stop": 3"#),
        ("requests[0].think_time", r#""think_time": "x""#),
        ("requests[0].ttft", r#""ttft": 1e300"#),
    ] {
        let text =
            format!(r#"{{"id": "a", "requests": [{{"t": 0, "in": 10, "out": 1, {call}}}]}}"#);
        assert_eq!(read(&text).unwrap_err().field, field, "{call}");
    }
    let e = read(r#"{"id": "a", "totals": 5, "requests": [{"t": 0, "in": 10, "out": 1}]}"#)
        .unwrap_err();
    assert_eq!(e.field, "totals", "{e}");
    let e = read(r#"{"id": "a", "models": "m", "requests": [{"t": 0, "in": 10, "out": 1}]}"#)
        .unwrap_err();
    assert_eq!(e.field, "models", "{e}");
    let e = read(r#"{"id": "a", "requests": [{"t": 0, "in": 10, "out": 1}, {"type": "subagent", "t": 1, "agent_id": "x", "total_tokens": -4, "requests": [{"t": 1, "in": 5, "out": 1}]}]}"#).unwrap_err();
    assert_eq!(e.field, "requests[1].total_tokens", "{e}");
    // AgentX's extra-tolerant cases it would refuse but real files hold: global scope, a null
    // subagent_type, extra keys, a sub-agent time relative to its entry.
    let i = read(r#"{"id": "g", "hash_id_scope": "global", "_analysis": {}, "requests": [{"t": 10, "in": 10, "out": 1, "api_time": 1}, {"type": "subagent", "t": 12, "agent_id": "x", "subagent_type": null, "requests": [{"t": 0.5, "in": 5, "out": 1, "api_time": 1}]}, {"t": 20, "in": 30, "out": 1}]}"#).unwrap();
    let rec = i.trees[0].recorded().unwrap();
    assert_eq!(
        rec.start_ns[1], 12_500_000_000,
        "relative inner time made absolute"
    );
    assert_eq!(
        rec.streams[1].spawn.unwrap().join,
        Some(2),
        "joined by the next main call"
    );
}

#[test]
fn agentx_validity_needs_coverage_of_long_windows_and_few_overflows() {
    use serverbench_sim::{apply_agentx, summarise, AgentxSummary, Deployment};
    let d = Deployment::preset("qwen3.5-9b-2xl40").unwrap();
    let check = |window: f64, last: f64, overflows: usize| {
        let (_, mut s) = summarise(&[], &d, window);
        s.requests = 99;
        let a = AgentxSummary {
            last_ttft_s: last,
            last_itl_s: last,
            context_overflows: overflows,
            ..AgentxSummary::default()
        };
        apply_agentx(&mut s, a);
        (s.valid, s.agentx.unwrap().invalid)
    };
    assert_eq!(
        check(1800.0, 1711.0, 0),
        (true, None),
        "95 % of 1800 s is 1710 s"
    );
    let (valid, why) = check(1800.0, 1700.0, 0);
    assert!(!valid && why.unwrap().contains("insufficient coverage"));
    assert!(
        check(600.0, 100.0, 0).0,
        "under 900 s AgentX checks no coverage"
    );
    let (valid, why) = check(1800.0, 1800.0, 2);
    assert!(
        !valid && why.unwrap().contains("overflowed"),
        "2 of 101 overflowed: 1.98 %"
    );
    assert!(check(1800.0, 1800.0, 1).0, "1 of 100: 1 %");
}

/// A spec stands in for one fixed corpus under AgentX: its rows are the generator's stream of
/// `CORPUS_SEED` whatever the run's seed (the benchmark replays the same rows on every seed; the seed
/// moves only where each lane starts), where the other protocols draw a stream per seed.
#[test]
fn a_specs_rows_are_one_corpus_for_every_seed_under_agentx() {
    use serverbench_workloads::{Workload, WorkloadSpec, CORPUS_SEED};
    let spec = WorkloadSpec::preset("agentx-062126").unwrap();
    let w = Workload::generated(spec);
    let limit = 1_048_576;
    let corpus = w.source(CORPUS_SEED, limit).unwrap();
    for seed in [1, 5, 42] {
        let rows = w.source_for(seed, limit, true).unwrap();
        let drawn = w.source_for(seed, limit, false).unwrap();
        for k in 0..4 {
            assert_eq!(rows.tree(k), corpus.tree(k), "seed {seed}, row {k}");
            assert_ne!(drawn.tree(k), corpus.tree(k), "seed {seed}, row {k}");
        }
    }
}

/// Under the AgentX protocol every request is a chat completion: the front end also takes the profile's
/// `tokenize_s_per_token` for each prompt token. One lane, so each request meets an idle front end and
/// engine: its first token comes that much later, and the same replay under the cold protocol (prompts of
/// token ids) does not pay it at all unless its prompts are sent as text (`RunConfig::text_prompts`).
#[test]
fn chat_prompts_pay_the_profiles_tokenizer_under_the_agentx_protocol() {
    use serverbench_sim::{simulate, Deployment, Outcome, RunConfig, RunOutput};
    let trace = serverbench_workloads::Trace::new(traces(&FOUR)).unwrap();
    let d = Deployment::preset("qwen3-8b-200k-1xh200-vllm").unwrap();
    let with = d.cost_model();
    let mut plain = d.clone();
    plain.profile.tokenize_s_per_token = 0.0;
    let without = plain.cost_model();
    assert!(with.tokenize_ns(100_000) > 0);
    let run_as = |protocol, cost: &serverbench_calibration::CostModel, text_prompts| {
        let cfg = RunConfig {
            protocol,
            text_prompts,
            ..RunConfig::new(1, 3, 300.0)
        };
        simulate(&d, cost, &trace, &cfg).unwrap()
    };
    let run = |protocol, cost| run_as(protocol, cost, false);
    let json = |o: &RunOutput| serde_json::to_string(&o.records).unwrap();
    assert_eq!(
        json(&run(Protocol::Cold, &with)),
        json(&run(Protocol::Cold, &without))
    );
    // Sent as text (`compare --api text|chat`) the cold protocol's prompts pay it too.
    assert_ne!(
        json(&run_as(Protocol::Cold, &with, true)),
        json(&run(Protocol::Cold, &with))
    );
    assert_eq!(
        json(&run_as(Protocol::Agentx, &with, true)),
        json(&run(Protocol::Agentx, &with))
    );
    let (a, b) = (
        run(Protocol::Agentx, &with),
        run(Protocol::Agentx, &without),
    );
    let ttft = |o: &RunOutput| -> Vec<(u32, u64)> {
        o.records
            .iter()
            .filter(|r| {
                r.outcome == Outcome::Completed
                    && r.kind == serverbench_workloads::RequestKind::RootTurn
            })
            .map(|r| (r.input_tokens, r.first_token_ns.unwrap() - r.send_ns))
            .collect()
    };
    let (ta, tb) = (ttft(&a), ttft(&b));
    assert!(ta.len() > 5, "{} requests", ta.len());
    // The first requests are the same ones in both runs (the lane's start point does not depend on time).
    let n = ta.len().min(tb.len()).min(5);
    for i in 0..n {
        assert_eq!(ta[i].0, tb[i].0);
        let extra = ta[i].1 as i64 - tb[i].1 as i64;
        let want = with.tokenize_ns(ta[i].0) as i64;
        assert!(
            (extra - want).abs() <= want / 20 + 1_000_000,
            "request {i} of {} tokens: {extra} ns more, the tokenizer {want} ns",
            ta[i].0
        );
    }
}

/// A sub-agent whose first call was sent before the call AgentX spawns it from (the last main-agent
/// call before its entry) waits, in the tree and the corpus, for the latest call sent by then — or, with
/// none, for nothing — while the AgentX protocol still spawns it from that call; its corpus session
/// passes the corpus's checks (issue 41, item 6: no call waits for one sent after it).
#[test]
fn a_sub_agent_sent_before_its_spawning_call_waits_only_for_what_was_sent_by_then() {
    let read = |text: &str| read_weka(text).unwrap();
    let i = read(
        r#"{"id": "a", "requests": [{"t": 0, "in": 100, "out": 1, "api_time": 1, "hash_ids": [1]}, {"t": 10, "in": 200, "out": 1, "api_time": 2, "hash_ids": [1, 2]}, {"type": "subagent", "t": 5, "agent_id": "x", "duration_ms": 1000, "requests": [{"t": 5, "in": 150, "out": 1, "api_time": 1, "hash_ids": [9]}]}]}"#,
    );
    let r = &i.trees[0].requests()[2];
    assert_eq!((r.agent, r.deps.as_slice()), (1, &[0][..]));
    assert_eq!(
        r.think_ns, 4_000_000_000,
        "from the end of call 0 to its send"
    );
    let rec = i.trees[0].recorded().unwrap();
    assert_eq!(
        rec.streams[1].spawn.unwrap().parent,
        1,
        "AgentX spawns it from call 1"
    );
    let s = &i.reduced.unwrap().sessions[0];
    s.check().unwrap();
    assert_eq!(s.calls[2].deps, vec![0]);
    // Sent before every call of its parent: it waits for nothing.
    let i = read(
        r#"{"id": "b", "requests": [{"t": 10, "in": 100, "out": 1, "api_time": 1, "hash_ids": [1]}, {"type": "subagent", "t": 5, "agent_id": "x", "requests": [{"t": 5, "in": 150, "out": 1, "api_time": 1, "hash_ids": [9]}]}]}"#,
    );
    let r = &i.trees[0].requests()[1];
    assert_eq!((r.agent, r.deps.len(), r.think_ns), (1, 0, 0));
    i.reduced.unwrap().sessions[0].check().unwrap();
}
