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
        .map(|n| fixture(&format!("{n}.json.gz")))
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
