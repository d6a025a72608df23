//! Black-box probes of an OpenAI-compatible server for `calibrate --endpoint`: time to first token against
//! prompt length (fresh prompts, and short suffixes over a cached prefix) and time per output token against
//! the number of concurrent streams. Each probe is reported as the engine step it stands for, so the same
//! fit as for step logs applies. Measures only; never fits.

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
    /// A prefix sent once, then reused by every suffix probe.
    pub cached_prefix: u32,
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
    /// Repetitions of each TTFT probe (fresh prompts each time).
    pub reps: u32,
    /// Token ids are drawn from here.
    pub vocab: Vocab,
    /// Seed of the prompts (a server shared with others should not have them cached).
    pub seed: u64,
}

impl ProbePlan {
    /// The default plan: prompts of 64–2,048 tokens, suffixes of 16–512 over an 8,192-token prefix,
    /// 1–32 streams of 64 tokens.
    pub fn standard(vocab: Vocab, seed: u64) -> ProbePlan {
        ProbePlan {
            prompt_lengths: vec![64, 256, 512, 1024, 2048],
            cached_prefix: 8192,
            suffixes: vec![16, 128, 512],
            streams: vec![1, 2, 4, 8, 16, 32],
            decode_tokens: 64,
            decode_prompt: 256,
            long_streams: vec![],
            long_context: 8192,
            reps: 3,
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
    let mut seed = plan.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut next_seed = || {
        seed = seed.wrapping_add(1);
        seed
    };
    for &len in &plan.prompt_lengths {
        for _ in 0..plan.reps {
            let p = prompt(next_seed(), len, plan.vocab);
            let t = ttft(client, &p, &format!("TTFT of a fresh {len}-token prompt")).await?;
            out.push(ProbeStep {
                what: format!("TTFT, fresh prompt of {len}"),
                step: StepSample {
                    prefill: vec![(len, 0)],
                    decode: vec![],
                    decode_kv_distinct: None,
                    seconds: t,
                },
            });
        }
    }
    let prefix = prompt(next_seed(), plan.cached_prefix, plan.vocab);
    ttft(client, &prefix, "the cached prefix").await?;
    for &s in &plan.suffixes {
        for _ in 0..plan.reps {
            let mut p = prefix.clone();
            p.extend(prompt(next_seed(), s, plan.vocab));
            let t = ttft(
                client,
                &p,
                &format!("TTFT of {s} tokens over the cached prefix"),
            )
            .await?;
            out.push(ProbeStep {
                what: format!("TTFT, {s} tokens over {} cached", plan.cached_prefix),
                step: StepSample {
                    prefill: vec![(s, plan.cached_prefix)],
                    decode: vec![],
                    decode_kv_distinct: None,
                    seconds: t,
                },
            });
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
        let (tpot, context) = tpot(client, prompts, plan.decode_tokens).await?;
        out.push(ProbeStep {
            what: format!("TPOT, {n} concurrent streams over {prompt_len}"),
            step: StepSample {
                prefill: vec![],
                decode: vec![context; n as usize],
                decode_kv_distinct: None,
                seconds: tpot,
            },
        });
    }
    Ok(out)
}

/// Streams `prompts` concurrently (`tokens` output tokens each) and measures their time per output
/// token once every stream is decoding: each stream's chunks after the last first token (before it,
/// other streams' prefills share the steps). Returns the median stream's TPOT and the mean context of
/// the measured steps.
async fn tpot(
    client: &Arc<HttpClient>,
    prompts: Vec<Vec<u32>>,
    tokens: u32,
) -> Result<(f64, u32), String> {
    let n = prompts.len();
    let prompt_len = prompts.first().map_or(0, |p| p.len()) as u32;
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
    let mut per_stream: Vec<(f64, f64)> = Vec::new();
    for times in &results {
        // From the first chunk at or after the moment every stream decodes (the whole stream when
        // fewer than two chunks come after it).
        let from = all_decoding
            .and_then(|at| times.iter().position(|&t| t >= at))
            .filter(|&k| times.len() >= k + 2)
            .unwrap_or(0);
        if times.len() >= from + 2 {
            let gaps = (times.len() - 1 - from) as f64;
            let tpot = (times[times.len() - 1] - times[from]).as_secs_f64() / gaps;
            // The measured steps' mean output position: halfway through the measured chunks.
            per_stream.push((tpot, (from + times.len() - 1) as f64 / 2.0));
        }
    }
    if per_stream.is_empty() {
        return Err(format!(
            "{n} concurrent streams: no stream produced two output chunks"
        ));
    }
    per_stream.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (tpot, position) = per_stream[per_stream.len() / 2];
    Ok((tpot, prompt_len + position.round() as u32))
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
    fn prompts_are_seeded_distinct_and_inside_the_vocabulary() {
        let v = Vocab::new(100, 1000).unwrap();
        let (a, b) = (prompt(1, 64, v), prompt(2, 64, v));
        assert_eq!(a, prompt(1, 64, v));
        assert_ne!(a, b);
        assert!(a.iter().all(|&t| (100..1000).contains(&t)));
    }
}
