//! Open-loop arrivals in the simulator: recorded times kept exactly, dependencies still honoured, the
//! cap on open trees, Poisson starts at their rate, determinism, and the errors of a mode that cannot
//! apply.

use serverbench_sim::{simulate, Arrivals, Deployment, Outcome, Record, RunConfig, RunError};
use serverbench_workloads::{parse_trace, Generator, Trace, TraceFormat, TreeSource, WorkloadSpec};
use std::collections::HashMap;

/// `n` single requests in the `requests` format, arriving at irregular times from 5 s on.
fn requests_trace(n: usize) -> (String, Vec<f64>) {
    let mut text = String::new();
    let mut times = Vec::new();
    let mut t = 5.0;
    for i in 0..n {
        // Irregular gaps (some zero: equal times keep file order), prompts sharing a first block.
        t += [0.0, 0.013, 0.4, 1.7, 0.05][i % 5];
        times.push(t);
        let blocks: Vec<u64> = (0..(1 + i % 4) as u64)
            .map(|b| if b == 0 { 7 } else { 1000 * i as u64 + b })
            .collect();
        text.push_str(&format!(
            "{{\"arrival_s\": {t}, \"input_tokens\": {}, \"output_tokens\": {}, \"hash_ids\": {blocks:?}}}\n",
            16 * blocks.len() + 100 + (i % 7) * 300,
            20 + (i % 5) * 40
        ));
    }
    (text, times)
}

fn open(arrivals: Arrivals, window_s: f64) -> RunConfig {
    RunConfig {
        arrivals,
        concurrency: serverbench_sim::MAX_CONCURRENCY,
        ..RunConfig::new(1, 0, window_s)
    }
}

fn gemma() -> Deployment {
    Deployment::preset("gemma4-e4b-1xl40").unwrap()
}

#[test]
fn a_trace_replayed_open_loop_sends_every_request_at_its_recorded_time() {
    let (text, times) = requests_trace(300);
    let trace = parse_trace("r.jsonl", &text, Some(TraceFormat::REQUESTS)).unwrap();
    let d = gemma();
    for speedup in [1.0, 2.5] {
        let out = simulate(
            &d,
            &d.cost_model(),
            &trace,
            &open(Arrivals::Trace { speedup }, 600.0),
        )
        .unwrap();
        assert_eq!(out.records.len(), 300, "every request once, none repeated");
        for r in &out.records {
            let want = ((times[r.tree as usize] - 5.0) * 1e9 / speedup).round() as u64;
            let diff = r.send_ns.abs_diff(want);
            // The requests format reads seconds as f64: exact to the nanosecond of the decimal given.
            assert!(
                diff <= 1,
                "request of line {} sent at {} ns, recorded {want} ns",
                r.tree + 1,
                r.send_ns
            );
        }
        let sends: Vec<u64> = out.records.iter().map(|r| r.send_ns).collect();
        assert!(sends.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(out.summary.trees_started, 300);
        assert_eq!(out.summary.arrivals, Arrivals::Trace { speedup });
        let o = out.summary.open_loop.unwrap();
        assert_eq!((o.late_for_dependencies, o.waited_for_a_slot), (0, 0));
        assert!(out.records.iter().all(|r| r.outcome == Outcome::Completed));
    }
}

#[test]
fn recorded_times_never_send_a_turn_before_its_parent_completes() {
    // Bailian sessions of four turns; a turn is recorded 2 s or 40 s after its parent, and answers of
    // 400 tokens take longer than 2 s, so some turns come due before their parents complete.
    let mut text = String::new();
    for s in 0..30u32 {
        let mut t = s as f64 * 1.5;
        for turn in 0..4u32 {
            let id = s * 10 + turn;
            let parent = if turn == 0 { -1 } else { id as i64 - 1 };
            text.push_str(&format!("{{\"chat_id\": {id}, \"parent_chat_id\": {parent}, \"timestamp\": {t}, \"input_length\": {}, \"output_length\": 400, \"turn\": {}, \"hash_ids\": []}}\n", 200 + 100 * turn, turn + 1));
            t += if (s + turn) % 2 == 0 { 2.0 } else { 40.0 };
        }
    }
    let trace = parse_trace("b.jsonl", &text, Some(TraceFormat::BAILIAN)).unwrap();
    let d = gemma();
    let out = simulate(
        &d,
        &d.cost_model(),
        &trace,
        &open(Arrivals::Trace { speedup: 2.0 }, 3600.0),
    )
    .unwrap();
    assert_eq!(out.records.len(), 120);
    let finish: HashMap<(u64, u32), u64> = out
        .records
        .iter()
        .map(|r| ((r.tree, r.request), r.finish_ns.unwrap()))
        .collect();
    let base = trace
        .trees()
        .iter()
        .filter_map(|t| t.first_arrival_ns())
        .min()
        .unwrap();
    let (mut late, mut on_time) = (0, 0);
    for r in &out.records {
        let tree = &trace.trees()[r.tree as usize];
        let recorded =
            ((tree.arrivals_ns().unwrap()[r.request as usize] - base) as f64 / 2.0).round() as u64;
        let parents = &tree.requests()[r.request as usize].deps;
        let ready = parents
            .iter()
            .map(|&p| finish[&(r.tree, p)])
            .max()
            .unwrap_or(0);
        assert_eq!(
            r.send_ns,
            recorded.max(ready),
            "tree {} request {}: sent at the later of its recorded time and its parents' completion",
            r.tree,
            r.request
        );
        if ready > recorded {
            late += 1;
        } else {
            on_time += 1;
        }
    }
    assert!(
        late > 0 && on_time > 0,
        "both cases occur ({late} late, {on_time} on time)"
    );
    assert_eq!(
        out.summary.open_loop.unwrap().late_for_dependencies,
        late as u64
    );
}

#[test]
fn the_cap_on_open_trees_holds_and_late_trees_wait_for_a_slot() {
    let (text, _) = requests_trace(120);
    let trace = parse_trace("r.jsonl", &text, None).unwrap();
    let d = gemma();
    let cfg = RunConfig {
        concurrency: 3,
        ..open(Arrivals::Trace { speedup: 20.0 }, 600.0)
    };
    let out = simulate(&d, &d.cost_model(), &trace, &cfg).unwrap();
    assert_eq!(out.records.len(), 120);
    // Each tree is one request here: at most three in flight at any instant.
    let mut edges: Vec<(u64, i32)> = out
        .records
        .iter()
        .flat_map(|r| [(r.send_ns, 1), (r.finish_ns.unwrap(), -1)])
        .collect();
    edges.sort();
    let mut open = 0;
    for (_, e) in edges {
        open += e;
        assert!(open <= 3, "{open} trees open at once");
    }
    assert!(out.records.iter().all(|r| r.lane < 3), "three slots reused");
    assert!(out.summary.open_loop.unwrap().waited_for_a_slot > 0);
}

fn generator() -> Generator {
    Generator::new(WorkloadSpec::synthetic_v1(), 3, 1_048_576).unwrap()
}

/// (start time, tree) of each tree's first record.
fn tree_starts(records: &[Record]) -> Vec<(u64, u64)> {
    let mut first: HashMap<u64, u64> = HashMap::new();
    for r in records {
        first.entry(r.tree).or_insert(r.send_ns);
    }
    let mut v: Vec<(u64, u64)> = first.into_iter().map(|(t, s)| (s, t)).collect();
    v.sort();
    v
}

#[test]
fn poisson_trees_start_at_the_rate_and_repeat_per_seed() {
    let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
    let g = generator();
    let cfg = open(Arrivals::Poisson { rate: 0.2 }, 900.0);
    let a = simulate(&d, &d.cost_model(), &g, &cfg).unwrap();
    let b = simulate(&d, &d.cost_model(), &g, &cfg).unwrap();
    assert_eq!(a.records, b.records, "same seed, same records");
    let other = simulate(&d, &d.cost_model(), &g, &RunConfig { seed: 1, ..cfg }).unwrap();
    assert_ne!(tree_starts(&a.records), tree_starts(&other.records));
    // Trees start in stream order, the first at 0; 0.2 per second over 900 s is 180 expected.
    let starts = tree_starts(&a.records);
    assert_eq!(starts[0].0, 0);
    assert!(starts.iter().map(|s| s.1).eq(0..starts.len() as u64));
    assert!(
        (140..=220).contains(&starts.len()),
        "{} trees",
        starts.len()
    );
    // Turns inside a tree stay closed-loop: a later turn waits for the one before it.
    let finish: HashMap<(u64, u32), u64> = a
        .records
        .iter()
        .filter_map(|r| r.finish_ns.map(|f| ((r.tree, r.request), f)))
        .collect();
    for r in &a.records {
        for &p in &g.tree(r.tree).requests()[r.request as usize].deps {
            assert!(r.send_ns >= finish[&(r.tree, p)]);
        }
    }
}

#[test]
fn an_open_mode_that_cannot_apply_is_an_error_naming_arrivals() {
    let d = gemma();
    let err = simulate(
        &d,
        &d.cost_model(),
        &generator(),
        &open(Arrivals::Trace { speedup: 1.0 }, 60.0),
    )
    .unwrap_err();
    assert!(
        matches!(&err, RunError::Config(e) if e.field == "arrivals" && e.reason.contains("--trace")),
        "{err}"
    );
    let weka = serverbench_workloads::read_trace(
        std::path::Path::new("tests/fixtures/weka/sample_trace.json"),
        None,
    )
    .unwrap();
    {
        let err = simulate(
            &d,
            &d.cost_model(),
            &weka,
            &open(Arrivals::Trace { speedup: 1.0 }, 60.0),
        )
        .unwrap_err();
        assert!(err.to_string().contains("no recorded arrival"), "{err}");
    }
    for bad in [
        "poisson",
        "poisson:0",
        "poisson:-1",
        "trace:x",
        "open",
        "poisson:nan",
    ] {
        assert!(Arrivals::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(
        Arrivals::parse("trace").unwrap(),
        Arrivals::Trace { speedup: 1.0 }
    );
    assert_eq!(
        Arrivals::parse("poisson:2.5").unwrap(),
        Arrivals::Poisson { rate: 2.5 }
    );
}

#[test]
fn the_closed_loop_ignores_recorded_times_and_native_exports_keep_them() {
    let (text, _) = requests_trace(20);
    let trace: Trace = parse_trace("r.jsonl", &text, None).unwrap();
    let mut out = Vec::new();
    serverbench_workloads::write_native(trace.trees().iter().cloned(), &mut out).unwrap();
    let back = parse_trace("n.jsonl", std::str::from_utf8(&out).unwrap(), None).unwrap();
    assert_eq!(back.trees(), trace.trees());
    let d = gemma();
    let closed = simulate(&d, &d.cost_model(), &trace, &RunConfig::new(2, 0, 60.0)).unwrap();
    assert_eq!(
        closed.records[0].send_ns, 0,
        "the closed loop starts at once"
    );
    assert_eq!(closed.summary.arrivals, Arrivals::Closed);
    assert!(closed.summary.open_loop.is_none());
    let json = serde_json::to_string(&closed.summary).unwrap();
    assert!(
        !json.contains("arrivals"),
        "a closed-loop summary is unchanged"
    );
}
