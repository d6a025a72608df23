//! Black-box probes of an OpenAI-compatible server for `calibrate --endpoint`: time to first token against
//! prompt length (fresh prompts, and short suffixes over cached prefixes), time per output token against
//! the number of concurrent streams, and the step that prefills while streams decode. Each probe is
//! reported as the engine step it stands for, so the same fit as for step logs applies. Measures only;
//! never fits.

use crate::client::HttpClient;
use serverbench_calibration::StepSample;
use serverbench_workloads::hash::mix2;
use serverbench_workloads::tokens::Vocab;
use std::sync::Arc;

/// What to probe.
#[derive(Clone, Debug)]
pub struct ProbePlan {
    /// Fresh prompt lengths (each one prefill step; keep them within the server's token budget).
    pub prompt_lengths: Vec<u32>,
    /// Prefixes, each sent once, then reused by every suffix probe over it.
    pub cached_prefixes: Vec<u32>,
    /// New tokens after the cached prefix.
    pub suffixes: Vec<u32>,
    /// Concurrent decode streams.
    pub streams: Vec<u32>,
    /// Output tokens per decode stream.
    pub decode_tokens: u32,
    /// Prompt length of each decode stream.
    pub decode_prompt: u32,
    /// Concurrent streams decoding over a long prompt (none by default).
    pub long_streams: Vec<u32>,
    /// Prompt length of those streams.
    pub long_context: u32,
    /// Prefills sent while streams decode (none by default).
    pub mixed: Vec<MixedProbe>,
    /// Streams of unequal prompt lengths decoding together (none by default).
    pub ragged: Vec<RaggedProbe>,
    /// Streams whose prompts share a prefix, decoding together (none by default).
    pub shared: Vec<SharedProbe>,
    /// Repetitions of each TTFT probe (fresh prompts each time).
    pub reps: u32,
    /// Fresh prompts longer than this are sent once, not `reps` times: their prefill takes seconds (a
    /// 196,608-token prompt about half a minute on an H200), far past the first-request effects the
    /// median of repetitions guards against. Over cached prefixes of at least this many tokens, a
    /// `chunk_suffix` is probed beside the short suffixes.
    pub long_prompt: u32,
    /// A suffix of one prefill chunk (keep it within the server's tokens per step), probed over the long
    /// cached prefixes: the step a long prompt's chunked prefill is made of, attention over a long cached
    /// context included (0: none).
    pub chunk_suffix: u32,
    /// Token ids are drawn from here.
    pub vocab: Vocab,
    /// Seed of the prompts (a server shared with others should not have them cached).
    pub seed: u64,
}

/// A prefill of `new` tokens over `cached` cached ones, sent while `streams` streams decode over
/// `context`-token prompts: the streams' gap that ends with its first token is the step that holds both
/// (keep `new + streams` within the server's tokens per step, or the prefill takes several steps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixedProbe {
    /// Decode streams.
    pub streams: u32,
    /// Prompt length of each stream.
    pub context: u32,
    /// New tokens of the prefill.
    pub new: u32,
    /// Cached tokens the prefill follows.
    pub cached: u32,
}

/// `streams` streams whose prompts are spread evenly from `short` to `long` tokens, decoding together:
/// a closed loop's batch, whose contexts differ. Beside equal-length streams of the same mean context,
/// it shows whether the server's decode attention costs the batch's total context or more (a kernel
/// whose longest sequence sets its time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaggedProbe {
    /// Decode streams.
    pub streams: u32,
    /// The shortest prompt.
    pub short: u32,
    /// The longest prompt.
    pub long: u32,
}

/// `streams` streams whose prompts are one `shared`-token prefix followed by `own` tokens of their own,
/// decoding together: every stream's attention reads the prefix's blocks. Beside streams of distinct
/// prompts of the same length it shows what a shared block costs the second and later readers of a step
/// (a system prompt every session of an application sends), which the profile's `shared_kv_efficiency`
/// states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharedProbe {
    /// Decode streams.
    pub streams: u32,
    /// Tokens of the prefix all streams share.
    pub shared: u32,
    /// Tokens of each stream's own after the prefix.
    pub own: u32,
}

impl RaggedProbe {
    /// The streams' prompt lengths, shortest first, evenly spaced.
    pub fn lengths(&self) -> Vec<u32> {
        let n = self.streams.max(1) as u64;
        let (lo, hi) = (self.short as u64, self.long.max(self.short) as u64);
        (0..n)
            .map(|i| {
                if n == 1 {
                    (lo + hi) / 2
                } else {
                    lo + (hi - lo) * i / (n - 1)
                }
            })
            .map(|l| l as u32)
            .collect()
    }
}

impl ProbePlan {
    /// The probes of `url` as a fitted profile's provenance names them: `measured` probes, their
    /// prompt lengths, prefixes and streams.
    pub fn describe(&self, url: &str, measured: usize) -> String {
        format!(
            "{measured} probes of {url}: TTFT of fresh prompts {:?}, of suffixes {:?} over {:?} cached tokens; TPOT of {:?} streams over {} tokens and {:?} over {}; {} mixed steps; {} ragged and {} shared-prefix batches",
            self.prompt_lengths,
            self.suffixes,
            self.cached_prefixes,
            self.streams,
            self.decode_prompt,
            self.long_streams,
            self.long_context,
            self.mixed.len(),
            self.ragged.len(),
            self.shared.len()
        )
    }

    /// The default plan: prompts of 64–2,048 tokens, suffixes of 16–512 over an 8,192-token prefix,
    /// 1–32 streams of 64 tokens (prompts over 32,768 tokens once each, and an 8,192-token chunk over
    /// cached prefixes of 32,768 or more, where a plan asks for such lengths).
    pub fn standard(vocab: Vocab, seed: u64) -> ProbePlan {
        ProbePlan {
            prompt_lengths: vec![64, 256, 512, 1024, 2048],
            cached_prefixes: vec![8192],
            suffixes: vec![16, 128, 512],
            streams: vec![1, 2, 4, 8, 16, 32],
            decode_tokens: 64,
            decode_prompt: 256,
            long_streams: vec![],
            long_context: 8192,
            mixed: vec![],
            ragged: vec![],
            shared: vec![],
            reps: 3,
            long_prompt: 32_768,
            chunk_suffix: 8_192,
            vocab,
            seed,
        }
    }
}

/// One probe, as the engine step it measures.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeStep {
    /// What was probed (for the report).
    pub what: String,
    /// The step it stands for; `seconds` is the TTFT, or the median time per output token.
    pub step: StepSample,
    /// A mixed probe's decode gaps away from its step (not fitted; kept in the probe log).
    pub decode_gaps: Option<DecodeGaps>,
}

/// The decode streams' median gaps of a mixed probe outside the step that held the prefill: before the
/// prefill was sent, and while the server was taking it in (from its send to the step). A server whose
/// front end slows its engine while it takes in a long prompt shows a longer second gap.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecodeGaps {
    /// Median gap before the prefill was sent, seconds.
    pub before_s: f64,
    /// Median gap from the prefill's send to the start of its step, seconds (0 when no gap fell there).
    pub taking_in_s: f64,
}

fn prompt(seed: u64, len: u32, vocab: Vocab) -> Vec<u32> {
    let span = (vocab.hi - vocab.lo) as u64;
    (0..len as u64)
        .map(|i| vocab.lo + (mix2(seed, i) % span) as u32)
        .collect()
}

/// Runs the plan; fails on the first request that errors (the error names the probe).
pub async fn probe(client: &Arc<HttpClient>, plan: &ProbePlan) -> Result<Vec<ProbeStep>, String> {
    let mut out = Vec::new();
    let mut failure = None;
    probe_each(client, plan, |r| match r {
        Ok(step) => {
            out.push(step);
            true
        }
        Err(e) => {
            failure = Some(e);
            false
        }
    })
    .await;
    failure.map_or(Ok(out), Err)
}

/// Runs the plan, handing `each` every probe as soon as it is measured, or its error (which names the
/// probe) when it fails; the plan stops when `each` returns false and otherwise goes on with the next
/// probe (a cached or shared prefix that cannot be sent skips the probes over it). A long plan against a
/// real server so keeps what it measured before a failure or a deadline.
pub async fn probe_each(
    client: &Arc<HttpClient>,
    plan: &ProbePlan,
    mut each: impl FnMut(Result<ProbeStep, String>) -> bool,
) {
    macro_rules! hand {
        ($r:expr) => {
            if !each($r) {
                return;
            }
        };
    }
    let mut seed = plan.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next_seed = || {
        seed = seed.wrapping_add(1);
        seed
    };
    for &len in &plan.prompt_lengths {
        let reps = if len > plan.long_prompt { 1 } else { plan.reps };
        for _ in 0..reps {
            let p = prompt(next_seed(), len, plan.vocab);
            let t = ttft(client, &p, &format!("TTFT of a fresh {len}-token prompt")).await;
            hand!(t.map(|t| ProbeStep {
                what: format!("TTFT, fresh prompt of {len}"),
                step: StepSample {
                    prefill: vec![(len, 0)],
                    decode: vec![],
                    decode_kv_distinct: None,
                    seconds: t,
                },
                decode_gaps: None,
            }));
        }
    }
    for &cached in &plan.cached_prefixes {
        let prefix = prompt(next_seed(), cached, plan.vocab);
        if let Err(e) = ttft(client, &prefix, &format!("the cached prefix of {cached}")).await {
            hand!(Err(e));
            continue;
        }
        let chunk =
            (cached >= plan.long_prompt && plan.chunk_suffix > 0).then_some(plan.chunk_suffix);
        for &s in plan.suffixes.iter().chain(&chunk) {
            for _ in 0..plan.reps {
                let mut p = prefix.clone();
                p.extend(prompt(next_seed(), s, plan.vocab));
                let what = format!("TTFT of {s} tokens over the cached prefix of {cached}");
                let t = ttft(client, &p, &what).await;
                hand!(t.map(|t| ProbeStep {
                    what: format!("TTFT, {s} tokens over {cached} cached"),
                    step: StepSample {
                        prefill: vec![(s, cached)],
                        decode: vec![],
                        decode_kv_distinct: None,
                        seconds: t,
                    },
                    decode_gaps: None,
                }));
            }
        }
    }
    let decode = plan
        .streams
        .iter()
        .map(|&n| (n, plan.decode_prompt))
        .chain(plan.long_streams.iter().map(|&n| (n, plan.long_context)));
    for (n, prompt_len) in decode {
        let prompts: Vec<Vec<u32>> = (0..n)
            .map(|_| prompt(next_seed(), prompt_len, plan.vocab))
            .collect();
        let what = format!("TPOT, {n} concurrent streams over {prompt_len}");
        hand!(decode_batch(client, prompts, 0, plan.decode_tokens, what).await);
    }
    for r in &plan.ragged {
        let prompts: Vec<Vec<u32>> = r
            .lengths()
            .iter()
            .map(|&len| prompt(next_seed(), len, plan.vocab))
            .collect();
        let what = format!(
            "TPOT, {} concurrent streams over {} to {}",
            r.streams, r.short, r.long
        );
        hand!(decode_batch(client, prompts, 0, plan.decode_tokens, what).await);
    }
    for s in &plan.shared {
        let prefix = prompt(next_seed(), s.shared, plan.vocab);
        if let Err(e) = ttft(
            client,
            &prefix,
            &format!("the shared prefix of {}", s.shared),
        )
        .await
        {
            hand!(Err(e));
            continue;
        }
        let prompts: Vec<Vec<u32>> = (0..s.streams)
            .map(|_| {
                let mut p = prefix.clone();
                p.extend(prompt(next_seed(), s.own, plan.vocab));
                p
            })
            .collect();
        let what = format!(
            "TPOT, {} concurrent streams over {} shared and {} own",
            s.streams, s.shared, s.own
        );
        hand!(decode_batch(client, prompts, s.shared, plan.decode_tokens, what).await);
    }
    for m in &plan.mixed {
        let streams: Vec<Vec<u32>> = (0..m.streams)
            .map(|_| prompt(next_seed(), m.context, plan.vocab))
            .collect();
        let prefix = prompt(next_seed(), m.cached, plan.vocab);
        let mut prefill = prefix.clone();
        prefill.extend(prompt(next_seed(), m.new, plan.vocab));
        hand!(mixed(client, m, streams, prefix, prefill).await);
    }
}

/// Streams `prompts` together after warming them (`tokens` output tokens each), timed as [`tpot`] times
/// them: the decode step they stand for, each context its prompt grown by the measured output position.
/// Prompts that start with the same `shared` tokens (cached first by the caller) read those blocks once
/// per stream, and `decode_kv_distinct` counts them once (0: nothing shared, left unrecorded).
async fn decode_batch(
    client: &Arc<HttpClient>,
    prompts: Vec<Vec<u32>>,
    shared: u32,
    tokens: u32,
    what: String,
) -> Result<ProbeStep, String> {
    warm(client, &prompts)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let lengths: Vec<u32> = prompts.iter().map(|p| p.len() as u32).collect();
    let (tpot, position) = tpot(client, prompts, tokens)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    let decode: Vec<u32> = lengths.iter().map(|&l| l + position).collect();
    let reread = shared as u64 * decode.len().saturating_sub(1) as u64;
    let distinct = decode.iter().map(|&c| c as u64).sum::<u64>() - reread;
    Ok(ProbeStep {
        what,
        step: StepSample {
            prefill: vec![],
            decode,
            decode_kv_distinct: (shared > 0).then_some(distinct),
            seconds: tpot,
        },
        decode_gaps: None,
    })
}

/// Sends each prompt once for one token, all at once, so that the server has them cached: streams that
/// start from them then decode together, instead of the first finishing while the last still prefills.
async fn warm(client: &Arc<HttpClient>, prompts: &[Vec<u32>]) -> Result<(), String> {
    let tasks: Vec<_> = prompts
        .iter()
        .cloned()
        .map(|p| {
            let client = client.clone();
            tokio::spawn(async move { ttft(&client, &p, "warming a stream's prompt").await })
        })
        .collect();
    for t in tasks {
        t.await.map_err(|e| format!("warming: {e}"))??;
    }
    Ok(())
}

/// Output tokens of each stream of a mixed probe: enough to decode before, during and after the prefill.
const MIXED_DECODE_TOKENS: u32 = 160;

/// Output chunks every stream must have before the prefill is sent (the streams then decode together).
const MIXED_WARM_CHUNKS: u32 = 16;

/// The gaps between a stream's consecutive chunks (seconds), each kept when `keep` holds for the time
/// its later chunk came.
fn gaps_between(
    times: &[std::time::Instant],
    keep: impl Fn(std::time::Instant) -> bool,
) -> Vec<f64> {
    (1..times.len())
        .filter(|&k| keep(times[k]))
        .map(|k| (times[k] - times[k - 1]).as_secs_f64())
        .collect()
}

/// The chunk of a stream (an index ≥ 1 into its chunk times) that ends the step which also gave the
/// prefill its first token at `first`: the longest gap among the chunks that came within `decode_step`
/// of it, else the chunk nearest it. A client that reads the prefill's token a little late (a loaded
/// machine) would otherwise time the plain decode step after the mixed one.
fn step_gap(
    times: &[std::time::Instant],
    first: std::time::Instant,
    decode_step: std::time::Duration,
) -> Option<usize> {
    let distance = |i: usize| times[i].max(first) - times[i].min(first);
    let gap = |i: usize| times[i] - times[i - 1];
    (1..times.len())
        .filter(|&i| distance(i) <= decode_step)
        .max_by_key(|&i| gap(i))
        .or_else(|| (1..times.len()).min_by_key(|&i| distance(i)))
}

/// One mixed probe: the streams start from cached prompts; once each has streamed a few chunks, the
/// prefill (whose prefix was cached first) is sent for one token. Each stream's longest gap ending
/// within one decode step of the prefill's first token ([`step_gap`]) is the step that computed both;
/// the median stream's gap is the probe's time.
async fn mixed(
    client: &Arc<HttpClient>,
    m: &MixedProbe,
    streams: Vec<Vec<u32>>,
    prefix: Vec<u32>,
    prefill: Vec<u32>,
) -> Result<ProbeStep, String> {
    use std::sync::atomic::{AtomicU32, Ordering};
    let what = format!(
        "{} streams over {} and a prefill of {} over {}",
        m.streams, m.context, m.new, m.cached
    );
    warm(client, &streams).await?;
    if !prefix.is_empty() {
        ttft(client, &prefix, "the mixed probe's cached prefix").await?;
    }
    let counters: Vec<Arc<AtomicU32>> = streams.iter().map(|_| Arc::default()).collect();
    let tasks: Vec<_> = streams
        .into_iter()
        .zip(&counters)
        .enumerate()
        .map(|(lane, (p, seen))| {
            let (client, seen) = (client.clone(), seen.clone());
            tokio::spawn(async move {
                client
                    .stream(lane as u32, &p, MIXED_DECODE_TOKENS, true, Some(seen))
                    .await
            })
        })
        .collect();
    let started = std::time::Instant::now();
    while counters
        .iter()
        .any(|c| c.load(Ordering::Relaxed) < MIXED_WARM_CHUNKS)
    {
        // A stream that ended before its first chunks (an error, a short answer) never reaches them:
        // say so now rather than wait out the 120 s.
        if let Some(lane) = (0..tasks.len()).find(|&i| {
            tasks[i].is_finished() && counters[i].load(Ordering::Relaxed) < MIXED_WARM_CHUNKS
        }) {
            let seen = counters[lane].load(Ordering::Relaxed);
            let why = match tasks.into_iter().nth(lane).expect("the lane's task").await {
                Ok(r) => r.error.map_or_else(
                    || format!("it ended after {seen} chunks"),
                    |e| format!("it was answered {e}"),
                ),
                Err(e) => format!("its task failed: {e}"),
            };
            return Err(format!(
                "{what}: stream {lane} ended before the prefill was sent ({MIXED_WARM_CHUNKS} chunks each were needed): {why}"
            ));
        }
        if started.elapsed() > std::time::Duration::from_secs(120) {
            return Err(format!(
                "{what}: the streams did not all start within 120 s"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let sent = std::time::Instant::now();
    let r = client.stream(0, &prefill, 1, true, None).await;
    if let Some(e) = r.error {
        return Err(format!("{what}: the prefill was answered {e}"));
    }
    let first = r
        .first_token
        .ok_or_else(|| format!("{what}: the prefill produced no token"))?;
    let mut chunk_times = Vec::new();
    for t in tasks {
        let s = t.await.map_err(|e| format!("{what}: {e}"))?;
        if let Some(e) = s.error {
            return Err(format!("{what}: a stream was answered {e}"));
        }
        chunk_times.push(s.chunk_times.unwrap_or_default());
    }
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let decode_step = std::time::Duration::from_secs_f64(median(
        chunk_times
            .iter()
            .flat_map(|times| gaps_between(times, |at| at < sent))
            .collect(),
    ));
    let mut gaps = Vec::new();
    let mut positions = Vec::new();
    let (mut before, mut taking_in) = (Vec::new(), Vec::new());
    for times in &chunk_times {
        if let Some(i) = step_gap(times, first, decode_step) {
            gaps.push((times[i] - times[i - 1]).as_secs_f64());
            positions.push(i as u32);
            before.extend(gaps_between(&times[..i], |at| at < sent));
            taking_in.extend(gaps_between(&times[..i], |at| at >= sent));
        }
    }
    if gaps.is_empty() {
        return Err(format!("{what}: no stream streamed around the prefill"));
    }
    gaps.sort_by(f64::total_cmp);
    positions.sort_unstable();
    Ok(ProbeStep {
        what: format!("Mixed step, {what}"),
        step: StepSample {
            prefill: vec![(m.new, m.cached)],
            decode: vec![m.context + positions[positions.len() / 2]; m.streams as usize],
            decode_kv_distinct: None,
            seconds: gaps[gaps.len() / 2],
        },
        decode_gaps: Some(DecodeGaps {
            before_s: median(before),
            taking_in_s: median(taking_in),
        }),
    })
}

/// Streams `prompts` concurrently (`tokens` output tokens each) and measures their time per output
/// token while every stream is decoding: each stream's chunks between the last stream's first chunk
/// and the first stream's last (before it, other streams' prefills share the steps; after it, the batch
/// shrinks). Returns the median stream's TPOT and the mean output position of the measured steps
/// (what each stream's context had grown by). Streams that
/// never decode together (no such window, or fewer than two chunks of a stream in it) fall back to
/// each stream's chunks from the last first chunk on.
async fn tpot(
    client: &Arc<HttpClient>,
    prompts: Vec<Vec<u32>>,
    tokens: u32,
) -> Result<(f64, u32), String> {
    let n = prompts.len();
    let tasks: Vec<_> = prompts
        .into_iter()
        .enumerate()
        .map(|(lane, p)| {
            let client = client.clone();
            tokio::spawn(async move { client.stream_timed(lane as u32, &p, tokens).await })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        let r = t.await.map_err(|e| format!("decode probe: {e}"))?;
        if let Some(e) = r.error {
            return Err(format!(
                "{n} concurrent streams: the server answered {e}: {}",
                r.error_message.unwrap_or_default()
            ));
        }
        results.push(r.chunk_times.unwrap_or_default());
    }
    let all_decoding = results.iter().filter_map(|t| t.first().copied()).max();
    let one_ends = results.iter().filter_map(|t| t.last().copied()).min();
    let mut per_stream: Vec<(f64, f64)> = Vec::new();
    for times in &results {
        let inside: Vec<usize> = (0..times.len())
            .filter(|&i| {
                all_decoding.is_some_and(|a| times[i] >= a)
                    && one_ends.is_some_and(|b| times[i] <= b)
            })
            .collect();
        let (from, to) = match (inside.first(), inside.last()) {
            (Some(&f), Some(&t)) if t > f => (f, t),
            _ => {
                // No common window: from the first chunk at or after every stream decodes.
                let from = all_decoding
                    .and_then(|at| times.iter().position(|&t| t >= at))
                    .filter(|&k| times.len() >= k + 2)
                    .unwrap_or(0);
                (from, times.len().saturating_sub(1))
            }
        };
        if to > from {
            let tpot = (times[to] - times[from]).as_secs_f64() / (to - from) as f64;
            // The measured steps' mean output position: halfway through the measured chunks.
            per_stream.push((tpot, (from + to) as f64 / 2.0));
        }
    }
    if per_stream.is_empty() {
        return Err(format!(
            "{n} concurrent streams: no stream produced two output chunks"
        ));
    }
    per_stream.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (tpot, position) = per_stream[per_stream.len() / 2];
    Ok((tpot, position.round() as u32))
}

async fn ttft(client: &HttpClient, prompt: &[u32], what: &str) -> Result<f64, String> {
    let r = client.stream(0, prompt, 1, true, None).await;
    if let Some(e) = r.error {
        return Err(format!("{what}: the server answered {e}"));
    }
    r.first_token
        .map(|t| (t - r.sent).as_secs_f64())
        .ok_or_else(|| format!("{what}: no output token came back"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mixed_step_is_found_when_the_prefills_token_is_read_late() {
        use std::time::{Duration, Instant};
        let ms = |x: u64| Duration::from_millis(x);
        let t0 = Instant::now();
        // Decode steps of 6 ms, the mixed step of 22 ms ending at 40 ms, then decode again.
        let times: Vec<Instant> = [0, 6, 12, 18, 40, 46, 52, 58]
            .iter()
            .map(|&x| t0 + ms(x))
            .collect();
        let decode = Duration::from_secs_f64(
            gaps_between(&times, |at| at < t0 + ms(20))
                .into_iter()
                .fold(0.0, f64::max),
        );
        assert_eq!(decode, ms(6));
        // On time, 4 ms late (nearer the next chunk) and 2 ms early: the 22-ms gap each time.
        for first in [ms(40), ms(44), ms(38)] {
            assert_eq!(step_gap(&times, t0 + first, decode), Some(4), "{first:?}");
        }
        // Further off than a decode step, the nearest chunk is all there is to go on.
        assert_eq!(step_gap(&times, t0 + ms(80), decode), Some(7));
        assert_eq!(step_gap(&times[..1], t0, decode), None);
        assert_eq!(
            gaps_between(&times, |at| at >= t0 + ms(46)),
            [6e-3, 6e-3, 6e-3]
        );
    }

    #[test]
    fn a_plan_names_its_probes_for_the_provenance() {
        let plan = ProbePlan::standard(Vocab::new(100, 1000).unwrap(), 0);
        let d = plan.describe("http://h:1", 3);
        assert!(
            d.starts_with("3 probes of http://h:1: TTFT of fresh prompts ["),
            "{d}"
        );
        assert!(d.ends_with(" ragged and 0 shared-prefix batches"), "{d}");
    }

    #[test]
    fn prompts_are_seeded_distinct_and_inside_the_vocabulary() {
        let v = Vocab::new(100, 1000).unwrap();
        let (a, b) = (prompt(1, 64, v), prompt(2, 64, v));
        assert_eq!(a, prompt(1, 64, v));
        assert_ne!(a, b);
        assert!(a.iter().all(|&t| (100..1000).contains(&t)));
    }

    #[test]
    fn ragged_streams_spread_evenly_from_the_shortest_to_the_longest() {
        let r = |streams, short, long| RaggedProbe {
            streams,
            short,
            long,
        };
        assert_eq!(r(4, 100, 400).lengths(), vec![100, 200, 300, 400]);
        assert_eq!(r(1, 100, 400).lengths(), vec![250]);
        assert_eq!(r(3, 500, 500).lengths(), vec![500; 3]);
        let l = r(16, 16_384, 40_960).lengths();
        assert_eq!((l[0], l[15], l.len()), (16_384, 40_960, 16));
        let mean = l.iter().map(|&x| x as f64).sum::<f64>() / 16.0;
        assert!((mean - 28_672.0).abs() < 1.0, "{mean}");
    }
}
