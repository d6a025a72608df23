//! The agentic-coding generator against its spec, and token synthesis.

use serverbench_workloads::tokens::{prompt_tokens, Vocab};
use serverbench_workloads::{
    quantile, write_native, Generator, RequestKind, TreeSource, WorkloadSpec,
};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

#[test]
fn same_seed_gives_identical_export_bytes() {
    let export = |seed| {
        let g = Generator::new(WorkloadSpec::synthetic_v1(), seed, 1_048_576).unwrap();
        let mut b = Vec::new();
        write_native((0..30).map(|k| g.tree(k)), &mut b).unwrap();
        b
    };
    assert_eq!(export(11), export(11));
    assert_ne!(export(11), export(12));
}

#[test]
fn generator_statistics_follow_the_spec() {
    let spec = WorkloadSpec::synthetic_v1();
    let g = Generator::new(spec.clone(), 5, 1_048_576).unwrap();
    let trees: Vec<_> = (0..2000).map(|k| g.tree(k)).collect();
    let turns = median(trees.iter().map(|t| t.root_turns() as f64).collect());
    assert!(
        (turns - 40.0).abs() <= 3.0,
        "median root turns {turns}, spec 40"
    );
    let all: Vec<_> = trees
        .iter()
        .flat_map(|t| t.requests().iter().cloned())
        .collect();
    let turns_only = |k: RequestKind| all.iter().filter(move |r| r.kind == k);
    let out = median(
        turns_only(RequestKind::RootTurn)
            .map(|r| r.output_tokens as f64)
            .collect(),
    );
    assert!((out - 150.0).abs() <= 8.0, "median output {out}, spec 150");
    assert!(all.iter().all(|r| r.output_tokens <= 8192));
    let think = median(
        all.iter()
            .filter(|r| r.kind == RequestKind::RootTurn && r.turn > 0 && r.deps.len() == 1)
            .map(|r| r.think_ns as f64 / 1e9)
            .collect(),
    );
    assert!(
        (think - 2.0).abs() <= 0.15,
        "median think {think}, spec 2 s"
    );
    // First prompts: the root's first turn minus the 20,000-token prefix.
    let first = median(
        trees
            .iter()
            .map(|t| (t.requests()[0].input_tokens - 20_000) as f64)
            .collect(),
    );
    assert!(
        (first - 500.0).abs() <= 40.0,
        "median first prompt {first}, spec 500"
    );
    // Sub-agents: 0.04 per root turn × mean fan-out (1 + geometric(0.5) capped at 5 ≈ 1.94).
    let root_turns: usize = trees.iter().map(|t| t.root_turns() as usize).sum();
    let subagents: usize = trees.iter().map(|t| t.agents() - 1).sum();
    let rate = subagents as f64 / root_turns as f64;
    assert!(
        (rate - 0.04 * 1.94).abs() < 0.012,
        "sub-agents per root turn {rate}"
    );
    let bg = trees
        .iter()
        .flat_map(|t| {
            t.requests()
                .iter()
                .filter(|r| r.background)
                .map(|r| r.agent)
                .collect::<std::collections::HashSet<_>>()
        })
        .count();
    let frac = bg as f64 / subagents as f64;
    assert!((frac - 0.1).abs() < 0.04, "background fraction {frac}");
    let sub_first: Vec<_> = turns_only(RequestKind::SubagentTurn)
        .filter(|r| r.deps.len() == 1 && r.think_ns == 0 && r.input_tokens == 22_000)
        .collect();
    assert!(
        !sub_first.is_empty(),
        "sub-agents start from prefix + 2,000 tokens"
    );
    // Compaction keeps every prompt under the threshold plus one turn's growth.
    assert!(all
        .iter()
        .filter(|r| r.kind != RequestKind::Compaction)
        .all(|r| r.input_tokens <= 160_000 + 40_000 + 8_192 + 5 * 500));
}

#[test]
fn synthesised_prompts_share_tokens_exactly_where_blocks_are_shared() {
    let g = Generator::new(WorkloadSpec::synthetic_v1(), 1, 1_048_576).unwrap();
    let t = g.tree(0);
    let v = Vocab::new(10, 151_000).unwrap();
    let (a, b) = (&t.requests()[0], &t.requests()[1]);
    let (ta, tb) = (
        prompt_tokens(t.session_id, a, 64, v),
        prompt_tokens(t.session_id, b, 64, v),
    );
    assert_eq!(ta.len(), a.input_tokens as usize);
    assert_eq!(tb.len(), b.input_tokens as usize);
    let shared = a.blocks.len() * 64;
    assert_eq!(ta[..shared], tb[..shared]);
    let other = g.tree(1);
    let tc = prompt_tokens(other.session_id, &other.requests()[0], 64, v);
    assert_eq!(
        tc[..20_000 / 64 * 64],
        ta[..20_000 / 64 * 64],
        "the system prefix is the same in every session"
    );
}
