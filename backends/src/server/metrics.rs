//! `serve`'s `/metrics` in Prometheus text, through `prometheus-client`: vLLM's gauges and counters
//! under vLLM's names, and server-side latency histograms (time to first token, inter-token latency,
//! end-to-end), each labelled with the model name. Latencies are server time (wall clock times
//! `--time-scale`). It never touches the engine: the engine thread fills [`Counts`], responses observe
//! [`Latency`].

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::time::Instant;

/// Engine gauges and counters, as the engine thread last saw them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Counts {
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
    pub prefix_queries: u64,
    pub prefix_hits: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub requests_finished: u64,
    pub requests_cancelled: u64,
}

/// Upper bucket edges, seconds.
const TTFT_BUCKETS: [f64; 20] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0,
];
const ITL_BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.5, 1.0, 2.5,
];
const E2E_BUCKETS: [f64; 18] = [
    0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 240.0, 480.0,
    960.0,
];

/// Server-side latency histograms, shared by every response.
#[derive(Debug)]
pub(super) struct Latency {
    queue: Histogram,
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
    /// Server seconds per wall-clock second.
    scale: f64,
}

impl Latency {
    pub fn new(time_scale: f64) -> Latency {
        Latency {
            queue: Histogram::new(TTFT_BUCKETS),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
            scale: time_scale,
        }
    }

    /// A request waited `wall` (wall clock) from its arrival to its first scheduled step.
    pub fn queued(&self, wall: std::time::Duration) {
        self.queue.observe(self.scale * wall.as_secs_f64());
    }
}

/// One request's clock: when it arrived and when its last token went out.
#[derive(Debug)]
pub(super) struct RequestClock {
    arrived: Instant,
    last_token: Option<Instant>,
}

impl RequestClock {
    pub fn start() -> RequestClock {
        RequestClock {
            arrived: Instant::now(),
            last_token: None,
        }
    }

    /// When the request arrived.
    pub fn arrived(&self) -> Instant {
        self.arrived
    }

    /// `n` tokens go out now: the first one's time to first token, then each one's gap.
    pub fn tokens(&mut self, n: u32, l: &Latency) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        let mut rest = n;
        let since = match self.last_token {
            None => {
                l.ttft.observe(l.scale * (now - self.arrived).as_secs_f64());
                rest -= 1;
                now
            }
            Some(t) => t,
        };
        if rest > 0 {
            let gap = l.scale * (now - since).as_secs_f64() / rest as f64;
            for _ in 0..rest {
                l.itl.observe(gap);
            }
        }
        self.last_token = Some(now);
    }

    /// The response ended now.
    pub fn done(&self, l: &Latency) {
        l.e2e
            .observe(l.scale * self.arrived.elapsed().as_secs_f64());
    }
}

/// The `/metrics` text.
pub(super) fn text(model: &str, c: &Counts, l: &Latency) -> String {
    let mut r = Registry::with_labels(std::iter::once((
        Cow::Borrowed("model_name"),
        Cow::Owned(model.to_string()),
    )));
    r.register(
        "vllm:num_requests_running",
        "Requests in the running batch",
        ConstGauge::new(c.running as i64),
    );
    r.register(
        "vllm:num_requests_waiting",
        "Requests waiting to be scheduled",
        ConstGauge::new(c.waiting as i64),
    );
    r.register(
        "vllm:kv_cache_usage_perc",
        "Fraction of KV blocks in use (1 = full)",
        ConstGauge::new(c.kv_usage),
    );
    r.register(
        "vllm:gpu_cache_usage_perc",
        "Fraction of KV blocks in use (older name)",
        ConstGauge::new(c.kv_usage),
    );
    for (name, help, v) in [
        (
            "vllm:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache",
            c.prefix_queries,
        ),
        (
            "vllm:prefix_cache_hits",
            "Prompt tokens served from the prefix cache",
            c.prefix_hits,
        ),
        (
            "vllm:prompt_tokens",
            "Prompt tokens received",
            c.prompt_tokens,
        ),
        (
            "vllm:generation_tokens",
            "Output tokens generated",
            c.generation_tokens,
        ),
        (
            "vllm:request_success",
            "Requests finished (all their tokens sent)",
            c.requests_finished,
        ),
        (
            "serverbench:requests_cancelled",
            "Requests cancelled because their client went away",
            c.requests_cancelled,
        ),
    ] {
        r.register(name, help, ConstCounter::new(v));
    }
    r.register(
        "vllm:request_queue_time_seconds",
        "Time from a request's arrival to the engine step that first scheduled it, server seconds",
        l.queue.clone(),
    );
    r.register(
        "vllm:time_to_first_token_seconds",
        "Time from a request's arrival to its first output token, server seconds",
        l.ttft.clone(),
    );
    r.register(
        "vllm:inter_token_latency_seconds",
        "Time between consecutive output tokens of a request, server seconds",
        l.itl.clone(),
    );
    r.register(
        "vllm:e2e_request_latency_seconds",
        "Time from a request's arrival to its last byte, server seconds",
        l.e2e.clone(),
    );
    let mut s = String::new();
    encode(&mut s, &r).expect("writing to a String cannot fail");
    s
}
