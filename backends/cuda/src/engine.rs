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
}

/// The CUDA engine's per-sequence state and step log around a [`Model`].
pub struct CudaEngine {
    /// The model on the GPU.
    pub model: Model,
    tokens: HashMap<u64, Vec<u32>>,
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

    /// Forgets a finished request; returns its tokens (prompt then output).
    pub fn remove(&mut self, tag: u64) -> Option<Vec<u32>> {
        self.tokens.remove(&tag)
    }

    /// Runs the step `replica` has scheduled; call before [`Replica::finish_step`].
    pub fn step(&mut self, replica: &Replica) -> Result<StepOutput> {
        let t0 = Instant::now();
        self.entries.clear();
        self.entries.extend(replica.step_entries());
        self.tables.resize_with(self.entries.len(), Vec::new);
        for (e, t) in self.entries.iter().zip(self.tables.iter_mut()) {
            t.clear();
            replica.block_table(e.seq, t);
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
        let before = self.model.dev.mark()?;
        let sampled = self.model.forward(&packed)?;
        let after = self.model.dev.mark()?;
        let gpu_ms = before.elapsed_ms(&after)? as f64;
        let mut out = StepOutput {
            sampled: packed.sample_tags.iter().copied().zip(sampled).collect(),
            ..StepOutput::default()
        };
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

    /// Flushes the step log.
    pub fn flush(&mut self) -> Result<()> {
        if let Some(log) = self.log.as_mut() {
            log.flush()
                .map_err(|e| crate::error::CudaError::file("step log", e))?;
        }
        Ok(())
    }
}
