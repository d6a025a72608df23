//! Recorded sessions compacted at a shorter context, as their agent would have compacted them there: a
//! pure tree transform (the generator's compaction rule applied to a trace); no IO, no unseeded draw.
//!
//! A session recorded against a long context (the benchmark corpus's 1M-token model) replayed on a
//! server with a shorter one would overflow it; the agent on that server compacts instead. Each agent's
//! requests are walked in order: when a prompt would pass the threshold, a compaction request is sent
//! first (its prompt the agent's earlier prompt that this one continues, and that prompt's answer; its
//! output the summary), and that prompt and the agent's later ones start again from the application
//! prefix, the summary and what the agent carries on (files it reads again: the spec's
//! `carried_tokens`, drawn per compaction from a hash of it), followed by what the prompt had added since
//! the one it continues. Requests keep their outputs, think times and dependencies;
//! the compaction takes the request's dependencies and think time, the request then waits for it alone.

use crate::hash::mix2;
use crate::import::Trace;
use crate::spec::{Dist, WorkloadSpec};
use crate::tree::{Blocks, Request, RequestKind, SessionTree};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Salt of the block ids of a compacted context (mixed with the session and the compaction's number).
const COMPACT_SALT: u64 = 0xC0A1_7AC7_5E55_1000;

/// Salt of the seed of a compaction's carried-tokens draw (mixed with its key).
const CARRY_SALT: u64 = 0xCA77_1ED0_70CE_2000;

/// Where and how an agent compacts: a prompt longer than `threshold` tokens is compacted first, into
/// `summary_tokens`, and the next prompt carries `carried_tokens` besides the prefix and the summary.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionRule {
    /// The deployment's context limit (no request is made longer than it).
    pub context_limit: u32,
    /// The longest prompt an agent sends before compacting.
    pub threshold: u32,
    /// The summary's length.
    pub summary_tokens: u32,
    /// What the first prompt after a compaction carries besides the prefix and the summary (files read
    /// again), one draw per compaction; `None`: nothing.
    pub carried_tokens: Option<Dist>,
    /// Whether the carry stands for the compacting turn's own additions too (the spec's
    /// `compaction.turn_in_carry`); else they come on top of it.
    pub turn_in_carry: bool,
}

impl CompactionRule {
    /// Where `spec`'s agents compact on a `context_limit`-token deployment when the context forces
    /// them: `context_fraction` of it less the reserve (not the spec's own `max_tokens`, which a
    /// recorded session already followed where its own context made it), into `summary_tokens`,
    /// carrying on its `carried_tokens` as its agents do.
    pub fn forced_by(spec: &WorkloadSpec, context_limit: u32) -> CompactionRule {
        CompactionRule {
            context_limit,
            threshold: spec.limit_threshold(context_limit),
            summary_tokens: spec.compaction.summary_tokens,
            carried_tokens: spec.compaction.carried_tokens.clone(),
            turn_in_carry: spec.compaction.turn_in_carry,
        }
    }

    /// Blocks of carried context the compaction keyed `key` adds, when the prompt it precedes adds
    /// `added` blocks of its own and `room` blocks are left below the threshold.
    fn carry_blocks(&self, key: u64, added: usize, room: usize, bs: u32) -> usize {
        let Some(dist) = &self.carried_tokens else {
            return 0;
        };
        let drawn = dist.sample(&mut ChaCha8Rng::seed_from_u64(mix2(key, CARRY_SALT)));
        let blocks = (drawn.max(0.0) / bs as f64) as usize;
        let extra = match self.turn_in_carry {
            true => blocks.saturating_sub(added),
            false => blocks,
        };
        extra.min(room)
    }
}

/// Every tree of `trace` compacted under `rule` ([`compact_tree`]), with what changed.
pub fn compact_trace(trace: &Trace, rule: &CompactionRule) -> (Trace, Compacted) {
    let mut counts = Compacted::default();
    let trees = trace
        .trees()
        .iter()
        .map(|t| {
            let (t, c) = compact_tree(t, rule);
            counts.add(c);
            t
        })
        .collect();
    (Trace::of_shared(trees).expect("a trace has a tree"), counts)
}

/// What compacting changed in a tree or a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Sessions with at least one compaction inserted or prompt cut.
    pub sessions: usize,
    /// Compaction requests inserted.
    pub compactions: usize,
    /// Agents' first prompts cut to the threshold (a session resumed with a long history, a sub-agent
    /// started on a long context).
    pub first_cut: usize,
    /// Later prompts cut to the threshold: one that shares too little with its agent's previous prompt
    /// to be compacted from it, or whose own additions pass the threshold even after compacting.
    pub cut: usize,
}

impl Compacted {
    /// Adds another tree's counts.
    pub fn add(&mut self, other: Compacted) {
        self.sessions += other.sessions;
        self.compactions += other.compactions;
        self.first_cut += other.first_cut;
        self.cut += other.cut;
    }
}

/// One compacted context of an agent: the blocks before `cut` of its anchor's chain became the
/// application prefix (`head`'s first blocks) and the summary (the rest of `head`); later blocks are
/// the originals' ids mixed with `key`.
struct Epoch {
    anchor: Blocks,
    cut: usize,
    head: Vec<u64>,
    key: u64,
    /// Rewritten chains by the original chain's address (requests sharing a chain share its rewrite).
    chains: HashMap<usize, Arc<[u64]>>,
}

impl Epoch {
    /// Whether `r`'s prompt holds this context (it shares the anchor's blocks up to the cut: a block id
    /// names its whole prefix, so the last one before the cut says it).
    fn holds(&self, r: &Request) -> bool {
        let (a, b) = (self.anchor.as_slice(), r.blocks.as_slice());
        self.cut > 0 && b.len() >= self.cut && a[self.cut - 1] == b[self.cut - 1]
    }

    /// Tokens the compaction took out of every prompt of this context.
    fn shift_tokens(&self, block_size: u32) -> u32 {
        (self.cut - self.head.len()) as u32 * block_size
    }

    /// `r` (which [`Epoch::holds`]) rewritten into this context.
    fn rewrite(&mut self, r: &Request, block_size: u32) -> Request {
        let backing = r.blocks.backing();
        let (cut, key) = (self.cut, self.key);
        let head = &self.head;
        let chain = self
            .chains
            .entry(Arc::as_ptr(backing) as *const u64 as usize)
            .or_insert_with(|| {
                head.iter()
                    .copied()
                    .chain(backing[cut..].iter().map(|&id| mix2(key, id)))
                    .collect()
            })
            .clone();
        let len = r.blocks.len() - (cut - self.head.len());
        Request {
            input_tokens: r.input_tokens - self.shift_tokens(block_size),
            blocks: Blocks::prefix_of(chain, len),
            ..r.clone()
        }
    }
}

/// One agent's walk: its requests so far and its compacted contexts.
#[derive(Default)]
struct Agent {
    /// Each earlier request's prompt as recorded, and the request as sent (its index in the output).
    history: Vec<(Blocks, usize)>,
    /// Leading blocks of the agent's first prompt that are the application's prefix.
    prefix_blocks: Option<usize>,
    /// The contexts it compacted into, oldest first.
    epochs: Vec<Epoch>,
}

impl Agent {
    /// The compacted context `r` continues: of those that hold it, the one cut latest.
    fn epoch_of(&mut self, r: &Request) -> Option<&mut Epoch> {
        self.epochs
            .iter_mut()
            .filter(|e| e.holds(r))
            .max_by_key(|e| e.cut)
    }

    /// The earlier request (not a compaction) whose recorded prompt `r` shares most blocks with, and
    /// how many: the conversation `r` continues (an agent's calls may interleave several).
    fn continued(&self, r: &Request, out: &[Request]) -> Option<(usize, usize)> {
        self.history
            .iter()
            .filter(|(_, i)| out[*i].kind != RequestKind::Compaction)
            .map(|(b, i)| (*i, common_blocks(b, &r.blocks)))
            .max_by_key(|&(i, n)| (n, i))
    }
}

/// Leading blocks two prompts share.
fn common_blocks(a: &Blocks, b: &Blocks) -> usize {
    a.as_slice()
        .iter()
        .zip(b.as_slice())
        .take_while(|(x, y)| x == y)
        .count()
}

/// `r` cut to `tokens` (its chain to the blocks that fit).
fn cut_to(r: Request, tokens: u32, block_size: u32) -> Request {
    let blocks = r.blocks.len().min((tokens / block_size) as usize);
    Request {
        input_tokens: tokens,
        blocks: Blocks::prefix_of(r.blocks.backing().clone(), blocks),
        ..r
    }
}

/// `tree` compacted under `rule`, with what changed; the tree itself (shared) when nothing had to, when
/// it is a single request (a request-rate trace's, which no agent sent: it runs as recorded), or when
/// the threshold leaves no room for a summary (a context too short to compact in: its long requests
/// overflow). A tree that gains a compaction loses its recorded clock (only AgentX's protocol reads it,
/// and that protocol replays sessions as recorded); arrival times are kept when no request is inserted.
pub fn compact_tree(
    tree: &Arc<SessionTree>,
    rule: &CompactionRule,
) -> (Arc<SessionTree>, Compacted) {
    let fits = tree
        .requests()
        .iter()
        .all(|r| r.input_tokens <= rule.threshold);
    if fits || tree.len() == 1 || rule.threshold <= rule.summary_tokens {
        return (tree.clone(), Compacted::default());
    }
    let bs = tree.block_size;
    let app: HashSet<u64> = tree.app_prefix().iter().copied().collect();
    let mut agents: HashMap<u32, Agent> = HashMap::new();
    let mut new_id = Vec::with_capacity(tree.len());
    let mut out: Vec<Request> = Vec::with_capacity(tree.len());
    let mut counts = Compacted::default();
    // A sub-agent keeps no more than the root's application prefix: what it read cached beyond that
    // when it started (a forked context) is conversation, and compacts with the rest.
    let mut root_prefix: Option<usize> = None;
    for r in tree.requests() {
        let deps: Vec<u32> = r.deps.iter().map(|&d| new_id[d as usize]).collect();
        let a = agents.entry(r.agent).or_default();
        let own = || {
            r.blocks
                .as_slice()
                .iter()
                .take_while(|id| app.contains(id))
                .count()
        };
        let prefix = *a
            .prefix_blocks
            .get_or_insert_with(|| own().min(root_prefix.unwrap_or(usize::MAX)));
        if r.agent == 0 {
            root_prefix.get_or_insert(prefix);
        }
        let mut sent = match a.epoch_of(r) {
            Some(e) => e.rewrite(r, bs),
            None => r.clone(),
        };
        sent.deps = deps;
        if sent.input_tokens > rule.threshold {
            let key = mix2(
                mix2(COMPACT_SALT, tree.session_id),
                counts.compactions as u64,
            );
            let continued = (r.kind != RequestKind::Compaction)
                .then(|| a.continued(r, &out))
                .flatten();
            let epoch =
                continued.and_then(|(i, cut)| Some((i, new_epoch(r, cut, prefix, rule, bs, key)?)));
            if let Some((i, mut epoch)) = epoch {
                let c_id = out.len() as u32;
                let c = compaction(&out[i], &sent, rule, bs);
                out.push(Request { id: c_id, ..c });
                counts.compactions += 1;
                sent = Request {
                    deps: vec![c_id],
                    think_ns: 0,
                    ..epoch.rewrite(r, bs)
                };
                a.epochs.push(epoch);
            }
            if sent.input_tokens > rule.threshold {
                sent = cut_to(sent, rule.threshold, bs);
                match a.history.is_empty() {
                    true => counts.first_cut += 1,
                    false => counts.cut += 1,
                }
            }
        }
        sent.id = out.len() as u32;
        new_id.push(sent.id);
        a.history.push((r.blocks.clone(), out.len()));
        out.push(sent);
    }
    counts.sessions = 1;
    let mut t = SessionTree::new(tree.session_id, bs, out)
        .expect("compacting keeps a tree valid")
        .with_app_prefix(tree.app_prefix().to_vec());
    if counts.compactions == 0 {
        t = t.with_recorded(tree.recorded().cloned());
        if let Some(arrivals) = tree.arrivals_ns() {
            t = t
                .with_arrivals(arrivals.to_vec())
                .expect("one arrival per request");
        }
    }
    (Arc::new(t), counts)
}

/// The context `r` starts when its agent compacts before it: the `cut` blocks its prompt shares with
/// the conversation it continues become the prefix, the summary and the carried context (new blocks,
/// kept within the threshold). `None` when they would not shorten it.
fn new_epoch(
    r: &Request,
    cut: usize,
    prefix: usize,
    rule: &CompactionRule,
    bs: u32,
    key: u64,
) -> Option<Epoch> {
    let summary_blocks = rule.summary_tokens.div_ceil(bs) as usize;
    let added = r.blocks.len().saturating_sub(cut);
    let room = ((rule.threshold / bs) as usize).saturating_sub(prefix + summary_blocks + added);
    let fresh = summary_blocks + rule.carry_blocks(key, added, room, bs);
    if cut <= prefix + fresh {
        return None;
    }
    let head = r.blocks.as_slice()[..prefix]
        .iter()
        .copied()
        .chain((0..fresh as u64).map(|j| mix2(key, !j)))
        .collect();
    Some(Epoch {
        anchor: r.blocks.clone(),
        cut,
        head,
        key,
        chains: HashMap::new(),
    })
}

/// The compaction request sent before `next`: the previous prompt (as sent) and its answer summarised,
/// taking `next`'s dependencies and think time.
fn compaction(previous: &Request, next: &Request, rule: &CompactionRule, bs: u32) -> Request {
    let room = rule.context_limit.saturating_sub(rule.summary_tokens);
    let input = (previous.input_tokens + previous.output_tokens).min(room);
    let blocks = previous.blocks.len().min((input / bs) as usize);
    Request {
        id: 0,
        agent: next.agent,
        kind: RequestKind::Compaction,
        deps: next.deps.clone(),
        think_ns: next.think_ns,
        input_tokens: input,
        output_tokens: rule.summary_tokens,
        background: next.background,
        turn: next.turn,
        blocks: Blocks::prefix_of(previous.blocks.backing().clone(), blocks),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: u32 = 16;

    fn rule(threshold: u32) -> CompactionRule {
        CompactionRule {
            context_limit: threshold + threshold / 8,
            threshold,
            summary_tokens: 2_000,
            carried_tokens: None,
            turn_in_carry: false,
        }
    }

    /// A request of `agent` whose prompt is the first `input` tokens of `chain`.
    fn request(id: u32, agent: u32, deps: Vec<u32>, input: u32, chain: &Arc<[u64]>) -> Request {
        Request {
            id,
            agent,
            kind: RequestKind::turn_of(agent),
            deps,
            think_ns: 1_000 + id as u64,
            input_tokens: input,
            output_tokens: 500,
            background: false,
            turn: 0,
            blocks: Blocks::prefix_of(chain.clone(), (input / BS) as usize),
        }
    }

    fn chain(salt: u64, blocks: u64, app: u64) -> Arc<[u64]> {
        (0..blocks)
            .map(|i| {
                if i < app {
                    9_000 + i
                } else {
                    salt * 1_000_000 + i
                }
            })
            .collect()
    }

    /// One agent growing 10,000 tokens a turn from 20,000 to 200,000, its first 1,000 tokens the
    /// application's prefix.
    fn growing() -> Arc<SessionTree> {
        let c = chain(1, 200_000 / BS as u64, 1_000 / BS as u64);
        let reqs = (0..19)
            .map(|i| {
                request(
                    i,
                    0,
                    if i == 0 { vec![] } else { vec![i - 1] },
                    20_000 + 10_000 * i,
                    &c,
                )
            })
            .collect();
        let app = (0..1_000 / BS as u64).map(|i| 9_000 + i).collect();
        Arc::new(SessionTree::new(7, BS, reqs).unwrap().with_app_prefix(app))
    }

    #[test]
    fn a_tree_within_the_threshold_is_the_same_tree() {
        let t = growing();
        let (same, counts) = compact_tree(&t, &rule(200_000));
        assert!(Arc::ptr_eq(&t, &same));
        assert_eq!(counts, Compacted::default());
    }

    #[test]
    fn a_growing_agent_compacts_before_passing_the_threshold() {
        let t = growing();
        let (c, counts) = compact_tree(&t, &rule(100_000));
        let reqs = c.requests();
        let turns = reqs.iter().filter(|r| r.kind != RequestKind::Compaction);
        assert!(turns.clone().all(|r| r.input_tokens <= 100_000));
        assert_eq!(turns.count(), 19);
        assert!(reqs
            .iter()
            .all(|r| r.input_tokens + 2_000 <= rule(100_000).context_limit));
        let compactions: Vec<&Request> = reqs
            .iter()
            .filter(|r| r.kind == RequestKind::Compaction)
            .collect();
        assert_eq!(counts.compactions, compactions.len());
        assert_eq!(counts.cut, 0);
        assert_eq!(reqs.len(), 19 + compactions.len());
        // 20K..100K fit; then each compacted context restarts at prefix + summary + 10K and grows 10K a
        // turn: 1,008 + 2,000 + 10,000 (block-rounded) ... up to the threshold.
        assert_eq!(
            compactions[0].input_tokens, 100_500,
            "the previous prompt and its answer"
        );
        assert_eq!(compactions[0].output_tokens, 2_000);
        let after = &reqs[compactions[0].id as usize + 1];
        assert_eq!(after.deps, vec![compactions[0].id]);
        assert_eq!(after.think_ns, 0);
        assert_eq!(compactions[0].think_ns, t.requests()[9].think_ns);
        // The prompt after a compaction: prefix (1,008 tokens: whole blocks of the app prefix... the
        // leading app blocks), the summary's 125 blocks, then what it added since the previous prompt.
        let prefix = (1_000 / BS) as usize;
        assert_eq!(
            &after.blocks.as_slice()[..prefix],
            &t.requests()[0].blocks.as_slice()[..prefix]
        );
        assert_eq!(after.input_tokens, prefix as u32 * BS + 2_000 + 10_000);
        // Later prompts of the context extend it.
        let next = &reqs[compactions[0].id as usize + 2];
        assert_eq!(
            &next.blocks.as_slice()[..after.blocks.len()],
            after.blocks.as_slice()
        );
        assert_eq!(next.input_tokens, after.input_tokens + 10_000);
        // Dependencies still point to the agent's previous request.
        for w in reqs.windows(2) {
            assert_eq!(w[1].deps, vec![w[0].id]);
        }
    }

    #[test]
    fn a_first_prompt_past_the_threshold_is_cut() {
        let c = chain(1, 20_000, 0);
        let reqs = vec![
            request(0, 0, vec![], 150_000, &c),
            request(1, 0, vec![0], 20_000, &chain(2, 20_000, 0)),
        ];
        let t = Arc::new(SessionTree::new(1, BS, reqs).unwrap());
        let (out, counts) = compact_tree(&t, &rule(100_000));
        assert_eq!(
            (counts.compactions, counts.first_cut, counts.cut),
            (0, 1, 0)
        );
        assert_eq!(out.requests()[0].input_tokens, 100_000);
        assert_eq!(out.requests()[0].blocks.len(), 100_000 / BS as usize);
    }

    /// A single request (a request-rate trace's) and a context with no room for a summary run as
    /// recorded.
    #[test]
    fn single_requests_and_tiny_contexts_are_left_as_recorded() {
        let c = chain(1, 20_000, 0);
        let one =
            Arc::new(SessionTree::new(1, BS, vec![request(0, 0, vec![], 150_000, &c)]).unwrap());
        let (same, counts) = compact_tree(&one, &rule(100_000));
        assert!(Arc::ptr_eq(&one, &same) && counts == Compacted::default());
        let tiny = CompactionRule {
            threshold: 1_000,
            ..rule(100_000)
        };
        let (same, counts) = compact_tree(&growing(), &tiny);
        assert_eq!((*same == *growing(), counts), (true, Compacted::default()));
    }

    /// The first prompt after a compaction carries the rule's `carried_tokens` besides the prefix and
    /// the summary: the turn's own additions on top of it, or within it under `turn_in_carry`, new
    /// blocks the context's later prompts share, and never past the threshold.
    #[test]
    fn a_compacted_context_carries_what_the_rule_draws() {
        let after = |carry: f64, turn_in_carry: bool| {
            let r = CompactionRule {
                carried_tokens: Some(Dist::Constant { value: carry }),
                turn_in_carry,
                ..rule(100_000)
            };
            let (c, _) = compact_tree(&growing(), &r);
            let reqs = c.requests().to_vec();
            let i = reqs
                .iter()
                .position(|r| r.kind == RequestKind::Compaction)
                .unwrap();
            (reqs[i + 1].clone(), reqs[i + 2].clone())
        };
        let base = (1_000 / BS) * BS + 2_000;
        assert_eq!(
            after(30_000.0, false).0.input_tokens,
            base + 30_000 + 10_000
        );
        assert_eq!(after(30_000.0, true).0.input_tokens, base + 30_000);
        // A carry smaller than the turn's additions adds nothing under `turn_in_carry`.
        assert_eq!(after(4_000.0, true).0.input_tokens, base + 10_000);
        // The carried blocks are new (nothing cached) and the next prompt extends them.
        let (first, next) = after(30_000.0, true);
        let prefix = (1_000 / BS) as usize;
        let original = growing();
        let recorded = original.requests()[9].blocks.as_slice();
        assert!(first.blocks.as_slice()[prefix..]
            .iter()
            .all(|b| !recorded.contains(b)));
        assert_eq!(
            &next.blocks.as_slice()[..first.blocks.len()],
            first.blocks.as_slice()
        );
        // A carry past the threshold is capped at it.
        let (capped, _) = after(500_000.0, false);
        assert!(capped.input_tokens <= 100_000, "{}", capped.input_tokens);
        assert!(
            capped.input_tokens > 100_000 - BS,
            "{}",
            capped.input_tokens
        );
    }

    #[test]
    fn dependencies_across_agents_follow_the_inserted_requests() {
        // Root 0 spawns sub-agent turns 1..=3 (growing 60K, 90K, 120K), root 4 waits for the last.
        let root = chain(1, 10_000, 0);
        let sub = chain(2, 10_000, 0);
        let reqs = vec![
            request(0, 0, vec![], 30_000, &root),
            request(1, 1, vec![0], 60_000, &sub),
            request(2, 1, vec![1], 90_000, &sub),
            request(3, 1, vec![2], 120_000, &sub),
            request(4, 0, vec![0, 3], 31_000, &root),
        ];
        let t = Arc::new(SessionTree::new(3, BS, reqs).unwrap());
        let (out, counts) = compact_tree(&t, &rule(100_000));
        assert_eq!(counts.compactions, 1);
        let r = out.requests();
        assert_eq!(r.len(), 6);
        assert_eq!(r[3].kind, RequestKind::Compaction);
        assert_eq!((r[3].agent, r[3].deps.clone()), (1, vec![2]));
        assert_eq!(r[4].deps, vec![3]);
        assert_eq!(r[4].input_tokens, 2_000u32.div_ceil(BS) * BS + 30_000);
        assert_eq!(
            r[5].deps,
            vec![0, 4],
            "the root waits for the sub-agent's last request"
        );
        assert_eq!(r[5].input_tokens, 31_000, "the root's context is untouched");
    }

    #[test]
    fn a_recorded_compaction_resets_the_context() {
        // 60K, 90K, then the trace's own compaction and a prompt that starts again from nothing.
        let c = chain(1, 10_000, 0);
        let fresh = chain(5, 10_000, 0);
        let mut reqs = vec![
            request(0, 0, vec![], 60_000, &c),
            request(1, 0, vec![0], 90_000, &c),
            request(2, 0, vec![1], 110_000, &c),
            request(3, 0, vec![2], 20_000, &fresh),
        ];
        reqs[2].kind = RequestKind::Compaction;
        let t = Arc::new(SessionTree::new(4, BS, reqs).unwrap());
        let (out, counts) = compact_tree(&t, &rule(100_000));
        // The recorded compaction is cut to the threshold, not compacted first.
        assert_eq!(
            (counts.compactions, counts.first_cut, counts.cut),
            (0, 0, 1)
        );
        assert_eq!(out.requests()[2].input_tokens, 100_000);
        assert_eq!(out.requests()[3], t.requests()[3]);
    }

    #[test]
    fn compacting_is_deterministic_and_separates_sessions() {
        let a = compact_tree(&growing(), &rule(100_000)).0;
        let b = compact_tree(&growing(), &rule(100_000)).0;
        assert_eq!(*a, *b);
        let other = Arc::new((*growing()).clone().with_session_id(8));
        let o = compact_tree(&other, &rule(100_000)).0;
        let last = |t: &SessionTree| t.requests().last().unwrap().blocks.as_slice().to_vec();
        assert_ne!(
            last(&a),
            last(&o),
            "another session's summaries are its own"
        );
    }
}
