//! Generation fidelity of a candidate server against a reference serving the same checkpoint: greedy
//! continuations compared token by token, the candidate's continuation scored under the reference by
//! teacher forcing (the completions API's `echo` + `logprobs`), and answer tests from a question set.
//! Talks to servers only through [`HttpClient`] on `/v1/completions`; the arithmetic is pure and tested
//! on its own. It never decides pass or fail: the caller's thresholds do.

use crate::client::HttpClient;
use serde::Serialize;
use serde_json::{json, Value};

/// Where the fidelity requests go.
const COMPLETIONS: &str = "/v1/completions";

/// One prompt's comparison.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PromptFidelity {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens of each continuation.
    pub continuation_tokens: usize,
    /// Leading tokens on which candidate and reference agree.
    pub agreed_tokens: usize,
    /// Mean over the candidate's continuation of the reference's per-token regret: the log-probability
    /// of the reference's most likely token minus that of the candidate's token (nats; 0 when they
    /// agree everywhere).
    pub mean_regret: f64,
    /// The largest per-token regret.
    pub max_regret: f64,
}

impl PromptFidelity {
    /// The candidate's continuation is not the reference's (it is teacher-forced and judged).
    pub fn suspicious(&self) -> bool {
        self.agreed_tokens < self.continuation_tokens
    }
}

/// Leading positions where `a` and `b` hold the same token.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// One token of a teacher-forced sequence under the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenScore {
    /// Log-probability of the token that was there.
    pub logprob: f64,
    /// Log-probability of the reference's most likely token at that place.
    pub best: f64,
}

/// Mean and largest per-token regret of a scored continuation (0 for an empty one).
pub fn regret(scores: &[TokenScore]) -> (f64, f64) {
    let each = scores.iter().map(|s| (s.best - s.logprob).max(0.0));
    let max = each.clone().fold(0.0, f64::max);
    let mean = each.sum::<f64>() / scores.len().max(1) as f64;
    (mean, max)
}

/// The benchmark's answer rule: the candidate answers at least as many questions as the reference, less
/// a tenth of the questions (rounded down): `k_cand ≥ max(0, k_ref − ⌊0.1 n⌋)`.
pub fn answers_pass(k_cand: usize, k_ref: usize, n: usize) -> bool {
    k_cand >= k_ref.saturating_sub(n / 10)
}

/// The greedy continuation of `prompt`, exactly `tokens` long, as token ids (the server must write
/// tokens as ids in `logprobs`, as vLLM's `return_tokens_as_token_ids` does).
pub async fn greedy(client: &HttpClient, prompt: &[u32], tokens: u32) -> Result<Vec<u32>, String> {
    let mut body = exact_greedy(client, prompt, tokens);
    body["logprobs"] = json!(0);
    body["return_tokens_as_token_ids"] = json!(true);
    let answer = client.post_json(COMPLETIONS, &body).await?;
    let lp = logprobs(&answer)?;
    let ids = lp["tokens"]
        .as_array()
        .ok_or("choices[0].logprobs.tokens: missing")?
        .iter()
        .enumerate()
        .map(|(i, t)| token_id(t).ok_or_else(|| format!("choices[0].logprobs.tokens[{i}]: {t} is not `token_id:N` (the server must honour return_tokens_as_token_ids)")))
        .collect::<Result<Vec<u32>, String>>()?;
    if ids.len() != tokens as usize {
        return Err(format!(
            "asked for {tokens} tokens, the server returned {}",
            ids.len()
        ));
    }
    Ok(ids)
}

/// Scores `continuation` after `prompt` under the server (teacher forcing: the prompt and the
/// continuation are sent as one echoed prompt with log-probabilities).
pub async fn teacher_forced(
    client: &HttpClient,
    prompt: &[u32],
    continuation: &[u32],
) -> Result<Vec<TokenScore>, String> {
    let mut ids = prompt.to_vec();
    ids.extend_from_slice(continuation);
    let body = json!({
        "model": client.config().model,
        "prompt": ids,
        "max_tokens": 1,
        "temperature": 0,
        "echo": true,
        "logprobs": 1,
        "return_tokens_as_token_ids": true,
    });
    let answer = client.post_json(COMPLETIONS, &body).await?;
    let lp = logprobs(&answer)?;
    let chosen = lp["token_logprobs"]
        .as_array()
        .ok_or("choices[0].logprobs.token_logprobs: missing (does the server honour echo?)")?;
    let top = lp["top_logprobs"]
        .as_array()
        .ok_or("choices[0].logprobs.top_logprobs: missing")?;
    if chosen.len() < ids.len() || top.len() < ids.len() {
        return Err(format!(
            "the echoed log-probabilities cover {} tokens, the prompt has {}",
            chosen.len().min(top.len()),
            ids.len()
        ));
    }
    (prompt.len()..ids.len())
        .map(|i| {
            let logprob = chosen[i]
                .as_f64()
                .ok_or_else(|| format!("choices[0].logprobs.token_logprobs[{i}]: not a number"))?;
            let best = top[i]
                .as_object()
                .and_then(|m| m.values().filter_map(Value::as_f64).reduce(f64::max))
                .ok_or_else(|| format!("choices[0].logprobs.top_logprobs[{i}]: no alternatives"))?;
            Ok(TokenScore {
                logprob,
                best: best.max(logprob),
            })
        })
        .collect()
}

/// Asks for one token after `prefix`, so that the server's prefix cache holds it.
pub async fn warm(client: &HttpClient, prefix: &[u32]) -> Result<(), String> {
    let body = exact_greedy(client, prefix, 1);
    client.post_json(COMPLETIONS, &body).await.map(|_| ())
}

/// A completions request for exactly `tokens` greedy tokens after `prompt`, in the client's server's
/// fields for an exact length.
fn exact_greedy(client: &HttpClient, prompt: &[u32], tokens: u32) -> Value {
    let mut body = json!({
        "model": client.config().model,
        "prompt": prompt,
        "max_tokens": tokens,
        "temperature": 0,
    });
    for (k, v) in client.config().server.exact_length_fields(tokens) {
        body[k] = v;
    }
    body
}

/// A prompt's continuation by candidate and reference, the candidate's teacher-forced under the
/// reference when they differ. The candidate is first asked for one token after the prompt's first
/// half, so that its continuation is computed over its own prefix cache, as in a replay's turns.
pub async fn compare(
    candidate: &HttpClient,
    reference: &HttpClient,
    prompt: &[u32],
    tokens: u32,
) -> Result<PromptFidelity, String> {
    if prompt.len() >= 2 {
        warm(candidate, &prompt[..prompt.len() / 2])
            .await
            .map_err(|e| format!("candidate, warming its prefix cache: {e}"))?;
    }
    let cand = greedy(candidate, prompt, tokens)
        .await
        .map_err(|e| format!("candidate: {e}"))?;
    let refr = greedy(reference, prompt, tokens)
        .await
        .map_err(|e| format!("reference: {e}"))?;
    let agreed = common_prefix(&cand, &refr);
    let (mean_regret, max_regret) = if agreed == cand.len() {
        (0.0, 0.0)
    } else {
        let scores = teacher_forced(reference, prompt, &cand)
            .await
            .map_err(|e| format!("reference scoring the candidate: {e}"))?;
        regret(&scores)
    };
    Ok(PromptFidelity {
        prompt_tokens: prompt.len(),
        continuation_tokens: cand.len(),
        agreed_tokens: agreed,
        mean_regret,
        max_regret,
    })
}

/// The text of a greedy answer to a text prompt (at most `max_tokens`, stopping where the model does).
pub async fn answer(client: &HttpClient, prompt: &str, max_tokens: u32) -> Result<String, String> {
    let body = json!({
        "model": client.config().model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
    });
    let answer = client.post_json(COMPLETIONS, &body).await?;
    answer["choices"][0]["text"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "choices[0].text: missing".to_string())
}

fn logprobs(answer: &Value) -> Result<&Value, String> {
    let lp = &answer["choices"][0]["logprobs"];
    if lp.is_object() {
        Ok(lp)
    } else {
        Err("choices[0].logprobs: missing (the server must return log-probabilities on /v1/completions)".into())
    }
}

/// `token_id:N` → N.
fn token_id(t: &Value) -> Option<u32> {
    t.as_str()?.strip_prefix("token_id:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regret_is_measured_against_the_reference_best() {
        let s = |logprob, best| TokenScore { logprob, best };
        assert_eq!(regret(&[]), (0.0, 0.0));
        let (mean, max) = regret(&[s(-0.5, -0.5), s(-6.5, -0.5), s(-1.5, -0.5)]);
        assert!((mean - 7.0 / 3.0).abs() < 1e-12 && (max - 6.0).abs() < 1e-12);
        // A token scored above the listed best (rounding) has no regret, not a negative one.
        assert_eq!(regret(&[s(-0.4, -0.5)]), (0.0, 0.0));
    }

    #[test]
    fn the_answer_rule_allows_a_tenth_of_the_questions() {
        assert!(answers_pass(7, 8, 10));
        assert!(!answers_pass(6, 8, 10));
        assert!(answers_pass(0, 0, 5));
        assert!(answers_pass(0, 1, 10), "⌊0.1·10⌋ = 1");
        assert!(!answers_pass(0, 1, 9), "⌊0.1·9⌋ = 0");
        assert!(answers_pass(9, 8, 10));
    }

    #[test]
    fn agreement_is_the_common_prefix() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 4]), 2);
        assert_eq!(common_prefix(&[1, 2], &[1, 2]), 2);
        assert_eq!(common_prefix(&[5], &[1]), 0);
        let f = PromptFidelity {
            prompt_tokens: 1,
            continuation_tokens: 2,
            agreed_tokens: 2,
            mean_regret: 0.0,
            max_regret: 0.0,
        };
        assert!(!f.suspicious());
        assert!(PromptFidelity {
            agreed_tokens: 1,
            ..f
        }
        .suspicious());
    }
}
