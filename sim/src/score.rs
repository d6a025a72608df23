//! Scoring: per-request records, value, qualification against frozen SLOs, and D, G, f (docs/definitions.md).

use crate::deployment::{Deployment, Prices, Slo};
use crate::replay::{AgentxStats, Arrivals, OpenStats, Protocol};
use serde::{Deserialize, Serialize};
use serverbench_workloads::{Quantiles, Request, RequestKind};

/// How a request ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// All requested tokens arrived.
    Completed,
    /// Still running when the window closed.
    Cancelled,
    /// Prompt + output exceed the deployment's context limit; never sent to the engine.
    ContextOverflow,
    /// The backend failed it (kind names why).
    Error(String),
}

/// One request as the client saw it. Times are ns since the run started.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Position of the tree in the seed's stream.
    pub tree: u64,
    /// Request id inside the tree.
    pub request: u32,
    /// Lane that replayed it.
    pub lane: u32,
    /// Engine replica that served it.
    pub replica: u32,
    /// Agent inside the tree.
    pub agent: u32,
    /// Root turn, sub-agent turn or compaction.
    pub kind: RequestKind,
    /// Sent.
    pub send_ns: u64,
    /// First output token received.
    pub first_token_ns: Option<u64>,
    /// Last output token received.
    pub last_token_ns: Option<u64>,
    /// Request ended (completed, failed or cancelled).
    pub finish_ns: Option<u64>,
    /// `x`: prompt tokens, cached or not.
    pub input_tokens: u32,
    /// Output tokens asked for.
    pub output_requested: u32,
    /// `y`: output tokens received.
    pub output_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
    /// Times the request was preempted.
    pub preemptions: u32,
    /// How it ended.
    pub outcome: Outcome,
    /// What a real server or connection said when the request failed (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Prompt tokens a real server counted (its `usage.prompt_tokens`; absent in simulated runs and
    /// when the server sent no usage): equal to `input_tokens` when the whole prompt arrived as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_prompt_tokens: Option<u32>,
    /// The longest gap between two consecutive output tokens (output chunks, where one carries several),
    /// ns: a stall TPOT's average hides (absent before the second token, and in runs recorded before
    /// it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_max_ns: Option<u64>,
}

impl Record {
    /// A request as it is sent: nothing received yet, cancelled unless something better happens.
    pub fn sent(tree: u64, lane: u32, replica: u32, req: &Request, send_ns: u64) -> Record {
        Record {
            tree,
            request: req.id,
            lane,
            replica,
            agent: req.agent,
            kind: req.kind,
            send_ns,
            first_token_ns: None,
            last_token_ns: None,
            finish_ns: None,
            input_tokens: req.input_tokens,
            output_requested: req.output_tokens,
            output_tokens: 0,
            cached_tokens: 0,
            preemptions: 0,
            outcome: Outcome::Cancelled,
            error_message: None,
            server_prompt_tokens: None,
            itl_max_ns: None,
        }
    }

    /// Time to first token, seconds.
    pub fn ttft_s(&self) -> Option<f64> {
        self.first_token_ns.map(|f| (f - self.send_ns) as f64 / 1e9)
    }

    /// Time per output token after the first, seconds (0 when at most one token arrived).
    pub fn tpot_s(&self) -> Option<f64> {
        let (f, l) = (self.first_token_ns?, self.last_token_ns?);
        Some(if self.output_tokens <= 1 {
            0.0
        } else {
            (l - f) as f64 / 1e9 / (self.output_tokens - 1) as f64
        })
    }

    /// End-to-end latency, seconds.
    pub fn e2e_s(&self) -> Option<f64> {
        self.finish_ns.map(|f| (f - self.send_ns) as f64 / 1e9)
    }

    /// `v_i = (p_in x + p_out y) / 1e6`.
    pub fn value(&self, p: &Prices) -> f64 {
        value(p, self.input_tokens, self.output_tokens)
    }

    /// `q_i`: completed with exactly the requested length, inside both targets (inclusive).
    pub fn qualifies(&self, slo: &Slo) -> bool {
        self.outcome == Outcome::Completed
            && self.output_tokens == self.output_requested
            && self.ttft_s().is_some_and(|t| t <= slo.ttft_s)
            && self.tpot_s().is_some_and(|t| t <= slo.tpot_s)
    }
}

/// Dollar value of a request of `x` input and `y` output tokens.
pub fn value(p: &Prices, x: u32, y: u32) -> f64 {
    (p.input_per_m * x as f64 + p.output_per_m * y as f64) / 1e6
}

/// D, G and f of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// `D = Σ q v / cost`: qualified value per dollar of GPU time.
    pub d: f64,
    /// `G = Σ v / cost`: gross value per dollar.
    pub g: f64,
    /// `f = D / G`: value-weighted qualified fraction (0 when G is 0).
    pub f: f64,
    /// `Σ q v`, dollars.
    pub qualified_value: f64,
    /// `Σ v`, dollars.
    pub gross_value: f64,
    /// `d × r × W / 3600`, dollars.
    pub gpu_cost: f64,
}

impl Score {
    /// From summed values and the run's GPU cost.
    /// A run that cost nothing (a window of length 0: interrupted before it opened) scores 0.
    pub fn new(qualified_value: f64, gross_value: f64, gpu_cost: f64) -> Score {
        let per_dollar = |v: f64| if gpu_cost > 0.0 { v / gpu_cost } else { 0.0 };
        let (d, g) = (per_dollar(qualified_value), per_dollar(gross_value));
        Score {
            d,
            g,
            f: if g > 0.0 { d / g } else { 0.0 },
            qualified_value,
            gross_value,
            gpu_cost,
        }
    }
}

/// Scores the requests sent inside the window (all of `records`).
pub fn score(records: &[Record], prices: &Prices, slo: &Slo, gpu_cost: f64) -> Score {
    let (mut q, mut g) = (0.0, 0.0);
    for r in records {
        let v = r.value(prices);
        g += v;
        if r.qualifies(slo) {
            q += v;
        }
    }
    Score::new(q, g, gpu_cost)
}

/// The records of the prefix window `[0, window_ns)` of a run scored under the AgentX window (its
/// records already measured from the window's opening): requests sent before the cut that finished
/// within `grace_ns` after it, as AgentX would have recorded a window of that length; the others
/// leave no record. At the run's own window this is the run's records.
pub fn agentx_prefix_window(records: &[Record], window_ns: u64, grace_ns: u64) -> Vec<Record> {
    let end = window_ns.saturating_add(grace_ns);
    records
        .iter()
        .filter(|r| r.send_ns < window_ns && r.finish_ns.map_or(true, |f| f <= end))
        .cloned()
        .collect()
}

/// The records of the prefix window `[0, window_ns)` of a longer run: requests sent before the cut,
/// those still running at the cut cancelled with the tokens they had by then. The replay is causal, so
/// this is the run a window of that length would have produced; the only estimate is the token count
/// of a request cut mid-stream, interpolated linearly between its first and last token.
pub fn prefix_window(records: &[Record], window_ns: u64) -> Vec<Record> {
    records
        .iter()
        .filter(|r| r.send_ns < window_ns)
        .map(|r| {
            if r.finish_ns.is_some_and(|f| f <= window_ns) {
                return r.clone();
            }
            let mut c = r.clone();
            c.outcome = Outcome::Cancelled;
            c.finish_ns = None;
            c.last_token_ns = None;
            c.output_tokens = match (r.first_token_ns, r.last_token_ns) {
                (Some(f), _) if f > window_ns => 0,
                (None, _) => 0,
                (Some(f), last) => {
                    let end = last.unwrap_or(window_ns.max(f + 1));
                    let span = (end - f).max(1) as f64;
                    let got = 1.0
                        + ((window_ns - f) as f64 / span
                            * (r.output_tokens.saturating_sub(1)) as f64)
                            .floor();
                    (got as u32).min(r.output_tokens)
                }
            };
            if c.output_tokens == 0 {
                c.first_token_ns = None;
            }
            c
        })
        .collect()
}

/// Everything `simulate` reports about one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Deployment name.
    pub deployment: String,
    /// Workload seed.
    pub seed: u64,
    /// Lanes.
    pub concurrency: u32,
    /// Window, seconds.
    pub window_s: f64,
    /// D, G, f.
    pub score: Score,
    /// The SLO the score used.
    pub slo: Slo,
    /// Requests sent inside the window.
    pub requests: usize,
    /// Of those, completed.
    pub completed: usize,
    /// Of those, qualified.
    pub qualified: usize,
    /// Cancelled at the window's end.
    pub cancelled: usize,
    /// Failed for exceeding the context limit.
    pub context_overflow: usize,
    /// Failed by the backend.
    pub errors: usize,
    /// TTFT of completed requests, seconds.
    pub ttft_s: Quantiles,
    /// TPOT of completed requests, seconds.
    pub tpot_s: Quantiles,
    /// End-to-end latency of completed requests, seconds.
    pub e2e_s: Quantiles,
    /// Gaps between consecutive output tokens (chunks) of every request, pooled, seconds (quantiles to
    /// within 0.8 %; count, mean and max exact).
    #[serde(default)]
    pub itl_s: Quantiles,
    /// Prompt tokens of requests sent.
    pub input_tokens: u64,
    /// Output tokens received.
    pub output_tokens: u64,
    /// Output tokens per second of window.
    pub output_tokens_per_s: f64,
    /// Prompt tokens per second of window.
    pub input_tokens_per_s: f64,
    /// Mean KV occupancy over busy time (fraction of blocks in use).
    pub kv_occupancy_mean: f64,
    /// Highest KV occupancy.
    pub kv_occupancy_max: f64,
    /// Prompt tokens served from the prefix cache / prompt tokens admitted.
    pub prefix_hit_rate: f64,
    /// Preemptions.
    pub preemptions: u64,
    /// Preemptions that swapped KV to host memory (`preemption: swap`).
    pub swaps: u64,
    /// Steps that waited for the engine to compile a fused-MoE kernel variant no earlier step needed
    /// (the profile's `expert_compile_s`; absent when none did).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub kernel_compiles: u64,
    /// Mean tokens one speculative verify step emitted per sequence (0 without speculative decoding).
    pub spec_tokens_per_verify: f64,
    /// Context overflows / requests.
    pub overflow_rate: f64,
    /// Requests the backend failed / requests.
    #[serde(default)]
    pub error_rate: f64,
    /// False when more than [`MAX_OVERFLOW_RATE`] of the requests overflowed the context or more than
    /// [`MAX_ERROR_RATE`] failed.
    pub valid: bool,
    /// Engine steps.
    pub steps: u64,
    /// Session trees started.
    pub trees_started: u64,
    /// How trees arrived (absent from the JSON for the closed loop).
    #[serde(default, skip_serializing_if = "Arrivals::is_closed")]
    pub arrivals: Arrivals,
    /// Open loop: what arrivals waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_loop: Option<OpenStats>,
    /// The protocol the run replayed (absent from summaries written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none", alias = "start")]
    pub protocol: Option<Protocol>,
    /// Under the AgentX protocols: the warm-up, the window's accounting and the validity checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agentx: Option<AgentxSummary>,
    /// Why the run ended before its window closed (a signal, an output that could not be written);
    /// absent for a run that ran its course. Such a run is never valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_early: Option<String>,
}

impl Summary {
    /// Records what run this summary is of: its seed, concurrency, start, arrivals and, open loop, what
    /// the arrivals waited for (`open`); the simulator and the real replay share it.
    pub fn describe_run(&mut self, cfg: &crate::replay::ReplayConfig, open: OpenStats) {
        self.seed = cfg.seed;
        self.concurrency = cfg.concurrency;
        self.protocol = Some(cfg.effective_start());
        self.arrivals = cfg.arrivals;
        self.open_loop = (!cfg.arrivals.is_closed()).then_some(open);
    }

    /// Why the run is invalid, in words: each rate past its limit ([`MAX_ERROR_RATE`],
    /// [`MAX_OVERFLOW_RATE`]), an early end, and the AgentX window's coverage check; empty when none
    /// of these holds.
    pub fn invalid_reasons(&self) -> Vec<String> {
        let mut why = Vec::new();
        if let Some(early) = &self.ended_early {
            why.push(format!("the run ended early ({early})"));
        }
        if self.error_rate > MAX_ERROR_RATE {
            why.push(format!(
                "{:.1} % of requests failed",
                self.error_rate * 100.0
            ));
        }
        if self.overflow_rate > MAX_OVERFLOW_RATE {
            why.push(format!(
                "{:.1} % of requests overflowed the context",
                self.overflow_rate * 100.0
            ));
        }
        if let Some(coverage) = self
            .agentx
            .as_ref()
            .and_then(|a| a.invalid.as_deref())
            .filter(|w| w.starts_with("insufficient coverage"))
        {
            why.push(coverage.to_string());
        }
        why
    }

    /// Marks the run as ended before its window closed, for `why`: it scores what was measured, and
    /// it is not a valid run.
    pub fn end_early(&mut self, why: impl Into<String>) {
        self.ended_early = Some(why.into());
        self.valid = false;
    }
}

/// What the AgentX window did with a run's requests, and its validity checks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentxSummary {
    /// Warm-up requests (primers and the pressure stage): never scored.
    pub warmup_requests: usize,
    /// Of those, primers.
    pub primers: u64,
    /// How long the warm-up took before the window opened, s.
    pub warmup_s: f64,
    /// Lanes built (fewer than the concurrency when too few rows could start).
    pub lanes: u32,
    /// Rows skipped at lane building (nothing live at their start point).
    pub unspawnable_rows: u64,
    /// Requests still running at the end of the grace: left without a record.
    pub dropped_unfinished: usize,
    /// Requests that overflowed the context: left out of the score, counted for validity.
    pub context_overflows: usize,
    /// When the last first token arrived after the window opened, s (coverage needs 95 % of W).
    pub last_ttft_s: f64,
    /// When the last token of a request of two tokens or more arrived, s (coverage needs 95 % of W).
    pub last_itl_s: f64,
    /// Streams a context overflow ended early.
    pub killed_streams: u64,
    /// Times the per-tree idle cap moved a tree's timers, and the seconds it removed.
    pub tree_idle_jumps: u64,
    /// Seconds the per-tree idle cap removed.
    pub tree_idle_skipped_s: f64,
    /// Times the global idle cap moved every timer.
    pub global_idle_jumps: u64,
    /// Seconds the global idle cap removed.
    pub global_idle_skipped_s: f64,
    /// Why the run is not valid by AgentX's checks (absent when it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// Share of the window the last TTFT and the last ITL observation must reach (AgentX's coverage).
pub const AGENTX_COVERAGE: f64 = 0.95;
/// AgentX's shortest window, seconds: its scenarios refuse shorter ones (an override lets them through)
/// and check no coverage for them, and neither does this.
pub const AGENTX_MIN_WINDOW_S: f64 = 900.0;

/// A run's records under the AgentX window: warm-up requests (`warm`) left out, requests still running
/// at the end of the grace (no finish time, or a finish after `run_end_ns`) left without a record,
/// context overflows left out of the score, and every time measured from the window's opening
/// (`origin_ns`). Returns the scored records and the summary of what was left out.
pub fn agentx_window(
    records: Vec<Record>,
    warm: &[bool],
    origin_ns: u64,
    run_end_ns: u64,
    stats: &AgentxStats,
) -> (Vec<Record>, AgentxSummary) {
    let mut s = AgentxSummary {
        primers: stats.primers,
        warmup_s: stats.warmup_s,
        lanes: stats.lanes.len() as u32,
        unspawnable_rows: stats.unspawnable_rows,
        killed_streams: stats.killed_streams,
        tree_idle_jumps: stats.tree_idle_jumps,
        tree_idle_skipped_s: stats.tree_idle_skipped_s,
        global_idle_jumps: stats.global_idle_jumps,
        global_idle_skipped_s: stats.global_idle_skipped_s,
        ..AgentxSummary::default()
    };
    let mut kept = Vec::new();
    for (r, &w) in records.into_iter().zip(warm) {
        if w {
            s.warmup_requests += 1;
            continue;
        }
        if r.outcome == Outcome::ContextOverflow {
            s.context_overflows += 1;
            continue;
        }
        if r.outcome == Outcome::Cancelled || !matches!(r.finish_ns, Some(f) if f <= run_end_ns) {
            s.dropped_unfinished += 1;
            continue;
        }
        let at = |t: u64| t.saturating_sub(origin_ns);
        let mut r = r;
        r.send_ns = at(r.send_ns);
        r.first_token_ns = r.first_token_ns.map(at);
        r.last_token_ns = r.last_token_ns.map(at);
        r.finish_ns = r.finish_ns.map(at);
        kept.push(r);
    }
    let last = |f: &dyn Fn(&Record) -> Option<u64>| {
        kept.iter().filter_map(f).max().unwrap_or(0) as f64 / 1e9
    };
    s.last_ttft_s = last(&|r: &Record| r.first_token_ns);
    s.last_itl_s = last(&|r: &Record| (r.output_tokens >= 2).then_some(r.last_token_ns).flatten());
    (kept, s)
}

/// Applies AgentX's validity checks to a summary of the records [`agentx_window`] kept: coverage of
/// the window by the last TTFT and ITL observations, and the context-overflow rate.
pub fn apply_agentx(summary: &mut Summary, mut a: AgentxSummary) {
    let window = summary.window_s;
    let all = summary.requests + a.context_overflows;
    summary.context_overflow = a.context_overflows;
    summary.overflow_rate = if all > 0 {
        a.context_overflows as f64 / all as f64
    } else {
        0.0
    };
    let mut why = Vec::new();
    let short = a.last_ttft_s < AGENTX_COVERAGE * window || a.last_itl_s < AGENTX_COVERAGE * window;
    if window >= AGENTX_MIN_WINDOW_S && short {
        why.push(format!(
            "insufficient coverage: the last TTFT at {:.1} s and the last ITL at {:.1} s of a {window} s window (both must reach {:.0} %)",
            a.last_ttft_s,
            a.last_itl_s,
            AGENTX_COVERAGE * 100.0
        ));
    }
    if summary.overflow_rate > MAX_OVERFLOW_RATE {
        why.push(format!(
            "{:.2} % of requests overflowed the context (at most {:.0} %)",
            summary.overflow_rate * 100.0,
            MAX_OVERFLOW_RATE * 100.0
        ));
    }
    if !why.is_empty() {
        summary.valid = false;
        a.invalid = Some(why.join("; "));
    }
    summary.agentx = Some(a);
}

/// Most of a run's requests that may overflow the context before the run is invalid.
pub const MAX_OVERFLOW_RATE: f64 = 0.01;
/// Most of a run's requests that the backend may fail before the run is invalid.
pub const MAX_ERROR_RATE: f64 = 0.01;

/// Latency quantiles and counts of a set of records (the parts of a summary that need no engine).
pub fn summarise(records: &[Record], d: &Deployment, window_s: f64) -> (Score, Summary) {
    let s = score(records, &d.prices, &d.slo, d.cost(window_s));
    let completed: Vec<&Record> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .collect();
    let mut ttft: Vec<f64> = completed.iter().filter_map(|r| r.ttft_s()).collect();
    let mut tpot: Vec<f64> = completed.iter().filter_map(|r| r.tpot_s()).collect();
    let mut e2e: Vec<f64> = completed.iter().filter_map(|r| r.e2e_s()).collect();
    let count = |o: fn(&Outcome) -> bool| records.iter().filter(|r| o(&r.outcome)).count();
    let overflow = count(|o| *o == Outcome::ContextOverflow);
    let input: u64 = records.iter().map(|r| r.input_tokens as u64).sum();
    let output: u64 = records.iter().map(|r| r.output_tokens as u64).sum();
    let errors = count(|o| matches!(o, Outcome::Error(_)));
    let rate = |n: usize| {
        if records.is_empty() {
            0.0
        } else {
            n as f64 / records.len() as f64
        }
    };
    let (overflow_rate, error_rate) = (rate(overflow), rate(errors));
    let summary = Summary {
        deployment: d.name.clone(),
        seed: 0,
        concurrency: 0,
        window_s,
        score: s,
        slo: d.slo,
        requests: records.len(),
        completed: completed.len(),
        qualified: records.iter().filter(|r| r.qualifies(&d.slo)).count(),
        cancelled: count(|o| *o == Outcome::Cancelled),
        context_overflow: overflow,
        errors,
        ttft_s: Quantiles::of(&mut ttft),
        tpot_s: Quantiles::of(&mut tpot),
        e2e_s: Quantiles::of(&mut e2e),
        itl_s: Quantiles::default(),
        input_tokens: input,
        output_tokens: output,
        output_tokens_per_s: output as f64 / window_s,
        input_tokens_per_s: input as f64 / window_s,
        kv_occupancy_mean: 0.0,
        kv_occupancy_max: 0.0,
        prefix_hit_rate: 0.0,
        preemptions: records.iter().map(|r| r.preemptions as u64).sum(),
        swaps: 0,
        kernel_compiles: 0,
        spec_tokens_per_verify: 0.0,
        overflow_rate,
        error_rate,
        valid: overflow_rate <= MAX_OVERFLOW_RATE && error_rate <= MAX_ERROR_RATE,
        steps: 0,
        trees_started: 0,
        arrivals: Arrivals::Closed,
        open_loop: None,
        protocol: None,
        agentx: None,
        ended_early: None,
    };
    (s, summary)
}

/// Serde: leave a zero count out.
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use approx::assert_relative_eq;

    #[test]
    fn an_invalid_run_says_which_limits_it_passed() {
        let d = crate::Deployment::preset("qwen3-8b-1xh200").unwrap();
        let ok: Vec<Record> = (0..10).map(|i| rec(i, i + 5, i + 9, 4, 4)).collect();
        let (_, s) = summarise(&ok, &d, 60.0);
        assert!(s.valid && s.invalid_reasons().is_empty());
        let mut bad = ok.clone();
        bad[0].outcome = Outcome::Error("http".into());
        bad[1].outcome = Outcome::ContextOverflow;
        let (_, mut s) = summarise(&bad, &d, 60.0);
        assert!(!s.valid);
        assert_eq!(
            s.invalid_reasons(),
            [
                "10.0 % of requests failed",
                "10.0 % of requests overflowed the context"
            ]
        );
        s.end_early("SIGINT");
        assert_eq!(s.invalid_reasons()[0], "the run ended early (SIGINT)");
    }

    fn rec(send: u64, first: u64, last: u64, y: u32, req: u32) -> Record {
        Record {
            tree: 0,
            request: 0,
            lane: 0,
            replica: 0,
            agent: 0,
            kind: RequestKind::RootTurn,
            send_ns: send,
            first_token_ns: Some(first),
            last_token_ns: Some(last),
            finish_ns: Some(last),
            input_tokens: 1_000_000,
            output_tokens: y,
            output_requested: req,
            cached_tokens: 0,
            preemptions: 0,
            outcome: Outcome::Completed,
            error_message: None,
            server_prompt_tokens: None,
            itl_max_ns: None,
        }
    }

    #[test]
    fn the_spec_example_divides_to_4_40() {
        let s = Score::new(3.65, 7.30, 0.83);
        assert_relative_eq!(s.d, 4.3975903614, epsilon = 1e-9);
        assert_eq!(format!("{:.2}", s.d), "4.40");
        assert_relative_eq!(s.f, 0.5);
        assert_relative_eq!(s.d, s.g * s.f, epsilon = 1e-12);
    }

    #[test]
    fn a_hand_worked_run() {
        // Prices $1/M in and $10/M out; one GPU at $2/h for 1800 s costs $1.
        let prices = Prices {
            input_per_m: 1.0,
            output_per_m: 10.0,
        };
        let slo = Slo {
            ttft_s: 1.0,
            tpot_s: 0.05,
        };
        let ms = 1_000_000;
        let records = vec![
            // qualifies: TTFT 1.0 s (inclusive), TPOT (1000 ms - 0) / 20 = 50 ms (inclusive). v = 1 + 21e-5·10
            rec(0, 1000 * ms, 2000 * ms, 21, 21),
            // TPOT 60 ms: fails. v = 1 + 11e-5 · 10 = 1.0011... only counts in G
            rec(0, 500 * ms, 1100 * ms, 11, 11),
            // short by one token: fails
            rec(0, 100 * ms, 200 * ms, 4, 5),
        ];
        let s = score(&records, &prices, &slo, 1.0);
        let v = |y: f64| 1.0 + 10.0 * y / 1e6;
        assert_relative_eq!(s.qualified_value, v(21.0), epsilon = 1e-12);
        assert_relative_eq!(s.gross_value, v(21.0) + v(11.0) + v(4.0), epsilon = 1e-12);
        assert_relative_eq!(s.d, v(21.0), epsilon = 1e-12);
        assert_relative_eq!(s.f, v(21.0) / (v(21.0) + v(11.0) + v(4.0)), epsilon = 1e-12);
        assert_eq!(records[0].tpot_s(), Some(0.05));
    }

    /// Three requests: one done before 400 ms, one running past it, one sent at it.
    fn three_records() -> Vec<Record> {
        let ms = 1_000_000;
        vec![
            rec(0, 100 * ms, 200 * ms, 11, 11),
            rec(50 * ms, 300 * ms, 700 * ms, 5, 5),
            rec(400 * ms, 500 * ms, 600 * ms, 3, 3),
        ]
    }

    #[test]
    fn agentx_prefix_windows_keep_what_finished_within_the_grace() {
        let (ms, records) = (1_000_000, three_records());
        // Cut at 400 ms with a 200 ms grace: the second finished at 700 ms, past 600: no record.
        let cut = agentx_prefix_window(&records, 400 * ms, 200 * ms);
        assert_eq!(cut, vec![records[0].clone()]);
        // A 300 ms grace keeps it whole (AgentX records it as it finished).
        let cut = agentx_prefix_window(&records, 400 * ms, 300 * ms);
        assert_eq!(cut, records[..2].to_vec());
        assert_eq!(agentx_prefix_window(&records, 10_000 * ms, 0), records);
    }

    #[test]
    fn prefix_windows_cancel_what_runs_past_the_cut() {
        let (ms, records) = (1_000_000, three_records());
        let cut = prefix_window(&records, 400 * ms);
        assert_eq!(cut.len(), 2, "the third was sent at the cut");
        assert_eq!(cut[0], records[0]);
        assert_eq!(cut[1].outcome, Outcome::Cancelled);
        assert_eq!(cut[1].output_tokens, 2, "1 + floor(100/400 · 4)");
        assert_eq!(prefix_window(&records, 250 * ms)[1].output_tokens, 0);
        assert_eq!(prefix_window(&records, 10_000 * ms), records);
    }

    #[test]
    fn cancelled_and_failed_requests_count_in_g_only() {
        let prices = Prices {
            input_per_m: 1.0,
            output_per_m: 1.0,
        };
        let slo = Slo {
            ttft_s: 10.0,
            tpot_s: 10.0,
        };
        let mut r = rec(0, 1, 2, 3, 3);
        r.outcome = Outcome::Cancelled;
        let s = score(&[r.clone()], &prices, &slo, 1.0);
        assert_eq!(s.d, 0.0);
        assert!(s.g > 0.0);
        r.outcome = Outcome::Completed;
        assert_eq!(score(&[r], &prices, &slo, 1.0).f, 1.0);
    }
}
