//! Each session's own speed, measured from a corpus's think times: how much of a think time is the
//! session's (some agents turn around in a fraction of a second, some wait on tools for tens of
//! seconds) and how much the request's. Pure arithmetic on samples; never draws anything.
//!
//! A think time `g` of session `i` is read on the log scale as `ln g = m_i + σ_i·r`: the session's
//! own location `m_i` and spread `σ_i`, and the request's standardized residual `r`, whose
//! distribution all sessions share. A session's sample location and spread are noisy where it has
//! few think times, so each is shrunk towards the corpus's as a random effect is estimated (the method
//! of moments, one-way analysis of variance with unequal group sizes): the location by
//! `σ_b² / (σ_b² + σ_w² / n_i)`, the log of the variance by `τ² / (τ² + 2 / (n_i − 1))` (`2 / (n − 1)`
//! is the sampling variance of a log sample variance). A session measured on one think time is
//! then barely faster or slower than the corpus, one measured on a hundred keeps nearly all of its own
//! speed and spread. No constant is tuned: both shares come from the corpus's own spread.
//!
//! The spec carries the pooled residuals as `think_time_s` (think times at the corpus's location and
//! spread, `exp(μ + σ_w·r)`) and per session shape `[a, b]`: a session draws `g0` from `think_time_s`
//! and thinks `a · c · (g0 / c)^b`, `c` the median of `think_time_s`, never longer than the longest think
//! time the corpus recorded (the largest value of `think_time_s`).

/// Think times below this are read as this on the log scale (a zero gap has no logarithm).
pub const LOG_FLOOR_S: f64 = 1e-3;

/// The speed decomposition of a corpus's think times.
#[derive(Clone, Debug, PartialEq)]
pub struct Speeds {
    /// Per session `[a, b]`: its think times are `a · c · (g0 / c)^b` for `g0` drawn from `base`
    /// (`[1, 1]` for a session without think times).
    pub sessions: Vec<[f64; 2]>,
    /// Think times at the corpus's location and spread, one per think time given.
    pub base: Vec<f64>,
    /// The corpus's mean log think time (μ) and within-session variance (σ_w²).
    pub mean_log: f64,
    /// See `mean_log`.
    pub within_var: f64,
    /// Variance of the sessions' locations (σ_b²) and of their log variances (τ²).
    pub between_var: f64,
    /// See `between_var`.
    pub spread_var: f64,
}

/// Per session: how many think times, and their logs' mean and sample variance.
struct Groups {
    n: Vec<usize>,
    mean: Vec<f64>,
    var: Vec<f64>,
}

fn groups(logs: &[f64], session: &[usize], sessions: usize) -> Groups {
    let mut n = vec![0usize; sessions];
    let mut sum = vec![0.0; sessions];
    for (&l, &i) in logs.iter().zip(session) {
        n[i] += 1;
        sum[i] += l;
    }
    let mean: Vec<f64> = (0..sessions)
        .map(|i| if n[i] > 0 { sum[i] / n[i] as f64 } else { 0.0 })
        .collect();
    let mut ss = vec![0.0; sessions];
    for (&l, &i) in logs.iter().zip(session) {
        ss[i] += (l - mean[i]).powi(2);
    }
    let var = (0..sessions)
        .map(|i| {
            if n[i] > 1 {
                ss[i] / (n[i] - 1) as f64
            } else {
                0.0
            }
        })
        .collect();
    Groups { n, mean, var }
}

/// Splits `think_s` (seconds; `session[j]` is the session of `think_s[j]`, below `sessions`) into
/// per-session speeds and the shared residuals.
pub fn session_speeds(think_s: &[f64], session: &[usize], sessions: usize) -> Speeds {
    assert_eq!(think_s.len(), session.len(), "one session per think time");
    let logs: Vec<f64> = think_s.iter().map(|g| g.max(LOG_FLOOR_S).ln()).collect();
    let g = groups(&logs, session, sessions);
    let mean_log = logs.iter().sum::<f64>() / logs.len().max(1) as f64;
    let (between_var, within_var) = location_components(&logs, &g, mean_log);
    let (spread_mean, spread_var) = spread_components(&g);
    let location = |i: usize| {
        if g.n[i] == 0 || between_var <= 0.0 {
            return mean_log;
        }
        let keep = between_var / (between_var + within_var / g.n[i] as f64);
        mean_log + keep * (g.mean[i] - mean_log)
    };
    let spread = |i: usize| {
        if g.n[i] < 2 || g.var[i] <= 0.0 || within_var <= 0.0 {
            return within_var.sqrt();
        }
        let noise = 2.0 / (g.n[i] - 1) as f64;
        let keep = spread_var / (spread_var + noise);
        (spread_mean + keep * (g.var[i].ln() - spread_mean))
            .exp()
            .sqrt()
    };
    let sd = within_var.sqrt();
    let loc: Vec<f64> = (0..sessions).map(location).collect();
    let spr: Vec<f64> = (0..sessions).map(spread).collect();
    // Residuals, rescaled to the corpus's location and spread; none longer than the corpus's longest
    // think time (a session of very even gaps turns its one outlier into a residual far past anything
    // recorded once rescaled).
    let longest = think_s.iter().copied().fold(LOG_FLOOR_S, f64::max);
    let base: Vec<f64> = logs
        .iter()
        .zip(session)
        .map(|(&l, &i)| {
            let r = if spr[i] > 0.0 {
                (l - loc[i]) / spr[i]
            } else {
                0.0
            };
            (mean_log + sd * r).exp().min(longest)
        })
        .collect();
    let c = median_log(&base);
    let sessions = (0..sessions)
        .map(|i| {
            if g.n[i] == 0 || sd <= 0.0 {
                return [1.0, 1.0];
            }
            // ln g = loc + spr·r and ln g0 = μ + sd·r, so ln g = ln a + ln c + b·(ln g0 − ln c) with:
            let b = spr[i] / sd;
            let ln_a = loc[i] - c + b * (c - mean_log);
            [ln_a.exp(), b]
        })
        .collect();
    Speeds {
        sessions,
        base,
        mean_log,
        within_var,
        between_var,
        spread_var,
    }
}

/// The median of the logs of `xs`.
fn median_log(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().map(|x| x.ln()).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    crate::stats::quantile(&v, 0.5)
}

/// (σ_b², σ_w²) of the locations by one-way analysis of variance with unequal group sizes; σ_b² is
/// 0 where the sessions' means spread no more than their own noise, both 0 with too little to measure.
fn location_components(logs: &[f64], g: &Groups, grand: f64) -> (f64, f64) {
    let total = logs.len() as f64;
    let k = g.n.iter().filter(|&&n| n > 0).count();
    if k < 2 || logs.len() <= k {
        return (0.0, 0.0);
    }
    let ss_within: f64 = (0..g.n.len())
        .filter(|&i| g.n[i] > 1)
        .map(|i| g.var[i] * (g.n[i] - 1) as f64)
        .sum();
    let ss_between: f64 = (0..g.n.len())
        .filter(|&i| g.n[i] > 0)
        .map(|i| g.n[i] as f64 * (g.mean[i] - grand).powi(2))
        .sum();
    let within = ss_within / (total - k as f64);
    let ms_between = ss_between / (k as f64 - 1.0);
    let sum_sq: f64 = g.n.iter().map(|&n| (n * n) as f64).sum();
    let n0 = (total - sum_sq / total) / (k as f64 - 1.0);
    (((ms_between - within) / n0).max(0.0), within)
}

/// The mean and between-session variance (τ²) of the sessions' log sample variances, each of which
/// carries sampling noise `2 / (n − 1)`; sessions with fewer than two think times, or all equal, have
/// none to give.
fn spread_components(g: &Groups) -> (f64, f64) {
    let of: Vec<(f64, f64)> = (0..g.n.len())
        .filter(|&i| g.n[i] > 1 && g.var[i] > 0.0)
        .map(|i| (g.var[i].ln(), 2.0 / (g.n[i] - 1) as f64))
        .collect();
    if of.len() < 2 {
        return (of.first().map_or(0.0, |x| x.0), 0.0);
    }
    let k = of.len() as f64;
    let mean = of.iter().map(|x| x.0).sum::<f64>() / k;
    let var = of.iter().map(|x| (x.0 - mean).powi(2)).sum::<f64>() / (k - 1.0);
    let noise = of.iter().map(|x| x.1).sum::<f64>() / k;
    (mean, (var - noise).max(0.0))
}

/// A session's think time from a base draw `g0`: `a · c · (g0 / c)^b` (`c` the base's median), at most
/// `longest` (the base's largest value: no session thinks longer than the corpus's longest think time).
pub fn think_of(speed: [f64; 2], base_median: f64, longest: f64, g0: f64) -> f64 {
    let g = if g0 <= 0.0 || base_median <= 0.0 {
        speed[0] * g0
    } else {
        speed[0] * base_median * (g0 / base_median).powf(speed[1])
    };
    g.min(longest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    /// Reassembles every think time from its session's speed and its base value.
    fn reassembled(s: &Speeds, session: &[usize]) -> Vec<f64> {
        let mut sorted = s.base.clone();
        sorted.sort_by(f64::total_cmp);
        let c = crate::stats::quantile(&sorted, 0.5);
        s.base
            .iter()
            .zip(session)
            .map(|(&g0, &i)| think_of(s.sessions[i], c, f64::INFINITY, g0))
            .collect()
    }

    #[test]
    fn sessions_of_different_speeds_keep_them_and_reassemble_their_think_times() {
        // Many sessions, alternately fast and ten times slower, each with the same relative spread.
        let mut think = Vec::new();
        let mut session = Vec::new();
        for i in 0..20 {
            let k = if i % 2 == 0 { 1.0 } else { 10.0 };
            for g in [1.0, 2.0, 0.5, 1.0, 4.0, 0.25] {
                think.push(g * k);
                session.push(i);
            }
        }
        let s = session_speeds(&think, &session, 21);
        // Locations ln 10 apart: σ_b² near (ln 10 / 2)², and each session keeps most of its own.
        assert!(s.between_var > 1.0, "{}", s.between_var);
        let keep = s.between_var / (s.between_var + s.within_var / 6.0);
        assert!(keep > 0.85, "{keep}");
        // Equal spreads in every session: no spread of spreads, b = 1 everywhere.
        assert_eq!(s.spread_var, 0.0);
        assert!(s.sessions[..20].iter().all(|x| (x[1] - 1.0).abs() < 1e-12));
        // The slow sessions' factor is the fast ones' times 10^keep; the empty session's is 1.
        assert_relative_eq!(
            s.sessions[1][0] / s.sessions[0][0],
            10f64.powf(keep),
            max_relative = 1e-9
        );
        assert_eq!(s.sessions[20], [1.0, 1.0]);
        // Each session's speed with its own base values gives its think times back.
        for (a, b) in reassembled(&s, &session).iter().zip(&think) {
            assert_relative_eq!(a, b, max_relative = 1e-9);
        }
    }

    #[test]
    fn a_session_with_a_wider_spread_keeps_part_of_it() {
        // Ten sessions of spread 1 (on the log scale, about), ten of spread 3, 12 think times each.
        let r = [
            -1.5, -1.0, -0.6, -0.3, -0.1, 0.0, 0.0, 0.1, 0.3, 0.6, 1.0, 1.5,
        ];
        let (mut think, mut session) = (Vec::new(), Vec::new());
        for i in 0..20 {
            let w: f64 = if i < 10 { 1.0 } else { 3.0 };
            for x in r {
                think.push((w * x).exp());
                session.push(i);
            }
        }
        let s = session_speeds(&think, &session, 20);
        assert!(s.spread_var > 0.5, "{}", s.spread_var);
        let (narrow, wide) = (s.sessions[0][1], s.sessions[10][1]);
        assert!(
            wide / narrow > 2.5 && wide / narrow < 3.0,
            "{narrow} {wide}"
        );
        for (a, b) in reassembled(&s, &session).iter().zip(&think) {
            assert_relative_eq!(a, b, max_relative = 1e-9);
        }
    }

    #[test]
    fn sessions_that_differ_no_more_than_their_noise_get_no_speed_of_their_own() {
        // The same think times, shuffled between sessions: the means spread less than the noise.
        let think = [1.0, 10.0, 10.0, 1.0, 3.0, 3.5];
        let session = [0, 0, 1, 1, 2, 2];
        let s = session_speeds(&think, &session, 3);
        assert_eq!(s.between_var, 0.0);
    }

    #[test]
    fn zero_think_times_and_a_single_session_are_handled() {
        let s = session_speeds(&[0.0, 1.0, 2.0], &[0, 0, 0], 1);
        assert_eq!(s.between_var, 0.0);
        assert!(s.base.iter().all(|x| x.is_finite() && *x > 0.0));
        let none = session_speeds(&[], &[], 2);
        assert_eq!(none.sessions, vec![[1.0, 1.0], [1.0, 1.0]]);
        assert_eq!(think_of([2.0, 1.5], 4.0, f64::INFINITY, 0.0), 0.0);
        assert_eq!(think_of([2.0, 1.0], 4.0, 5.0, 3.0), 5.0);
    }
}
