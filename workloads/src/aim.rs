//! Aims a fitted spec at the published quantities of a corpus it stands in for (`workload fit
//! --targets`): fixed moves, each turning one knob of the spec until the generated sessions show one
//! published quantity, repeated for a fixed number of rounds; and the table of every published
//! quantity beside what the spec generates. Pure: a spec and targets in, a spec and numbers out; no IO,
//! and no constant that a targets file does not name with its source.

use crate::generator::Generator;
use crate::spec::{Dist, NewTokens, WorkloadSpec};
use crate::stats::quantile;
use crate::tree::{RequestKind, SessionTree};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Serialize};
use serverbench_config::FieldError;

/// Rounds of moves: each round measures the generated sessions once and moves every knob.
pub const ROUNDS: usize = 12;
/// Sessions generated per round (the table is over as many as the caller asks).
pub const SESSIONS: u64 = 1_000;

/// What is measured on sessions, per request of the main agent (the root), per request of any agent,
/// or per session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// Prompt tokens of each main-agent request.
    MainInput,
    /// Output tokens of each main-agent request.
    MainOutput,
    /// Prompt tokens of each main-agent request that no earlier request of its session held (what an
    /// infinite prefix cache, scoped to the session, misses).
    MainNewPrefill,
    /// Seconds from the end of the request a main-agent request waited for to its start.
    MainGap,
    /// Prompt tokens of each request, every agent.
    RequestInput,
    /// Output tokens of each request, every agent.
    RequestOutput,
    /// Prompt tokens an infinite prefix cache scoped to each session holds, over all prompt tokens.
    InfiniteCacheHit,
    /// Fraction of sessions with at least one sub-agent.
    SessionsWithSubagents,
    /// Sub-agents (groups) of each session that has any.
    GroupsPerSpawningSession,
    /// Sub-agents per session, every session.
    GroupsPerSession,
    /// Main-agent requests (compactions included) per session.
    MainRequestsPerSession,
    /// Requests per sub-agent.
    SubagentRequestsPerGroup,
}

impl Quantity {
    /// Its unit, for the table.
    pub fn unit(self) -> &'static str {
        match self {
            Quantity::MainInput
            | Quantity::MainOutput
            | Quantity::MainNewPrefill
            | Quantity::RequestInput
            | Quantity::RequestOutput => "tok",
            Quantity::MainGap => "s",
            _ => "",
        }
    }
}

/// Which statistic of the quantity a target gives.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stat {
    /// Arithmetic mean.
    Mean,
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
    /// Fraction of values above the target's `above`.
    ShareAbove,
    /// The quantity is one number (a ratio, a share).
    Value,
}

impl Stat {
    /// The probability of a quantile statistic.
    fn probability(self) -> Option<f64> {
        match self {
            Stat::P50 => Some(0.5),
            Stat::P90 => Some(0.9),
            Stat::P95 => Some(0.95),
            Stat::P99 => Some(0.99),
            _ => None,
        }
    }
}

/// One published number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// What it measures.
    pub quantity: Quantity,
    /// Which statistic.
    pub stat: Stat,
    /// For `share_above`: the threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above: Option<f64>,
    /// The published value.
    pub value: f64,
    /// Where it is published.
    pub source: String,
}

/// A corpus's published quantities, and how the corpus was filtered (`presets/targets/NAME.yaml`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Targets {
    /// The corpus's name (the file's name).
    pub name: String,
    /// One line: what the corpus is and where it is described.
    pub source: String,
    /// The corpus kept only sessions with at least this many requests: the fit reads only such
    /// sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_requests_per_session: Option<u32>,
    /// The corpus left out requests whose prompt plus output exceed this (the spec's
    /// `max_request_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_tokens: Option<u32>,
    /// This corpus is another (named targets) filtered by `max_request_tokens`: the spec is aimed at
    /// that one's quantities, then filtered, and compared with these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived_from: Option<String>,
    /// Whether the corpus's sessions declare their application prefix (a Weka trace's
    /// `system_tokens` + `tool_tokens`): the aimed spec's `declared_prefix`. Absent: as the spec was
    /// fitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_prefix: Option<bool>,
    /// The published numbers.
    pub quantities: Vec<Target>,
}

impl Targets {
    /// A built-in targets file by name (`presets/targets/NAME.yaml`).
    pub fn preset(name: &str) -> Option<Targets> {
        serverbench_config::parse_preset("targets", name, Targets::check, |t| &t.name)
    }

    /// Names of the built-in targets, comma-separated.
    pub fn preset_names() -> String {
        serverbench_config::preset_names("targets")
    }

    /// The sessions the corpus kept: at least this many requests (its own filter, or that of the
    /// corpus it was derived from, `parent`).
    pub fn min_requests(&self, parent: Option<&Targets>) -> Option<u32> {
        parent.unwrap_or(self).min_requests_per_session
    }

    /// Leaves out of `imported` the sessions the corpus would not have kept, counted with the reason;
    /// returns the part of a fitted spec's `source` line that says what it was aimed at.
    pub fn keep_corpus_sessions(
        &self,
        parent: Option<&Targets>,
        imported: &mut crate::Imported,
    ) -> String {
        let Some(min) = self.min_requests(parent) else {
            return format!("aimed at {}", self.name);
        };
        let why =
            format!("a session of fewer than {min} requests (the targets' corpus keeps none)");
        imported.keep_sessions(|t| t.len() >= min as usize, &why);
        format!(
            "sessions of at least {min} requests, aimed at {}",
            self.name
        )
    }

    /// Checks the numbers; the error names the field.
    pub fn check(&self) -> Result<(), FieldError> {
        if self.quantities.is_empty() {
            return Err(FieldError::new("quantities", "needs at least one target"));
        }
        if self.max_request_tokens == Some(0) {
            return Err(FieldError::new("max_request_tokens", "must be positive"));
        }
        for (i, t) in self.quantities.iter().enumerate() {
            let field = |f: &str| format!("quantities[{i}].{f}");
            if !(t.value.is_finite() && t.value >= 0.0) {
                return Err(FieldError::new(
                    field("value"),
                    "must be a finite non-negative number",
                ));
            }
            let share = matches!(
                t.quantity,
                Quantity::InfiniteCacheHit | Quantity::SessionsWithSubagents
            );
            match (t.stat, t.above) {
                (Stat::ShareAbove, None) => {
                    return Err(FieldError::new(field("above"), "share_above needs it"))
                }
                (Stat::ShareAbove, Some(_)) | (Stat::Value, _) if t.value > 1.0 => {
                    return Err(FieldError::new(field("value"), "a share is at most 1"))
                }
                (Stat::Value, _) if !share => {
                    return Err(FieldError::new(
                        field("stat"),
                        format!(
                            "{:?} has a distribution: give a mean, a quantile or a share_above",
                            t.quantity
                        ),
                    ))
                }
                (s, _) if share && s != Stat::Value => {
                    return Err(FieldError::new(
                        field("stat"),
                        format!("{:?} is one number: `value`", t.quantity),
                    ))
                }
                (s, Some(_)) if s != Stat::ShareAbove => {
                    return Err(FieldError::new(field("above"), "only for share_above"))
                }
                _ => {}
            }
            if t.source.trim().is_empty() {
                return Err(FieldError::new(
                    field("source"),
                    "must name where it is published",
                ));
            }
        }
        Ok(())
    }

    /// The targets of `quantity`.
    fn of(&self, quantity: Quantity) -> impl Iterator<Item = &Target> {
        self.quantities
            .iter()
            .filter(move |t| t.quantity == quantity)
    }
}

/// The quantities of a set of sessions, as samples.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    sessions: usize,
    main_input: Vec<f64>,
    main_output: Vec<f64>,
    main_new: Vec<f64>,
    main_gap: Vec<f64>,
    input: Vec<f64>,
    output: Vec<f64>,
    held_tokens: f64,
    input_tokens: f64,
    spawning: usize,
    groups: Vec<f64>,
    spawning_groups: Vec<f64>,
    main_requests: Vec<f64>,
    subagent_requests: Vec<f64>,
}

impl Observed {
    /// Measures `trees`.
    pub fn of<'a>(trees: impl IntoIterator<Item = &'a SessionTree>) -> Observed {
        let mut o = Observed::default();
        for t in trees {
            o.add(t);
        }
        o
    }

    fn add(&mut self, tree: &SessionTree) {
        let bs = tree.block_size as f64;
        let mut seen: FxHashSet<u64> = FxHashSet::default();
        let mut per_agent: Vec<f64> = Vec::new();
        for r in tree.requests() {
            let ids = r.blocks.as_slice();
            // A prompt's held part is its longest prefix ending at a block seen before (a prompt
            // shares a prefix, never a middle): only the blocks after it are new.
            let held = ids
                .iter()
                .rposition(|id| seen.contains(id))
                .map_or(0, |p| p + 1);
            seen.extend(&ids[held..]);
            let input = r.input_tokens as f64;
            let new = (input - held as f64 * bs).max(0.0);
            self.input.push(input);
            self.output.push(r.output_tokens as f64);
            self.input_tokens += input;
            self.held_tokens += input - new;
            if per_agent.len() <= r.agent as usize {
                per_agent.resize(r.agent as usize + 1, 0.0);
            }
            per_agent[r.agent as usize] += 1.0;
            if r.agent == 0 {
                self.main_input.push(input);
                self.main_output.push(r.output_tokens as f64);
                self.main_new.push(new);
                if !r.deps.is_empty() && r.kind != RequestKind::Compaction {
                    self.main_gap.push(r.think_ns as f64 / 1e9);
                }
            }
        }
        self.sessions += 1;
        self.main_requests
            .push(per_agent.first().copied().unwrap_or(0.0));
        let groups = per_agent.iter().skip(1).filter(|&&n| n > 0.0).count() as f64;
        self.subagent_requests
            .extend(per_agent.iter().skip(1).filter(|&&n| n > 0.0));
        self.groups.push(groups);
        if groups > 0.0 {
            self.spawning += 1;
            self.spawning_groups.push(groups);
        }
    }

    /// The samples of a distributed quantity (`None` for a one-number quantity).
    fn samples(&self, q: Quantity) -> Option<&[f64]> {
        Some(match q {
            Quantity::MainInput => &self.main_input,
            Quantity::MainOutput => &self.main_output,
            Quantity::MainNewPrefill => &self.main_new,
            Quantity::MainGap => &self.main_gap,
            Quantity::RequestInput => &self.input,
            Quantity::RequestOutput => &self.output,
            Quantity::GroupsPerSpawningSession => &self.spawning_groups,
            Quantity::GroupsPerSession => &self.groups,
            Quantity::MainRequestsPerSession => &self.main_requests,
            Quantity::SubagentRequestsPerGroup => &self.subagent_requests,
            Quantity::InfiniteCacheHit | Quantity::SessionsWithSubagents => return None,
        })
    }

    /// The value of `stat` of `q` (`above` for a share).
    pub fn value(&self, q: Quantity, stat: Stat, above: Option<f64>) -> f64 {
        match q {
            Quantity::InfiniteCacheHit => {
                return if self.input_tokens > 0.0 {
                    self.held_tokens / self.input_tokens
                } else {
                    0.0
                }
            }
            Quantity::SessionsWithSubagents => {
                return self.spawning as f64 / self.sessions.max(1) as f64
            }
            _ => {}
        }
        let mut v = self.samples(q).unwrap_or(&[]).to_vec();
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(f64::total_cmp);
        match (stat, stat.probability()) {
            (_, Some(p)) => quantile(&v, p),
            (Stat::Mean, _) => v.iter().sum::<f64>() / v.len() as f64,
            (Stat::ShareAbove, _) => {
                let a = above.unwrap_or(f64::INFINITY);
                v.iter().filter(|&&x| x > a).count() as f64 / v.len() as f64
            }
            _ => 0.0,
        }
    }
}

/// One row of the aim table.
#[derive(Clone, Debug, Serialize)]
pub struct AimRow {
    /// The target.
    pub target: Target,
    /// What the fitted spec generated before any move.
    pub fitted: f64,
    /// What the aimed spec generates.
    pub aimed: f64,
    /// `aimed` against the target: relative (or, for shares and ratios, the difference).
    pub error: f64,
    /// Whether a move aims at it (else it only shows what follows from the others).
    pub moved: bool,
}

/// What `workload fit --targets` prints: every published quantity beside the generated one.
#[derive(Clone, Debug, Serialize)]
pub struct AimReport {
    /// The targets' name.
    pub targets: String,
    /// Sessions generated for the table.
    pub sessions: u64,
    /// Rounds of moves.
    pub rounds: usize,
    /// Per target.
    pub rows: Vec<AimRow>,
}

/// Whether a move aims at the target (else it is only reported: it follows from the others).
pub fn is_moved(t: &Target) -> bool {
    use Quantity::*;
    match t.quantity {
        MainOutput | MainGap | MainNewPrefill => true,
        MainRequestsPerSession | SubagentRequestsPerGroup | GroupsPerSession => {
            t.stat == Stat::Mean
        }
        MainInput => matches!(t.stat, Stat::P50 | Stat::P99),
        GroupsPerSpawningSession | RequestOutput | RequestInput => t.stat == Stat::P50,
        SessionsWithSubagents => true,
        InfiniteCacheHit => false,
    }
}

/// The generated sessions of `spec` (seed 0).
fn generate(
    spec: &WorkloadSpec,
    sessions: u64,
    context_limit: u32,
) -> Result<Vec<SessionTree>, FieldError> {
    let g = Generator::new(spec.clone(), 0, context_limit)?;
    Ok((0..sessions).map(|k| g.generate(k)).collect())
}

/// Aims `spec` at `targets` (for a derived corpus: at its parent's, then filters), moving it over
/// `rounds` of [`SESSIONS`] generated sessions under `context_limit`, and tables the result over
/// `sessions` generated sessions; `parent` resolves a `derived_from` name.
pub fn aim(
    spec: &WorkloadSpec,
    targets: &Targets,
    parent: Option<&Targets>,
    context_limit: u32,
    sessions: u64,
    rounds: usize,
) -> Result<(WorkloadSpec, AimReport), FieldError> {
    let before = Observed::of(&generate(spec, sessions, context_limit)?);
    let per_round = SESSIONS.min(sessions);
    let mut s = spec.clone();
    let aim_at = parent.unwrap_or(targets);
    s.max_request_tokens = aim_at.max_request_tokens;
    for _ in 0..rounds {
        let o = Observed::of(&generate(&s, per_round, context_limit)?);
        step(&mut s, aim_at, &o)?;
    }
    round_spec(&mut s);
    if let Some(declared) = targets
        .declared_prefix
        .or(parent.and_then(|p| p.declared_prefix))
    {
        s.declared_prefix = Some(declared);
    }
    if parent.is_some() {
        s.max_request_tokens = targets.max_request_tokens;
    }
    s.check()?;
    let after = Observed::of(&generate(&s, sessions, context_limit)?);
    let rows = targets
        .quantities
        .iter()
        .map(|t| {
            let aimed = after.value(t.quantity, t.stat, t.above);
            AimRow {
                target: t.clone(),
                fitted: before.value(t.quantity, t.stat, t.above),
                aimed,
                error: error(t, aimed),
                moved: parent.is_none() && is_moved(t),
            }
        })
        .collect();
    Ok((
        s,
        AimReport {
            targets: targets.name.clone(),
            sessions,
            rounds,
            rows,
        },
    ))
}

/// Relative error, or the difference for a share.
pub fn error(t: &Target, got: f64) -> f64 {
    match t.stat {
        Stat::Value | Stat::ShareAbove => got - t.value,
        _ if t.value > 0.0 => got / t.value - 1.0,
        _ => got - t.value,
    }
}

/// Above this probability a new-prefill quantile is set by how often a turn changes its history (the
/// largest new prefills are of such turns), not by how much an ordinary turn adds.
const GROWTH_MAX_P: f64 = 0.9;

/// One round of moves from the measured sessions `o`.
fn step(s: &mut WorkloadSpec, t: &Targets, o: &Observed) -> Result<(), FieldError> {
    // Distributions moved through their published quantiles, and beyond the highest to their mean.
    if let Some(f) = anchors(t, o, Quantity::MainOutput, 1.0) {
        let k = tail_factor(t, o, Quantity::MainOutput, &f);
        map_dist(&mut s.output_tokens, &f, k, "output_tokens")?;
    }
    if let Some(f) = anchors(t, o, Quantity::MainGap, 1.0) {
        let k = tail_factor(t, o, Quantity::MainGap, &f);
        map_dist(&mut s.think_time_s, &f, k, "think_time_s")?;
    }
    if let Some(f) = anchors(t, o, Quantity::MainNewPrefill, GROWTH_MAX_P) {
        let k = tail_factor(t, o, Quantity::MainNewPrefill, &f);
        let Some(g) = s.new_tokens.as_mut() else {
            return Err(FieldError::new(
                "new_tokens",
                "main_new_prefill targets need a fitted growth model",
            ));
        };
        each_root_growth(g, |field, g| {
            for (i, b) in g.bands.iter_mut().enumerate() {
                map_dist(&mut b.dist, &f, k, &format!("{field}.bands[{i}].dist"))?;
            }
            Ok(())
        })?;
    }
    if let (Some(k), Some(g)) = (
        ratio(t, o, Quantity::MainNewPrefill, Stat::P99),
        s.new_tokens.as_mut(),
    ) {
        each_root_growth(g, |_, g| {
            g.rewrite_probability = (g.rewrite_probability * k).clamp(0.0, 1.0);
            Ok(())
        })?;
    }
    // Counts scaled to their published means.
    if let Some(k) = ratio(t, o, Quantity::MainRequestsPerSession, Stat::Mean) {
        scale_turns(s, k);
    }
    if let Some(k) = ratio(t, o, Quantity::SubagentRequestsPerGroup, Stat::Mean) {
        scale_dist(&mut s.subagents.turns, k, 1.0);
    }
    // The context at which sessions compact, to the published longest main-agent prompts; how much
    // of its history a turn that changes it loses, to the published median prompt (the new prefill a
    // session sends is published: what its changed histories do not spend on sending again, its
    // ordinary turns add to the context).
    if let Some(k) = ratio(t, o, Quantity::MainInput, Stat::P99) {
        scale_thresholds(s, k);
    }
    if let (Some(k), Some(g)) = (
        ratio(t, o, Quantity::MainInput, Stat::P50),
        s.new_tokens.as_mut(),
    ) {
        each_root_growth(g, |_, g| {
            scale_loss(&mut g.rewrite_kept_fraction, 1.0 / k);
            Ok(())
        })?;
    }
    // Sub-agents: which sessions use them, how many, and what they answer.
    if let Some(tt) = t.of(Quantity::SessionsWithSubagents).next() {
        let got = o.value(Quantity::SessionsWithSubagents, Stat::Value, None);
        let p = s.subagents.session_probability.unwrap_or(1.0);
        let k = if got > 0.0 { tt.value / got } else { 2.0 };
        s.subagents.session_probability = Some((p * k).clamp(0.0, 1.0));
    }
    // Counts of a few sub-agents move in steps: half the correction per round, or they swing.
    if let Some(k) = ratio(t, o, Quantity::GroupsPerSpawningSession, Stat::P50) {
        let p = s.subagents.spawn_probability.max(1e-4);
        s.subagents.spawn_probability = (p * k.sqrt()).clamp(0.0, 1.0);
    }
    if let Some(k) = ratio(t, o, Quantity::GroupsPerSession, Stat::Mean) {
        // A mean above what the median gives comes from sessions that spawn far more than others.
        let sigma = s.subagents.spawn_spread.unwrap_or(0.0) + 0.5 * k.ln();
        s.subagents.spawn_spread = Some(sigma.clamp(0.0, 3.0));
    }
    // What sub-agents add per turn, to the published median prompt of all requests (the main
    // agent's prompts are set above).
    if let Some(k) = ratio(t, o, Quantity::RequestInput, Stat::P50) {
        if s.subagents.new_tokens.is_none() {
            // The root's model without its early tiers: sub-agents never draw from them.
            s.subagents.new_tokens = s.new_tokens.clone().map(|g| NewTokens {
                early: Vec::new(),
                ..g
            });
        }
        let Some(g) = s.subagents.new_tokens.as_mut() else {
            return Err(FieldError::new(
                "subagents.new_tokens",
                "request_input targets need a fitted growth model",
            ));
        };
        for b in g.bands.iter_mut() {
            scale_dist(&mut b.dist, k, 0.0);
        }
    }
    if let Some(k) = ratio(t, o, Quantity::RequestOutput, Stat::P50) {
        let d = s
            .subagents
            .output_tokens
            .get_or_insert_with(|| s.output_tokens.clone());
        scale_dist(d, k, 1.0);
    }
    Ok(())
}

/// With a published mean of `q`: the factor on the excess over the highest anchor's value that,
/// applied to the measured values after the map `f`, gives that mean (bounded to [1/4, 4] per round);
/// 1 without one.
fn tail_factor(t: &Targets, o: &Observed, q: Quantity, f: &[(f64, f64)]) -> f64 {
    let (Some(mean), Some(v)) = (t.of(q).find(|x| x.stat == Stat::Mean), o.samples(q)) else {
        return 1.0;
    };
    let a = f[f.len() - 1].1;
    let (mut body, mut excess, mut n_tail) = (0.0, 0.0, 0.0);
    for &x in v {
        let y = through(f, x);
        if y > a {
            excess += y - a;
            n_tail += 1.0;
        } else {
            body += y;
        }
    }
    let want = mean.value * v.len() as f64 - body - n_tail * a;
    if excess > 0.0 && want > 0.0 {
        (want / excess).clamp(0.25, 4.0)
    } else {
        1.0
    }
}

/// Target over measured for `(q, stat)`, bounded to [1/4, 4] per round; `None` without such a target.
fn ratio(t: &Targets, o: &Observed, q: Quantity, stat: Stat) -> Option<f64> {
    let tt = t.of(q).find(|x| x.stat == stat)?;
    let got = o.value(q, stat, None);
    Some(if got > 0.0 {
        (tt.value / got).clamp(0.25, 4.0)
    } else {
        4.0
    })
}

/// The monotone map that takes the measured quantiles of `q` to the published ones: `(measured,
/// published)` pairs, ascending; `None` without quantile targets. A share above a threshold is the
/// quantile at one minus the share.
fn anchors(t: &Targets, o: &Observed, q: Quantity, max_p: f64) -> Option<Vec<(f64, f64)>> {
    let mut v = o.samples(q)?.to_vec();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mut pairs: Vec<(f64, f64, f64)> = t
        .of(q)
        .filter_map(|x| {
            let p = match x.stat {
                Stat::ShareAbove => 1.0 - x.value,
                s => s.probability()?,
            };
            let published = match x.stat {
                Stat::ShareAbove => x.above?,
                _ => x.value,
            };
            Some((p, quantile(&v, p), published))
        })
        .filter(|&(p, _, _)| p <= max_p)
        .filter(|&(_, m, p)| m > 0.0 && p > 0.0)
        .collect();
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Keep the anchors that rise in both coordinates (ties in the measured value keep the first).
    let mut out: Vec<(f64, f64)> = Vec::new();
    for (_, m, p) in pairs {
        if out.last().map_or(true, |&(lm, lp)| m > lm && p > lp) {
            out.push((m, p));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `x` through the anchors: piecewise linear in log-log space between them, the end ratios held
/// beyond them.
fn through(f: &[(f64, f64)], x: f64) -> f64 {
    if x <= 0.0 {
        return x;
    }
    let (first, last) = (f[0], f[f.len() - 1]);
    if x <= first.0 {
        return x * first.1 / first.0;
    }
    if x >= last.0 {
        return x * last.1 / last.0;
    }
    let i = f.partition_point(|a| a.0 <= x);
    let ((x0, y0), (x1, y1)) = (f[i - 1], f[i]);
    let w = (x.ln() - x0.ln()) / (x1.ln() - x0.ln());
    (y0.ln() + w * (y1.ln() - y0.ln())).exp()
}

/// Calls `f` on the root's growth model and on each of its early tiers' (`new_tokens.early`), with
/// the field each is named by: the aim moves them all alike. The first error stops it.
fn each_root_growth(
    g: &mut NewTokens,
    mut f: impl FnMut(&str, &mut NewTokens) -> Result<(), FieldError>,
) -> Result<(), FieldError> {
    // Taken out while the common model is lent, so that a tier is never reachable through it.
    let mut early = std::mem::take(&mut g.early);
    let mut result = f("new_tokens", g);
    for (i, t) in early.iter_mut().enumerate() {
        if result.is_err() {
            break;
        }
        result = f(&format!("new_tokens.early[{i}].growth"), &mut t.growth);
    }
    g.early = early;
    result
}

/// Moves an empirical distribution's knots through `f`, then multiplies what they exceed the highest
/// anchor's value by by `k`.
fn map_dist(d: &mut Dist, f: &[(f64, f64)], k: f64, field: &str) -> Result<(), FieldError> {
    let Dist::Empirical { points } = d else {
        return Err(FieldError::new(
            field,
            "targets move measured (empirical) distributions only",
        ));
    };
    let a = f[f.len() - 1].1;
    for p in points.iter_mut() {
        let y = through(f, p[1]);
        p[1] = if y > a { a + (y - a) * k } else { y };
    }
    Ok(())
}

/// Multiplies a distribution's values by `k` (its floor `min` kept).
fn scale_dist(d: &mut Dist, k: f64, min: f64) {
    match d {
        Dist::Empirical { points } => {
            for p in points.iter_mut() {
                p[1] = (p[1] * k).max(min.min(p[1]));
            }
        }
        Dist::Constant { value } => *value *= k,
        Dist::Lognormal { median, .. } => *median *= k,
        Dist::Uniform { low, high } => {
            *low *= k;
            *high *= k;
        }
        Dist::Geometric { p, .. } => *p = (*p / k).clamp(1e-6, 1.0),
    }
}

/// Scales every session's root turns (the shapes, or the turn distribution).
fn scale_turns(s: &mut WorkloadSpec, k: f64) {
    match s.session_shapes.as_mut() {
        Some(rows) => rows.iter_mut().for_each(|r| r[1] = (r[1] * k).max(1.0)),
        None => scale_dist(&mut s.root_turns, k, 1.0),
    }
}

/// Multiplies the fraction a changed history loses (one less the kept fraction) by `k`.
fn scale_loss(kept: &mut Dist, k: f64) {
    if let Dist::Empirical { points } = kept {
        for p in points.iter_mut() {
            p[1] = (1.0 - (1.0 - p[1]) * k).clamp(0.0, 1.0);
        }
    }
}

/// Scales the contexts at which sessions compact (each shape's threshold and `max_tokens`).
fn scale_thresholds(s: &mut WorkloadSpec, k: f64) {
    if let Some(rows) = s.session_shapes.as_mut() {
        rows.iter_mut().for_each(|r| r[2] *= k);
    }
    let m = (s.compaction.max_tokens as f64 * k).min(crate::spec::MAX_FIXED_TOKENS as f64);
    s.compaction.max_tokens = m as u32;
}

/// Rounds what the moves left: knots and shapes to 4 significant digits (rising), counts to integers.
fn round_spec(s: &mut WorkloadSpec) {
    let mut dists: Vec<&mut Dist> = vec![
        &mut s.output_tokens,
        &mut s.think_time_s,
        &mut s.subagents.turns,
    ];
    if let Some(d) = s.subagents.output_tokens.as_mut() {
        dists.push(d);
    }
    if let Some(g) = s.subagents.new_tokens.as_mut() {
        dists.extend(g.bands.iter_mut().map(|b| &mut b.dist));
    }
    if let Some(g) = s.new_tokens.as_mut() {
        dists.extend(g.bands.iter_mut().map(|b| &mut b.dist));
        let tiers = g.early.iter_mut().flat_map(|t| t.growth.bands.iter_mut());
        dists.extend(tiers.map(|b| &mut b.dist));
    }
    for d in dists {
        if let Dist::Empirical { points } = d {
            for i in 0..points.len() {
                points[i][1] = crate::fit::round4(points[i][1]);
                if i > 0 {
                    points[i][1] = points[i][1].max(points[i - 1][1]);
                }
            }
        }
    }
    if let Some(rows) = s.session_shapes.as_mut() {
        for r in rows.iter_mut() {
            r[0] = crate::fit::round4(r[0]).clamp(1.0, crate::spec::MAX_PART_TOKENS as f64);
            r[1] = r[1].round().max(1.0);
            r[2] = crate::fit::round4(r[2]);
        }
        // Rounding may move a first prompt across the resumed line: the share stays the rows' own.
        let share = crate::spec::resumed_share_of(rows);
        s.resumed_share = s.resumed_share.map(|_| share);
    }
    s.compaction.max_tokens = crate::fit::round4(s.compaction.max_tokens as f64) as u32;
    if let Some(g) = s.new_tokens.as_mut() {
        g.rewrite_probability = crate::fit::round4(g.rewrite_probability);
        for t in g.early.iter_mut() {
            t.growth.rewrite_probability = crate::fit::round4(t.growth.rewrite_probability);
        }
    }
    let p = &mut s.subagents;
    p.spawn_spread = p.spawn_spread.map(crate::fit::round4);
    p.spawn_probability = crate::fit::round4(p.spawn_probability);
    p.session_probability = p.session_probability.map(crate::fit::round4);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_aim_moves_the_early_tiers_as_the_common_growth_model() {
        let spec = WorkloadSpec::early_tiers_example(12.0);
        let mut g = spec.new_tokens.unwrap();
        let mut seen = Vec::new();
        each_root_growth(&mut g, |field, n| {
            seen.push(field.to_string());
            scale_dist(&mut n.bands[0].dist, 2.0, 0.0);
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                "new_tokens",
                "new_tokens.early[0].growth",
                "new_tokens.early[1].growth"
            ]
        );
        let medians = |n: &NewTokens| n.bands[0].dist.median().unwrap();
        assert_eq!(medians(&g), 200.0);
        let tiers: Vec<f64> = g.early.iter().map(|t| medians(&t.growth)).collect();
        assert_eq!(tiers, [18_000.0, 6_000.0], "the tiers are moved and kept");
        // A tier's error names it, and the tiers are still there after it.
        let e = each_root_growth(&mut g, |field, _| match field {
            "new_tokens.early[0].growth" => Err(FieldError::new(field, "bad")),
            _ => Ok(()),
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "new_tokens.early[0].growth: bad");
        assert_eq!(g.early.len(), 2);
    }

    #[test]
    fn the_map_goes_through_its_anchors_and_keeps_order() {
        let f = [(10.0, 20.0), (100.0, 400.0)];
        assert!((through(&f, 10.0) - 20.0).abs() < 1e-9);
        assert!((through(&f, 100.0) - 400.0).abs() < 1e-9);
        assert!((through(&f, 5.0) - 10.0).abs() < 1e-9, "end ratio below");
        assert!(
            (through(&f, 1000.0) - 4000.0).abs() < 1e-9,
            "end ratio above"
        );
        let mut last = 0.0;
        for x in 1..2000 {
            let y = through(&f, x as f64);
            assert!(y > last);
            last = y;
        }
    }
}
