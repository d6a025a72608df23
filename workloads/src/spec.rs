//! The YAML spec of the `agentic-coding` generator: every distribution named, every default documented.

use rand::Rng;
use rand_distr::{Distribution, Geometric, Normal};
use serde::{Deserialize, Serialize};
use serverbench_config::FieldError;

/// The smallest geometric success probability accepted.
pub const MIN_GEOMETRIC_P: f64 = 1e-9;

/// A distribution of a non-negative quantity, clamped to `[min, max]` after sampling.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum Dist {
    /// Always `value`.
    Constant {
        /// The value.
        value: f64,
    },
    /// `exp(N(ln median, sigma²))`.
    Lognormal {
        /// Median of the distribution.
        median: f64,
        /// Standard deviation of the underlying normal.
        sigma: f64,
        /// Lower clamp.
        #[serde(default)]
        min: Option<f64>,
        /// Upper clamp.
        #[serde(default)]
        max: Option<f64>,
    },
    /// Uniform on `[low, high]`.
    Uniform {
        /// Lower end.
        low: f64,
        /// Upper end.
        high: f64,
    },
    /// A measured distribution: its quantile function through `points` (`[probability, value]`,
    /// probabilities rising from 0 to 1, values not falling), linear between them — what
    /// `workload fit` writes, heavy tails included.
    Empirical {
        /// `[probability, value]` knots of the quantile function.
        points: Vec<[f64; 2]>,
    },
    /// `offset +` the number of failures before the first success with probability `p`.
    Geometric {
        /// Success probability.
        p: f64,
        /// Added to the draw.
        #[serde(default)]
        offset: f64,
        /// Upper clamp.
        #[serde(default)]
        max: Option<f64>,
    },
}

impl Dist {
    /// A lognormal with a cap and a floor.
    pub fn lognormal(median: f64, sigma: f64, min: Option<f64>, max: Option<f64>) -> Dist {
        Dist::Lognormal {
            median,
            sigma,
            min,
            max,
        }
    }

    /// Checks the parameters, and that the distribution's values are meant to stay at most `cap` (a
    /// constant, a median, a lower end or an offset above it is refused; draws are clamped to it
    /// anyway); the error names the parameter and says why.
    pub fn check(&self, cap: f64) -> Result<(), FieldError> {
        let bad = |name: &str, why: &str| Err(FieldError::new(name, why));
        let over = |name: &str, v: f64| {
            Err(FieldError::new(
                name,
                format!("{v} is above the most this field allows ({cap})"),
            ))
        };
        for (name, v) in self.bounds() {
            if let Some(v) = v {
                if !(v >= 0.0 && v.is_finite()) {
                    return bad(name, "must be a finite non-negative number");
                }
            }
        }
        if let Dist::Empirical { points } = self {
            return check_points(points, cap);
        }
        match *self {
            Dist::Constant { value } if value > cap => return over("value", value),
            Dist::Lognormal { median, .. } if median > cap => return over("median", median),
            Dist::Lognormal { min: Some(lo), .. } if lo > cap => return over("min", lo),
            Dist::Uniform { low, .. } if low > cap => return over("low", low),
            Dist::Geometric { offset, .. } if offset > cap => return over("offset", offset),
            _ => {}
        }
        match *self {
            Dist::Constant { value } if !(value >= 0.0 && value.is_finite()) => {
                bad("value", "must be a finite non-negative number")
            }
            Dist::Lognormal { median, .. } if !(median > 0.0 && median.is_finite()) => {
                bad("median", "must be positive")
            }
            Dist::Lognormal { sigma, .. } if !(sigma >= 0.0 && sigma.is_finite()) => {
                bad("sigma", "must be non-negative")
            }
            Dist::Lognormal {
                min: Some(lo),
                max: Some(hi),
                ..
            } if lo > hi => bad("min", "must not exceed max"),
            Dist::Uniform { low, high } if !(low >= 0.0 && low <= high && high.is_finite()) => {
                bad("low", "must satisfy 0 <= low <= high")
            }
            Dist::Geometric { p, .. } if !(MIN_GEOMETRIC_P..=1.0).contains(&p) => bad(
                "p",
                "must be in [1e-9, 1] (a smaller p means more than a billion draws on average, no count this tool uses, and rand_distr's sampler does not end below about 1e-16)",
            ),
            _ => Ok(()),
        }
    }

    /// The optional bounds and offsets of the distribution, by parameter name.
    fn bounds(&self) -> [(&'static str, Option<f64>); 2] {
        match *self {
            Dist::Lognormal { min, max, .. } => [("min", min), ("max", max)],
            Dist::Geometric { offset, max, .. } => [("offset", Some(offset)), ("max", max)],
            _ => [("", None), ("", None)],
        }
    }

    /// One draw, clamped.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match *self {
            Dist::Empirical { ref points } => quantile_at(points, rng.random::<f64>()),
            Dist::Constant { value } => value,
            Dist::Lognormal {
                median,
                sigma,
                min,
                max,
            } => {
                let x = if sigma == 0.0 {
                    median
                } else {
                    let z: f64 = Normal::new(0.0, 1.0).expect("unit normal").sample(rng);
                    median * (sigma * z).exp()
                };
                clamp(x, min, max)
            }
            Dist::Uniform { low, high } => {
                if high > low {
                    rng.random_range(low..=high)
                } else {
                    low
                }
            }
            Dist::Geometric { p, offset, max } => {
                let k = Geometric::new(p).expect("checked p").sample(rng) as f64;
                clamp(offset + k, None, max)
            }
        }
    }

    /// One draw rounded to a whole number, clamped to `[floor, cap]`.
    pub fn sample_count<R: Rng + ?Sized>(&self, rng: &mut R, floor: u32, cap: u32) -> u32 {
        (self.sample(rng).round().min(cap as f64) as u32).max(floor)
    }

    /// The largest value a draw can take, where there is one.
    pub fn upper(&self) -> Option<f64> {
        match *self {
            Dist::Constant { value } => Some(value),
            Dist::Lognormal { max, .. } | Dist::Geometric { max, .. } => max,
            Dist::Uniform { high, .. } => Some(high),
            Dist::Empirical { ref points } => points.last().map(|p| p[1]),
        }
    }

    /// The median, where it has a closed form (used by docs and the statistics tests).
    pub fn median(&self) -> Option<f64> {
        match *self {
            Dist::Constant { value } => Some(value),
            Dist::Lognormal { median, .. } => Some(median),
            Dist::Uniform { low, high } => Some((low + high) / 2.0),
            Dist::Empirical { ref points } => Some(quantile_at(points, 0.5)),
            Dist::Geometric { .. } => None,
        }
    }

    /// An empirical distribution through the `probabilities`-quantiles of `values` (sorted in
    /// place); `probabilities` run from 0 to 1.
    pub fn empirical(values: &mut [f64], probabilities: &[f64]) -> Dist {
        values.sort_by(f64::total_cmp);
        let mut points: Vec<[f64; 2]> = probabilities
            .iter()
            .map(|&p| [p, crate::stats::quantile(values, p)])
            .collect();
        for i in 1..points.len() {
            points[i][1] = points[i][1].max(points[i - 1][1]);
        }
        Dist::Empirical { points }
    }
}

/// The value at probability `u` of a quantile function through `points` (checked).
fn quantile_at(points: &[[f64; 2]], u: f64) -> f64 {
    let i = points.partition_point(|p| p[0] <= u);
    if i == 0 {
        return points[0][1];
    }
    if i == points.len() {
        return points[i - 1][1];
    }
    let ([p0, v0], [p1, v1]) = (points[i - 1], points[i]);
    if p1 > p0 {
        v0 + (v1 - v0) * (u - p0) / (p1 - p0)
    } else {
        v1
    }
}

/// Checks an empirical distribution's knots: probabilities from 0 to 1, rising; values finite,
/// non-negative, not falling, at most `cap`.
fn check_points(points: &[[f64; 2]], cap: f64) -> Result<(), FieldError> {
    let bad = |why: String| Err(FieldError::new("points", why));
    if points.len() < 2 {
        return bad("needs at least two [probability, value] points".into());
    }
    if points[0][0] != 0.0 || points[points.len() - 1][0] != 1.0 {
        return bad("probabilities must run from 0 to 1".into());
    }
    for (i, w) in points.windows(2).enumerate() {
        if !(w[1][0] > w[0][0]) {
            return bad(format!(
                "probability of point {} must exceed the one before",
                i + 1
            ));
        }
        if !(w[1][1] >= w[0][1]) {
            return bad(format!(
                "value of point {} must not be below the one before",
                i + 1
            ));
        }
    }
    for (i, p) in points.iter().enumerate() {
        if !(p[1] >= 0.0 && p[1].is_finite()) {
            return bad(format!(
                "value of point {i} must be a finite non-negative number"
            ));
        }
    }
    if points[0][1] > cap {
        return bad(format!(
            "{} is above the most this field allows ({cap})",
            points[0][1]
        ));
    }
    Ok(())
}

fn clamp(x: f64, min: Option<f64>, max: Option<f64>) -> f64 {
    let x = min.map_or(x, |lo| x.max(lo));
    max.map_or(x, |hi| x.min(hi))
}

/// Most root turns (or sub-agent turns) one agent may take.
pub const MAX_TURNS: u32 = 100_000;

/// Whether a `session_shapes` row `[first prompt, turns, compaction threshold]` is one the generator can
/// draw: at least `[1, 1, 0]`, at most `[MAX_PART_TOKENS, MAX_TURNS, MAX_FIXED_TOKENS]`.
pub fn session_shape_ok(r: &[f64; 3]) -> bool {
    r[0] >= 1.0
        && r[0] <= MAX_PART_TOKENS as f64
        && r[1] >= 1.0
        && r[1] <= MAX_TURNS as f64
        && r[2] >= 0.0
        && r[2] <= MAX_FIXED_TOKENS as f64
}
/// Most sub-agents one turn may spawn at once.
pub const MAX_FANOUT: u32 = 64;
/// Most tokens of one prompt part, tool result or output.
pub const MAX_PART_TOKENS: u32 = 1_048_576;
/// Most tokens of a fixed-size field (prefix, summaries, results, compaction threshold): the longest
/// context a deployment may have.
pub const MAX_FIXED_TOKENS: u32 = 16_777_216;
/// Largest factor a session's speed may multiply its think times by (`session_think_speeds`' `a`).
pub const MAX_THINK_SCALE: f64 = 1e4;
/// Largest widening of a session's think-time spread (`session_think_speeds`' `b`).
pub const MAX_THINK_SPREAD: f64 = 100.0;

/// Longest think time, seconds (the replay's idle-gap cap applies on top).
pub const MAX_THINK_S: f64 = 1e6;
/// Largest block of the generated block-hash chains, tokens.
pub const MAX_BLOCK_TOKENS: u32 = 4096;

/// One band of a banded distribution: the distribution when the quantity it depends on (a context,
/// a first prompt) is below `below_tokens` (the last band has none: every larger value).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Band {
    /// Upper end of the band (exclusive), tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_tokens: Option<u32>,
    /// The distribution in this band.
    pub dist: Dist,
}

/// The distribution of the band `x` falls in (bands checked by [`check_bands`]).
fn band_of(bands: &[Band], x: u32) -> &Dist {
    let i = bands
        .iter()
        .position(|b| match b.below_tokens {
            None => true,
            Some(t) => x < t,
        })
        .unwrap_or(bands.len() - 1);
    &bands[i].dist
}

/// Checks bands: at least one, ascending, only the last without an upper end, each distribution
/// at most `cap`.
fn check_bands(bands: &[Band], cap: f64) -> Result<(), FieldError> {
    if bands.is_empty() {
        return Err(FieldError::new("", "needs at least one band"));
    }
    for (i, b) in bands.iter().enumerate() {
        let last = i + 1 == bands.len();
        let field = format!("[{i}].below_tokens");
        match b.below_tokens {
            None if !last => {
                return Err(FieldError::new(
                    field,
                    "only the last band may leave it out",
                ))
            }
            Some(_) if last => {
                return Err(FieldError::new(
                    field,
                    "the last band covers every larger value: leave it out",
                ))
            }
            Some(t) if i > 0 && bands[i - 1].below_tokens >= Some(t) => {
                return Err(FieldError::new(field, "bands must ascend"))
            }
            _ => {}
        }
        b.dist
            .check(cap)
            .map_err(|e| e.under(&format!("[{i}].dist")))?;
    }
    Ok(())
}

/// What each later turn's prompt adds to the prompt before it, measured as one quantity: the previous
/// answer and the tool results together (the prompt tokens a turn sends that the turn before did not),
/// by the size of the context it extends; and how often a turn re-sends the history changed, so that
/// only part of the previous prompt is still a cached prefix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewTokens {
    /// Bands by context size, ascending; the last has no upper end.
    pub bands: Vec<Band>,
    /// Probability that a later turn changes its history: its prompt is as long as always, but
    /// only the first `rewrite_kept_fraction` of the previous prompt is shared with it.
    #[serde(default)]
    pub rewrite_probability: f64,
    /// Fraction of the previous prompt a changed history still shares.
    #[serde(default = "NewTokens::nothing_kept")]
    pub rewrite_kept_fraction: Dist,
    /// A session's early root turns measured apart from the later ones (`workload fit
    /// --early-growth`): tier `k` covers the root turns from the previous tier's `below_turn` (the
    /// first from turn 1, the session's first growth) to below its own, each with its own bands (of
    /// the context it extends) and rewrites; empty: every turn drawn from this model. A tier has no
    /// tiers of its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub early: Vec<EarlyTurns>,
}

impl NewTokens {
    fn nothing_kept() -> Dist {
        Dist::Constant { value: 0.0 }
    }

    /// The distribution for a turn that extends a context of `context` tokens.
    pub fn band(&self, context: u32) -> &Dist {
        band_of(&self.bands, context)
    }

    /// A model that adds `tokens` at every turn and never changes a history, with `early` tiers.
    #[cfg(test)]
    pub(crate) fn constant(tokens: f64, early: Vec<EarlyTurns>) -> NewTokens {
        NewTokens {
            bands: vec![Band {
                below_tokens: None,
                dist: Dist::Constant { value: tokens },
            }],
            rewrite_probability: 0.0,
            rewrite_kept_fraction: NewTokens::nothing_kept(),
            early,
        }
    }

    /// The model of root turn `turn`'s growth: its early tier's where it has one, else this.
    pub fn of_turn(&self, turn: u32) -> &NewTokens {
        (self.early.iter().find(|t| turn < t.below_turn)).map_or(self, |t| &t.growth)
    }

    /// Checks the bands (ascending, the last open) and the rewrite fields.
    pub fn check(&self) -> Result<(), FieldError> {
        check_bands(&self.bands, MAX_PART_TOKENS as f64).map_err(|e| e.under("bands"))?;
        let mut from = 1;
        for (i, tier) in self.early.iter().enumerate() {
            let field = |f: &str| format!("early[{i}].{f}");
            if tier.below_turn <= from {
                return Err(FieldError::new(
                    field("below_turn"),
                    format!("must be above {from} (tiers ascend from turn 1)"),
                ));
            }
            if !tier.growth.early.is_empty() {
                return Err(FieldError::new(
                    field("early"),
                    "a tier has no tiers of its own",
                ));
            }
            tier.growth
                .check()
                .map_err(|e| e.under(&format!("early[{i}]")))?;
            from = tier.below_turn;
        }
        if !(0.0..=1.0).contains(&self.rewrite_probability) {
            return Err(FieldError::new("rewrite_probability", "must be in [0, 1]"));
        }
        self.rewrite_kept_fraction
            .check(1.0)
            .map_err(|e| e.under("rewrite_kept_fraction"))
    }
}

/// A growth model for a tier of a session's early root turns ([`NewTokens::early`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EarlyTurns {
    /// The tier ends before this root turn (turn 0 is the first prompt).
    pub below_turn: u32,
    /// Its growth model.
    pub growth: NewTokens,
}

/// Sub-agent behaviour.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentSpec {
    /// Probability that a session uses sub-agents at all (drawn once per session); absent: every
    /// session may, and only `spawn_probability` decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_probability: Option<f64>,
    /// Probability that a root turn of a session that uses sub-agents spawns them.
    pub spawn_probability: f64,
    /// Sessions differ in how often they spawn: `spawn_probability` times a lognormal factor of median
    /// 1 and this sigma, drawn once per session; absent: the same for every session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn_spread: Option<f64>,
    /// Where a session that uses sub-agents first spawns them, as a fraction of its root turns (0: its
    /// first turn): that turn spawns for certain, and `spawn_probability` is then the rate of its
    /// other turns. Absent: every turn spawns at `spawn_probability`, so a session drawn to use
    /// sub-agents may spawn none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_spawn_at: Option<Dist>,
    /// Number of sub-agents spawned together.
    pub fanout: Dist,
    /// Turns per sub-agent.
    pub turns: Dist,
    /// Task prompt of a sub-agent's first request, after the shared prefix.
    pub first_prompt_tokens: u32,
    /// Tokens a foreground sub-agent's result adds to its parent's next prompt.
    pub result_tokens: u32,
    /// Fraction of sub-agents launched in the background (they gate nothing).
    pub background_fraction: f64,
    /// The sub-agents' own system + tools prefix, shared by every sub-agent of every session; absent:
    /// they start with the root's `system_prefix_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_tokens: Option<u32>,
    /// The task prompt after that prefix, as a distribution; absent: `first_prompt_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_prompt_tokens: Option<Dist>,
    /// Output tokens of a sub-agent's turn; absent: the root's `output_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<Dist>,
    /// What a sub-agent's later turns add; absent: as the root's turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tokens: Option<NewTokens>,
}

impl Default for SubagentSpec {
    fn default() -> Self {
        SubagentSpec {
            session_probability: None,
            spawn_probability: 0.04,
            spawn_spread: None,
            first_spawn_at: None,
            fanout: Dist::Geometric {
                p: 0.5,
                offset: 1.0,
                max: Some(5.0),
            },
            turns: Dist::lognormal(15.0, 0.6, Some(1.0), None),
            first_prompt_tokens: 2_000,
            result_tokens: 500,
            background_fraction: 0.1,
            prefix_tokens: None,
            task_prompt_tokens: None,
            output_tokens: None,
            new_tokens: None,
        }
    }
}

/// Context compaction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompactionSpec {
    /// Compact when the context would pass this fraction of the deployment's context limit...
    pub context_fraction: f64,
    /// ...or this many tokens, whichever is smaller.
    pub max_tokens: u32,
    /// Length of the summary that replaces the history.
    pub summary_tokens: u32,
    /// Tokens the first prompt after a compaction carries besides the prefix and the summary (files
    /// read again, the task restated); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried_tokens: Option<Dist>,
    /// Tokens an agent keeps free below the deployment's context limit for its answer: it compacts
    /// before its context passes the limit less this (so that the longest answer it asks for fits);
    /// absent: no reserve beyond `context_fraction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_tokens: Option<u32>,
    /// Whether `carried_tokens` is all the first prompt after a compaction holds besides the prefix and
    /// the summary, the compacting turn's own additions included, as `workload fit` measures it (`workload
    /// fit --turn-in-carry` says so). Absent or false: the turn's drawn growth is added on top of the
    /// carried tokens, as every spec made before this field existed was generated (so runs stored with
    /// them reproduce) — which counts a fitted spec's turn twice (docs/workload.md).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub turn_in_carry: bool,
}

impl Default for CompactionSpec {
    fn default() -> Self {
        CompactionSpec {
            context_fraction: 0.9,
            max_tokens: 160_000,
            summary_tokens: 2_000,
            carried_tokens: None,
            reserve_tokens: None,
            turn_in_carry: false,
        }
    }
}

/// The `agentic-coding` workload: what each distribution is and where it is capped.
///
/// The default is the built-in spec `agentic-coding`, fitted to the corpus of real Claude Code
/// sessions under `corpus/claude-code`; a field a spec file leaves out takes the hand-set
/// `synthetic-v1` value, so that files written before the fit mean what they meant.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default = "WorkloadSpec::synthetic_v1")]
pub struct WorkloadSpec {
    /// A built-in spec's name (`agentic-coding`, `synthetic-v1`); not read by the generator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Profile name; only `agentic-coding` exists.
    pub profile: String,
    /// Tokens per block of the generated block chains.
    pub block_size: u32,
    /// Shared system + tools prefix, identical in every session of the workload.
    pub system_prefix_tokens: u32,
    /// The user's first prompt (after the prefix).
    pub first_prompt_tokens: Dist,
    /// Root turns per session.
    pub root_turns: Dist,
    /// Measured sessions' shapes, `[first prompt after the prefix, root turns, compaction
    /// threshold]`: a session draws one row (a bootstrap of the corpus's sessions, so that a session
    /// that starts from a long history runs few turns and one that compacted does so where it did),
    /// replacing `first_prompt_tokens` and `root_turns`; a session compacts at its threshold (capped
    /// by `context_fraction` of the deployment's limit), or at that cap if its threshold is 0 (it
    /// never compacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_shapes: Option<Vec<[f64; 3]>>,
    /// The share of sessions that resume an earlier conversation: those drawn from shapes whose
    /// first prompt is more than [`RESUMED_ABOVE_TOKENS`] past the prefix ([`shape_is_resumed`]).
    /// `workload fit` writes the share its shapes have, and a session then draws a row uniformly
    /// (which gives each kind that share); another share draws the kind first, then a row of that
    /// kind (`0`: fresh sessions only). Needs `session_shapes` with a row of each kind it can draw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_share: Option<f64>,
    /// Each `session_shapes` row's own speed, `[a, b]`: a session drawn from that row thinks
    /// `a · c · (g / c)^b` for each `g` drawn from `think_time_s` (`c` its median), so `a` sets how
    /// fast the session turns around and `b` how widely its think times spread (`think_time_s` is
    /// then the corpus's think times at its typical speed). `workload fit --session-speed` measures
    /// them ([`crate::speed`]); one pair per row, `a` above 0, `b` at least 0. Absent: every session
    /// draws its think times from `think_time_s` alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_think_speeds: Option<Vec<[f64; 2]>>,
    /// Each `session_shapes` row's own application prefix, tokens: a session drawn from that row
    /// starts with that many tokens of system and tools prompt in place of `system_prefix_tokens`,
    /// shared with every session whose row has a prefix of the same length and with no other (as the
    /// corpus shares an application prefix: `corpus` format's `app`), and the row's first prompt
    /// follows it. `workload fit --app-prefixes` measures them; one per row, at most
    /// [`MAX_FIXED_TOKENS`]. Absent: every session starts with the one `system_prefix_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_app_prefixes: Option<Vec<u32>>,
    /// Output tokens per turn.
    pub output_tokens: Dist,
    /// Tool-result tokens appended before each later turn.
    pub tool_result_tokens: Dist,
    /// Think (tool execution) time before each later turn, in seconds; the replay caps it.
    pub think_time_s: Dist,
    /// What each later turn adds, measured as one quantity (answer and tool results), by context
    /// size; when present it replaces `tool_result_tokens` and the previous output's growth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_tokens: Option<NewTokens>,
    /// Sub-agents.
    pub subagents: SubagentSpec,
    /// Compaction.
    pub compaction: CompactionSpec,
    /// Requests whose prompt plus output exceed this many tokens are left out of their session, as
    /// `cc-traces-weka-062126-256k` leaves them out of the full corpus: what waited for one waits for
    /// what it waited for, after its think time too. Requests longer than the deployment's context
    /// are left out of their sessions the same way (AgentX's `--max-context-length` leaves whole
    /// traces out instead: a generated session is not a trace the benchmark could have left out). A session
    /// always keeps its first request. Absent: every request is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_request_tokens: Option<u32>,
    /// Whether the sessions' application prefix (`system_prefix_tokens`, a shape's own, the
    /// sub-agents' `prefix_tokens`) is declared the application's own, as a Weka trace declares its
    /// `system_tokens` + `tool_tokens`: a generated tree then names it (`SessionTree::app_prefix`), so
    /// that a tree written out keeps what it shares with other sessions, a real replay sends it as a
    /// system message, and AgentX's cache-bust marker follows it (the prefix stays shared across
    /// trees). `false` where the corpus modelled declares none (the benchmark's stand-ins: its corpus
    /// probably declares none, so AgentX shares nothing across trees). Absent: declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared_prefix: Option<bool>,
    /// Where the spec's numbers come from, in one line (a built-in spec says; `workload fit` writes
    /// its corpus); not read by the generator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// The built-in spec every command uses unless told otherwise.
pub const DEFAULT_WORKLOAD: &str = "agentic-coding";

impl Default for WorkloadSpec {
    /// The built-in `agentic-coding` spec, fitted to real Claude Code sessions.
    fn default() -> Self {
        static DEFAULT: std::sync::OnceLock<WorkloadSpec> = std::sync::OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                WorkloadSpec::preset(DEFAULT_WORKLOAD).expect("the default spec is built in")
            })
            .clone()
    }
}

impl WorkloadSpec {
    /// `synthetic-v1` with `turns` root turns a session that add 9,000 tokens at turn 1, 3,000 at
    /// turns 2-5 and 100 from turn 6 on (early tiers), never changing a history.
    #[cfg(test)]
    pub(crate) fn early_tiers_example(turns: f64) -> WorkloadSpec {
        let tier = |below_turn, tokens| EarlyTurns {
            below_turn,
            growth: NewTokens::constant(tokens, vec![]),
        };
        let mut spec = WorkloadSpec::synthetic_v1();
        spec.root_turns = Dist::Constant { value: turns };
        spec.new_tokens = Some(NewTokens::constant(
            100.0,
            vec![tier(2, 9_000.0), tier(6, 3_000.0)],
        ));
        spec
    }

    /// A built-in spec by name (`presets/workloads/NAME.yaml`).
    pub fn preset(name: &str) -> Option<WorkloadSpec> {
        serverbench_config::parse_preset("workloads", name, WorkloadSpec::check, |s| {
            s.name.as_deref().unwrap_or("")
        })
    }

    /// Names of the built-in specs, comma-separated.
    pub fn preset_names() -> String {
        serverbench_config::preset_names("workloads")
    }

    /// The hand-set spec the generator had before it was fitted to real sessions (`synthetic-v1`):
    /// its distributions are assumptions chosen to resemble published Claude Code traces. A spec
    /// file's missing fields take these values.
    pub fn synthetic_v1() -> Self {
        WorkloadSpec {
            name: None,
            profile: "agentic-coding".into(),
            block_size: 64,
            system_prefix_tokens: 20_000,
            first_prompt_tokens: Dist::lognormal(500.0, 1.0, Some(1.0), None),
            root_turns: Dist::lognormal(40.0, 0.7, Some(1.0), Some(400.0)),
            session_shapes: None,
            resumed_share: None,
            session_think_speeds: None,
            session_app_prefixes: None,
            output_tokens: Dist::lognormal(150.0, 1.2, Some(1.0), Some(8_192.0)),
            tool_result_tokens: Dist::lognormal(400.0, 1.5, Some(0.0), Some(40_000.0)),
            think_time_s: Dist::lognormal(2.0, 1.0, None, None),
            new_tokens: None,
            subagents: SubagentSpec::default(),
            compaction: CompactionSpec::default(),
            max_request_tokens: None,
            declared_prefix: None,
            source: None,
        }
    }
}

impl WorkloadSpec {
    /// A per-row field (`field`, holding `n` `what`) has one entry per `session_shapes` row.
    fn check_one_per_row(&self, field: &str, what: &str, n: usize) -> Result<(), FieldError> {
        let rows = self.session_shapes.as_ref().map_or(0, Vec::len);
        if n == rows {
            return Ok(());
        }
        Err(FieldError::new(
            field,
            format!("has {n} {what} for {rows} session_shapes rows (one per row)"),
        ))
    }

    /// `session_think_speeds`: one `[a, b]` per `session_shapes` row, `think_time_s` with a median.
    fn check_think_speeds(&self, speeds: &[[f64; 2]]) -> Result<(), FieldError> {
        self.check_one_per_row("session_think_speeds", "pairs", speeds.len())?;
        if !self.think_time_s.median().is_some_and(|c| c > 0.0) {
            return Err(FieldError::new(
                "session_think_speeds",
                "needs think_time_s with a median above 0 (the speeds scale around it)",
            ));
        }
        let ok = |x: &[f64; 2]| {
            x[0].is_finite()
                && x[0] > 0.0
                && x[0] <= MAX_THINK_SCALE
                && x[1].is_finite()
                && (0.0..=MAX_THINK_SPREAD).contains(&x[1])
        };
        match speeds.iter().position(|x| !ok(x)) {
            Some(i) => Err(FieldError::new(
                format!("session_think_speeds[{i}]"),
                format!("[a, b] must have a above 0 and at most {MAX_THINK_SCALE}, b from 0 to {MAX_THINK_SPREAD}"),
            )),
            None => Ok(()),
        }
    }

    /// `session_app_prefixes`: one per `session_shapes` row, none longer than a context may be.
    fn check_app_prefixes(&self, prefixes: &[u32]) -> Result<(), FieldError> {
        self.check_one_per_row("session_app_prefixes", "prefixes", prefixes.len())?;
        match prefixes.iter().position(|&t| t > MAX_FIXED_TOKENS) {
            Some(i) => Err(FieldError::new(
                format!("session_app_prefixes[{i}]"),
                format!(
                    "{} tokens is more than the longest context a deployment may have ({MAX_FIXED_TOKENS})",
                    prefixes[i]
                ),
            )),
            None => Ok(()),
        }
    }

    /// `resumed_share` is a share, and the shapes hold a row of each kind it draws.
    fn check_resumed_share(&self, p: f64) -> Result<(), FieldError> {
        let bad = |why: &str| Err(FieldError::new("resumed_share", why));
        if !(0.0..=1.0).contains(&p) {
            return bad("must be a share between 0 and 1");
        }
        let Some(rows) = &self.session_shapes else {
            return bad("needs session_shapes (it chooses between their resumed and fresh rows)");
        };
        let resumed = rows.iter().filter(|r| shape_is_resumed(r)).count();
        if p > 0.0 && resumed == 0 {
            return bad(
                "is above 0, but no session_shapes row starts past 50,000 tokens (a resumed session)",
            );
        }
        if p < 1.0 && resumed == rows.len() {
            return bad(
                "is below 1, but every session_shapes row starts past 50,000 tokens (none is fresh)",
            );
        }
        Ok(())
    }

    /// Checks every field; the error names the field and the reason.
    pub fn check(&self) -> Result<(), FieldError> {
        let bad = |field: &str, why: &str| Err(FieldError::new(field, why));
        if self.profile != "agentic-coding" {
            return Err(FieldError::new(
                "profile",
                format!(
                    "unknown profile {:?} (only \"agentic-coding\" exists)",
                    self.profile
                ),
            ));
        }
        if self.block_size == 0 || self.block_size > MAX_BLOCK_TOKENS {
            return Err(FieldError::new(
                "block_size",
                format!("must be between 1 and {MAX_BLOCK_TOKENS}"),
            ));
        }
        let fixed = [
            ("system_prefix_tokens", self.system_prefix_tokens),
            (
                "subagents.first_prompt_tokens",
                self.subagents.first_prompt_tokens,
            ),
            ("subagents.result_tokens", self.subagents.result_tokens),
            ("compaction.max_tokens", self.compaction.max_tokens),
            ("compaction.summary_tokens", self.compaction.summary_tokens),
            (
                "compaction.reserve_tokens",
                self.compaction.reserve_tokens.unwrap_or(0),
            ),
            ("max_request_tokens", self.max_request_tokens.unwrap_or(0)),
        ];
        for (name, v) in fixed {
            if v > MAX_FIXED_TOKENS {
                return Err(FieldError::new(
                    name,
                    format!("{v} tokens is more than the longest context a deployment may have ({MAX_FIXED_TOKENS})"),
                ));
            }
        }
        let dists = [
            (
                "first_prompt_tokens",
                &self.first_prompt_tokens,
                MAX_PART_TOKENS as f64,
            ),
            ("root_turns", &self.root_turns, MAX_TURNS as f64),
            ("output_tokens", &self.output_tokens, MAX_PART_TOKENS as f64),
            (
                "tool_result_tokens",
                &self.tool_result_tokens,
                MAX_PART_TOKENS as f64,
            ),
            ("think_time_s", &self.think_time_s, MAX_THINK_S),
            (
                "subagents.fanout",
                &self.subagents.fanout,
                MAX_FANOUT as f64,
            ),
            ("subagents.turns", &self.subagents.turns, MAX_TURNS as f64),
        ];
        for (name, d, cap) in dists {
            d.check(cap).map_err(|e| e.under(name))?;
        }
        let optional = [
            (
                "subagents.task_prompt_tokens",
                &self.subagents.task_prompt_tokens,
            ),
            ("subagents.output_tokens", &self.subagents.output_tokens),
        ];
        for (name, d) in optional {
            if let Some(d) = d {
                d.check(MAX_PART_TOKENS as f64).map_err(|e| e.under(name))?;
            }
        }
        if let Some(d) = &self.subagents.first_spawn_at {
            d.check(1.0)
                .map_err(|e| e.under("subagents.first_spawn_at"))?;
        }
        if let Some(rows) = &self.session_shapes {
            if rows.is_empty() {
                return bad("session_shapes", "needs at least one row");
            }
            for (i, r) in rows.iter().enumerate() {
                if !session_shape_ok(r) {
                    return Err(FieldError::new(
                        format!("session_shapes[{i}]"),
                        format!("[first prompt, turns, threshold] must be at least [1, 1, 0] and at most [{MAX_PART_TOKENS}, {MAX_TURNS}, {MAX_FIXED_TOKENS}]"),
                    ));
                }
            }
        }
        if let Some(p) = self.resumed_share {
            self.check_resumed_share(p)?;
        }
        if let Some(speeds) = &self.session_think_speeds {
            self.check_think_speeds(speeds)?;
        }
        if let Some(prefixes) = &self.session_app_prefixes {
            self.check_app_prefixes(prefixes)?;
        }
        for (name, n) in [
            ("new_tokens", &self.new_tokens),
            ("subagents.new_tokens", &self.subagents.new_tokens),
        ] {
            if let Some(n) = n {
                n.check().map_err(|e| e.under(name))?;
            }
        }
        if self
            .subagents
            .new_tokens
            .as_ref()
            .is_some_and(|n| !n.early.is_empty())
        {
            return Err(FieldError::new(
                "subagents.new_tokens.early",
                "only the root's turns have early tiers (a sub-agent's turns are drawn from its common model)",
            ));
        }
        if let Some(t) = self.subagents.prefix_tokens {
            if t > MAX_FIXED_TOKENS {
                return Err(FieldError::new(
                    "subagents.prefix_tokens",
                    format!("{t} tokens is more than the longest context a deployment may have ({MAX_FIXED_TOKENS})"),
                ));
            }
        }
        let s = &self.subagents;
        if s.session_probability
            .is_some_and(|p| !(0.0..=1.0).contains(&p))
        {
            return bad("subagents.session_probability", "must be in [0, 1]");
        }
        if s.spawn_spread.is_some_and(|x| !(0.0..=5.0).contains(&x)) {
            return bad("subagents.spawn_spread", "must be in [0, 5]");
        }
        if !(0.0..=1.0).contains(&s.spawn_probability) {
            return bad("subagents.spawn_probability", "must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&s.background_fraction) {
            return bad("subagents.background_fraction", "must be in [0, 1]");
        }
        if self.max_request_tokens == Some(0) {
            return bad(
                "max_request_tokens",
                "must be positive (leave it out to keep every request)",
            );
        }
        let c = &self.compaction;
        if !(c.context_fraction > 0.0 && c.context_fraction <= 1.0) {
            return bad("compaction.context_fraction", "must be in (0, 1]");
        }
        if c.summary_tokens == 0 {
            return bad("compaction.summary_tokens", "must be positive");
        }
        if let Some(d) = &c.carried_tokens {
            d.check(MAX_PART_TOKENS as f64)
                .map_err(|e| e.under("compaction.carried_tokens"))?;
        }
        Ok(())
    }

    /// Checks that sessions of this spec fit a deployment's `context_limit`: the context at which they
    /// compact must leave room after the shared prefix and the summary. The error names `compaction`
    /// (the spec's side); a caller that knows where the context limit was set may blame that instead.
    pub fn check_context(&self, context_limit: u32) -> Result<(), FieldError> {
        let threshold = self.compaction_threshold(context_limit);
        let floor = self.longest_prefix() as u64 + self.compaction.summary_tokens as u64;
        if threshold as u64 > floor {
            return Ok(());
        }
        Err(FieldError::new(
            "compaction",
            format!(
                "a context of {context_limit} tokens cannot hold these sessions: they would compact at {threshold} tokens (the smallest of {} × the context, max_tokens and the context less its reserve for answers), which leaves no room after the {}-token prefix and the {}-token summary",
                self.compaction.context_fraction,
                self.longest_prefix(),
                self.compaction.summary_tokens
            ),
        ))
    }

    /// The longest prefix a session of this spec starts with: `system_prefix_tokens`, or the
    /// longest of `session_app_prefixes` where that is longer.
    pub fn longest_prefix(&self) -> u32 {
        let rows = self.session_app_prefixes.iter().flatten().copied();
        rows.fold(self.system_prefix_tokens, u32::max)
    }

    /// The compaction thresholds a deployment's context limit allows this spec's sessions.
    pub fn thresholds(&self, context_limit: u32) -> Thresholds {
        let default = self.compaction_threshold(context_limit);
        Thresholds {
            default,
            limit: self.limit_threshold(context_limit).max(default),
            // Never below what the prefix and summary leave room for.
            floor: default.min(self.longest_prefix() + self.compaction.summary_tokens + 1),
        }
    }

    /// What a deployment's context limit cuts from the measured session shapes this spec draws
    /// (`session_shapes`): how many compacted later in their corpus than the limit lets a session
    /// grow (they compact at the limit instead), and how many began with a first prompt longer than
    /// their threshold leaves room for (cut to fit, under a measured growth model). `None` when the
    /// spec draws no shapes or the limit cuts none.
    pub fn context_cuts(&self, context_limit: u32) -> Option<ContextCuts> {
        let rows = self.session_shapes.as_ref()?;
        let t = self.thresholds(context_limit);
        let cuts_first = self.new_tokens.is_some();
        let (mut later, mut longer) = (0, 0);
        for r in rows {
            later += usize::from(r[2] > t.limit as f64);
            let room = t
                .of_shape(r[2])
                .saturating_sub(self.system_prefix_tokens)
                .max(1);
            longer += usize::from(cuts_first && shape_first_prompt(r) > room);
        }
        (later + longer > 0).then_some(ContextCuts {
            compact_at: t.limit,
            shapes: rows.len(),
            later,
            longer,
        })
    }

    /// The context length past which an agent compacts, for a deployment's context limit (a
    /// session's own threshold, where the spec draws one, is capped by the same limit).
    pub fn compaction_threshold(&self, context_limit: u32) -> u32 {
        self.limit_threshold(context_limit)
            .min(self.compaction.max_tokens)
    }

    /// `context_fraction` of the deployment's context limit, less the `reserve_tokens` an agent keeps
    /// free for its answer.
    pub fn limit_threshold(&self, context_limit: u32) -> u32 {
        let by_fraction = (self.compaction.context_fraction * context_limit as f64).floor() as u32;
        match self.compaction.reserve_tokens {
            Some(r) => by_fraction.min(context_limit.saturating_sub(r)),
            None => by_fraction,
        }
    }
}

/// The compaction thresholds of a spec's sessions on one deployment ([`WorkloadSpec::thresholds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Where a session without a measured shape compacts.
    pub default: u32,
    /// The most a session's own threshold may be: `context_fraction` of the limit less the reserve.
    pub limit: u32,
    /// The least: what the prefix and summary leave room for.
    pub floor: u32,
}

impl Thresholds {
    /// Where a session of a measured shape compacts, from the threshold its corpus recorded (0: it
    /// never compacted, so it goes on to the deployment's own limit).
    pub fn of_shape(&self, recorded: f64) -> u32 {
        match recorded > 0.0 {
            true => (recorded as u32).clamp(self.floor, self.limit),
            false => self.limit,
        }
    }
}

/// A first prompt more than this many tokens past the application prefix continues an earlier
/// conversation (a resumed session, or a capture that began mid-session) rather than opening one: no
/// fresh session in the corpus's Claude Code logs starts beyond 43,563 tokens, while the WEKA proxy
/// traces put a quarter of their sessions past 89,000 with few between (docs/workload.md, "Resumed
/// and fresh sessions").
pub const RESUMED_ABOVE_TOKENS: f64 = 50_000.0;

/// Whether a `session_shapes` row is a resumed session's (its first prompt past
/// [`RESUMED_ABOVE_TOKENS`]).
pub fn shape_is_resumed(r: &[f64; 3]) -> bool {
    r[0] > RESUMED_ABOVE_TOKENS
}

/// The share of `rows` that are resumed sessions', rounded as the fit rounds (4 digits).
pub fn resumed_share_of(rows: &[[f64; 3]]) -> f64 {
    let n = rows.iter().filter(|r| shape_is_resumed(r)).count();
    let share = n as f64 / rows.len().max(1) as f64;
    (share * 1e4).round() / 1e4
}

/// A measured shape's first prompt after the prefix, as the generator draws it.
pub(crate) fn shape_first_prompt(r: &[f64; 3]) -> u32 {
    (r[0].round() as u32).clamp(1, MAX_PART_TOKENS)
}

/// What a deployment's context cuts from a spec's measured session shapes ([`WorkloadSpec::context_cuts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextCuts {
    /// The most tokens a session's context reaches before it compacts on this deployment.
    pub compact_at: u32,
    /// Session shapes the spec draws from.
    pub shapes: usize,
    /// Shapes that compacted later than `compact_at` in their corpus: they compact there instead.
    pub later: usize,
    /// Shapes whose first prompt (with the prefix) passes their threshold here: it is cut to fit.
    pub longer: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The 256K stand-in on Gemma's 131,072-token context: 90 % of it less the reserve for answers is
    /// where every session compacts; the shapes that compacted later, or began longer, are counted.
    #[test]
    fn a_context_that_cuts_measured_session_shapes_counts_them() {
        let spec = WorkloadSpec::preset("agentx-062126-256k").unwrap();
        let c = spec.context_cuts(131_072).unwrap();
        assert_eq!(c.compact_at, spec.compaction_threshold(131_072));
        assert_eq!(
            (c.compact_at, c.shapes, c.later, c.longer),
            (112_877, 419, 76, 66)
        );
        let generic = WorkloadSpec::preset("agentic-coding").unwrap();
        assert_eq!(
            generic.context_cuts(1_048_576),
            None,
            "a 1M context cuts none"
        );
        assert_eq!(
            WorkloadSpec::synthetic_v1().context_cuts(40_960),
            None,
            "no shapes"
        );
    }

    #[test]
    fn defaults_are_valid_and_round_trip_through_yaml() {
        let spec = WorkloadSpec::default();
        spec.check().unwrap();
        let text = serde_yaml::to_string(&spec).unwrap();
        let back: WorkloadSpec = serde_yaml::from_str(&text).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn early_tiers_ascend_from_turn_two_and_hold_no_tiers() {
        let tier = |below_turn, early| EarlyTurns {
            below_turn,
            growth: NewTokens::constant(100.0, early),
        };
        let with = |early| WorkloadSpec {
            new_tokens: Some(NewTokens::constant(10.0, early)),
            ..WorkloadSpec::default()
        };
        let spec = with(vec![tier(2, vec![]), tier(6, vec![])]);
        spec.check().unwrap();
        let back: WorkloadSpec =
            serde_yaml::from_str(&serde_yaml::to_string(&spec).unwrap()).unwrap();
        assert_eq!(back, spec);
        let g = spec.new_tokens.as_ref().unwrap();
        let added = |turn| g.of_turn(turn).band(0).median();
        assert_eq!(
            [1, 2, 5, 6, 40].map(added),
            [
                Some(100.0),
                Some(100.0),
                Some(100.0),
                Some(10.0),
                Some(10.0)
            ]
        );
        let error = |early| with(early).check().unwrap_err().to_string();
        assert_eq!(
            error(vec![tier(2, vec![]), tier(2, vec![])]),
            "new_tokens.early[1].below_turn: must be above 2 (tiers ascend from turn 1)"
        );
        assert_eq!(
            error(vec![tier(1, vec![])]),
            "new_tokens.early[0].below_turn: must be above 1 (tiers ascend from turn 1)"
        );
        assert_eq!(
            error(vec![tier(3, vec![tier(2, vec![])])]),
            "new_tokens.early[0].early: a tier has no tiers of its own"
        );
        let mut bad = tier(3, vec![]);
        bad.growth.rewrite_probability = 2.0;
        assert_eq!(
            error(vec![bad]),
            "new_tokens.early[0].rewrite_probability: must be in [0, 1]"
        );
        let mut sub = with(vec![]);
        sub.subagents.new_tokens = Some(NewTokens::constant(10.0, vec![tier(2, vec![])]));
        assert_eq!(
            sub.check().unwrap_err().to_string(),
            "subagents.new_tokens.early: only the root's turns have early tiers (a sub-agent's turns are drawn from its common model)"
        );
        let unknown = "block_size: 64\nnew_tokens:\n  bands: [{dist: {dist: constant, value: 5}}]\n  early:\n  - below_turn: 2\n    grwoth: {bands: []}\n";
        let e = serde_yaml::from_str::<WorkloadSpec>(unknown)
            .unwrap_err()
            .to_string();
        assert!(e.contains("grwoth"), "{e}");
    }

    #[test]
    fn bad_parameters_are_named() {
        let mut spec = WorkloadSpec {
            output_tokens: Dist::lognormal(-1.0, 1.0, None, None),
            ..WorkloadSpec::default()
        };
        assert_eq!(
            spec.check().unwrap_err().to_string(),
            "output_tokens.median: must be positive"
        );
        spec = WorkloadSpec::default();
        spec.subagents.fanout = Dist::Geometric {
            p: 0.0,
            offset: 1.0,
            max: None,
        };
        assert!(spec
            .check()
            .unwrap_err()
            .to_string()
            .starts_with("subagents.fanout.p: must be in [1e-9, 1]"));
        // Below about 1e-16 rand_distr's sampler never returns: refused at the check.
        spec.subagents.fanout = Dist::Geometric {
            p: 1e-17,
            offset: 1.0,
            max: None,
        };
        assert!(spec.check().is_err());
        spec.subagents.fanout = Dist::Geometric {
            p: MIN_GEOMETRIC_P,
            offset: 1.0,
            max: Some(5.0),
        };
        spec.check().unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        assert_eq!(spec.subagents.fanout.sample(&mut rng), 5.0);
    }

    #[test]
    fn clamps_hold() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let d = Dist::lognormal(150.0, 3.0, Some(1.0), Some(8192.0));
        for _ in 0..10_000 {
            let x = d.sample(&mut rng);
            assert!((1.0..=8192.0).contains(&x));
        }
        let g = Dist::Geometric {
            p: 0.5,
            offset: 1.0,
            max: Some(5.0),
        };
        for _ in 0..10_000 {
            let x = g.sample(&mut rng);
            assert!((1.0..=5.0).contains(&x) && x.fract() == 0.0);
        }
    }

    #[test]
    fn compaction_threshold_takes_the_smaller() {
        let spec = WorkloadSpec::synthetic_v1();
        assert_eq!(spec.compaction_threshold(1_048_576), 160_000);
        assert_eq!(spec.compaction_threshold(131_072), 117_964);
    }
}
