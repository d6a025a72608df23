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
    for &n in &plan.streams {
        let tasks: Vec<_> = (0..n)
            .map(|lane| {
                let (client, p) = (
                    client.clone(),
                    prompt(next_seed(), plan.decode_prompt, plan.vocab),
                );
                let tokens = plan.decode_tokens;
                tokio::spawn(async move { client.stream(lane, &p, tokens, true, None).await })
            })
            .collect();
        let mut tpots = Vec::new();
        for t in tasks {
            let r = t.await.map_err(|e| format!("decode probe: {e}"))?;
            if let Some(e) = r.error {
                return Err(format!("{n} concurrent streams: the server answered {e}"));
            }
            if let (Some(a), Some(b)) = (r.first_token, r.last_token) {
                if r.token_chunks > 1 {
                    tpots.push((b - a).as_secs_f64() / (r.token_chunks - 1) as f64);
                }
            }
        }
        if tpots.is_empty() {
            return Err(format!(
                "{n} concurrent streams: no stream produced two output chunks"
            ));
        }
        tpots.sort_by(f64::total_cmp);
        out.push(ProbeStep {
            what: format!("TPOT, {n} concurrent streams"),
            step: StepSample {
                prefill: vec![],
                decode: vec![plan.decode_prompt + plan.decode_tokens / 2; n as usize],
                decode_kv_distinct: None,
                seconds: tpots[tpots.len() / 2],
            },
        });
    }
    Ok(out)
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
