//! Generation fidelity of `verify --reference`: the frozen thresholds, the held-out prompts, the greedy
//! continuations and teacher-forced scores of candidate and reference (through [`crate::fidelity`]),
//! the answer tests of a question set, and the gates they make. It reads the question set and talks to
//! the two servers; it decides nothing the thresholds do not say.

use crate::fidelity::{self, PromptFidelity};
use crate::{Api, ClientConfig, HttpClient, Runtime, Server as ServerKind};
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serverbench_sim::Deployment;
use serverbench_workloads::tokens::{prompt_tokens, Vocab};
use serverbench_workloads::Workload;
use std::path::Path;

/// Thresholds of the generation-fidelity gates (`verify --reference`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FidelityGates {
    /// The score counts only with a reference check (`freeze --no-fidelity` turns it off).
    pub required: bool,
    /// Held-out prompts whose greedy continuations are compared.
    pub prompts: usize,
    /// Most tokens of each prompt (the end of a held-out request's prompt).
    pub max_prompt_tokens: u32,
    /// Tokens of each greedy continuation.
    pub continuation_tokens: u32,
    /// Largest mean per-token log-probability regret (nats) a continuation that differs from the
    /// reference's may have under the reference (the benchmark's 4.0).
    pub max_regret: f64,
    /// Least fraction of continuation tokens before the first difference from the reference.
    pub min_greedy_agreement: f64,
    /// Most tokens of each answer of a question set (`verify --answers`).
    pub answer_tokens: u32,
}

impl Default for FidelityGates {
    fn default() -> FidelityGates {
        FidelityGates {
            required: true,
            prompts: 16,
            max_prompt_tokens: 2048,
            continuation_tokens: 32,
            max_regret: 4.0,
            min_greedy_agreement: 0.0,
            answer_tokens: 64,
        }
    }
}

/// What `freeze` is told about the generation check (its flags' values).
pub(super) struct Thresholds {
    /// Let the score count without a reference check.
    pub no_fidelity: bool,
    /// Held-out prompts compared.
    pub fidelity_prompts: usize,
    /// Least fraction of continuation tokens that agree.
    pub min_greedy_agreement: f64,
    /// Largest mean per-token regret, nats.
    pub max_regret: f64,
}

/// The fidelity thresholds `freeze`'s flags ask for.
pub(super) fn fidelity_thresholds(a: &Thresholds) -> Result<FidelityGates> {
    if a.fidelity_prompts == 0 || a.fidelity_prompts > 256 {
        bail!(
            "--fidelity-prompts: must be between 1 and 256, got {}",
            a.fidelity_prompts
        );
    }
    if !(0.0..=1.0).contains(&a.min_greedy_agreement) {
        bail!(
            "--min-greedy-agreement: must be a fraction from 0 to 1, got {}",
            a.min_greedy_agreement
        );
    }
    if !(a.max_regret.is_finite() && a.max_regret > 0.0) {
        bail!(
            "--max-regret: must be a positive number of nats, got {}",
            a.max_regret
        );
    }
    Ok(FidelityGates {
        required: !a.no_fidelity,
        prompts: a.fidelity_prompts,
        min_greedy_agreement: a.min_greedy_agreement,
        max_regret: a.max_regret,
        ..FidelityGates::default()
    })
}

/// One question of a question set: a text prompt and the answer its continuation must contain.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Question {
    prompt: String,
    answer: String,
}

/// A question set (JSONL, one `{"prompt": …, "answer": …}` per line; blank lines skipped).
pub(super) fn read_questions(path: &Path) -> Result<Vec<Question>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{}: cannot read the question set", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let q: Question = serde_json::from_str(line).with_context(|| {
            format!(
                "{}:{}: not a question: {{\"prompt\": text, \"answer\": text}} expected",
                path.display(),
                i + 1
            )
        })?;
        if q.answer.trim().is_empty() {
            bail!(
                "{}:{}: answer: empty (every answer must be text the continuation can contain)",
                path.display(),
                i + 1
            );
        }
        out.push(q);
    }
    if out.is_empty() {
        bail!("{}: the question set has no questions", path.display());
    }
    Ok(out)
}

/// What the reference check measured.
#[derive(Clone, Debug, Serialize)]
pub struct FidelityReport {
    /// The reference server's URL.
    pub reference: String,
    /// Each held-out prompt's comparison.
    pub prompts: Vec<PromptFidelity>,
    /// The question set's answers, when one was given.
    pub answers: Option<AnswerCounts>,
}

/// Questions answered correctly by each server.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct AnswerCounts {
    /// Questions asked.
    pub questions: usize,
    /// Answered correctly by the candidate.
    pub candidate: usize,
    /// Answered correctly by the reference.
    pub reference: usize,
}

/// The held-out prompts of the fidelity check: the first held-out seed's sessions of the deployment's
/// workload, one request of each tree at a varying depth, its last tokens up to the frozen prompt length, salted apart from the
/// replays' prompts.
fn fidelity_prompts(seed: u64, t: &FidelityGates, d: &Deployment) -> Result<Vec<Vec<u32>>> {
    // The deployment's own workload spec, as the replays of `verify` use it.
    let source = Workload::builtin(d.workload.as_deref())
        .source(seed, d.context_limit)
        .map_err(|e| anyhow!("workload: {e}"))?;
    let vocab = Vocab::new(100, d.model_spec().vocab)
        .ok_or_else(|| anyhow!("the model's vocabulary has no usable token ids"))?
        .salted(seed ^ 0xF1DE);
    Ok((0..t.prompts as u64)
        .map(|k| {
            let tree = source.tree(k);
            let requests = tree.requests();
            let r = &requests[k as usize % requests.len()];
            let mut p = prompt_tokens(tree.session_id, r, tree.block_size, vocab);
            // The end of the prompt: its start is the system prompt every session shares.
            p.split_off(p.len().saturating_sub(t.max_prompt_tokens as usize))
        })
        .collect())
}

/// A client for the fidelity requests to one server.
fn fidelity_client(url: &str, server: &str, model: &str) -> Result<HttpClient> {
    let kind = ServerKind::parse(server).ok_or_else(|| {
        anyhow!(
            "server kind `{server}`: expected one of {}",
            ServerKind::names()
        )
    })?;
    let timeout = std::time::Duration::from_secs(600);
    Ok(HttpClient::new(ClientConfig {
        api_key: std::env::var("OPENAI_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        ..ClientConfig::new(url, Api::CompletionsTokens, kind, model, timeout)
    })?)
}

/// The two servers of a fidelity check, each `(URL, server kind, model name)`.
pub(super) struct Servers<'a> {
    /// The candidate.
    pub candidate: (&'a str, &'a str, &'a str),
    /// The reference.
    pub reference: (&'a str, &'a str, &'a str),
}

/// Greedy continuations of the held-out prompts (from held-out seed `seed`) from candidate and reference, teacher forcing where
/// they differ, and the question set when given. A failed request is the check's failure (`Ok(Err)`),
/// not an error of `verify`.
pub(super) fn check_fidelity(
    seed: u64,
    t: &FidelityGates,
    d: &Deployment,
    servers: &Servers<'_>,
    questions: Option<&[Question]>,
) -> Result<std::result::Result<FidelityReport, String>> {
    let prompts = fidelity_prompts(seed, t, d)?;
    let [cand, refr] = [servers.candidate, servers.reference]
        .map(|(url, kind, model)| fidelity_client(url, kind, model));
    let (cand, refr) = (cand?, refr?);
    let reference = servers.reference.0;
    let t = t.clone();
    let rt = Runtime::new().context("cannot start the async runtime")?;
    Ok(rt.block_on(async move {
        let mut out = Vec::new();
        for p in &prompts {
            out.push(fidelity::compare(&cand, &refr, p, t.continuation_tokens).await?);
        }
        let answers = match questions {
            None => None,
            Some(qs) => {
                let mut counts = AnswerCounts {
                    questions: qs.len(),
                    candidate: 0,
                    reference: 0,
                };
                for q in qs {
                    let c = fidelity::answer(&cand, &q.prompt, t.answer_tokens)
                        .await
                        .map_err(|e| format!("candidate: {e}"))?;
                    let r = fidelity::answer(&refr, &q.prompt, t.answer_tokens)
                        .await
                        .map_err(|e| format!("reference: {e}"))?;
                    counts.candidate += c.contains(q.answer.trim()) as usize;
                    counts.reference += r.contains(q.answer.trim()) as usize;
                }
                Some(counts)
            }
        };
        Ok(FidelityReport {
            reference: reference.to_string(),
            prompts: out,
            answers,
        })
    }))
}
