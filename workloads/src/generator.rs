//! The seeded `agentic-coding` generator: tree `k` of seed `s` is a pure function of (spec, s, k, context limit).

use crate::hash::{mix2, mix64};
use crate::spec::{
    resumed_share_of, shape_first_prompt, shape_is_resumed, Thresholds, WorkloadSpec, MAX_FANOUT,
    MAX_PART_TOKENS, MAX_THINK_S, MAX_TURNS,
};
use crate::tree::{Blocks, Request, RequestKind, SessionTree};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serverbench_config::FieldError;
use std::sync::Arc;

/// Salt of the block ids of the shared system + tools prefix (the same in every session and seed).
const GLOBAL_PREFIX_SALT: u64 = 0x5157_E11A_9EF1_0000;
/// Salt of the sub-agents' own shared prefix (`subagents.prefix_tokens`).
const SUBAGENT_PREFIX_SALT: u64 = 0x5AB_A6E7_9EF1_0000;

/// Block `p` of the shared prefix salted `salt` (the same in every tree that starts with it).
fn prefix_block(salt: u64, p: u64) -> u64 {
    mix2(salt, p)
}

/// An endless stream of session trees, indexed by position.
pub trait TreeSource: Send + Sync {
    /// Tree number `k` of the stream; the same `k` always gives the same tree.
    fn tree(&self, k: u64) -> Arc<SessionTree>;
    /// How many distinct trees the stream has before it repeats (a trace's length); `None` for an
    /// endless generator. A replay of recorded arrivals plays each of them once.
    fn finite_len(&self) -> Option<u64> {
        None
    }
}

/// The `agentic-coding` generator for one seed.
#[derive(Clone, Debug)]
pub struct Generator {
    spec: WorkloadSpec,
    seed: u64,
    /// Where sessions compact on this deployment.
    thresholds: Thresholds,
    /// The deployment's context limit: a spec with `max_request_tokens` leaves out longer requests too.
    context_limit: u32,
}

impl Generator {
    /// A generator for `seed`; compaction happens at `spec.compaction_threshold(context_limit)`.
    pub fn new(spec: WorkloadSpec, seed: u64, context_limit: u32) -> Result<Self, FieldError> {
        spec.check()?;
        spec.check_context(context_limit)?;
        Ok(Generator {
            thresholds: spec.thresholds(context_limit),
            spec,
            seed,
            context_limit,
        })
    }

    /// The spec this generator draws from.
    pub fn spec(&self) -> &WorkloadSpec {
        &self.spec
    }

    /// Builds tree `k` of this generator's seed.
    pub fn generate(&self, k: u64) -> SessionTree {
        let mut b = Builder {
            spec: &self.spec,
            threshold: self.thresholds.default,
            rng: ChaCha8Rng::seed_from_u64(mix2(self.seed, k)),
            tree_key: mix2(mix64(self.seed ^ 0xA6E7), k),
            requests: Vec::new(),
            epochs: Vec::new(),
            request_epoch: Vec::new(),
            next_agent: 1,
            thresholds: self.thresholds,
            think_speed: None,
            root_prefix: (self.spec.system_prefix_tokens, GLOBAL_PREFIX_SALT),
        };
        b.root();
        let app = b.app_prefix();
        let mut requests = b.finish();
        if let Some(limit) = self.spec.max_request_tokens {
            requests = leave_out_longer(requests, limit.min(self.context_limit));
        }
        SessionTree::new(k, self.spec.block_size, requests)
            .expect("the generator builds valid trees")
            .with_app_prefix(app)
    }
}

impl TreeSource for Generator {
    fn tree(&self, k: u64) -> Arc<SessionTree> {
        Arc::new(self.generate(k))
    }
}

/// One append-only agent context: a block chain that later turns extend.
struct Epoch {
    key: u64,
    max_blocks: usize,
    /// Leading blocks that are the shared prefix, and its salt.
    prefix_blocks: usize,
    prefix_salt: u64,
    /// A changed history: the first blocks are those of an earlier epoch.
    parent: Option<(usize, usize)>,
}

/// The context an agent carries from turn to turn.
struct Context {
    agent: u32,
    epoch: usize,
    tokens: u32,
    /// The root turn the context last served (a sub-agent's stays 0: its growth has no early
    /// tiers).
    turn: u32,
}

struct Turn {
    kind: RequestKind,
    deps: Vec<u32>,
    think_ns: u64,
    output: u32,
    background: bool,
    turn: u32,
}

struct Builder<'a> {
    spec: &'a WorkloadSpec,
    threshold: u32,
    rng: ChaCha8Rng,
    tree_key: u64,
    requests: Vec<Request>,
    epochs: Vec<Epoch>,
    request_epoch: Vec<usize>,
    next_agent: u32,
    /// Bounds of a session's own compaction threshold.
    thresholds: Thresholds,
    /// The session's own speed (`session_think_speeds`), `think_time_s`' median and largest value.
    think_speed: Option<([f64; 2], f64, f64)>,
    /// The root's application prefix, tokens, and the salt of its block ids: `system_prefix_tokens`,
    /// or its shape row's own (`session_app_prefixes`), shared by the sessions of equal length.
    root_prefix: (u32, u64),
}

impl<'a> Builder<'a> {
    fn new_context(&mut self, agent: u32, after_prefix: u32) -> Context {
        let epoch = self.new_epoch(agent, None);
        Context {
            agent,
            epoch,
            tokens: self.prefix_tokens(agent) + after_prefix,
            turn: 0,
        }
    }

    /// The shared prefix an agent's context starts with: the root's system + tools prefix, or the
    /// sub-agents' own where the spec has one.
    fn prefix_tokens(&self, agent: u32) -> u32 {
        match (agent, self.spec.subagents.prefix_tokens) {
            (0, _) | (_, None) => self.root_prefix.0,
            (_, Some(t)) => t,
        }
    }

    /// The block ids of the shared prefixes this tree's agents start with (the root's, and the
    /// sub-agents' own where the spec has one), declared the tree's application prefix so that a tree
    /// written out (`workload export --format corpus`) keeps what it shares with other sessions; none
    /// where the spec says its corpus declares none (`declared_prefix: false`).
    fn app_prefix(&self) -> Vec<u64> {
        if self.spec.declared_prefix == Some(false) {
            return Vec::new();
        }
        let bs = self.spec.block_size;
        let blocks =
            |tokens: u32, salt: u64| (0..(tokens / bs) as u64).map(move |p| prefix_block(salt, p));
        let own = self.spec.subagents.prefix_tokens.unwrap_or(0);
        blocks(self.root_prefix.0, self.root_prefix.1)
            .chain(blocks(own, SUBAGENT_PREFIX_SALT))
            .collect()
    }

    fn new_epoch(&mut self, agent: u32, parent: Option<(usize, usize)>) -> usize {
        let key = mix2(
            self.tree_key,
            ((agent as u64) << 32) | self.epochs.len() as u64,
        );
        let own = agent > 0 && self.spec.subagents.prefix_tokens.is_some();
        self.epochs.push(Epoch {
            key,
            max_blocks: 0,
            prefix_blocks: (self.prefix_tokens(agent) / self.spec.block_size) as usize,
            prefix_salt: if own {
                SUBAGENT_PREFIX_SALT
            } else {
                self.root_prefix.1
            },
            parent,
        });
        self.epochs.len() - 1
    }

    /// The measured growth model of an agent's turns, if the spec has one.
    fn growth(&self, agent: u32) -> Option<&'a crate::spec::NewTokens> {
        let s: &'a WorkloadSpec = self.spec;
        match agent {
            0 => s.new_tokens.as_ref(),
            _ => s.subagents.new_tokens.as_ref().or(s.new_tokens.as_ref()),
        }
    }

    /// The growth model of the context's next turn: for the root's, its early tier's where the spec
    /// measured one apart (`new_tokens.early`).
    fn growth_of(&self, ctx: &Context) -> Option<&'a crate::spec::NewTokens> {
        let g = self.growth(ctx.agent)?;
        Some(match ctx.agent {
            0 => g.of_turn(ctx.turn + 1),
            _ => g,
        })
    }

    /// Tokens a later turn of the context adds: a tool result (the previous output was added when it
    /// was produced), or under a measured growth model the answer and tool results together, drawn for
    /// the context's size.
    fn added_tokens(&mut self, ctx: &Context) -> u32 {
        let dist = match self.growth_of(ctx) {
            Some(g) => g.band(ctx.tokens),
            None => &self.spec.tool_result_tokens,
        };
        dist.sample_count(&mut self.rng, 0, MAX_PART_TOKENS)
    }

    /// Under a measured growth model, a turn may change its history: the context goes on in a new
    /// chain that shares only the first part of the previous prompt.
    fn maybe_rewrite(&mut self, ctx: &mut Context) {
        let Some(g) = self.growth_of(ctx) else {
            return;
        };
        if g.rewrite_probability == 0.0 || self.rng.random::<f64>() >= g.rewrite_probability {
            return;
        }
        let kept = g
            .rewrite_kept_fraction
            .sample(&mut self.rng)
            .clamp(0.0, 1.0);
        let blocks = ((kept * ctx.tokens as f64) as u32 / self.spec.block_size) as usize;
        ctx.epoch = self.new_epoch(ctx.agent, Some((ctx.epoch, blocks)));
    }

    /// Output tokens of one of the agent's turns.
    fn output_tokens(&mut self, agent: u32) -> u32 {
        let spec: &'a WorkloadSpec = self.spec;
        let d = match (agent, &spec.subagents.output_tokens) {
            (0, _) | (_, None) => &spec.output_tokens,
            (_, Some(d)) => d,
        };
        d.sample_count(&mut self.rng, 1, MAX_PART_TOKENS)
    }

    /// Under a measured growth model, `tokens` capped at `room` (a quantity measured on contexts longer
    /// than this deployment's must fit it); the hand-set model's draws are kept as they are.
    fn within(&self, agent: u32, tokens: u32, room: u32) -> u32 {
        match self.growth(agent) {
            Some(_) => tokens.min(room),
            None => tokens,
        }
    }

    /// After a turn: its output becomes part of the context, unless the growth model counts it in
    /// the next turn's new tokens.
    fn keep_output(&self, ctx: &mut Context, output: u32) {
        if self.growth(ctx.agent).is_none() {
            ctx.tokens += output;
        }
    }

    fn think_ns(&mut self) -> u64 {
        let g = self.spec.think_time_s.sample(&mut self.rng);
        let g = match self.think_speed {
            Some((speed, median, longest)) => crate::speed::think_of(speed, median, longest, g),
            None => g,
        };
        (g.min(MAX_THINK_S) * 1e9).round() as u64
    }

    fn push(&mut self, ctx: &Context, t: Turn) -> u32 {
        let id = self.requests.len() as u32;
        let blocks = (ctx.tokens / self.spec.block_size) as usize;
        let epoch = &mut self.epochs[ctx.epoch];
        epoch.max_blocks = epoch.max_blocks.max(blocks);
        self.request_epoch.push(ctx.epoch);
        self.requests.push(Request {
            id,
            agent: ctx.agent,
            kind: t.kind,
            deps: t.deps,
            think_ns: t.think_ns,
            blocks: Blocks::from_vec(vec![blocks as u64]), // placeholder length, replaced in finish()
            input_tokens: ctx.tokens,
            output_tokens: t.output,
            background: t.background,
            turn: t.turn,
        });
        id
    }

    /// Grows the context by `added` tokens before the next turn, compacting first when it would pass
    /// the threshold. Returns the dependencies and think time the next turn should use.
    fn advance(
        &mut self,
        ctx: &mut Context,
        deps: Vec<u32>,
        added: u32,
        turn: u32,
        background: bool,
    ) -> (Vec<u32>, u64) {
        let think = self.think_ns();
        if ctx.tokens.saturating_add(added) <= self.threshold {
            self.maybe_rewrite(ctx);
            ctx.tokens += added;
            return (deps, think);
        }
        let summary = self.spec.compaction.summary_tokens;
        let c = self.push(
            ctx,
            Turn {
                kind: RequestKind::Compaction,
                deps,
                think_ns: think,
                output: summary,
                background,
                turn,
            },
        );
        ctx.epoch = self.new_epoch(ctx.agent, None);
        // Carried tokens measured with the turn's additions in them (`turn_in_carry`) stand for those too.
        let (carried, added) = match &self.spec.compaction.carried_tokens {
            Some(d) => {
                let carried = d.sample_count(&mut self.rng, 0, MAX_PART_TOKENS);
                (
                    carried,
                    if self.spec.compaction.turn_in_carry {
                        0
                    } else {
                        added
                    },
                )
            }
            None => (0, added),
        };
        // What a compacted context carries never takes it past the most the deployment's context lets
        // an agent hold (a shorter context than the corpus's sessions compacted in would otherwise see
        // the next turn and compaction overflow it).
        let head = self.prefix_tokens(ctx.agent) + summary;
        let carried = carried.min(self.thresholds.limit.saturating_sub(head));
        let base = head.saturating_add(carried);
        // Under a measured growth model one turn never adds more than a compacted context has room
        // for (an agent whose tool output overflows its whole context could not go on).
        let added = self.within(ctx.agent, added, self.threshold.saturating_sub(base));
        ctx.tokens = base.saturating_add(added);
        (vec![c], 0)
    }

    /// A session's measured shape: a row drawn uniformly, or, where `resumed_share` differs from the
    /// rows' own share, the kind first (resumed with that probability) and then a row of that kind.
    /// The row's index is returned beside it (its speed, `session_think_speeds`, is the same row's).
    fn shape(&mut self, rows: &[[f64; 3]]) -> (usize, [f64; 3]) {
        let share = self
            .spec
            .resumed_share
            .filter(|&p| p != resumed_share_of(rows));
        let Some(p) = share else {
            let i = self.rng.random_range(0..rows.len());
            return (i, rows[i]);
        };
        let resumed = self.rng.random::<f64>() < p;
        let kind: Vec<usize> = (0..rows.len())
            .filter(|&i| shape_is_resumed(&rows[i]) == resumed)
            .collect();
        let i = kind[self.rng.random_range(0..kind.len())];
        (i, rows[i])
    }

    fn root(&mut self) {
        let spec = self.spec;
        let (turns, first) = match &spec.session_shapes {
            Some(rows) => {
                let (i, r) = self.shape(rows);
                self.threshold = self.thresholds.of_shape(r[2]);
                if let Some(speeds) = &spec.session_think_speeds {
                    let t = &spec.think_time_s;
                    let longest = t.upper().unwrap_or(f64::INFINITY);
                    self.think_speed = Some((speeds[i], t.median().unwrap_or(1.0), longest));
                }
                if let Some(prefixes) = &spec.session_app_prefixes {
                    let t = prefixes[i];
                    self.root_prefix = (t, mix2(GLOBAL_PREFIX_SALT, t as u64));
                }
                (
                    (r[1].round() as u32).clamp(1, MAX_TURNS),
                    shape_first_prompt(&r),
                )
            }
            None => {
                let turns = spec.root_turns.sample_count(&mut self.rng, 1, MAX_TURNS);
                let first =
                    spec.first_prompt_tokens
                        .sample_count(&mut self.rng, 1, MAX_PART_TOKENS);
                (turns, first)
            }
        };
        // A measured session resumed from a longer history than this deployment's context holds
        // starts from what its context holds.
        let room = self.threshold.saturating_sub(self.prefix_tokens(0)).max(1);
        let first = self.within(0, first, room);
        let mut ctx = self.new_context(0, first);
        // Drawn only where the spec has the field, so that specs without it keep their streams.
        let spawning = match spec.subagents.session_probability {
            Some(p) => self.rng.random::<f64>() < p,
            None => true,
        };
        let spawn_p = match spec.subagents.spawn_spread {
            Some(sigma) => {
                let z: f64 = self.rng.sample(rand_distr::StandardNormal);
                (spec.subagents.spawn_probability * (sigma * z).exp()).min(1.0)
            }
            None => spec.subagents.spawn_probability,
        };
        // The turn a session that uses sub-agents spawns at for certain (drawn only where the spec has
        // the field, so that specs without it keep their streams).
        let first_spawn = match (&spec.subagents.first_spawn_at, spawning) {
            (Some(d), true) => {
                let f = d.sample(&mut self.rng).clamp(0.0, 1.0);
                Some(((f * turns as f64) as u32).min(turns - 1))
            }
            _ => None,
        };
        let mut deps = Vec::new();
        let mut think_ns = 0;
        for turn in 0..turns {
            if turn > 0 {
                let joined = deps.len().saturating_sub(1) as u32;
                let added = self.added_tokens(&ctx) + joined * spec.subagents.result_tokens;
                (deps, think_ns) =
                    self.advance(&mut ctx, std::mem::take(&mut deps), added, turn, false);
            }
            let output = self.output_tokens(0);
            let id = self.push(
                &ctx,
                Turn {
                    kind: RequestKind::RootTurn,
                    deps: std::mem::take(&mut deps),
                    think_ns,
                    output,
                    background: false,
                    turn,
                },
            );
            self.keep_output(&mut ctx, output);
            ctx.turn = turn;
            deps.push(id);
            if spawning && (first_spawn == Some(turn) || self.rng.random::<f64>() < spawn_p) {
                let fanout = spec
                    .subagents
                    .fanout
                    .sample_count(&mut self.rng, 1, MAX_FANOUT);
                for _ in 0..fanout {
                    let background = self.rng.random::<f64>() < spec.subagents.background_fraction;
                    let last = self.subagent(id, background, turn);
                    if !background {
                        deps.push(last);
                    }
                }
            }
        }
    }

    /// Runs one sub-agent spawned by request `parent`; returns its last request.
    fn subagent(&mut self, parent: u32, background: bool, turn: u32) -> u32 {
        let spec = self.spec;
        let agent = self.next_agent;
        self.next_agent += 1;
        let turns = spec
            .subagents
            .turns
            .sample_count(&mut self.rng, 1, MAX_TURNS);
        let task = match &spec.subagents.task_prompt_tokens {
            Some(d) => d.sample_count(&mut self.rng, 1, MAX_PART_TOKENS),
            None => spec.subagents.first_prompt_tokens,
        };
        let room = self
            .threshold
            .saturating_sub(self.prefix_tokens(agent))
            .max(1);
        let task = self.within(agent, task, room);
        let mut ctx = self.new_context(agent, task);
        let mut deps = vec![parent];
        let mut think_ns = 0;
        let mut last = parent;
        for j in 0..turns {
            if j > 0 {
                let added = self.added_tokens(&ctx);
                (deps, think_ns) = self.advance(&mut ctx, vec![last], added, turn, background);
            }
            let output = self.output_tokens(agent);
            last = self.push(
                &ctx,
                Turn {
                    kind: RequestKind::SubagentTurn,
                    deps: std::mem::take(&mut deps),
                    think_ns,
                    output,
                    background,
                    turn,
                },
            );
            self.keep_output(&mut ctx, output);
        }
        last
    }

    /// Builds one block chain per context epoch (a changed history starts with its parent's first
    /// blocks) and points every request at its prefix.
    fn finish(self) -> Vec<Request> {
        let mut chains: Vec<Arc<[u64]>> = Vec::with_capacity(self.epochs.len());
        for e in &self.epochs {
            let (parent, kept) = e.parent.unwrap_or((0, 0));
            let chain: Arc<[u64]> = (0..e.max_blocks)
                .map(|p| {
                    if p < kept && p < chains[parent].len() {
                        chains[parent][p]
                    } else if p < e.prefix_blocks {
                        prefix_block(e.prefix_salt, p as u64)
                    } else {
                        mix2(e.key, p as u64)
                    }
                })
                .collect();
            chains.push(chain);
        }
        let mut requests = self.requests;
        for (r, &e) in requests.iter_mut().zip(&self.request_epoch) {
            let len = r.blocks.as_slice()[0] as usize;
            r.blocks = Blocks::prefix_of(chains[e].clone(), len);
        }
        requests
    }
}

/// `requests` without those (but the first) whose prompt plus output exceed `limit`: a request that
/// waited for a left-out one waits for what that one waited for, after both think times.
fn leave_out_longer(requests: Vec<Request>, limit: u32) -> Vec<Request> {
    let n = requests.len();
    // Per request: its new id if kept; if left out, what it waited for (new ids) and its think time
    // with that of the left-out requests it waited for.
    let mut new_id: Vec<Option<u32>> = vec![None; n];
    let mut waited: Vec<(Vec<u32>, u64)> = vec![(Vec::new(), 0); n];
    let mut out = Vec::with_capacity(n);
    for (i, mut r) in requests.into_iter().enumerate() {
        let mut deps = Vec::with_capacity(r.deps.len());
        let mut carried = 0u64;
        for &d in &r.deps {
            match new_id[d as usize] {
                Some(k) => deps.push(k),
                None => {
                    let (w, t) = &waited[d as usize];
                    deps.extend_from_slice(w);
                    carried = carried.max(*t);
                }
            }
        }
        deps.sort_unstable();
        deps.dedup();
        let think = r.think_ns.saturating_add(carried);
        if i > 0 && r.input_tokens as u64 + r.output_tokens as u64 > limit as u64 {
            waited[i] = (deps, think);
            continue;
        }
        new_id[i] = Some(out.len() as u32);
        r.id = out.len() as u32;
        r.deps = deps;
        r.think_ns = think;
        out.push(r);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(seed: u64) -> Generator {
        Generator::new(WorkloadSpec::synthetic_v1(), seed, 1_048_576).unwrap()
    }

    #[test]
    fn requests_left_out_pass_their_dependencies_and_think_time_on() {
        let spec = WorkloadSpec {
            max_request_tokens: Some(30_000),
            ..WorkloadSpec::synthetic_v1()
        };
        let full = gen(3).generate(0);
        let cut = Generator::new(spec.clone(), 3, 1_048_576)
            .unwrap()
            .generate(0);
        let long = |r: &Request| r.input_tokens + r.output_tokens > 30_000;
        assert!(
            full.requests().iter().skip(1).any(long),
            "the case leaves some out"
        );
        assert!(cut.requests().iter().skip(1).all(|r| !long(r)));
        assert_eq!(
            cut.requests()[0],
            full.requests()[0],
            "the first is always kept"
        );
        // Every dependency points at an earlier kept request; the tree is valid (SessionTree::new).
        for r in cut.requests() {
            assert!(r.deps.iter().all(|&d| d < r.id));
        }
        // The deployment's context leaves out longer requests too, for such a spec.
        let small = Generator::new(spec, 3, 40_000).unwrap().generate(0);
        assert!(small
            .requests()
            .iter()
            .skip(1)
            .all(|r| r.input_tokens + r.output_tokens <= 30_000));
    }

    #[test]
    fn a_session_share_of_sub_agents_spawns_in_that_share_of_sessions() {
        let mut spec = WorkloadSpec::synthetic_v1();
        spec.subagents.spawn_probability = 0.5;
        spec.subagents.session_probability = Some(0.3);
        spec.subagents.spawn_spread = Some(0.5);
        let g = Generator::new(spec, 5, 1_048_576).unwrap();
        let n = 400;
        let spawning = (0..n)
            .filter(|&k| g.generate(k).requests().iter().any(|r| r.agent != 0))
            .count();
        let share = spawning as f64 / n as f64;
        assert!((share - 0.3).abs() < 0.07, "{share}");
    }

    /// Two fresh shapes and two resumed ones (first prompts past 50,000 tokens), no compaction.
    fn shaped(share: Option<f64>) -> WorkloadSpec {
        WorkloadSpec {
            session_shapes: Some(vec![
                [1_000.0, 3.0, 0.0],
                [2_000.0, 3.0, 0.0],
                [80_000.0, 3.0, 0.0],
                [120_000.0, 3.0, 0.0],
            ]),
            resumed_share: share,
            ..WorkloadSpec::synthetic_v1()
        }
    }

    /// The share of `n` trees of `spec` whose first request starts past the prefix plus 50,000 tokens.
    fn resumed_trees(spec: WorkloadSpec, n: u64) -> f64 {
        let prefix = spec.system_prefix_tokens;
        let g = Generator::new(spec, 9, 1_048_576).unwrap();
        let resumed = (0..n)
            .filter(|&k| g.generate(k).requests()[0].input_tokens > prefix + 50_000)
            .count();
        resumed as f64 / n as f64
    }

    #[test]
    fn a_resumed_share_draws_resumed_and_fresh_sessions_in_that_share() {
        assert_eq!(resumed_trees(shaped(Some(0.0)), 300), 0.0);
        assert_eq!(resumed_trees(shaped(Some(1.0)), 300), 1.0);
        let share = resumed_trees(shaped(Some(0.2)), 1000);
        assert!((share - 0.2).abs() < 0.04, "{share}");
        // The rows' own share (as `workload fit` writes it) draws a row uniformly: the very stream of
        // a spec without the field.
        let own = Generator::new(shaped(Some(0.5)), 4, 1_048_576).unwrap();
        let none = Generator::new(shaped(None), 4, 1_048_576).unwrap();
        for k in 0..50 {
            assert_eq!(own.generate(k), none.generate(k));
        }
        let share = resumed_trees(shaped(None), 1000);
        assert!((share - 0.5).abs() < 0.05, "{share}");
    }

    /// Each later request's think time, in seconds, over the first `n` trees.
    fn think_times(spec: WorkloadSpec, n: u64) -> Vec<f64> {
        let g = Generator::new(spec, 3, 1_048_576).unwrap();
        (0..n)
            .flat_map(|k| g.generate(k).requests().to_vec())
            .filter(|r| !r.deps.is_empty())
            .map(|r| r.think_ns as f64 / 1e9)
            .collect()
    }

    #[test]
    fn a_rows_own_app_prefix_is_shared_only_with_rows_of_its_length() {
        let spec = WorkloadSpec {
            session_app_prefixes: Some(vec![4_096, 4_096, 8_192, 2_048]),
            ..shaped(None)
        };
        let bs = spec.block_size as usize;
        let g = Generator::new(spec.clone(), 3, 1_048_576).unwrap();
        // Each row's first request is its prefix and its first prompt: 5,096, 6,096, 88,192, 122,048.
        let mut first: [Option<Vec<u64>>; 4] = Default::default();
        for k in 0..60 {
            let t = g.generate(k);
            let r = &t.requests()[0];
            let row = [5_096, 6_096, 88_192, 122_048]
                .iter()
                .position(|&n| n == r.input_tokens)
                .expect("a row's first request");
            first[row].get_or_insert(r.blocks.as_slice().to_vec());
        }
        let [a, b, c, d] = first.map(|x| x.expect("every row drawn in 60 sessions"));
        let common = |x: &[u64], y: &[u64]| x.iter().zip(y).take_while(|(p, q)| p == q).count();
        assert_eq!(
            common(&a, &b),
            4_096 / bs,
            "rows of one length share that prefix, no more"
        );
        assert_eq!(common(&a, &c), 0);
        assert_eq!(common(&a, &d), 0);
        assert_eq!(common(&c, &d), 0);
        // Without the field every session shares the one system prefix.
        let plain = Generator::new(shaped(None), 3, 1_048_576).unwrap();
        let (x, y) = (plain.generate(0), plain.generate(1));
        let shared = common(
            x.requests()[0].blocks.as_slice(),
            y.requests()[0].blocks.as_slice(),
        );
        assert_eq!(shared, spec.system_prefix_tokens as usize / bs);
        // One prefix per row, none past the longest context.
        let field = |p: Vec<u32>| {
            let s = WorkloadSpec {
                session_app_prefixes: Some(p),
                ..shaped(None)
            };
            Generator::new(s, 0, 1_048_576).err().unwrap().to_string()
        };
        assert!(field(vec![4_096; 3]).contains("has 3 prefixes for 4 session_shapes rows"));
        assert!(field(vec![4_096, 4_096, 90_000_000, 0]).contains("session_app_prefixes[2]"));
    }

    #[test]
    fn a_session_speed_scales_and_widens_its_think_times_around_the_median() {
        let with = |speed: [f64; 2]| WorkloadSpec {
            session_think_speeds: Some(vec![speed; 4]),
            ..shaped(None)
        };
        let plain = think_times(shaped(None), 30);
        assert!(plain.len() > 30);
        let c = shaped(None).think_time_s.median().unwrap();
        // [1, 1] is the spec without speeds; the draws are the same, so each think time maps.
        assert_eq!(think_times(with([1.0, 1.0]), 30), plain);
        // Think times are whole nanoseconds: equal to a few of them.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-7 * b.max(1.0);
        let tenfold = think_times(with([10.0, 1.0]), 30);
        let bad: Vec<_> = plain
            .iter()
            .zip(&tenfold)
            .filter(|(g, t)| !close(**t, 10.0 * **g))
            .take(3)
            .collect();
        assert!(bad.is_empty(), "{bad:?}");
        // b = 0: every think time is the median, times a; b = 2 doubles each one's log distance.
        // (A sub-agent's first request waits for its spawn without a think time of its own: 0 stays.)
        let flat = think_times(with([3.0, 0.0]), 30);
        assert!(plain.iter().zip(&flat).all(|(g, t)| if *g > 0.0 {
            close(*t, 3.0 * c)
        } else {
            *t == 0.0
        }));
        let wide = think_times(with([1.0, 2.0]), 30);
        assert!(plain
            .iter()
            .zip(&wide)
            .all(|(g, t)| close(*t, c * (g / c).powi(2))));
        // One pair per row, a above 0.
        let field = |spec: WorkloadSpec| {
            Generator::new(spec, 0, 1_048_576)
                .err()
                .unwrap()
                .to_string()
        };
        let mut short = with([1.0, 1.0]);
        short.session_think_speeds.as_mut().unwrap().pop();
        assert!(field(short).contains("has 3 pairs for 4 session_shapes rows"));
        let mut zero = with([1.0, 1.0]);
        zero.session_think_speeds.as_mut().unwrap()[2] = [0.0, 1.0];
        assert!(field(zero).contains("session_think_speeds[2]"));
    }

    #[test]
    fn a_resumed_share_the_shapes_cannot_give_is_refused() {
        let field = |spec: WorkloadSpec| Generator::new(spec, 0, 1_048_576).err().unwrap();
        let e = field(shaped(Some(1.5)));
        assert!(e.to_string().contains("resumed_share"), "{e}");
        let no_shapes = WorkloadSpec {
            resumed_share: Some(0.3),
            ..WorkloadSpec::synthetic_v1()
        };
        assert!(field(no_shapes)
            .to_string()
            .contains("needs session_shapes"));
        let mut fresh_only = shaped(Some(0.3));
        fresh_only.session_shapes.as_mut().unwrap().truncate(2);
        assert!(field(fresh_only)
            .to_string()
            .contains("no session_shapes row"));
        let mut fresh_only = shaped(Some(0.0));
        fresh_only.session_shapes.as_mut().unwrap().truncate(2);
        assert!(Generator::new(fresh_only, 0, 1_048_576).is_ok());
        let mut resumed_only = shaped(Some(0.9));
        resumed_only.session_shapes.as_mut().unwrap().drain(..2);
        assert!(field(resumed_only).to_string().contains("none is fresh"));
    }

    #[test]
    fn a_session_drawn_to_use_sub_agents_spawns_where_first_spawn_at_says() {
        use crate::spec::Dist;
        let mut spec = WorkloadSpec::synthetic_v1();
        spec.subagents.spawn_probability = 0.0;
        spec.subagents.session_probability = Some(0.4);
        let g = |spec: &WorkloadSpec| Generator::new(spec.clone(), 2, 1_048_576).unwrap();
        let n = 400;
        let spawning = |g: &Generator| {
            (0..n)
                .filter(|&k| g.generate(k).requests().iter().any(|r| r.agent != 0))
                .count()
        };
        // Without the field a zero per-turn rate spawns nothing, whatever the session share.
        assert_eq!(spawning(&g(&spec)), 0);
        // With it every session drawn to use sub-agents spawns, at its drawn root turn (here the
        // first), so the share of sessions that spawn is the session share.
        spec.subagents.first_spawn_at = Some(Dist::Constant { value: 0.0 });
        let with = g(&spec);
        let share = spawning(&with) as f64 / n as f64;
        assert!((share - 0.4).abs() < 0.07, "{share}");
        for k in 0..n {
            let t = with.generate(k);
            if let Some(sub) = t.requests().iter().find(|r| r.agent != 0) {
                let parent = &t.requests()[sub.deps[0] as usize];
                assert_eq!((parent.agent, parent.turn), (0, 0));
            }
        }
        spec.subagents.first_spawn_at = Some(Dist::Constant { value: 1.5 });
        let e = Generator::new(spec, 0, 1_048_576).err().unwrap();
        assert!(e.to_string().contains("subagents.first_spawn_at"), "{e}");
    }

    #[test]
    fn same_seed_same_tree_and_trees_are_independent() {
        let g = gen(7);
        assert_eq!(g.generate(3), gen(7).generate(3));
        assert_ne!(g.generate(3), g.generate(4));
        // Tree 3 does not depend on whether trees 0..3 were generated first.
        let _ = g.generate(0);
        assert_eq!(g.generate(3), gen(7).generate(3));
    }

    #[test]
    fn consecutive_root_turns_share_a_growing_prefix() {
        let t = gen(1).generate(0);
        let roots: Vec<&Request> = t
            .requests()
            .iter()
            .filter(|r| r.kind == RequestKind::RootTurn)
            .collect();
        for w in roots.windows(2) {
            let (a, b) = (w[0].blocks.as_slice(), w[1].blocks.as_slice());
            if b.len() >= a.len() && w[1].deps.contains(&w[0].id) {
                assert_eq!(
                    &b[..a.len()],
                    a,
                    "turn {} must extend turn {}",
                    w[1].id,
                    w[0].id
                );
            }
        }
    }

    #[test]
    fn every_tree_shares_the_system_prefix() {
        let (a, b) = (gen(1).generate(0), gen(2).generate(5));
        let n = (20_000 / 64) as usize;
        assert_eq!(
            a.requests()[0].blocks.as_slice()[..n],
            b.requests()[0].blocks.as_slice()[..n]
        );
        assert_ne!(
            a.requests()[0].blocks.as_slice()[n],
            b.requests()[0].blocks.as_slice()[n]
        );
    }

    #[test]
    fn a_tree_written_as_a_corpus_session_still_shares_the_system_prefix() {
        use crate::corpus::Session;
        let trees = [gen(1).generate(0), gen(2).generate(5)];
        let n = (20_000 / 64) as usize;
        assert_eq!(trees[0].app_prefix().len(), n);
        let back: Vec<SessionTree> = trees
            .iter()
            .enumerate()
            .map(|(i, t)| Session::from_tree(t, "generator").to_tree(i as u64))
            .collect();
        assert_eq!(
            back[0].requests()[0].input_tokens,
            trees[0].requests()[0].input_tokens
        );
        let first = |t: &SessionTree| t.requests()[0].blocks.as_slice().to_vec();
        let (a, b) = (first(&back[0]), first(&back[1]));
        assert_eq!(a[..n], b[..n]);
        assert_ne!(a[n], b[n]);
        // A spec whose corpus declares no prefix names none; its trees still share the prefix's ids.
        let spec = WorkloadSpec {
            declared_prefix: Some(false),
            ..WorkloadSpec::synthetic_v1()
        };
        let undeclared = Generator::new(spec, 1, 1_048_576).unwrap().generate(0);
        assert!(undeclared.app_prefix().is_empty());
        assert_eq!(undeclared.requests(), trees[0].requests());
    }

    #[test]
    fn no_prompt_passes_a_short_contexts_limit() {
        // The shipped spec's carried tokens reach 154,700; on a 131,072-token context no prompt, the
        // compactions' included, may pass what the context lets an agent hold.
        let spec = WorkloadSpec::default();
        let limit = spec.thresholds(131_072).limit;
        let g = Generator::new(spec, 6, 131_072).unwrap();
        let longest = (0..300)
            .flat_map(|k| g.generate(k).requests().to_vec())
            .map(|r| r.input_tokens)
            .max()
            .unwrap();
        assert!(longest <= limit, "{longest} > {limit}");
    }

    #[test]
    fn compaction_restarts_from_prefix_and_summary() {
        let mut spec = WorkloadSpec::synthetic_v1();
        spec.compaction.max_tokens = 70_000;
        spec.root_turns = crate::spec::Dist::Constant { value: 200.0 };
        let g = Generator::new(spec, 3, 1_048_576).unwrap();
        let t = g.generate(0);
        let compactions: Vec<&Request> = t
            .requests()
            .iter()
            .filter(|r| r.kind == RequestKind::Compaction)
            .collect();
        assert!(!compactions.is_empty());
        for c in compactions {
            assert_eq!(c.output_tokens, 2_000);
            assert!(
                c.input_tokens <= 70_000 + 8_192,
                "history is at most the threshold plus one output"
            );
            let next = t
                .requests()
                .iter()
                .find(|r| r.deps == vec![c.id])
                .expect("a turn follows the compaction");
            assert!(next.input_tokens >= 22_000 && next.input_tokens <= 22_000 + 40_000);
            assert_eq!(next.think_ns, 0);
        }
    }

    /// The root's prompts right after its compactions, for a spec that carries 5,000 tokens.
    fn prompts_after_compactions(turn_in_carry: bool) -> (u32, Vec<u32>) {
        let mut spec = WorkloadSpec::synthetic_v1();
        spec.compaction.max_tokens = 70_000;
        spec.compaction.carried_tokens = Some(crate::spec::Dist::Constant { value: 5_000.0 });
        spec.compaction.turn_in_carry = turn_in_carry;
        spec.root_turns = crate::spec::Dist::Constant { value: 200.0 };
        let head = spec.system_prefix_tokens + spec.compaction.summary_tokens;
        let t = Generator::new(spec, 3, 1_048_576).unwrap().generate(0);
        let after = t
            .requests()
            .iter()
            .filter(|r| r.kind == RequestKind::Compaction && r.agent == 0)
            .map(|c| t.requests().iter().find(|r| r.deps == vec![c.id]).unwrap())
            .map(|next| next.input_tokens)
            .collect();
        (head, after)
    }

    #[test]
    fn carried_tokens_with_the_turn_in_them_are_the_whole_prompt_after_a_compaction() {
        // `turn_in_carry`: the carry is all the next prompt holds besides the prefix and the summary.
        let (head, after) = prompts_after_compactions(true);
        assert!(!after.is_empty());
        assert!(after.iter().all(|&p| p == head + 5_000), "{after:?}");
        // Without it (every spec before the field) the turn's drawn growth comes on top, as before.
        let (head, after) = prompts_after_compactions(false);
        assert!(!after.is_empty());
        assert!(after.iter().any(|&p| p > head + 5_000), "{after:?}");
    }

    #[test]
    fn early_tiers_draw_the_root_turns_they_cover_and_no_sub_agents_turns() {
        let mut spec = WorkloadSpec::early_tiers_example(12.0);
        spec.subagents.spawn_probability = 0.5;
        spec.subagents.result_tokens = 0;
        let g = Generator::new(spec, 5, 1_048_576).unwrap();
        let mut sub_agent_steps = 0;
        for i in 0..20 {
            let t = g.generate(i);
            let reqs = t.requests();
            assert!(reqs.iter().all(|r| r.kind != RequestKind::Compaction));
            let of = |agent| reqs.iter().filter(move |r| r.agent == agent);
            let root: Vec<u32> = of(0).map(|r| r.input_tokens).collect();
            let steps: Vec<u32> = root.windows(2).map(|w| w[1] - w[0]).collect();
            let mut want = vec![9_000, 3_000, 3_000, 3_000, 3_000];
            want.resize(11, 100);
            assert_eq!(steps, want, "tree {i}");
            for agent in 1..=reqs.iter().map(|r| r.agent).max().unwrap() {
                let inputs: Vec<u32> = of(agent).map(|r| r.input_tokens).collect();
                for w in inputs.windows(2) {
                    assert_eq!(w[1] - w[0], 100, "sub-agent {agent} of tree {i}");
                    sub_agent_steps += 1;
                }
            }
        }
        assert!(sub_agent_steps > 0, "no sub-agent grew");
    }
}
