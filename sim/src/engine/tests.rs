//! The replica's unit tests: physical paging and shared-prefix reads over a small pool.

use super::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serverbench_workloads::hash::mix2;
use serverbench_workloads::RequestKind;

/// A small paged replica under pressure: shared prefixes, chunked prefill, preemption, eviction.
/// A paged run's block tables (tag, table) per step entry, and per step the decode re-reads the
/// scheduler's shape counts beside those its block tables show (Σ decode blocks − distinct blocks).
#[allow(clippy::type_complexity)]
fn paged_run(total_blocks: u64, seed: u64) -> (Vec<(u64, Vec<u32>)>, Vec<(u64, u64)>) {
    paged_run_entering(total_blocks, seed, CacheEntry::Prompt)
}

/// [`paged_run`] with prompt blocks entering the prefix cache by `entry`.
#[allow(clippy::type_complexity)]
fn paged_run_entering(
    total_blocks: u64,
    seed: u64,
    entry: CacheEntry,
) -> (Vec<(u64, Vec<u32>)>, Vec<(u64, u64)>) {
    let cfg = EngineConfig {
        cache_entry: entry,
        block_size: 4,
        max_num_batched_tokens: 24,
        max_num_seqs: 6,
        ..EngineConfig::default()
    };
    let opts = ReplicaOptions {
        seed,
        count_shared_reads: true,
        ..ReplicaOptions::default()
    };
    let mut r = Replica::paged(&cfg, total_blocks, opts).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut events = Vec::new();
    let mut tables = Vec::new();
    let mut shared = Vec::new();
    let mut inputs = std::collections::HashMap::new();
    let mut next_tag = 0u64;
    for _ in 0..400 {
        if r.running() + r.waiting() < 8 && rng.random::<f64>() < 0.3 {
            // Prompts share a 3-block system prefix and some share a second-level prefix.
            let family = rng.random_range(0..3u64);
            let own = rng.random_range(0..4u64);
            let mut chain = vec![1, 2, 3, 10 + family];
            for k in 0..own {
                chain.push(mix2(next_tag, k));
            }
            let blocks = serverbench_workloads::hash::chain_ids(&chain, 0);
            let input = chain.len() as u32 * 4 + rng.random_range(0..4u32);
            inputs.insert(next_tag, input);
            r.submit(SeqInput {
                tag: next_tag,
                blocks: Blocks::from_vec(blocks),
                workload_block_size: 4,
                input,
                output: rng.random_range(1..12u32),
                kind: RequestKind::RootTurn,
            });
            next_tag += 1;
        }
        let Some(shape) = r.schedule() else {
            continue;
        };
        let entries: Vec<StepEntry> = r.step_entries().collect();
        let (mut read, mut distinct) = (0u64, std::collections::HashSet::new());
        for e in entries {
            let mut t = Vec::new();
            r.block_table(e.seq, &mut t);
            let used = (e.start + e.tokens).div_ceil(4) as usize;
            assert!(
                t.len() >= used,
                "the table covers every position the step writes"
            );
            if e.tokens == 1 && e.start >= inputs[&e.tag] {
                read += used as u64;
                distinct.extend(t[..used].iter().copied());
            }
            tables.push((e.tag, t));
        }
        shared.push((shape.decode_shared, (read - distinct.len() as u64) * 4));
        r.finish_step(&mut events);
        r.audit().unwrap();
    }
    (tables, shared)
}

#[test]
fn physical_paging_keeps_every_block_in_one_place() {
    for seed in 0..8 {
        paged_run(40, seed);
    }
}

/// Blocks that enter the cache as their chunk is scheduled (vLLM) keep the same bookkeeping under
/// the same pressure, preemption included.
#[test]
fn blocks_entered_when_scheduled_keep_every_block_in_one_place() {
    for seed in 0..8 {
        paged_run_entering(40, seed, CacheEntry::Scheduled);
    }
}

#[test]
fn decode_steps_count_the_shared_prefix_reads_their_block_tables_show() {
    let (_, shared) = paged_run(400, 3);
    for (i, &(sim, tables)) in shared.iter().enumerate() {
        assert_eq!(sim, tables, "step {i}: repeated decode reads");
    }
    let sharing = shared.iter().filter(|s| s.0 > 0).count();
    assert!(sharing > 20, "only {sharing} steps re-read a shared block");
}

#[test]
fn sequences_with_a_cached_prefix_read_the_same_physical_blocks() {
    let (tables, _) = paged_run(400, 3);
    // The shared 3-block system prefix (12 tokens = 3 engine blocks) sits in the same blocks for
    // every sequence that found it cached.
    let firsts: std::collections::HashSet<Vec<u32>> = tables
        .iter()
        .filter(|(_, t)| t.len() >= 3)
        .map(|(_, t)| t[..3].to_vec())
        .collect();
    assert!(
        firsts.len() < tables.len() / 4,
        "prefix blocks are reused: {} distinct prefixes over {} steps",
        firsts.len(),
        tables.len()
    );
}

#[test]
fn a_cancelled_sequence_gives_back_every_block() {
    let cfg = EngineConfig {
        block_size: 4,
        max_num_batched_tokens: 16,
        ..EngineConfig::default()
    };
    let mut r = Replica::paged(&cfg, 64, ReplicaOptions::default()).unwrap();
    let submit = |r: &mut Replica, tag: u64| {
        r.submit(SeqInput {
            tag,
            blocks: Blocks::from_vec(vec![tag * 10 + 1, tag * 10 + 2]),
            workload_block_size: 4,
            input: 10,
            output: 50,
            kind: RequestKind::RootTurn,
        })
    };
    let (a, b) = (submit(&mut r, 1), submit(&mut r, 2));
    let mut events = Vec::new();
    for _ in 0..3 {
        r.schedule().unwrap();
        r.finish_step(&mut events);
    }
    let before = r.used_blocks();
    assert!(r.cancel(a), "a running sequence");
    assert!(r.used_blocks() < before);
    assert!(!r.cancel(a), "already gone");
    r.audit().unwrap();
    assert_eq!(r.running(), 1);
    assert!(r.cancel(b));
    r.audit().unwrap();
    assert!(!r.has_work());
    // Only the prompts' cached blocks stay (unreferenced, evictable); nothing is held.
    assert_eq!(r.kv_available_blocks(), r.total_blocks());
    let c = submit(&mut r, 3);
    assert!(r.cancel(c), "a waiting sequence");
    r.audit().unwrap();
}

/// Runs `a` (a long prompt that leaves under 15 % of the pool free once it decodes) and submits `b`,
/// small enough to fit, after a's first step; returns the step at which `b` first ran.
fn step_b_starts(policy: Policy) -> usize {
    let cfg = EngineConfig {
        policy,
        block_size: 4,
        max_num_batched_tokens: 128,
        prefix_caching: false,
        ..EngineConfig::default()
    };
    let mut r = Replica::paged(&cfg, 20, ReplicaOptions::default()).unwrap();
    let input = |tag: u64, tokens: u32, output: u32| SeqInput {
        tag,
        blocks: Blocks::from_vec(vec![]),
        workload_block_size: 4,
        input: tokens,
        output,
        kind: RequestKind::RootTurn,
    };
    r.submit(input(1, 68, 8));
    let mut events = Vec::new();
    for step in 0..40 {
        if step == 2 {
            r.submit(input(2, 4, 2));
        }
        if r.schedule().is_none() {
            break;
        }
        if r.step_entries().any(|e| e.tag == 2) {
            return step;
        }
        r.finish_step(&mut events);
        r.audit().unwrap();
    }
    usize::MAX
}

#[test]
fn transformers_admits_no_prefill_below_its_safety_margin() {
    // vLLM admits the small request as soon as it fits; transformers' FIFO scheduler waits while under
    // 15 % of the blocks are free and the step already decodes (here until the long request ends).
    assert_eq!(step_b_starts(Policy::VLLM), 2);
    let t = step_b_starts(Policy::TRANSFORMERS);
    assert!(
        (8..usize::MAX).contains(&t),
        "transformers started b at step {t}"
    );
}

#[test]
fn a_one_token_request_leaves_its_last_chunk_uncached_in_transformers_only() {
    let tf = Policy::TRANSFORMERS.get();
    assert_eq!(tf.warm_tokens(20_000, 8192), 16_384);
    assert_eq!(tf.warm_tokens(8192, 8192), 0);
    assert_eq!(tf.warm_tokens(8193, 8192), 8192);
    assert_eq!(tf.warm_tokens(0, 8192), 0);
    for p in [Policy::VLLM, Policy::SGLANG] {
        assert_eq!(p.get().warm_tokens(20_000, 8192), 20_000, "{p}");
    }
}

/// With one sequence slot, the tag that runs first after a cached request: `x` (nothing cached)
/// arrived before `y` (which extends the cached request's prompt).
fn first_after_cached(order: Option<WaitingOrder>) -> u64 {
    let cfg = EngineConfig {
        policy: Policy::SGLANG,
        block_size: 4,
        max_num_batched_tokens: 64,
        max_num_seqs: 1,
        waiting_order: order,
        ..EngineConfig::default()
    };
    let mut r = Replica::paged(&cfg, 64, ReplicaOptions::default()).unwrap();
    let input = |tag: u64, chain: &[u64], output: u32| SeqInput {
        tag,
        blocks: Blocks::from_vec(serverbench_workloads::hash::chain_ids(chain, 0)),
        workload_block_size: 4,
        input: chain.len() as u32 * 4,
        output,
        kind: RequestKind::RootTurn,
    };
    let mut events = Vec::new();
    r.submit(input(0, &[1, 2, 3, 4], 1));
    while r.schedule().is_some() {
        r.finish_step(&mut events);
    }
    r.submit(input(1, &[7, 8, 9, 10, 11], 1));
    r.submit(input(2, &[1, 2, 3, 4, 5], 1));
    r.schedule().expect("a waiting request runs");
    let tags: Vec<u64> = r.step_entries().map(|e| e.tag).collect();
    assert_eq!(tags.len(), 1, "one slot");
    tags[0]
}

#[test]
fn sglang_serves_the_longest_cached_prefix_first_unless_fcfs() {
    assert_eq!(
        first_after_cached(None),
        2,
        "lpm: the request extending the cached prompt"
    );
    assert_eq!(first_after_cached(Some(WaitingOrder::Lpm)), 2);
    assert_eq!(
        first_after_cached(Some(WaitingOrder::Fcfs)),
        1,
        "fcfs: arrival order"
    );
    let bad = EngineConfig {
        waiting_order: Some(WaitingOrder::Lpm),
        ..EngineConfig::default()
    };
    assert!(bad
        .check()
        .unwrap_err()
        .to_string()
        .contains("waiting_order"));
}

/// Runs `prompt` then `prompt` extended by one block, each with `output` tokens, on a sliding-window
/// replica (window 16, chunks of 8, blocks of 4) with SGLang's eviction interval `interval`; returns
/// the second request's cached prompt tokens.
fn second_turn_hit(output: u32, interval: Option<u32>) -> u64 {
    let cfg = EngineConfig {
        block_size: 4,
        max_num_batched_tokens: 8,
        max_num_seqs: 4,
        sliding_window_eviction_interval: interval,
        ..EngineConfig::default()
    };
    let geometry = Geometry {
        total_blocks: 1000,
        state_blocks: 0,
        window: Some(16),
        paged: false,
    };
    let mut r = Replica::with_geometry(
        &cfg,
        geometry,
        SwapSpace::default(),
        ReplicaOptions::default(),
    );
    let chain: Vec<u64> = (1..=9).collect();
    let mut events = Vec::new();
    for (tag, blocks) in [(0u64, 8usize), (1, 9)] {
        let ids = serverbench_workloads::hash::chain_ids(&chain[..blocks], 0);
        r.submit(SeqInput {
            tag,
            blocks: Blocks::from_vec(ids),
            workload_block_size: 4,
            input: blocks as u32 * 4,
            output,
            kind: RequestKind::RootTurn,
        });
        let before = r.stats.hit_tokens;
        loop {
            if r.schedule().is_some() {
                r.finish_step(&mut events);
            }
            if events
                .iter()
                .any(|e| matches!(e, SeqEvent::Finished { tag: t, .. } if *t == tag))
            {
                break;
            }
        }
        if tag == 1 {
            return r.stats.hit_tokens - before;
        }
    }
    unreachable!()
}

/// SGLang frees a sliding-window request's KV behind its window while it decodes: a prompt's last
/// prefill chunk (tokens 24–31 of 32 here) stays hittable only if it and the output stay under the
/// window plus the eviction interval; the chunks before it entered the cache as they were computed.
#[test]
fn a_long_answer_leaves_the_last_prefill_chunk_unhittable_on_sliding_windows() {
    // 8 chunk tokens + 30 output > 16 + 4: the hit ends where the last chunk began.
    assert_eq!(second_turn_hit(30, Some(4)), 24);
    // 8 + 2 ≤ 16 + 4: the whole prompt hits.
    assert_eq!(second_turn_hit(2, Some(4)), 32);
    // Without the setting a whole prompt stays hittable.
    assert_eq!(second_turn_hit(30, None), 32);
}

/// Prompt tokens computed by each of three requests submitted together, whose 48-token prompts share
/// their first 40 tokens, on a budget of 32 tokens a step (blocks of 4), with a paged pool when
/// `paged`, checking the bookkeeping after every step.
fn shared_prompt_work(entry: CacheEntry, paged: bool) -> Vec<u32> {
    let cfg = EngineConfig {
        block_size: 4,
        max_num_batched_tokens: 32,
        cache_entry: entry,
        ..EngineConfig::default()
    };
    let geometry = Geometry {
        total_blocks: 256,
        state_blocks: 0,
        window: None,
        paged,
    };
    let opts = ReplicaOptions::default();
    let mut r = Replica::with_geometry(&cfg, geometry, SwapSpace::default(), opts);
    for tag in 0..3u64 {
        let mut chain: Vec<u64> = (1..=10).collect();
        chain.extend([100 + 2 * tag, 101 + 2 * tag]);
        r.submit(SeqInput {
            tag,
            blocks: Blocks::from_vec(serverbench_workloads::hash::chain_ids(&chain, 0)),
            workload_block_size: 4,
            input: 48,
            output: 2,
            kind: RequestKind::RootTurn,
        });
    }
    let mut work = vec![0u32; 3];
    let mut events = Vec::new();
    while r.schedule().is_some() {
        for e in r.step_entries() {
            if e.start < 48 {
                work[e.tag as usize] += e.tokens;
            }
        }
        r.finish_step(&mut events);
        r.audit().unwrap();
    }
    work
}

/// vLLM enters a chunk's blocks into the prefix cache when it schedules the chunk: the second and
/// third requests, admitted in the step that schedules the first one's last chunk, find its 40 shared
/// tokens and compute their own 8. With blocks entering once a prompt is computed, the second request
/// (admitted in that same step) computes the shared part again; the third comes after.
#[test]
fn blocks_entered_when_scheduled_let_a_shared_prompt_be_computed_once() {
    for paged in [false, true] {
        assert_eq!(
            shared_prompt_work(CacheEntry::Scheduled, paged),
            [48, 8, 8],
            "paged {paged}"
        );
        assert_eq!(
            shared_prompt_work(CacheEntry::Prompt, paged),
            [48, 48, 8],
            "paged {paged}"
        );
    }
}
