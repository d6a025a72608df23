//! The real-time replay driver: the simulator's replay state machine, unchanged, driven by the wall
//! clock on tokio against a real server. Same lanes, dependencies, think times, window, records and score.

use crate::client::{HttpClient, StreamResult};
use crate::clock::ScaledClock;
use crate::interrupt::Interrupt;
use crate::openai::{request_bytes, Api, BodyCache};

use crate::timer::Timer;
use serverbench_sim::{
    agentx_window, apply_agentx, records_hit_rate, summarise, Deployment, EventQueue, Handle,
    Outcome, OverflowGuard, Ready, Record, Refusal, Replay, RunConfig, Summary, Time,
};
use serverbench_workloads::tokens::{prompt_tokens, prompt_tokens_from, Vocab};
use serverbench_workloads::{Quantiles, TreeSource};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// A real replay's settings.
#[derive(Clone, Debug)]
pub struct RealConfig {
    /// Lanes, seed, window, idle-gap cap, start mode (as `simulate`).
    pub run: RunConfig,
    /// Wall-clock compression for testing against `serve --time-scale X`: think times and the window
    /// are divided by it and every measured duration multiplied back, so records are in server time.
    pub time_scale: f64,
    /// Token ids prompts are synthesised from.
    pub vocab: Vocab,
    /// What ends the run early (the binary requests it on SIGINT and SIGTERM); a fresh
    /// [`Interrupt`] never fires by itself.
    pub stop: Interrupt,
}

/// What the client saw besides the records.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ClientStats {
    /// How late requests were sent after they became due, wall-clock milliseconds.
    pub dispatch_drift_ms: Quantiles,
    /// Failed requests by kind.
    pub errors_by_kind: BTreeMap<String, usize>,
    /// Completed requests whose output length differed from the request.
    pub length_mismatches: usize,
    /// Completed requests without a usage block.
    pub usage_missing: usize,
    /// Completed requests whose `usage.prompt_tokens` differs from the prompt sent (the server cut,
    /// padded or re-tokenised it).
    #[serde(default)]
    pub prompt_mismatches: usize,
    /// The first of those: the tokens sent and the tokens the server counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_prompt_mismatch: Option<(u32, u32)>,
    /// Completed requests whose usage count is below the output chunks streamed (a stream/usage
    /// inconsistency; the chunks are what is counted).
    pub chunk_usage_mismatches: usize,
    /// Completed requests whose usage count is above the output chunks streamed, up to `max_tokens`:
    /// several tokens in a chunk (the usage is what is counted).
    #[serde(default)]
    pub coalesced_streams: usize,
    /// Of those, the ones whose streamed text, tokenized with the output tokenizer
    /// (`--output-tokenizer`), does not back the usage count: all of them without one.
    #[serde(default)]
    pub coalesced_unconfirmed: usize,
    /// Requests whose stream carried a delta field with a value but no output field this client counts
    /// (a server streaming tokens under another name: TTFT and TPOT would be measured wrong).
    #[serde(default)]
    pub unrecognised_output_streams: usize,
    /// The first such field's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_unrecognised_field: Option<String>,
    /// Warm-up requests sent before the window (steady start).
    pub warmup_requests: usize,
    /// Of those, the ones that failed (the first one's reason in `warmup_error`).
    #[serde(default)]
    pub warmup_errors: usize,
    /// Why the first failed warm-up request failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_error: Option<String>,
    /// True when a stop request (Ctrl-C, SIGTERM) ended the run early (the summary scores what was
    /// measured, and says why in `ended_early`).
    pub interrupted: bool,
    /// The records file could not be written (the file, the record and the reason): the run ended
    /// there, and the file holds every record before it, whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_error: Option<String>,
    /// The first failed request's kind and what the server said, if any request failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Most requests in flight at once.
    pub max_in_flight: usize,
    /// Gaps between consecutive output chunks of every request, engine ns (the summary's `itl_s`).
    #[serde(skip)]
    pub itl: serverbench_sim::IntervalHistogram,
}

/// A finished real replay.
#[derive(Clone, Debug)]
pub struct RealOutput {
    /// One record per request sent inside the window, in send order.
    pub records: Vec<Record>,
    /// Scored exactly like a simulated run.
    pub summary: Summary,
    /// Client-side checks and timings.
    pub client: ClientStats,
}

struct Done {
    tag: usize,
    result: StreamResult,
}

struct InFlight {
    task: JoinHandle<()>,
    progress: Arc<AtomicU32>,
}

/// Appends records to a file, one whole line per write, so an interrupted run keeps what it measured.
/// A write that fails (a full disk) is cut back off the file, so that every line in it is a whole
/// record, and the sink writes nothing more.
pub struct RecordSink {
    file: Option<(std::path::PathBuf, std::fs::File)>,
    /// Bytes of whole records written.
    written: u64,
    /// Records written.
    records: u64,
    line: Vec<u8>,
    failed: Option<String>,
}

impl RecordSink {
    /// A sink writing to `path` (created or truncated), or nowhere.
    pub fn new(path: Option<&std::path::Path>) -> std::io::Result<RecordSink> {
        let file = match path {
            Some(p) => Some((p.to_path_buf(), std::fs::File::create(p)?)),
            None => None,
        };
        Ok(RecordSink {
            file,
            written: 0,
            records: 0,
            line: Vec::new(),
            failed: None,
        })
    }

    /// A sink writing `records.jsonl` in `dir` (created or truncated), or nowhere; the error names the
    /// file.
    pub fn in_dir(dir: Option<&std::path::Path>) -> anyhow::Result<RecordSink> {
        let path = dir.map(|d| d.join("records.jsonl"));
        RecordSink::new(path.as_deref()).map_err(|e| {
            let path = path.unwrap_or_else(|| "records.jsonl".into());
            anyhow::Error::new(e).context(format!("{}: cannot create", path.display()))
        })
    }

    /// Why writing failed (the file, the record and the reason), once it did.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Writes `r` as one line; false once a write has failed (see [`RecordSink::failure`]).
    fn write(&mut self, r: &Record) -> bool {
        let Some((path, file)) = &mut self.file else {
            return true;
        };
        if self.failed.is_some() {
            return false;
        }
        self.line.clear();
        serde_json::to_writer(&mut self.line, r).expect("a record serialises");
        self.line.push(b'\n');
        match file.write_all(&self.line) {
            Ok(()) => {
                self.written += self.line.len() as u64;
                self.records += 1;
                true
            }
            Err(e) => {
                // Drop the part of the line that was written, so the file ends with a whole record.
                let _ = file.set_len(self.written);
                self.failed = Some(format!(
                    "{}: cannot write record {} (the {} before it are kept whole): {e}",
                    path.display(),
                    self.records + 1,
                    self.records
                ));
                false
            }
        }
    }
}

/// Replays `source` against the server behind `client` in real time; `progress(seconds, window)` is
/// called as time passes. A stop request (`cfg.stop`) or a records file that cannot be written ends
/// the run early; it still returns what was measured, marked as ended early.
pub async fn run_real(
    d: &Deployment,
    source: &dyn TreeSource,
    client: Arc<HttpClient>,
    cfg: &RealConfig,
    sink: &mut RecordSink,
    progress: &(dyn Fn(f64) + Sync),
) -> std::io::Result<RealOutput> {
    let window_len = Time::from_secs(cfg.run.window_s).0;
    if cfg.run.protocol.is_agentx() && client.config().api != Api::Chat {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the AgentX protocols send chat completions, as AgentX does: the client must use the chat API",
        ));
    }
    let mut replay = Replay::new(source, cfg.run.replay())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let mut ready: Vec<Ready> = Vec::new();
    replay.start(Time::ZERO, &mut ready);
    let mut stats = ClientStats::default();
    if cfg.stop.count() > 0 {
        stats.interrupted = true;
        return Ok(interrupted_before_the_window(d, cfg, 0, stats));
    }
    let bodies: Bodies = Default::default();
    // A stop request from here on ends the run with what it measured (during the warm-up too).
    let stop = cfg.stop.requested();
    tokio::pin!(stop);
    if replay.warms() {
        let warm = warm_up(&replay, &ready, &client, cfg.vocab, &bodies);
        tokio::select! {
            w = warm => {
                stats.warmup_requests = w.sent;
                stats.warmup_errors = w.failed;
                stats.warmup_error = w.first_error;
            }
            _ = &mut stop => {
                stats.interrupted = true;
                return Ok(interrupted_before_the_window(d, cfg, replay.trees_started(), stats));
            }
        }
    }
    let clock = ScaledClock::new(cfg.time_scale);
    let prompt_extra = match (client.config().api, &client.config().words) {
        (Api::CompletionsText, Some(w)) => w.special_tokens(),
        _ => 0,
    };
    // Sub-millisecond wake-ups without spinning: at `--time-scale 10` a millisecond of wall clock is
    // 10 ms of server time, and a dispatch loop that spins for its next deadline takes a core from the
    // streams it serves.
    let timer = Timer::new();
    let mut queue: EventQueue<Handle> = EventQueue::new();
    for r in ready.drain(..) {
        queue.schedule(r.at, r.handle).expect("never in the past");
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
    let mut records: Vec<Record> = Vec::new();
    // Per record, whether it is a warm-up request (the AgentX protocols': never scored or written).
    let mut warm: Vec<bool> = Vec::new();
    let mut in_flight: HashMap<usize, InFlight> = HashMap::new();
    let mut drift_ms: Vec<f64> = Vec::new();
    let mut dues: HashMap<usize, u64> = HashMap::new();
    let mut overflows = OverflowGuard::default();
    let request_limit = d.request_limit();
    // The window opens when the replay says (at once, or after the AgentX warm-up); sending stops at
    // its end and the run ends a grace later.
    let (mut window_end, mut run_end) = (u64::MAX, u64::MAX);
    let mut origin = 0u64;
    let agentx = replay.agentx_stats().is_some();
    loop {
        if window_end == u64::MAX {
            if let Some(o) = replay.window_origin() {
                origin = o.0;
                window_end = o.0.saturating_add(window_len);
                run_end = window_end.saturating_add(replay.grace_ns());
            }
        }
        let now = clock.now();
        progress(now.saturating_sub(origin) as f64 / 1e9);
        // A records file that cannot be written ends the run: nothing more is sent.
        let ended = replay.finished() && in_flight.is_empty() && queue.is_empty();
        let drained = now >= window_end && in_flight.is_empty();
        if now >= run_end || ended || drained || sink.failure().is_some() {
            break;
        }
        // Open loop: trees that have arrived by now start; AgentX: timers due now fire.
        while let Some(at) = replay
            .next_arrival()
            .filter(|at| at.0 <= now && at.0 < window_end)
        {
            replay.arrive(at, &mut ready);
            for r in ready.drain(..) {
                queue
                    .schedule(r.at, r.handle)
                    .expect("arrivals are due from now on");
            }
        }
        while let Some(t) = queue.peek_time() {
            if t.0 > now || t.0 >= window_end {
                break;
            }
            let (due, h) = queue.pop().expect("peeked");
            let tag = records.len();
            records.push(dispatch(&replay, h, clock.now()));
            warm.push(replay.is_warmup(h));
            let max_tokens = replay.max_tokens(h);
            let input = replay.request(h).input_tokens;
            if let Some(refusal) = d.refusal(input, max_tokens, request_limit) {
                // As in the simulator: never sent, failed at once, as `context_overflow` past the
                // context limit (its stream ends under AgentX) or as an error past only the pool (the
                // stream goes on).
                overflows
                    .overflowed(due, request_limit)
                    .map_err(std::io::Error::other)?;
                let rec = &mut records[tag];
                rec.finish_ns = Some(rec.send_ns);
                let now = Time(queue.now().0);
                match refusal {
                    Refusal::ContextOverflow => {
                        rec.outcome = Outcome::ContextOverflow;
                        // AgentX leaves overflows out of the records and the score (it counts them).
                        if !warm[tag] && !agentx {
                            sink.write(rec);
                        }
                        replay.overflowed(h, now, &mut ready);
                    }
                    Refusal::PoolExceeded => {
                        rec.outcome = Outcome::Error(Refusal::POOL_EXCEEDED.into());
                        if !warm[tag] {
                            sink.write(rec);
                        }
                        replay.complete(h, now, &mut ready);
                    }
                }
                for r in ready.drain(..) {
                    queue
                        .schedule(r.at, r.handle)
                        .expect("ready times follow the completion");
                }
                continue;
            }
            dues.insert(tag, due.0);
            let (tree, index) = replay.tree(h.lane);
            let tree = tree.clone();
            let p = Arc::new(AtomicU32::new(0));
            let (client, tx, p2, vocab, bodies) = (
                client.clone(),
                tx.clone(),
                p.clone(),
                cfg.vocab,
                bodies.clone(),
            );
            let task = tokio::spawn(async move {
                // Prompt synthesis runs on a worker, off the dispatch loop.
                let req = &tree.requests()[h.request as usize];
                let body = if agentx {
                    agentx_request(h.lane, &tree, index, req, &client, vocab, max_tokens)
                } else {
                    request_body(
                        h.lane, &tree, index, req, &client, vocab, &bodies, max_tokens,
                    )
                };
                let result = client.stream_body(h.lane, body, max_tokens, Some(p2)).await;
                let _ = tx.send(Done { tag, result });
            });
            in_flight.insert(tag, InFlight { task, progress: p });
            stats.max_in_flight = stats.max_in_flight.max(in_flight.len());
        }
        let mut wake = [queue.peek_time(), replay.next_arrival()]
            .into_iter()
            .flatten()
            .map(|t| t.0)
            .fold(run_end, u64::min);
        if now < window_end {
            wake = wake.min(window_end);
        }
        tokio::select! {
            biased;
            _ = &mut stop => {
                stats.interrupted = true;
                break;
            }
            Some(done) = rx.recv() => {
                in_flight.remove(&done.tag);
                let due = dues.remove(&done.tag).unwrap_or(0);
                drift_ms.push(done.result.sent.saturating_duration_since(clock.instant(due)).as_secs_f64() * 1e3);
                let rec = &mut records[done.tag];
                if warm[done.tag] {
                    stats.warmup_requests += 1;
                    if let Some(kind) = &done.result.error {
                        stats.warmup_errors += 1;
                        stats.warmup_error.get_or_insert_with(|| match &done.result.error_message {
                            Some(m) => format!("{kind}: {m}"),
                            None => kind.clone(),
                        });
                    }
                    finish(rec, &done.result, &clock, prompt_extra, &mut ClientStats::default());
                } else {
                    finish(rec, &done.result, &clock, prompt_extra, &mut stats);
                    sink.write(&rebased(rec, origin));
                }
                let at = Time(clock.at(done.result.ended).max(queue.now().0));
                let h = Handle { lane: rec.lane, request: rec.request };
                replay.complete(h, at, &mut ready);
                for r in ready.drain(..) {
                    queue.schedule(r.at, r.handle).expect("ready times follow the completion");
                }
            }
            _ = timer.sleep_until(clock.instant(wake)) => {}
        }
    }
    for (tag, f) in in_flight {
        f.task.abort();
        let rec = &mut records[tag];
        rec.output_tokens = f.progress.load(Ordering::Relaxed);
        rec.outcome = Outcome::Cancelled;
        // AgentX: a request still running at the end of the grace leaves no record.
        if !warm[tag] && !agentx {
            sink.write(rec);
        }
    }
    stats.write_error = sink.failure().map(str::to_string);
    let early = stats.interrupted || stats.write_error.is_some();
    let window_s = if early {
        (clock.now().saturating_sub(origin) as f64 / 1e9).min(cfg.run.window_s)
    } else {
        cfg.run.window_s
    };
    let scored = replay
        .agentx_stats()
        .map(|a| agentx_window(std::mem::take(&mut records), &warm, origin, run_end, a));
    let agentx_summary = scored.map(|(kept, a)| {
        records = kept;
        a
    });
    let (_, mut summary) = summarise(&records, d, window_s);
    if stats.interrupted {
        summary.end_early(interrupted_by(&cfg.stop));
    } else if let Some(e) = &stats.write_error {
        summary.end_early(e.clone());
    }
    summary.itl_s = stats.itl.quantiles_s();
    summary.describe_run(&cfg.run.replay(), replay.open_stats());
    summary.trees_started = replay.trees_started();
    summary.prefix_hit_rate = records_hit_rate(&records);
    if let Some(a) = agentx_summary {
        apply_agentx(&mut summary, a);
    }
    stats.dispatch_drift_ms = Quantiles::of(&mut drift_ms);
    Ok(RealOutput {
        records,
        summary,
        client: stats,
    })
}

/// A record with its times measured from the window's opening (the AgentX protocols open it after
/// their warm-up; the others at 0, a no-op).
fn rebased(r: &Record, origin: u64) -> Record {
    let at = |t: u64| t.saturating_sub(origin);
    Record {
        send_ns: at(r.send_ns),
        first_token_ns: r.first_token_ns.map(at),
        last_token_ns: r.last_token_ns.map(at),
        finish_ns: r.finish_ns.map(at),
        ..r.clone()
    }
}

/// How a stopped run's summary says why it ended.
fn interrupted_by(stop: &Interrupt) -> String {
    format!(
        "interrupted by {}",
        stop.why().unwrap_or_else(|| "a stop request".into())
    )
}

impl RealOutput {
    /// The output of a run interrupted before its window opened: no request was sent in it.
    pub fn interrupted(d: &Deployment, cfg: &RealConfig) -> RealOutput {
        interrupted_before_the_window(
            d,
            cfg,
            0,
            ClientStats {
                interrupted: true,
                ..ClientStats::default()
            },
        )
    }

    /// Why the run does not count, in words, when it does not; `None` for a valid run.
    pub fn not_counted(&self) -> Option<NotCounted> {
        if self.client.interrupted {
            return Some(NotCounted::Interrupted(format!(
                "{}: the summary scores what was measured, and the run is not valid",
                self.summary.ended_early.as_deref().unwrap_or("interrupted")
            )));
        }
        let s = &self.summary;
        (!s.valid).then(|| NotCounted::Invalid(format!(
            "the run is invalid: {} of {} requests failed and {} overflowed the context (at most {:.0} % each); its score does not count",
            s.errors,
            s.requests,
            s.context_overflow,
            100.0 * serverbench_sim::MAX_ERROR_RATE
        )))
    }
}

/// Why a real run does not count (the binary gives each its own exit code).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotCounted {
    /// A stop request ended it; what was measured is scored all the same.
    Interrupted(String),
    /// Too many of its requests failed or overflowed the context.
    Invalid(String),
}

fn interrupted_before_the_window(
    d: &Deployment,
    cfg: &RealConfig,
    trees: u64,
    client: ClientStats,
) -> RealOutput {
    let (_, mut summary) = summarise(&[], d, 0.0);
    summary.describe_run(&cfg.run.replay(), Default::default());
    summary.trees_started = trees;
    summary.end_early(interrupted_by(&cfg.stop));
    RealOutput {
        records: Vec::new(),
        summary,
        client,
    }
}

type Bodies = Arc<std::sync::Mutex<HashMap<(u32, u32), BodyCache>>>;

/// A request's JSON body asking for `max_tokens`. Token-id bodies go through the body cache of the
/// (lane, agent), so a turn reuses the serialised prefix of the agent's previous turn (one entry per
/// lane and agent: a lane's next tree overwrites its entries).
#[allow(clippy::too_many_arguments)]
fn request_body(
    lane: u32,
    tree: &serverbench_workloads::SessionTree,
    index: u64,
    req: &serverbench_workloads::Request,
    client: &HttpClient,
    vocab: Vocab,
    bodies: &Bodies,
    max_tokens: u32,
) -> Vec<u8> {
    let form = client.form();
    if form.api != Api::CompletionsTokens {
        let prompt = prompt_tokens(index, req, tree.block_size, vocab);
        return request_bytes(form, &prompt, max_tokens, true);
    }
    let key = (lane, req.agent);
    let mut cache = bodies
        .lock()
        .expect("body cache")
        .remove(&key)
        .unwrap_or_default();
    let body = cache.body(
        form,
        req.blocks.as_slice(),
        tree.block_size,
        max_tokens,
        |from| prompt_tokens_from(index, req, tree.block_size, vocab, from),
    );
    bodies.lock().expect("body cache").insert(key, cache);
    body
}

/// A request as AgentX sends it: chat messages of the request's agent (a system prompt, then each turn's
/// answer-sized assistant message and user message), a cache-bust marker of the tree instance at the
/// start of the first user message, `max_completion_tokens` and `ignore_eos`.
fn agentx_request(
    lane: u32,
    tree: &serverbench_workloads::SessionTree,
    index: u64,
    req: &serverbench_workloads::Request,
    client: &HttpClient,
    vocab: Vocab,
    max_tokens: u32,
) -> Vec<u8> {
    let form = client.form();
    let tokens = prompt_tokens(index, req, tree.block_size, vocab);
    let text = |p: &[u32]| match form.words {
        Some(w) => w.text(p),
        None => crate::openai::tokens_as_text(p),
    };
    let marker = format!(
        "[rid:{:012x}]\n\n",
        serverbench_workloads::hash::mix2(lane as u64, index) & 0xFFFF_FFFF_FFFF
    );
    let mut marked = false;
    let messages: Vec<(&str, String)> = serverbench_workloads::tokens::messages(tree, req.id)
        .into_iter()
        .map(|(role, range)| {
            let mut content = text(&tokens[range]);
            if role == serverbench_workloads::tokens::Role::User && !marked {
                marked = true;
                content.insert_str(0, &marker);
            }
            (role.name(), content)
        })
        .collect();
    crate::openai::agentx_body(form.model, &messages, max_tokens)
}

fn dispatch(replay: &Replay<'_>, h: Handle, now: u64) -> Record {
    let (_, index) = replay.tree(h.lane);
    let mut r = Record::sent(index, h.lane, 0, replay.request(h), now);
    r.output_requested = replay.max_tokens(h);
    r
}

/// Fills `rec` from what the stream gave; `prompt_extra` is what the server's prompt count may exceed
/// the workload's by (the special tokens its tokenizer adds around a text prompt, under `--tokenizer`).
fn finish(
    rec: &mut Record,
    r: &StreamResult,
    clock: &ScaledClock,
    prompt_extra: u32,
    stats: &mut ClientStats,
) {
    rec.send_ns = clock.at(r.sent);
    rec.first_token_ns = r.first_token.map(|t| clock.at(t));
    rec.last_token_ns = r.last_token.map(|t| clock.at(t));
    if let Some(times) = &r.chunk_times {
        let gaps = times
            .windows(2)
            .map(|w| clock.at(w[1]).saturating_sub(clock.at(w[0])));
        rec.itl_max_ns = gaps.clone().max();
        gaps.for_each(|g| stats.itl.add(g));
    }
    rec.finish_ns = Some(clock.at(r.ended));
    rec.output_tokens = r.tokens();
    rec.cached_tokens = r.usage.and_then(|u| u.cached_tokens).unwrap_or(0) as u32;
    rec.server_prompt_tokens = r.usage.map(|u| u.prompt_tokens as u32);
    if let Some(field) = &r.unrecognised_field {
        stats.unrecognised_output_streams += 1;
        stats
            .first_unrecognised_field
            .get_or_insert_with(|| field.clone());
    }
    match &r.error {
        Some(kind) => {
            *stats.errors_by_kind.entry(kind.clone()).or_insert(0) += 1;
            rec.outcome = Outcome::Error(kind.clone());
            rec.error_message = r.error_message.clone();
            if stats.first_error.is_none() {
                stats.first_error = Some(match &r.error_message {
                    Some(m) => format!("{kind}: {m}"),
                    None => kind.clone(),
                });
            }
        }
        None => {
            rec.outcome = Outcome::Completed;
            if rec.output_tokens != rec.output_requested {
                stats.length_mismatches += 1;
            }
            match r.usage {
                None => stats.usage_missing += 1,
                Some(u) => {
                    if r.usage_differs() {
                        stats.chunk_usage_mismatches += 1;
                    }
                    if r.coalesced() {
                        stats.coalesced_streams += 1;
                    }
                    if r.coalesced_unconfirmed() {
                        stats.coalesced_unconfirmed += 1;
                    }
                    if u.prompt_tokens != (rec.input_tokens + prompt_extra) as u64 {
                        stats.prompt_mismatches += 1;
                        stats
                            .first_prompt_mismatch
                            .get_or_insert((rec.input_tokens, u.prompt_tokens as u32));
                    }
                }
            }
        }
    }
}

/// What the warm-up did.
struct WarmUp {
    sent: usize,
    failed: usize,
    first_error: Option<String>,
}

/// Steady start: sends each lane's first prompt once (one output token) so the server's prefix cache
/// holds it before the window opens, as the simulator warms its cache.
async fn warm_up(
    replay: &Replay<'_>,
    ready: &[Ready],
    client: &Arc<HttpClient>,
    vocab: Vocab,
    bodies: &Bodies,
) -> WarmUp {
    let mut tasks = Vec::new();
    for r in ready {
        let (tree, index) = replay.tree(r.handle.lane);
        let (tree, client, bodies, h) = (tree.clone(), client.clone(), bodies.clone(), r.handle);
        tasks.push(tokio::spawn(async move {
            // The lane's first request in the window has this very prompt: building it through the
            // body cache now makes that request's body ready when it is due.
            let req = &tree.requests()[h.request as usize];
            let body = request_body(h.lane, &tree, index, req, &client, vocab, &bodies, 1);
            client.stream_body(h.lane, body, 1, None).await
        }));
    }
    let mut w = WarmUp {
        sent: tasks.len(),
        failed: 0,
        first_error: None,
    };
    for t in tasks {
        let Ok(r) = t.await else { continue };
        if let Some(kind) = r.error {
            w.failed += 1;
            w.first_error.get_or_insert(match r.error_message {
                Some(m) => format!("{kind}: {m}"),
                None => kind,
            });
        }
    }
    w
}

/// Runs `f` unless a stop request comes first (then `None`).
pub async fn unless_interrupted<F: std::future::Future>(
    stop: &Interrupt,
    f: F,
) -> Option<F::Output> {
    // Biased, the stop first: a stop already requested wins over a future that is ready at once (a
    // refused connection), where an unbiased select picks one of the two at random.
    tokio::select! {
        biased;
        _ = stop.requested() => None,
        out = f => Some(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_sink_in_a_missing_folder_names_its_file() {
        let dir = std::env::temp_dir().join(format!("sb-no-such-dir-{}", std::process::id()));
        let e = RecordSink::in_dir(Some(&dir)).err().expect("no folder");
        let file = dir.join("records.jsonl");
        assert_eq!(e.to_string(), format!("{}: cannot create", file.display()));
        assert!(RecordSink::in_dir(None).is_ok());
    }

    #[test]
    fn an_interrupted_run_does_not_count_and_says_by_what() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let stop = Interrupt::new();
        stop.request("SIGINT");
        let cfg = RealConfig {
            run: RunConfig::new(1, 0, 60.0),
            time_scale: 1.0,
            vocab: Vocab::new(100, 1000).unwrap(),
            stop,
        };
        let mut out = RealOutput::interrupted(&d, &cfg);
        assert_eq!(
            out.not_counted(),
            Some(NotCounted::Interrupted(
                "interrupted by SIGINT: the summary scores what was measured, and the run is not valid"
                    .into()
            ))
        );
        out.client.interrupted = false;
        out.summary.valid = false;
        let Some(NotCounted::Invalid(why)) = out.not_counted() else {
            panic!("an invalid run counts")
        };
        assert!(
            why.starts_with("the run is invalid: 0 of 0 requests failed"),
            "{why}"
        );
        out.summary.valid = true;
        assert_eq!(out.not_counted(), None);
    }

    /// AgentX's body (reference/agentx-replay.md): chat messages (a system prompt where the tree has one), with the
    /// tree instance's cache-bust marker at the start of the first user message and nowhere else,
    /// `max_completion_tokens` and `ignore_eos` for an exact output, and usage at the stream's end.
    #[test]
    fn an_agentx_request_is_the_body_agentx_sends() {
        use serverbench_workloads::{Generator, WorkloadSpec};
        let g = Generator::new(WorkloadSpec::default(), 0, 200_000).unwrap();
        let tree = (0..64)
            .map(|k| g.generate(k))
            .find(|t| t.requests().iter().filter(|r| r.agent == 0).count() >= 3)
            .expect("a tree of three main-agent turns");
        let third = tree
            .requests()
            .iter()
            .filter(|r| r.agent == 0)
            .nth(2)
            .unwrap();
        let client = HttpClient::new(crate::ClientConfig::new(
            "http://127.0.0.1:1",
            crate::Api::Chat,
            crate::Server::Vllm,
            "m",
            std::time::Duration::from_secs(1),
        ))
        .unwrap();
        let vocab = Vocab::new(100, 1000).unwrap();
        let body = |lane, index| {
            let b = agentx_request(lane, &tree, index, third, &client, vocab, 40);
            serde_json::from_slice::<serde_json::Value>(&b).unwrap()
        };
        let v = body(3, 7);
        assert_eq!(v["model"], "m");
        assert_eq!(v["stream"], true);
        assert_eq!(v["max_completion_tokens"], 40);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        let messages = v["messages"].as_array().unwrap();
        assert!(matches!(
            messages[0]["role"].as_str(),
            Some("system" | "user")
        ));
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert!(roles.contains(&"assistant"), "{roles:?}");
        let contents: Vec<&str> = messages
            .iter()
            .map(|m| m["content"].as_str().unwrap())
            .collect();
        let first_user = roles.iter().position(|r| *r == "user").unwrap();
        assert!(
            contents[first_user].starts_with("[rid:"),
            "{}",
            contents[first_user]
        );
        assert_eq!(contents.iter().filter(|c| c.contains("[rid:")).count(), 1);
        let marker = |v: &serde_json::Value| {
            v["messages"][first_user]["content"].as_str().unwrap()[..19].to_string()
        };
        assert_eq!(marker(&v), marker(&body(3, 7)));
        assert_ne!(marker(&v), marker(&body(3, 8)));
    }
}
