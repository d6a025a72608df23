//! `workload fit`: the generator's parameters measured from real sessions, as distributions (heavy
//! tails and all), and the report that puts the corpus beside the fitted generator — quantiles per
//! quantity and two-sample Kolmogorov–Smirnov distances on sessions held out of the fit. Pure: trees
//! in, a spec and numbers out; no IO.

use crate::generator::Generator;
use crate::spec::{Band, CompactionSpec, Dist, EarlyTurns, NewTokens, SubagentSpec, WorkloadSpec};
use crate::stats::{ks_distance, quantile};
use crate::tree::{RequestKind, SessionTree};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;
use std::collections::{HashMap, HashSet};

/// Probabilities at which fitted distributions keep a knot: dense in the tails.
const KNOTS: &[f64] = &[
    0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7,
    0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 1.0,
];
/// Knots for quantities measured on few values (sub-agents, compactions).
const FEW_KNOTS: &[f64] = &[0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0];
/// Below this many values a distribution is fitted with [`FEW_KNOTS`].
const FEW: usize = 200;
/// Growth samples per context band (at most [`MAX_BANDS`] bands, at least one).
const PER_BAND: usize = 2_000;
/// Most context bands of a growth model.
const MAX_BANDS: usize = 4;
/// Where the tiers of early root turns fitted apart end (`workload fit --early-growth`): the
/// session's first growth (turn 1), turns 2–5 and turns 6–9. In the corpus the second root turn
/// adds 14K new tokens on average, turns 2–5 3–5K, later ones about 2K (docs/workload.md).
const EARLY_TIERS: &[u32] = &[2, 6, 10];
/// Growth samples per context band of an early tier (a few per session, so fewer than
/// [`PER_BAND`]).
const EARLY_PER_BAND: usize = 200;
/// A later turn whose prompt is below this fraction of the one before started a new context: the
/// agent compacted (a log without the summarising call shows only the drop).
const DROP: f64 = 0.5;
/// Every fifth session is held out of the fit: by default positions 4, 9, 14, … ([`DEFAULT_FOLD`]).
pub const HOLD_OUT_EVERY: usize = 5;
/// The fifth held out unless [`FitOptions::fold`] names another: positions 4, 9, 14, …
pub const DEFAULT_FOLD: usize = HOLD_OUT_EVERY - 1;

/// The quantities `workload fit` measures, as samples.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Sessions measured.
    pub sessions: usize,
    /// Root turns per session.
    pub root_turns: Vec<f64>,
    /// The application prefix of each session's first request (tokens shared with other sessions).
    pub root_prefix: Vec<f64>,
    /// Each session's first prompt.
    pub first_prompt: Vec<f64>,
    /// Output tokens of root turns, sub-agent turns and compactions.
    pub root_output: Vec<f64>,
    /// Sub-agent turns' outputs.
    pub subagent_output: Vec<f64>,
    /// Think time before each request that has a dependency, seconds.
    pub think_s: Vec<f64>,
    /// The session (index into the per-session samples) of each `think_s` entry.
    pub think_session: Vec<usize>,
    /// Root later turns: (context extended, tokens added, fraction kept if the history changed).
    pub root_growth: Vec<(f64, f64, Option<f64>)>,
    /// The root turn each `root_growth` sample grew into (1: the session's first growth).
    pub root_growth_turn: Vec<u32>,
    /// The same for sub-agents.
    pub subagent_growth: Vec<(f64, f64, Option<f64>)>,
    /// Root turns that spawned sub-agents: how many each.
    pub fanout: Vec<f64>,
    /// Sessions whose root spawned sub-agents, and those sessions' root turns.
    pub spawning_sessions: usize,
    /// Per spawning session: its first spawning root turn as a fraction of its root turns.
    pub first_spawn_at: Vec<f64>,
    /// Root turns of the sessions that spawned sub-agents.
    pub spawning_root_turns: f64,
    /// Turns per sub-agent.
    pub subagent_turns: Vec<f64>,
    /// Sub-agents' first prompts and their shared prefix.
    pub subagent_first: Vec<f64>,
    /// The application prefix of each sub-agent's first request.
    pub subagent_prefix: Vec<f64>,
    /// Sub-agents launched in the background.
    pub background: usize,
    /// Sub-agents spawned by another sub-agent (nesting depth 2 or more).
    pub nested: usize,
    /// Compactions: the context each compacted.
    pub compaction_at: Vec<f64>,
    /// Tokens the first prompt after a compaction carries beyond the agent's prefix.
    pub compaction_carried: Vec<f64>,
    /// Outputs of explicit compaction requests (the summaries), where the corpus has them.
    pub compaction_output: Vec<f64>,
    /// Per session: the context at which the root first compacted.
    pub session_threshold: Vec<Option<f64>>,
    /// Per session: the longest prompt of its root.
    pub session_longest: Vec<f64>,
    /// Per request, the prompt tokens that neither an earlier request of the session nor another
    /// session's shared prefix holds (what an infinite prefix cache misses).
    pub uncached: Vec<f64>,
    /// Per request, output tokens.
    pub output: Vec<f64>,
    /// Per session, prompt and output tokens of every request.
    pub session_tokens: Vec<f64>,
}

/// Full blocks two chains share from the start.
fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Block ids shared across sessions: every tree's declared application prefix, and the ids of
/// agents' first prompts that more than one tree holds.
fn cross_session_ids(trees: &[&SessionTree]) -> FxHashSet<u64> {
    let mut first_tree: FxHashMap<u64, (usize, bool)> = FxHashMap::default();
    let mut out: FxHashSet<u64> = FxHashSet::default();
    for (t, tree) in trees.iter().enumerate() {
        out.extend(tree.app_prefix());
        let mut seen_agents = HashSet::new();
        for r in tree.requests() {
            if !seen_agents.insert(r.agent) {
                continue;
            }
            for &id in r.blocks.as_slice() {
                let e = first_tree.entry(id).or_insert((t, false));
                if e.0 != t {
                    e.1 = true;
                }
            }
        }
    }
    out.extend(
        first_tree
            .into_iter()
            .filter(|(_, (_, m))| *m)
            .map(|(id, _)| id),
    );
    out
}

/// Measures trees.
pub fn measure(trees: &[&SessionTree]) -> Measured {
    let shared = cross_session_ids(trees);
    let mut m = Measured {
        sessions: trees.len(),
        ..Measured::default()
    };
    for tree in trees {
        measure_tree(tree, &shared, &mut m);
    }
    m
}

fn measure_tree(tree: &SessionTree, shared: &FxHashSet<u64>, m: &mut Measured) {
    let bs = tree.block_size as f64;
    let reqs = tree.requests();
    let mut seen: FxHashSet<u64> = FxHashSet::default();
    let mut total = 0.0;
    // Per agent: its requests in order.
    let mut by_agent: Vec<Vec<usize>> = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        if by_agent.len() <= r.agent as usize {
            by_agent.resize(r.agent as usize + 1, Vec::new());
        }
        by_agent[r.agent as usize].push(i);
        let ids = r.blocks.as_slice();
        let held = ids
            .iter()
            .rposition(|id| seen.contains(id) || shared.contains(id))
            .map_or(0, |p| p + 1);
        m.uncached.push(r.input_tokens as f64 - held as f64 * bs);
        m.output.push(r.output_tokens as f64);
        seen.extend(ids);
        total += r.input_tokens as f64 + r.output_tokens as f64;
        if !r.deps.is_empty() {
            m.think_s.push(r.think_ns as f64 / 1e9);
            m.think_session.push(m.root_turns.len());
        }
    }
    m.session_tokens.push(total);
    let leading_shared = |i: usize| {
        let ids = reqs[i].blocks.as_slice();
        ids.iter().take_while(|id| shared.contains(id)).count() as f64 * bs
    };
    for (agent, idx) in by_agent.iter().enumerate() {
        let Some(&first) = idx.first() else { continue };
        let prefix = leading_shared(first);
        let turns = idx
            .iter()
            .filter(|&&i| reqs[i].kind != RequestKind::Compaction)
            .count() as f64;
        if agent == 0 {
            m.root_turns.push(turns);
            m.root_prefix.push(prefix);
            m.first_prompt.push(reqs[first].input_tokens as f64);
            let longest = idx.iter().map(|&i| reqs[i].input_tokens).max();
            m.session_longest.push(longest.unwrap_or(0) as f64);
        } else {
            m.subagent_turns.push(turns);
            m.subagent_prefix.push(prefix);
            m.subagent_first.push(reqs[first].input_tokens as f64);
            m.background += reqs[first].background as usize;
            let spawner = reqs[first].deps.first().map(|&d| reqs[d as usize].agent);
            m.nested += spawner.is_some_and(|a| a != 0) as usize;
        }
        for &i in idx {
            if reqs[i].kind == RequestKind::Compaction {
                continue;
            }
            let o = reqs[i].output_tokens as f64;
            if agent == 0 {
                m.root_output.push(o);
            } else {
                m.subagent_output.push(o);
            }
        }
        let mut first_at: Option<f64> = None;
        // The root turn the later request of the pair is (compaction requests are not turns).
        let mut turn = 0u32;
        for w in idx.windows(2) {
            let (p, c) = (&reqs[w[0]], &reqs[w[1]]);
            turn += (c.kind != RequestKind::Compaction) as u32;
            if c.kind == RequestKind::Compaction {
                m.compaction_at.push(c.input_tokens as f64);
                m.compaction_output.push(c.output_tokens as f64);
                first_at = first_at.or(Some(c.input_tokens as f64));
                continue;
            }
            if p.kind == RequestKind::Compaction
                || (c.input_tokens as f64) < DROP * p.input_tokens as f64
            {
                if p.kind != RequestKind::Compaction {
                    m.compaction_at.push(p.input_tokens as f64);
                    first_at = first_at.or(Some(p.input_tokens as f64));
                }
                m.compaction_carried
                    .push((c.input_tokens as f64 - prefix).max(0.0));
                continue;
            }
            let kept = common_prefix(p.blocks.as_slice(), c.blocks.as_slice());
            let changed = kept < p.blocks.len();
            let growth = (c.input_tokens as f64 - p.input_tokens as f64).max(0.0);
            let sample = (
                p.input_tokens as f64,
                growth,
                changed.then(|| kept as f64 * bs / p.input_tokens as f64),
            );
            if agent == 0 {
                m.root_growth_turn.push(turn);
                m.root_growth.push(sample);
            } else {
                m.subagent_growth.push(sample);
            }
        }
        if agent == 0 {
            m.session_threshold.push(first_at);
        }
    }
    // Spawns: sub-agents whose first request depends on a root request.
    let mut spawned: HashMap<u32, usize> = HashMap::new();
    for idx in by_agent.iter().skip(1) {
        if let Some(&d) = idx.first().and_then(|&f| reqs[f].deps.first()) {
            if reqs[d as usize].agent == 0 {
                *spawned.entry(d).or_default() += 1;
            }
        }
    }
    if !spawned.is_empty() {
        m.spawning_sessions += 1;
        let roots: Vec<usize> = by_agent.first().map_or(Vec::new(), |idx| {
            idx.iter()
                .copied()
                .filter(|&i| reqs[i].kind != RequestKind::Compaction)
                .collect()
        });
        m.spawning_root_turns += roots.len() as f64;
        if let Some(k) = roots
            .iter()
            .position(|&i| spawned.contains_key(&(i as u32)))
        {
            m.first_spawn_at.push(k as f64 / roots.len() as f64);
        }
    }
    let mut fan: Vec<usize> = spawned.into_values().collect();
    fan.sort_unstable();
    m.fanout.extend(fan.into_iter().map(|n| n as f64));
}

/// Rounds to 4 significant digits (fitted values read as measurements, not as noise).
pub(crate) fn round4(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(3 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// An empirical distribution of `values`, knots rounded; `None` for no values.
fn empirical(values: &[f64]) -> Option<Dist> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    let knots = if v.len() < FEW { FEW_KNOTS } else { KNOTS };
    let Dist::Empirical { mut points } = Dist::empirical(&mut v, knots) else {
        unreachable!("Dist::empirical is empirical")
    };
    for p in &mut points {
        p[1] = round4(p[1]);
    }
    for i in 1..points.len() {
        points[i][1] = points[i][1].max(points[i - 1][1]);
    }
    Some(Dist::Empirical { points })
}

fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| quantile(&v, 0.5))
}

/// Bands of `(x, y)` samples at the quantiles of `x`: the distribution of `y` in each.
fn banded(samples: &[(f64, f64)], bands: usize) -> Vec<Band> {
    let mut xs: Vec<f64> = samples.iter().map(|s| s.0).collect();
    xs.sort_by(f64::total_cmp);
    let mut edges: Vec<u32> = (1..bands)
        .map(|b| round4(quantile(&xs, b as f64 / bands as f64)) as u32)
        .collect();
    edges.dedup();
    let mut out = Vec::new();
    let mut low = 0.0;
    for k in 0..=edges.len() {
        let high = edges.get(k).copied();
        let ys: Vec<f64> = samples
            .iter()
            .filter(|s| s.0 >= low && high.map_or(true, |h| s.0 < h as f64))
            .map(|s| s.1)
            .collect();
        if let Some(dist) = empirical(&ys) {
            out.push(Band {
                below_tokens: high,
                dist,
            });
        }
        low = high.map_or(f64::INFINITY, |h| h as f64);
    }
    if let Some(last) = out.last_mut() {
        last.below_tokens = None;
    }
    out
}

/// The root's growth model with its early turns measured apart ([`NewTokens::early`]): one tier
/// for each range of [`EARLY_TIERS`], from the samples of those turns (bands of about
/// [`EARLY_PER_BAND`]), the common model from the later turns alone. A tier without samples is
/// left out; nothing changes where no later turn has one.
pub fn with_early_growth(spec: &mut WorkloadSpec, m: &Measured) {
    let samples_of = |lo: u32, hi: u32| -> Vec<(f64, f64, Option<f64>)> {
        (m.root_growth.iter().zip(&m.root_growth_turn))
            .filter(|(_, &t)| lo <= t && t < hi)
            .map(|(s, _)| *s)
            .collect()
    };
    let last = EARLY_TIERS[EARLY_TIERS.len() - 1];
    let Some(mut model) = growth_model(&samples_of(last, u32::MAX), PER_BAND) else {
        return;
    };
    let mut from = 1;
    for &below_turn in EARLY_TIERS {
        if let Some(growth) = growth_model(&samples_of(from, below_turn), EARLY_PER_BAND) {
            model.early.push(EarlyTurns { below_turn, growth });
        }
        from = below_turn;
    }
    spec.new_tokens = Some(model);
}

/// A growth model from (context, added, kept) samples: bands at quantiles of the context, about
/// `per_band` samples each.
fn growth_model(samples: &[(f64, f64, Option<f64>)], per_band: usize) -> Option<NewTokens> {
    if samples.is_empty() {
        return None;
    }
    let pairs: Vec<(f64, f64)> = samples.iter().map(|s| (s.0, s.1)).collect();
    let bands = banded(&pairs, (samples.len() / per_band).clamp(1, MAX_BANDS));
    let kept: Vec<f64> = samples.iter().filter_map(|s| s.2).collect();
    Some(NewTokens {
        bands,
        rewrite_probability: round4(kept.len() as f64 / samples.len() as f64),
        rewrite_kept_fraction: empirical(&kept).unwrap_or(Dist::Constant { value: 0.0 }),
        early: Vec::new(),
    })
}

/// The report row the per-session token errors are read from.
const TOKENS_PER_SESSION: &str = "tokens per session";

/// Gives each session shape its session's own speed ([`crate::speed`]): `think_time_s` becomes the
/// corpus's think times at its typical speed and spread, `session_think_speeds` each shape's `[a, b]`.
pub fn with_session_speeds(spec: &mut WorkloadSpec, m: &Measured) {
    let sessions = m.root_turns.len();
    let speeds = crate::speed::session_speeds(&m.think_s, &m.think_session, sessions);
    let Some(base) = empirical(&speeds.base) else {
        return;
    };
    spec.think_time_s = base;
    let round = |x: [f64; 2]| [round4(x[0]), round4(x[1])];
    spec.session_think_speeds = Some(speeds.sessions.into_iter().map(round).collect());
}

/// Gives each session shape that never compacted, and whose longest prompt stayed at or under the
/// corpus's typical compaction threshold (`compaction.max_tokens`, the median of its compactions),
/// that threshold: the agent would have compacted there had the session gone on. A shape's row keeps
/// its turns and first prompt, but the generator draws its growth turn by turn, and a row without a
/// threshold otherwise grows on to the deployment's own limit, past where the corpus's agents compact
/// (docs/workload.md). Rows whose session went past it without compacting (agents with a longer
/// context) keep none; a corpus without a compaction changes nothing.
pub fn with_typical_compaction(spec: &mut WorkloadSpec, m: &Measured) {
    let typical = spec.compaction.max_tokens as f64;
    let Some(rows) = spec
        .session_shapes
        .as_mut()
        .filter(|_| !m.compaction_at.is_empty())
    else {
        return;
    };
    for (row, &longest) in rows.iter_mut().zip(&m.session_longest) {
        if row[2] == 0.0 && longest <= typical {
            row[2] = typical;
        }
    }
}

/// Gives each session shape its session's own application prefix (`session_app_prefixes`, whole
/// blocks of the tokens its first request shares with other sessions' prefixes), and measures the
/// row's first prompt from it instead of from `system_prefix_tokens`.
pub fn with_app_prefixes(spec: &mut WorkloadSpec, m: &Measured) {
    if spec.session_shapes.is_none() {
        return;
    }
    let block = spec.block_size;
    let prefixes: Vec<u32> = m
        .root_prefix
        .iter()
        .map(|&p| (p.round() as u32) / block * block)
        .collect();
    let first: Vec<f64> = (m.first_prompt.iter().zip(&prefixes))
        .map(|(&x, &p)| (x - p as f64).max(1.0))
        .collect();
    let rows = session_shapes(m, &first);
    spec.resumed_share = Some(crate::spec::resumed_share_of(&rows));
    spec.session_shapes = Some(rows);
    spec.session_app_prefixes = Some(prefixes);
}

/// What `workload fit` measures beyond the fields every fit writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FitOptions {
    /// Each session's own speed ([`with_session_speeds`]).
    pub session_speed: bool,
    /// Each session's own application prefix ([`with_app_prefixes`]).
    pub app_prefixes: bool,
    /// Sessions that never compacted and never passed the corpus's typical threshold compact there
    /// ([`with_typical_compaction`]).
    pub compact_typical: bool,
    /// The fitted `carried_tokens` stand for the compacting turn's additions too
    /// (`compaction.turn_in_carry`), as the fit measures them.
    pub turn_in_carry: bool,
    /// Each session's early root turns measured apart ([`with_early_growth`]).
    pub early_growth: bool,
    /// Which fifth is held out: positions `k`, `k + 5`, … (`None`: [`DEFAULT_FOLD`]). Fitting once per
    /// fold and replaying each fold beside its own fit is a five-fold cross-validation.
    pub fold: Option<usize>,
}

impl FitOptions {
    /// The fifth held out: `k` in `0..HOLD_OUT_EVERY`.
    pub fn held_out_fold(&self) -> usize {
        self.fold.unwrap_or(DEFAULT_FOLD)
    }
}

/// Each session's median think time (sessions with none left out).
fn session_think_medians(m: &Measured) -> Vec<f64> {
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); m.root_turns.len()];
    for (&g, &i) in m.think_s.iter().zip(&m.think_session) {
        per[i].push(g);
    }
    per.iter().filter_map(|v| median(v)).collect()
}

/// Per session `[first prompt, turns, compaction threshold (0: never)]`.
fn session_shapes(m: &Measured, first: &[f64]) -> Vec<[f64; 3]> {
    (0..first.len())
        .map(|i| {
            let threshold = m.session_threshold[i].map_or(0.0, round4);
            [round4(first[i]).max(1.0), m.root_turns[i], threshold]
        })
        .collect()
}

/// The generator spec measured from `m`; what it cannot measure (no sub-agents, no compaction in the
/// corpus) keeps the built-in spec's values, as the report says.
pub fn fit(m: &Measured, source: &str) -> WorkloadSpec {
    let base = WorkloadSpec::synthetic_v1();
    let prefix = median(&m.root_prefix).unwrap_or(0.0).round() as u32;
    let block = base.block_size;
    let prefix = prefix / block * block;
    let first: Vec<f64> = m
        .first_prompt
        .iter()
        .map(|x| (x - prefix as f64).max(1.0))
        .collect();
    // Session shapes: each measured session's first prompt, turns and compaction threshold.
    let shapes = session_shapes(m, &first);
    // Sub-agents: which sessions use them, and how often a root turn of such a session spawns them.
    let spawning = m.fanout.len() as f64;
    let root_turns = m.spawning_root_turns;
    let subs = m.subagent_turns.len();
    let sub_prefix = median(&m.subagent_prefix).map(|p| (p.round() as u32) / block * block);
    let sub_task: Vec<f64> = m
        .subagent_first
        .iter()
        .map(|x| (x - sub_prefix.unwrap_or(0) as f64).max(1.0))
        .collect();
    let subagents = SubagentSpec {
        session_probability: (m.sessions > 0)
            .then(|| round4(m.spawning_sessions as f64 / m.sessions as f64)),
        spawn_spread: None,
        // Each spawning session's first spawn is placed by `first_spawn_at`; the rate is that of
        // the spawning sessions' other root turns.
        first_spawn_at: empirical(&m.first_spawn_at),
        spawn_probability: match m.first_spawn_at.len() as f64 {
            firsts if root_turns > firsts => {
                round4((spawning - firsts).max(0.0) / (root_turns - firsts))
            }
            _ if root_turns > 0.0 => round4(spawning / root_turns),
            _ => 0.0,
        },
        fanout: empirical(&m.fanout).unwrap_or(base.subagents.fanout.clone()),
        turns: empirical(&m.subagent_turns).unwrap_or(base.subagents.turns.clone()),
        first_prompt_tokens: base.subagents.first_prompt_tokens,
        result_tokens: 0,
        background_fraction: if subs > 0 {
            round4(m.background as f64 / subs as f64)
        } else {
            0.0
        },
        prefix_tokens: sub_prefix,
        task_prompt_tokens: empirical(&sub_task),
        output_tokens: empirical(&m.subagent_output),
        new_tokens: growth_model(&m.subagent_growth, PER_BAND),
    };
    let max_tokens =
        median(&m.compaction_at).map_or(base.compaction.max_tokens, |x| round4(x) as u32);
    let summary_tokens = median(&m.compaction_output).map_or(base.compaction.summary_tokens, |x| {
        round4(x).max(1.0) as u32
    });
    let carried: Vec<f64> = m
        .compaction_carried
        .iter()
        .map(|x| (x - summary_tokens as f64).max(0.0))
        .collect();
    let compaction = CompactionSpec {
        context_fraction: base.compaction.context_fraction,
        max_tokens,
        summary_tokens,
        carried_tokens: empirical(&carried),
        // Room for the longest answer the corpus shows.
        reserve_tokens: [&m.root_output, &m.subagent_output]
            .iter()
            .flat_map(|v| v.iter())
            .fold(None, |a: Option<f64>, &x| Some(a.map_or(x, |a| a.max(x))))
            .map(|x| x as u32),
        turn_in_carry: false,
    };
    WorkloadSpec {
        name: None,
        block_size: block,
        system_prefix_tokens: prefix,
        first_prompt_tokens: empirical(&first).unwrap_or(base.first_prompt_tokens.clone()),
        root_turns: empirical(&m.root_turns).unwrap_or(base.root_turns.clone()),
        resumed_share: Some(crate::spec::resumed_share_of(&shapes)),
        session_shapes: Some(shapes),
        output_tokens: empirical(&m.root_output).unwrap_or(base.output_tokens.clone()),
        think_time_s: empirical(&m.think_s).unwrap_or(base.think_time_s.clone()),
        new_tokens: growth_model(&m.root_growth, PER_BAND),
        subagents,
        compaction,
        source: Some(source.to_string()),
        ..base
    }
}

/// Mean and quantiles of a sample, the tenth percentile included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    /// Values.
    pub count: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Percentiles 10, 50, 90 and 99.
    pub p10: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

impl Spread {
    /// Of `values` (sorted in place).
    pub fn of(values: &mut [f64]) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_by(f64::total_cmp);
        let q = |p| quantile(values, p);
        Spread {
            count: values.len(),
            mean: values.iter().sum::<f64>() / values.len() as f64,
            p10: q(0.1),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
        }
    }
}

/// One quantity of the fit report: the corpus's quantiles beside the generator's, and the KS
/// distance between held-out sessions and the generator.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// What is measured.
    pub quantity: &'static str,
    /// Its unit.
    pub unit: &'static str,
    /// Quantiles over the sessions the spec was fitted to.
    pub fitted_on: Spread,
    /// Quantiles over the held-out sessions.
    pub held_out: Spread,
    /// Quantiles over the generator's sessions.
    pub generator: Spread,
    /// Two-sample KS distance, held out against generator.
    pub ks: f64,
    /// Quantiles over the check sessions, if any.
    pub check: Option<Spread>,
    /// KS distance, check sessions against generator.
    pub check_ks: Option<f64>,
}

/// What `workload fit` prints and writes.
#[derive(Clone, Debug, Serialize)]
pub struct FitReport {
    /// Sessions the spec was fitted to, and held out.
    pub fitted_sessions: usize,
    /// Sessions held out (every [`HOLD_OUT_EVERY`]th).
    pub held_out_sessions: usize,
    /// Sessions drawn from the fitted generator for the comparison.
    pub generated_sessions: usize,
    /// Per quantity.
    pub rows: Vec<Row>,
    /// Per-session total tokens (prompts and outputs): generator over held out, at the median and
    /// p90, minus one.
    pub session_tokens_error_p50: f64,
    /// The same at p90.
    pub session_tokens_error_p90: f64,
    /// Check sessions compared (0: none).
    pub checked_sessions: usize,
    /// Per-session total tokens, generator over check sessions minus one, at p50 and p90.
    pub check_tokens_error: Option<[f64; 2]>,
    /// Sub-agents per session and the fraction of them nested below another sub-agent (the generator
    /// spawns sub-agents only from the root).
    pub subagents_per_session: f64,
    /// Sub-agents spawned by sub-agents.
    pub nested_subagents: usize,
    /// Sessions of the fitted part left out: the generator cannot draw them.
    pub left_out: Vec<LeftOut>,
    /// The fitted sessions' shapes told apart: those that resume an earlier conversation (a first
    /// prompt past [`crate::spec::RESUMED_ABOVE_TOKENS`] after the prefix) and fresh ones.
    pub resumed: KindShape,
    /// Fresh sessions.
    pub fresh: KindShape,
}

/// One kind of session in the fitted corpus: how many, and their first prompts (after the prefix)
/// and root turns at the median and p90.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct KindShape {
    /// Sessions of this kind.
    pub sessions: usize,
    /// First prompt after the prefix, p50 and p90, tokens.
    pub first_prompt: [f64; 2],
    /// Root turns, p50 and p90.
    pub root_turns: [f64; 2],
}

impl KindShape {
    /// The shapes of `rows` whose kind is `resumed`.
    pub fn of(rows: &[[f64; 3]], resumed: bool) -> Self {
        let kind: Vec<&[f64; 3]> = rows
            .iter()
            .filter(|r| crate::spec::shape_is_resumed(r) == resumed)
            .collect();
        let at = |col: usize| {
            let mut v: Vec<f64> = kind.iter().map(|r| r[col]).collect();
            v.sort_by(f64::total_cmp);
            if v.is_empty() {
                return [0.0, 0.0];
            }
            [quantile(&v, 0.5), quantile(&v, 0.9)]
        };
        KindShape {
            sessions: kind.len(),
            first_prompt: at(0),
            root_turns: at(1),
        }
    }
}

/// Whether the session at position `i` of a corpus is held out of the fit when `fold` is.
pub fn is_held_out(i: usize, fold: usize) -> bool {
    i % HOLD_OUT_EVERY == fold
}

/// Splits trees by position: `(fitted, held_out)`, holding out the fifth `fold`.
pub fn split(trees: &[SessionTree], fold: usize) -> (Vec<&SessionTree>, Vec<&SessionTree>) {
    let mut fit = Vec::new();
    let mut held = Vec::new();
    for (i, t) in trees.iter().enumerate() {
        if is_held_out(i, fold) {
            held.push(t);
        } else {
            fit.push(t);
        }
    }
    (fit, held)
}

/// The fit of `train`, leaving out (and naming) the sessions the generator cannot draw: a first prompt
/// or a number of turns past its limits (`spec::session_shape_ok`). One such session would otherwise
/// make the whole fit invalid.
fn fit_generable(
    train: &mut Vec<&SessionTree>,
    source: &str,
    options: FitOptions,
) -> (Measured, WorkloadSpec, Vec<LeftOut>) {
    let mut left_out = Vec::new();
    loop {
        let m = measure(train);
        let mut spec = fit(&m, source);
        if options.session_speed {
            with_session_speeds(&mut spec, &m);
        }
        if options.app_prefixes {
            with_app_prefixes(&mut spec, &m);
        }
        if options.compact_typical {
            with_typical_compaction(&mut spec, &m);
        }
        spec.compaction.turn_in_carry = options.turn_in_carry;
        if options.early_growth {
            with_early_growth(&mut spec, &m);
        }
        let rows = spec.session_shapes.as_deref().unwrap_or_default();
        let bad: Vec<usize> = (0..rows.len().min(train.len()))
            .filter(|&i| !crate::spec::session_shape_ok(&rows[i]))
            .collect();
        if bad.is_empty() {
            return (m, spec, left_out);
        }
        for &i in bad.iter().rev() {
            let r = rows[i];
            left_out.push(LeftOut {
                session: train[i].session_id,
                why: format!(
                    "a first prompt of {} tokens and {} turns (the generator draws at most {} and {})",
                    r[0],
                    r[1],
                    crate::spec::MAX_PART_TOKENS,
                    crate::spec::MAX_TURNS
                ),
            });
            train.remove(i);
        }
    }
}

/// A session the fit left out, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LeftOut {
    /// The session's number in the corpus (its tree's `session_id`: the order it was read in).
    pub session: u64,
    /// Why it was left out.
    pub why: String,
}

/// Fits on all but the held-out fifth, generates `generated` sessions from the result (seed 0, a
/// context limit of `context_limit`), and compares.
/// `check`: further sessions (that cannot be fitted on, or shipped) compared with the generator too.
pub fn fit_and_report(
    trees: &[SessionTree],
    check: &[SessionTree],
    source: &str,
    generated: u64,
    context_limit: u32,
    options: FitOptions,
) -> Result<(WorkloadSpec, FitReport), serverbench_config::FieldError> {
    let (mut train, held) = split(trees, options.held_out_fold());
    let (train_m, spec, left_out) = fit_generable(&mut train, source, options);
    let held = if held.is_empty() { train.clone() } else { held };
    let held_m = measure(&held);
    let g = Generator::new(spec.clone(), 0, context_limit)?;
    let gen_trees: Vec<SessionTree> = (0..generated).map(|k| g.generate(k)).collect();
    let gen_refs: Vec<&SessionTree> = gen_trees.iter().collect();
    let gen_m = measure(&gen_refs);
    let check_refs: Vec<&SessionTree> = check.iter().collect();
    let check_m = (!check.is_empty()).then(|| measure(&check_refs));
    let row = |quantity, unit, f: fn(&Measured) -> Vec<f64>| {
        let (mut a, mut b, mut c) = (f(&train_m), f(&held_m), f(&gen_m));
        let mut d = check_m.as_ref().map(f);
        Row {
            quantity,
            unit,
            fitted_on: Spread::of(&mut a),
            held_out: Spread::of(&mut b),
            generator: Spread::of(&mut c),
            ks: ks_distance(&mut b, &mut c),
            check_ks: d.as_mut().map(|d| ks_distance(d, &mut c)),
            check: d.as_mut().map(|d| Spread::of(d)),
        }
    };
    let rows = vec![
        row("uncached prompt per request", "tok", |m| m.uncached.clone()),
        row("output per request", "tok", |m| m.output.clone()),
        row("think time per request", "s", |m| m.think_s.clone()),
        row("session median think", "s", session_think_medians),
        row(TOKENS_PER_SESSION, "tok", |m| m.session_tokens.clone()),
        row("root turns per session", "", |m| m.root_turns.clone()),
        row("first prompt", "tok", |m| m.first_prompt.clone()),
        row("new tokens per later turn", "tok", |m| {
            m.root_growth.iter().map(|s| s.1).collect()
        }),
        row("sub-agent turns", "", |m| m.subagent_turns.clone()),
    ];
    let shapes = spec.session_shapes.as_deref().unwrap_or_default();
    let tokens = rows
        .iter()
        .find(|r| r.quantity == TOKENS_PER_SESSION)
        .expect("the rows above include tokens per session")
        .clone();
    let rel = |g: f64, h: f64| if h > 0.0 { g / h - 1.0 } else { 0.0 };
    let report = FitReport {
        fitted_sessions: train.len(),
        held_out_sessions: held.len(),
        generated_sessions: gen_trees.len(),
        session_tokens_error_p50: rel(tokens.generator.p50, tokens.held_out.p50),
        session_tokens_error_p90: rel(tokens.generator.p90, tokens.held_out.p90),
        checked_sessions: check.len(),
        check_tokens_error: tokens.check.map(|c| {
            [
                rel(tokens.generator.p50, c.p50),
                rel(tokens.generator.p90, c.p90),
            ]
        }),
        subagents_per_session: train_m.subagent_turns.len() as f64 / train_m.sessions.max(1) as f64,
        nested_subagents: train_m.nested,
        rows,
        left_out,
        resumed: KindShape::of(shapes, true),
        fresh: KindShape::of(shapes, false),
    };
    Ok((spec, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_shapes_that_never_compacted_nor_passed_the_median_threshold_take_it() {
        let m = Measured {
            compaction_at: vec![150_000.0, 160_000.0, 170_000.0],
            session_threshold: vec![
                Some(150_000.0),
                Some(160_000.0),
                None,
                None,
                Some(170_000.0),
            ],
            session_longest: vec![150_500.0, 160_200.0, 90_000.0, 400_000.0, 171_000.0],
            ..Measured::default()
        };
        let mut spec = fit(&m, "test");
        spec = WorkloadSpec {
            session_shapes: Some(vec![
                [20_000.0, 30.0, 150_000.0],
                [20_000.0, 30.0, 160_000.0],
                [20_000.0, 30.0, 0.0],
                [200_000.0, 10.0, 0.0],
                [20_000.0, 30.0, 170_000.0],
            ]),
            ..spec
        };
        with_typical_compaction(&mut spec, &m);
        let thresholds: Vec<f64> = spec.session_shapes.unwrap().iter().map(|r| r[2]).collect();
        // The median of the three measured compactions is 160,000: the session that stayed at 90,000
        // takes it; the one that went on to 400,000 without compacting (a longer context) keeps none.
        assert_eq!(
            thresholds,
            [150_000.0, 160_000.0, 160_000.0, 0.0, 170_000.0]
        );
        // A corpus without a measured compaction changes nothing.
        let none = Measured {
            session_threshold: vec![None],
            session_longest: vec![1_000.0],
            ..Measured::default()
        };
        let mut spec = WorkloadSpec {
            session_shapes: Some(vec![[1_000.0, 3.0, 0.0]]),
            ..WorkloadSpec::default()
        };
        with_typical_compaction(&mut spec, &none);
        assert_eq!(spec.session_shapes.unwrap()[0][2], 0.0);
    }

    #[test]
    fn early_turns_are_measured_apart_in_their_tiers() {
        use crate::spec::Band;
        // Sessions whose second root turn adds 9,000 tokens, turns 2-5 3,000 and later ones 100.
        let mut spec = WorkloadSpec::early_tiers_example(14.0);
        spec.subagents.spawn_probability = 0.0;
        let g = Generator::new(spec, 1, 1_048_576).unwrap();
        let trees: Vec<SessionTree> = (0..30).map(|k| g.generate(k)).collect();
        let m = measure(&trees.iter().collect::<Vec<_>>());
        let mut fitted = fit(&m, "test");
        let medians = |n: &NewTokens| -> Vec<f64> {
            n.bands
                .iter()
                .map(|b: &Band| b.dist.median().unwrap())
                .collect()
        };
        // Without the option every turn is pooled in one model.
        assert!(fitted.new_tokens.as_ref().unwrap().early.is_empty());
        with_early_growth(&mut fitted, &m);
        let n = fitted.new_tokens.unwrap();
        let tiers: Vec<(u32, Vec<f64>)> = (n.early.iter())
            .map(|t| (t.below_turn, medians(&t.growth)))
            .collect();
        assert_eq!(
            tiers,
            [(2, vec![9_000.0]), (6, vec![3_000.0]), (10, vec![100.0])]
        );
        assert!(medians(&n).iter().all(|&x| x == 100.0), "{:?}", medians(&n));
    }

    #[test]
    fn a_compaction_request_is_not_counted_as_a_root_turn() {
        // Sessions that compact within their first turns: every growth is still labelled with the
        // root turn it grew into, so turns 2-5 measure 3,000 tokens and later ones 100.
        let mut spec = WorkloadSpec::early_tiers_example(14.0);
        spec.subagents.spawn_probability = 0.0;
        spec.compaction.max_tokens = 30_000;
        let g = Generator::new(spec, 1, 1_048_576).unwrap();
        let trees: Vec<SessionTree> = (0..30).map(|k| g.generate(k)).collect();
        let early_compactions = trees
            .iter()
            .filter(|t| {
                let root = t.requests().iter().filter(|r| r.agent == 0).take(10);
                root.into_iter().any(|r| r.kind == RequestKind::Compaction)
            })
            .count();
        assert!(early_compactions > 0, "no session compacted early");
        let m = measure(&trees.iter().collect::<Vec<_>>());
        for (&(_, added, _), &turn) in m.root_growth.iter().zip(&m.root_growth_turn) {
            let want = match turn {
                1 => 9_000.0,
                2..=5 => 3_000.0,
                _ => 100.0,
            };
            assert_eq!(added, want, "turn {turn}");
        }
    }

    #[test]
    fn turn_in_carry_is_serialized_only_when_true() {
        let m = Measured {
            compaction_carried: vec![12_000.0, 30_000.0],
            ..Measured::default()
        };
        let spec = fit(&m, "test");
        assert!(!spec.compaction.turn_in_carry);
        // Specs without it read and write as before: the field appears only when true.
        assert!(!serde_yaml::to_string(&spec)
            .unwrap()
            .contains("turn_in_carry"));
        let mut asked = spec.clone();
        asked.compaction.turn_in_carry = true;
        let text = serde_yaml::to_string(&asked).unwrap();
        assert!(text.contains("turn_in_carry: true"), "{text}");
        let back: WorkloadSpec = serde_yaml::from_str(&text).unwrap();
        assert!(back.compaction.turn_in_carry);
    }
}
