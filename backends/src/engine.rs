//! The one engine driver of the real-time backends: a [`Replica`] (the simulator's scheduler and KV
//! manager) scheduled step by step, each step computed by an [`Executor`] — the cost model paced to
//! the wall clock ([`Emulated`]) or the GPU (`Cuda`, with the feature `cuda`) — on one [`ScaledClock`].
//! The server's engine thread and `cuda-check` drive the same [`EngineCore`]; the simulator's
//! virtual-time driver is `serverbench_sim::simulate`.

use crate::clock::ScaledClock;
use serverbench_calibration::{BatchShape, CostModel};
#[cfg(feature = "cuda")]
use serverbench_sim::{Deployment, ReplicaOptions};
use serverbench_sim::{Replica, SeqEvent, SeqId, SeqInput, Time};
use std::collections::HashMap;

/// How long a step took, as an executor knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// The step lasts this long in engine time (ns): the driver waits until it has passed.
    Modelled(u64),
    /// The step took this long (ns) and is over.
    Measured(u64),
}

/// What computes the steps a replica schedules.
pub trait Executor {
    /// What one step produces besides its timing (the CUDA engine's sampled tokens).
    type Output;
    /// A request joined under `tag`, with its prompt's token ids.
    fn admit(&mut self, tag: u64, ids: Vec<u32>);
    /// A request left (finished or cancelled); returns its tokens where the executor keeps them.
    fn release(&mut self, tag: u64) -> Option<Vec<u32>>;
    /// Request `tag` wants its tokens' log-probabilities with `top` alternatives (only an executor
    /// that computes tokens can give them).
    fn score(&mut self, _tag: u64, _top: usize) {}
    /// The tokens a step computed, by request, with their scores where they were asked for; empty
    /// for an executor that only times steps.
    fn tokens(_output: &Self::Output) -> Vec<(u64, Token)> {
        Vec::new()
    }
    /// Computes the step `replica` has scheduled (before [`Replica::finish_step`]).
    fn run(
        &mut self,
        replica: &mut Replica,
        shape: &BatchShape,
    ) -> Result<(Timing, Self::Output), String>;
    /// The engine has nothing to do (a chance to flush logs).
    fn idle(&mut self) {}
}

/// One token an executor computed for a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    /// Token id.
    pub id: u32,
    /// Its log-probabilities, when the request asked for them.
    pub scores: Option<TokenScores>,
}

/// A computed token's log-probability and the most likely tokens with theirs, most likely first: what
/// the server writes as `logprobs` (the CUDA engine's scores, converted here so that the server does
/// not need the engine).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenScores {
    /// Log-probability of the token.
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, most likely first.
    pub top: Vec<(u32, f32)>,
}

/// The simulated engine: each step takes what the cost model says (plus any swap transfer).
pub struct Emulated {
    cost: CostModel,
}

impl Emulated {
    /// An executor timing steps with `cost`.
    pub fn new(cost: CostModel) -> Emulated {
        Emulated { cost }
    }
}

impl Executor for Emulated {
    type Output = ();

    fn admit(&mut self, _tag: u64, _ids: Vec<u32>) {}

    fn release(&mut self, _tag: u64) -> Option<Vec<u32>> {
        None
    }

    fn run(&mut self, replica: &mut Replica, shape: &BatchShape) -> Result<(Timing, ()), String> {
        let ns = self.cost.step_ns(shape)
            + replica.take_transfer_ns()
            + replica.compile_ns(self.cost.moe_compiles(), shape);
        Ok((Timing::Modelled(ns), ()))
    }
}

/// The native CUDA engine: each step runs on the GPU and takes what it takes.
#[cfg(feature = "cuda")]
pub struct Cuda {
    /// The engine (model, per-request tokens, step log).
    pub engine: serverbench_cuda::CudaEngine,
}

#[cfg(feature = "cuda")]
impl Cuda {
    /// Loads the model of `c` with a KV pool of `blocks` blocks, and a replica with physical paging
    /// over them.
    pub fn load(
        d: &Deployment,
        c: &crate::CudaServe,
        blocks: u64,
        opts: ReplicaOptions,
    ) -> Result<(Replica, Cuda), String> {
        use serverbench_cuda::{Capacity, CudaEngine, Device, Model};
        let replica = Replica::paged(&d.engine, blocks, opts).map_err(|e| e.to_string())?;
        let cap = Capacity {
            num_blocks: blocks as u32,
            block_size: d.engine.block_size,
            max_tokens: d.engine.max_num_batched_tokens,
            max_seqs: d.engine.max_num_seqs,
            max_context: d.context_limit,
        };
        let dev = Device::open(c.gpu, &c.options).map_err(|e| e.to_string())?;
        let model =
            Model::load(dev, c.model.clone(), &c.weights, cap).map_err(|e| e.to_string())?;
        let log: Option<Box<dyn std::io::Write + Send>> = match &c.step_log {
            Some(p) => Some(Box::new(std::io::BufWriter::new(
                std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?,
            ))),
            None => None,
        };
        Ok((
            replica,
            Cuda {
                engine: CudaEngine::new(model, log),
            },
        ))
    }
}

#[cfg(feature = "cuda")]
impl Executor for Cuda {
    type Output = serverbench_cuda::StepOutput;

    fn admit(&mut self, tag: u64, ids: Vec<u32>) {
        self.engine.add(tag, ids);
    }

    fn release(&mut self, tag: u64) -> Option<Vec<u32>> {
        self.engine.remove(tag)
    }

    fn score(&mut self, tag: u64, top: usize) {
        self.engine.score(tag, top);
    }

    fn tokens(out: &Self::Output) -> Vec<(u64, Token)> {
        let mut scores: HashMap<u64, &serverbench_cuda::TokenScores> =
            out.scores.iter().map(|(tag, s)| (*tag, s)).collect();
        out.sampled
            .iter()
            .map(|&(tag, id)| {
                let scores = scores.remove(&tag).map(|s| TokenScores {
                    logprob: s.logprob,
                    top: s.top.clone(),
                });
                (tag, Token { id, scores })
            })
            .collect()
    }

    fn run(
        &mut self,
        replica: &mut Replica,
        _shape: &BatchShape,
    ) -> Result<(Timing, Self::Output), String> {
        let out = self
            .engine
            .step(replica)
            .map_err(|e| format!("CUDA engine step failed: {e}"))?;
        Ok((Timing::Measured(out.wall_ns), out))
    }

    fn idle(&mut self) {
        let _ = self.engine.flush();
    }
}

/// A replica and its executor on one clock: requests go in, steps come out.
pub struct EngineCore<E: Executor> {
    replica: Replica,
    /// The executor.
    pub exec: E,
    clock: ScaledClock,
    /// Engine time at which the last step ended (ns).
    now: u64,
    idle: bool,
    seqs: HashMap<u64, SeqId>,
    events: Vec<SeqEvent>,
    finished: Vec<(u64, Option<Vec<u32>>)>,
}

/// One step's result.
pub struct Stepped<O> {
    /// What the step did to its sequences.
    pub events: Vec<SeqEvent>,
    /// The executor's own output.
    pub output: O,
}

impl<E: Executor> EngineCore<E> {
    /// A core around `replica` and `exec`, its clock starting now at `time_scale` × real time.
    pub fn new(replica: Replica, exec: E, time_scale: f64) -> EngineCore<E> {
        EngineCore {
            replica,
            exec,
            clock: ScaledClock::new(time_scale),
            now: 0,
            idle: true,
            seqs: HashMap::new(),
            events: Vec::new(),
            finished: Vec::new(),
        }
    }

    /// The requests that finished since the last call, with their tokens where the executor keeps
    /// them (prompt, then output).
    pub fn take_finished(&mut self) -> Vec<(u64, Option<Vec<u32>>)> {
        std::mem::take(&mut self.finished)
    }

    /// The executor, once the engine is no longer needed.
    pub fn into_executor(self) -> E {
        self.exec
    }

    /// The replica (for its gauges and progress).
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// Hands a request to the scheduler under `input.tag`, with its prompt's token ids.
    pub fn submit(&mut self, input: SeqInput, ids: Vec<u32>) -> SeqId {
        let tag = input.tag;
        self.exec.admit(tag, ids);
        let seq = self.replica.submit(input);
        self.seqs.insert(tag, seq);
        seq
    }

    /// Takes request `tag` out of the engine before it finishes; false if it is not there.
    pub fn cancel(&mut self, tag: u64) -> bool {
        let Some(seq) = self.seqs.remove(&tag) else {
            return false;
        };
        self.exec.release(tag);
        self.replica.cancel(seq)
    }

    /// True when something is running or waiting.
    pub fn has_work(&self) -> bool {
        self.replica.has_work()
    }

    /// The engine has nothing to do.
    pub fn idle(&mut self) {
        self.exec.idle();
        self.idle = true;
    }

    /// Schedules one step, has the executor compute it (waiting until its end when its time is
    /// modelled), and applies it; `None` when nothing can be scheduled now (nothing will change until
    /// a request arrives). Finished requests are released from the executor; their tokens (where the
    /// executor keeps them) are returned by [`EngineCore::take_finished`].
    pub fn step(&mut self) -> Result<Option<Stepped<E::Output>>, String> {
        if self.idle {
            // Idle time passed; a busy engine starts each step exactly when the last one ended, so
            // sleep overshoot never accumulates.
            self.now = self.now.max(self.clock.now());
            self.idle = false;
        }
        let Some(shape) = self.replica.schedule() else {
            return Ok(None);
        };
        let wall_start = self.clock.now();
        let (timing, output) = self.exec.run(&mut self.replica, &shape)?;
        let (start, ns) = match timing {
            Timing::Modelled(ns) => {
                let start = self.now;
                self.now += ns;
                self.clock.sleep_until(self.now);
                (start, ns)
            }
            Timing::Measured(ns) => {
                self.now = self.clock.now().max(wall_start + ns);
                (wall_start, ns)
            }
        };
        self.replica.note_step(Time(start), ns, &shape);
        self.events.clear();
        self.replica.finish_step(&mut self.events);
        for e in &self.events {
            if let SeqEvent::Finished { tag, .. } = e {
                self.seqs.remove(tag);
                self.finished.push((*tag, self.exec.release(*tag)));
            }
        }
        Ok(Some(Stepped {
            events: self.events.clone(),
            output,
        }))
    }
}
