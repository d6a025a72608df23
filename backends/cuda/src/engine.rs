//! The engine loop's GPU half: for the step the shared scheduler chose ([`Replica::schedule`]), gather
//! each sequence's token ids and block table, run the forward pass, time it with CUDA events, append
//! the sampled tokens, and write a step-log line (batch features → measured time) for calibration.

use crate::batch::{pack_padded, Entry, StepFeatures};
use crate::error::Result;
use crate::model::Model;
use serde::{Deserialize, Serialize};
use serverbench_sim::{Replica, StepEntry};
use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

/// One line of the step log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Step number.
    pub step: u64,
    /// Wall-clock start since the engine started, seconds.
    pub start_s: f64,
    /// GPU time of the forward pass (CUDA events), milliseconds.
    pub gpu_ms: f64,
    /// Wall time of the whole step (packing, upload, forward, sampling), milliseconds.
    pub wall_ms: f64,
    /// What the step computed.
    #[serde(flatten)]
    pub features: StepFeatures,
}

/// What one step produced.
#[derive(Clone, Debug, Default)]
pub struct StepOutput {
    /// Wall time of the step, ns (what a client sees).
    pub wall_ns: u64,
    /// GPU time, ns.
    pub gpu_ns: u64,
    /// (tag, token) for every sequence that produced a token.
    pub sampled: Vec<(u64, u32)>,
    /// (tag, scores) for every sampled token whose request asked for log-probabilities.
    pub scores: Vec<(u64, TokenScores)>,
}

/// A sampled token's log-probabilities under the model (the softmax of its logits row).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenScores {
    /// Log-probability of the sampled token.
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// The fault `corrupt_cached_prefix`: the first `cached` entries of a block table all name its first
/// block (reads only: the blocks a step writes lie after the cached prefix).
fn corrupt_cached(table: &mut [u32], cached: u32) {
    let n = (cached as usize).min(table.len());
    if n > 1 {
        let first = table[0];
        table[1..n].fill(first);
    }
}

/// Scores `chosen` and the `top` most likely tokens of one logits row.
pub fn token_scores(logits: &[f32], chosen: u32, top: usize) -> TokenScores {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    let norm = max + sum.ln() as f32;
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let k = top.min(ids.len());
    let by_logit = |a: &u32, b: &u32| {
        logits[*b as usize]
            .total_cmp(&logits[*a as usize])
            .then(a.cmp(b))
    };
    if k > 0 && k < ids.len() {
        ids.select_nth_unstable_by(k - 1, by_logit);
    }
    ids.truncate(k);
    ids.sort_by(by_logit);
    TokenScores {
        logprob: logits
            .get(chosen as usize)
            .map_or(f32::NEG_INFINITY, |&x| x - norm),
        top: ids
            .into_iter()
            .map(|t| (t, logits[t as usize] - norm))
            .collect(),
    }
}

/// The CUDA engine's per-sequence state and step log around a [`Model`].
pub struct CudaEngine {
    /// The model on the GPU.
    pub model: Model,
    tokens: HashMap<u64, Vec<u32>>,
    /// Requests that asked for log-probabilities, and how many alternatives.
    scored: HashMap<u64, usize>,
    /// A fault on purpose (`serve --fault corrupt-prefix-cache`): a request's cached prefix is read
    /// through a block table whose cached entries all name its first block.
    pub corrupt_cached_prefix: bool,
    log: Option<Box<dyn Write + Send>>,
    steps: u64,
    started: Instant,
    entries: Vec<StepEntry>,
    tables: Vec<Vec<u32>>,
}

impl CudaEngine {
    /// An engine around a loaded model; `log` receives one JSON line per step.
    pub fn new(model: Model, log: Option<Box<dyn Write + Send>>) -> CudaEngine {
        CudaEngine {
            model,
            tokens: HashMap::new(),
            scored: HashMap::new(),
            corrupt_cached_prefix: false,
            log,
            steps: 0,
            started: Instant::now(),
            entries: Vec::new(),
            tables: Vec::new(),
        }
    }

    /// Registers a request's prompt under the tag it was submitted with.
    pub fn add(&mut self, tag: u64, prompt: Vec<u32>) {
        self.tokens.insert(tag, prompt);
    }

    /// Request `tag`'s sampled tokens come with their log-probabilities and `top` alternatives
    /// (the step's logits are then copied to the host).
    pub fn score(&mut self, tag: u64, top: usize) {
        self.scored.insert(tag, top);
    }

    /// Forgets a finished request; returns its tokens (prompt then output).
    pub fn remove(&mut self, tag: u64) -> Option<Vec<u32>> {
        self.scored.remove(&tag);
        self.tokens.remove(&tag)
    }

    /// Runs the step `replica` has scheduled; call before [`Replica::finish_step`].
    pub fn step(&mut self, replica: &Replica) -> Result<StepOutput> {
        let t0 = Instant::now();
        self.entries.clear();
        self.entries.extend(replica.step_entries());
        self.tables.resize_with(self.entries.len(), Vec::new);
        let block = self.model.cap.block_size;
        for (e, t) in self.entries.iter().zip(self.tables.iter_mut()) {
            t.clear();
            replica.block_table(e.seq, t);
            if self.corrupt_cached_prefix {
                corrupt_cached(t, replica.progress(e.seq).cached_tokens / block);
            }
        }
        let mut batch = Vec::with_capacity(self.entries.len());
        for (e, t) in self.entries.iter().zip(&self.tables) {
            let toks = self.tokens.get(&e.tag).ok_or_else(|| {
                crate::error::CudaError::Config(format!(
                    "no tokens registered for request {}",
                    e.tag
                ))
            })?;
            let (a, b) = (e.start as usize, (e.start + e.tokens) as usize);
            if b > toks.len() {
                return Err(crate::error::CudaError::Config(format!(
                    "request {} asks for positions {a}..{b} but has {} tokens",
                    e.tag,
                    toks.len()
                )));
            }
            batch.push(Entry {
                tag: e.tag,
                start: e.start,
                tokens: &toks[a..b],
                table: t,
                emits: e.emits,
            });
        }
        let packed = pack_padded(
            &batch,
            self.model.cap.block_size,
            self.model.cfg.query_group(),
            Some(self.model.cap.max_context),
        );
        let keep = self.model.keep_logits;
        let scoring = packed
            .sample_tags
            .iter()
            .any(|t| self.scored.contains_key(t));
        self.model.keep_logits = keep || scoring;
        let before = self.model.dev.mark()?;
        let forward = self.model.forward(&packed);
        self.model.keep_logits = keep;
        let sampled = forward?;
        let after = self.model.dev.mark()?;
        let gpu_ms = before.elapsed_ms(&after)? as f64;
        let mut out = StepOutput {
            sampled: packed.sample_tags.iter().copied().zip(sampled).collect(),
            ..StepOutput::default()
        };
        if scoring {
            out.scores = self.scores(&out.sampled);
        }
        for &(tag, tok) in &out.sampled {
            if let Some(v) = self.tokens.get_mut(&tag) {
                v.push(tok);
            }
        }
        out.gpu_ns = (gpu_ms * 1e6) as u64;
        out.wall_ns = t0.elapsed().as_nanos() as u64;
        if let Some(log) = self.log.as_mut() {
            let rec = StepRecord {
                step: self.steps,
                start_s: (t0 - self.started).as_secs_f64(),
                gpu_ms,
                wall_ms: out.wall_ns as f64 / 1e6,
                features: packed.features,
            };
            let line = serde_json::to_string(&rec).expect("a step record serialises");
            writeln!(log, "{line}").map_err(|e| crate::error::CudaError::file("step log", e))?;
        }
        self.steps += 1;
        Ok(out)
    }

    /// The scores of the sampled rows whose requests asked for them, from the step's logits.
    fn scores(&self, sampled: &[(u64, u32)]) -> Vec<(u64, TokenScores)> {
        let v = self.model.cfg.vocab_size as usize;
        let logits = &self.model.last_logits;
        sampled
            .iter()
            .enumerate()
            .filter_map(|(row, &(tag, tok))| {
                let top = *self.scored.get(&tag)?;
                let l = logits.get(row * v..(row + 1) * v)?;
                Some((tag, token_scores(l, tok, top)))
            })
            .collect()
    }

    /// Flushes the step log.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(log) = self.log.as_mut() {
            log.flush()
                .map_err(|e| crate::error::CudaError::file("step log", e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupted_table_reads_the_first_block_for_every_cached_one() {
        let mut t = vec![7, 3, 9, 4, 5];
        corrupt_cached(&mut t, 3);
        assert_eq!(t, [7, 7, 7, 4, 5]);
        let mut cold = vec![7, 3];
        corrupt_cached(&mut cold, 0);
        assert_eq!(cold, [7, 3]);
        corrupt_cached(&mut cold, 9);
        assert_eq!(cold, [7, 7]);
    }

    #[test]
    fn token_scores_are_a_log_softmax_with_the_best_first() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let s = token_scores(&logits, 2, 3);
        let z: f32 = logits.iter().map(|x| x.exp()).sum();
        assert!((s.logprob - (2.0 - z.ln())).abs() < 1e-5);
        let ids: Vec<u32> = s.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, [1, 3, 2], "ties keep the lower id first");
        assert!((s.top[0].1 - (3.0 - z.ln())).abs() < 1e-5);
        let total: f32 = logits.iter().map(|&x| (x - z.ln()).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!(token_scores(&logits, 0, 0).top.is_empty());
        assert_eq!(token_scores(&logits, 0, 9).top.len(), 5);
        assert_eq!(token_scores(&logits, 7, 1).logprob, f32::NEG_INFINITY);
    }
}
