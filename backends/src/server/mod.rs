//! `serverbench serve`: an OpenAI-compatible streaming server whose engine is either the simulated engine
//! (the same scheduler, KV cache and cost model as `simulate`) paced to the wall clock, or the native
//! CUDA engine (the same scheduler and KV manager, step time from the GPU).
//! `--time-scale X` runs the emulated engine X times faster than real time, for tests.

#[cfg(feature = "cuda")]
use crate::engine::Cuda;
use crate::engine::{Emulated, EngineCore, Executor, Token};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use serverbench_calibration::CostModel;
use serverbench_sim::{Deployment, Replica, ReplicaOptions, SeqEvent, SeqInput};
use serverbench_workloads::hash::mix2;
use serverbench_workloads::{Blocks, RequestKind};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use tokio::sync::mpsc;

mod body;
mod http;
mod metrics;
mod model;
mod params;

use crate::interrupt::Interrupt;
use http::serve_router;
pub use http::ServeLimits;
use model::{Context, PseudoModel};
pub use model::{Fault, Generation};
use params::{Params, Refusal};

/// Tokens per block of the prompt hashes the emulator derives from token ids.
const PROMPT_BLOCK: usize = 16;

/// How the emulator runs.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// The deployment whose engine is emulated.
    pub deployment: Deployment,
    /// Its cost model.
    pub cost: CostModel,
    /// Wall-clock speed-up (1 = real time).
    pub time_scale: f64,
    /// Model name reported by `/v1/models` and in responses.
    pub model_name: String,
    /// Vocabulary size for the token ids it generates.
    pub vocab: u32,
    /// The CUDA engine to serve with, instead of the emulated one.
    pub cuda: Option<CudaServe>,
    /// What the server tolerates from its clients.
    pub limits: ServeLimits,
    /// The emulated checkpoint whose greedy tokens and log-probabilities responses carry.
    pub generation: Generation,
    /// A real tokenizer (`--tokenizer`): text prompts are counted with it, and each output token is one
    /// of its one-token words, so a client counting the text with it counts what usage says.
    pub words: Option<Arc<crate::Words>>,
}

impl ServeConfig {
    /// A server of `deployment` named `model_name`: the CUDA engine when `cuda` is given, else the
    /// emulated one (with `words`' one-token words as its text, when given); at real time, with the
    /// default limits and checkpoint. Its tokens come from the CUDA model's vocabulary, else the
    /// tokenizer's, else the deployment's model's.
    pub fn new(
        deployment: Deployment,
        model_name: String,
        cuda: Option<CudaServe>,
        words: Option<Arc<crate::Words>>,
    ) -> ServeConfig {
        let vocab = match (&cuda, &words) {
            (Some(c), _) => c.vocab_size(),
            (None, Some(w)) => w.vocab_size(),
            (None, None) => deployment.model_spec().vocab,
        };
        ServeConfig {
            cost: deployment.cost_model(),
            deployment,
            time_scale: 1.0,
            model_name,
            vocab,
            cuda,
            limits: ServeLimits::default(),
            generation: Generation::default(),
            words,
        }
    }
}

/// The CUDA engine's set-up (the deployment's engine config and memory plan size its KV pool).
#[cfg(feature = "cuda")]
#[derive(Clone, Debug)]
pub struct CudaServe {
    /// GPU ordinal.
    pub gpu: usize,
    /// Model shape.
    pub model: serverbench_cuda::ModelConfig,
    /// Weights.
    pub weights: serverbench_cuda::Weights,
    /// Step log (JSONL) to write.
    pub step_log: Option<std::path::PathBuf>,
    /// How the kernels are built and chosen.
    pub options: serverbench_cuda::CudaOptions,
}

/// Built without the feature `cuda` there is no CUDA engine to serve with: this type has no values,
/// so [`ServeConfig::cuda`] is always `None`.
#[cfg(not(feature = "cuda"))]
#[derive(Clone, Debug)]
pub enum CudaServe {}

impl CudaServe {
    /// The model's vocabulary size.
    pub fn vocab_size(&self) -> u32 {
        #[cfg(feature = "cuda")]
        return self.model.vocab_size;
        #[cfg(not(feature = "cuda"))]
        match *self {}
    }
}

/// What the engine sends a request's handler.
#[derive(Debug)]
enum EngineEvent {
    /// `count` more tokens; their ids (and scores) when the engine computes tokens, else empty (the
    /// emulated checkpoint chooses them).
    Tokens(u32, Vec<Token>),
    Done {
        cached_tokens: u32,
    },
}

struct Submission {
    /// When the request arrived (its queue time runs from here to its first scheduled step).
    arrived: std::time::Instant,
    ids: Vec<u32>,
    blocks: Blocks,
    prompt_tokens: u32,
    output: u32,
    /// Log-probabilities asked for, with this many alternatives.
    logprobs: Option<u8>,
    events: mpsc::UnboundedSender<EngineEvent>,
}

use metrics::{Counts as Metrics, Latency, RequestClock};

struct Emulator {
    submit: Mutex<std_mpsc::Sender<Submission>>,
    /// Bytes of request bodies held at once.
    bodies: body::BodyBudget,
    /// The front end's one turn: requests are parsed and tokenized one at a time, in the order their
    /// bodies arrived (the queue is fair), as the simulated front end takes them (`frontend_s_per_token`,
    /// `tokenize_s_per_token`) and as a single tokenizer process does. Parsed side by side on many
    /// cores, a burst of long prompts reached the engine smallest first, in another order than the
    /// simulator's (results/agentx-conformance/README.md).
    front_end: tokio::sync::Mutex<()>,
    /// Set when a shutdown stops waiting for open requests: each ends with an error saying so (a
    /// stream with an error event and `data: [DONE]`) instead of being cut.
    closing: tokio::sync::watch::Sender<bool>,
    metrics: Arc<Mutex<Metrics>>,
    latency: Arc<Latency>,
    model: PseudoModel,
    cfg: ServeConfig,
    engine: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Emulator {
    /// Closes the submission channel and waits for the engine thread, so that the engine (and the GPU
    /// memory, step log and CUDA context it holds) is released before the process exits.
    fn drop(&mut self) {
        if let Ok(submit) = self.submit.get_mut() {
            *submit = std_mpsc::channel().0;
        }
        if let Some(h) = self.engine.get_mut().ok().and_then(|h| h.take()) {
            let _ = h.join();
        }
    }
}

/// A server started by [`spawn_local_server`]; [`LocalServer::stop`] ends it and its engine thread.
pub struct LocalServer {
    /// Base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    stop: Interrupt,
    task: tokio::task::JoinHandle<()>,
}

impl LocalServer {
    /// Stops accepting requests, lets open ones end (within the drain timeout, then ends them with an
    /// error) and waits for the engine thread.
    pub async fn stop(self) {
        self.stop.request("stop");
        let _ = self.task.await;
    }
}

/// Like [`spawn_local`], but stoppable: use it when the engine must be released before the process ends
/// (the CUDA engine).
pub async fn spawn_local_server(cfg: ServeConfig) -> std::io::Result<LocalServer> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    // The router starts the engine: build it here so that a failure to start is this call's error.
    let limits = cfg.limits;
    let (router, closing) = router(cfg).map_err(std::io::Error::other)?;
    let stop = Interrupt::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            let _ = serve_router(listener, router, limits, &stop, closing).await;
        }
    });
    Ok(LocalServer { url, stop, task })
}

/// Runs the engine thread and serves HTTP on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, cfg: ServeConfig) -> std::io::Result<()> {
    let limits = cfg.limits;
    let (router, closing) = router(cfg).map_err(std::io::Error::other)?;
    serve_router(listener, router, limits, &Interrupt::new(), closing).await
}

/// Binds `addr`, tells `listening` the address it got, and serves until `stop` is requested: new
/// connections are then refused, open requests may finish for the drain timeout, and a second
/// request (or the drain timeout) ends those still open with an error.
pub async fn serve_until_interrupted(
    addr: &str,
    cfg: ServeConfig,
    stop: &Interrupt,
    listening: impl FnOnce(std::net::SocketAddr),
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
    let limits = cfg.limits;
    let (router, closing) = router(cfg).map_err(std::io::Error::other)?;
    listening(listener.local_addr()?);
    serve_router(listener, router, limits, stop, closing).await
}

/// [`serve_until_interrupted`] on a runtime of its own, for a caller that has none (the binary).
pub fn serve_blocking(
    addr: &str,
    cfg: ServeConfig,
    stop: &Interrupt,
    listening: impl FnOnce(std::net::SocketAddr),
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let rt = crate::Runtime::new().context("cannot start the async runtime")?;
    rt.block_on(serve_until_interrupted(addr, cfg, stop, listening))
        .context("the server stopped")
}

/// Binds 127.0.0.1 on a free port and serves in the background; returns the base URL (for tests).
pub async fn spawn_local(cfg: ServeConfig) -> std::io::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = serve(listener, cfg).await;
    });
    Ok(url)
}

/// The routes, and what tells open requests that the server stops waiting for them.
fn router(cfg: ServeConfig) -> Result<(Router, http::Closing), String> {
    let (tx, rx) = std_mpsc::channel();
    let metrics = Arc::new(Mutex::new(Metrics::default()));
    let m2 = metrics.clone();
    let latency = Arc::new(Latency::new(cfg.time_scale));
    let l2 = latency.clone();
    let thread = std::thread::Builder::new().name("serverbench-engine".into());
    let opts = ReplicaOptions {
        report_tokens: true,
        count_shared_reads: cfg.cost.prices_shared_reads() && cfg.cuda.is_none(),
        split_kv: cfg.cost.split_kv().filter(|_| cfg.cuda.is_none()),
        varlen: cfg.cost.varlen().filter(|_| cfg.cuda.is_none()),
        ..ReplicaOptions::default()
    };
    match (cfg.cuda.is_some(), cfg.generation.fault) {
        (true, Fault::RunnerUp(_)) => return Err("--fault runner-up: the CUDA engine samples its own tokens; truncate-prompt and corrupt-prefix-cache apply to it".into()),
        (false, Fault::CorruptPrefixCache) => return Err("--fault corrupt-prefix-cache: only the CUDA engine reads real KV blocks (--engine cuda)".into()),
        _ => {}
    }
    if cfg.deployment.engine.data_parallel_attention {
        return Err("engine.data_parallel_attention: the served engine is one replica with tensor-parallel attention; its attention ranks in lockstep are simulated only (`simulate`, `sweep`)".into());
    }
    let replica = cfg.deployment.replica(opts).map_err(|e| e.to_string())?;
    let engine = match cfg.cuda.clone() {
        None => {
            let core = EngineCore::new(replica, Emulated::new(cfg.cost.clone()), cfg.time_scale);
            thread.spawn(move || serve_engine(core, rx, m2, l2))
        }
        #[cfg(not(feature = "cuda"))]
        Some(c) => match c {},
        #[cfg(feature = "cuda")]
        Some(c) => {
            // The GPU is opened on the engine thread (its CUDA context lives there); the caller waits
            // for the load to succeed or fail.
            let (ready_tx, ready_rx) = std_mpsc::channel();
            let corrupt = cfg.generation.fault == Fault::CorruptPrefixCache;
            let d = cfg.deployment.clone();
            let blocks = replica.total_blocks();
            let h = thread.spawn(move || match Cuda::load(&d, &c, blocks, opts) {
                Ok((replica, mut exec)) => {
                    exec.engine.corrupt_cached_prefix = corrupt;
                    let _ = ready_tx.send(Ok(()));
                    serve_engine(EngineCore::new(replica, exec, 1.0), rx, m2, l2);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            });
            ready_rx
                .recv()
                .map_err(|_| "the CUDA engine thread stopped".to_string())??;
            h
        }
    }
    .map_err(|e| e.to_string())?;
    if cfg.vocab < model::MIN_VOCAB {
        return Err(format!(
            "the vocabulary must have at least {} tokens, got {}",
            model::MIN_VOCAB,
            cfg.vocab
        ));
    }
    let closing = tokio::sync::watch::Sender::new(false);
    let em = Arc::new(Emulator {
        submit: Mutex::new(tx),
        bodies: body::BodyBudget::new(params::body_limit(cfg.deployment.context_limit)),
        front_end: tokio::sync::Mutex::new(()),
        closing: closing.clone(),
        metrics,
        latency,
        model: PseudoModel::new(cfg.vocab, cfg.generation.model_seed),
        cfg,
        engine: Mutex::new(Some(engine)),
    });
    let routes = Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { "" }))
        .route("/metrics", get(metrics_text))
        .with_state(em);
    Ok((routes, closing))
}

/// The engine thread: takes submissions, steps the engine while it has work, sends each request's
/// tokens to its handler, and cancels requests whose client has gone (their handler dropped its
/// receiver). It blocks on the submission channel whenever nothing can be scheduled; it ends when
/// the server drops the channel or a step fails.
fn serve_engine<E: Executor>(
    mut core: EngineCore<E>,
    rx: std_mpsc::Receiver<Submission>,
    metrics: Arc<Mutex<Metrics>>,
    latency: Arc<Latency>,
) {
    let mut next_tag: u64 = 0;
    let mut senders: HashMap<u64, mpsc::UnboundedSender<EngineEvent>> = HashMap::new();
    let mut queued: HashMap<u64, std::time::Instant> = HashMap::new();
    let mut take = |s: Submission,
                    core: &mut EngineCore<E>,
                    senders: &mut HashMap<_, _>,
                    queued: &mut HashMap<u64, std::time::Instant>| {
        senders.insert(next_tag, s.events);
        queued.insert(next_tag, s.arrived);
        let input = SeqInput {
            tag: next_tag,
            blocks: s.blocks,
            workload_block_size: PROMPT_BLOCK as u32,
            input: s.prompt_tokens,
            output: s.output,
            kind: RequestKind::RootTurn,
        };
        core.submit(input, s.ids);
        if let Some(k) = s.logprobs {
            core.exec.score(next_tag, k as usize);
        }
        next_tag += 1;
    };
    loop {
        loop {
            match rx.try_recv() {
                Ok(s) => take(s, &mut core, &mut senders, &mut queued),
                Err(std_mpsc::TryRecvError::Empty) => break,
                Err(std_mpsc::TryRecvError::Disconnected) => return,
            }
        }
        cancel_abandoned(&mut core, &mut senders, &metrics);
        let started = std::time::Instant::now();
        let stepped = match core.step() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("serverbench: {e}");
                return;
            }
        };
        let Some(stepped) = stepped else {
            // Nothing can run until a request arrives (or there is no work at all).
            core.idle();
            match rx.recv() {
                Ok(s) => take(s, &mut core, &mut senders, &mut queued),
                Err(_) => return,
            }
            continue;
        };
        core.take_finished();
        for e in &stepped.events {
            if let SeqEvent::Admitted { tag } = *e {
                if let Some(arrived) = queued.remove(&tag) {
                    latency.queued(started.saturating_duration_since(arrived));
                }
            }
        }
        queued.retain(|tag, _| senders.contains_key(tag));
        let tokens = E::tokens(&stepped.output);
        dispatch(
            &stepped.events,
            tokens,
            core.replica(),
            &mut senders,
            &metrics,
        );
    }
}

/// Cancels the requests whose handler is gone (the client disconnected): their blocks are freed at
/// once and they are counted as cancelled, not finished.
fn cancel_abandoned<E: Executor>(
    core: &mut EngineCore<E>,
    senders: &mut HashMap<u64, mpsc::UnboundedSender<EngineEvent>>,
    metrics: &Mutex<Metrics>,
) {
    let gone: Vec<u64> = senders
        .iter()
        .filter(|(_, tx)| tx.is_closed())
        .map(|(&tag, _)| tag)
        .collect();
    if gone.is_empty() {
        return;
    }
    for tag in &gone {
        senders.remove(tag);
        core.cancel(*tag);
    }
    let mut m = metrics.lock().expect("metrics lock");
    m.requests_cancelled += gone.len() as u64;
    gauges(&mut m, core.replica());
}

/// Sends a step's events to the requests' handlers and updates the gauges.
fn dispatch(
    events: &[SeqEvent],
    tokens: Vec<(u64, Token)>,
    replica: &Replica,
    senders: &mut HashMap<u64, mpsc::UnboundedSender<EngineEvent>>,
    metrics: &Mutex<Metrics>,
) {
    let mut generated = 0u64;
    let mut finished = 0u64;
    let mut by_tag: HashMap<u64, Vec<Token>> = HashMap::new();
    for (tag, t) in tokens {
        by_tag.entry(tag).or_default().push(t);
    }
    for &e in events {
        match e {
            SeqEvent::Emitted { tag, count } => {
                generated += count as u64;
                if let Some(tx) = senders.get(&tag) {
                    let ids = by_tag.remove(&tag).unwrap_or_default();
                    let _ = tx.send(EngineEvent::Tokens(count, ids));
                }
            }
            SeqEvent::Finished { tag, seq } => {
                let cached_tokens = replica.progress(seq).cached_tokens;
                if let Some(tx) = senders.remove(&tag) {
                    if tx.send(EngineEvent::Done { cached_tokens }).is_ok() {
                        finished += 1;
                    }
                }
            }
            SeqEvent::FirstToken { .. } | SeqEvent::Admitted { .. } => {}
        }
    }
    let mut m = metrics.lock().expect("metrics lock");
    gauges(&mut m, replica);
    m.generation_tokens += generated;
    m.requests_finished += finished;
}

/// The engine's gauges as they are now.
fn gauges(m: &mut Metrics, replica: &Replica) {
    m.running = replica.running();
    m.waiting = replica.waiting();
    m.kv_usage = replica.used_blocks() as f64 / replica.total_blocks().max(1) as f64;
    m.prefix_queries = replica.stats.lookup_tokens;
    m.prefix_hits = replica.stats.hit_tokens;
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": { "message": message, "type": "invalid_request_error", "code": status.as_u16() } }))).into_response()
}

/// Chained block ids of a prompt's full 16-token blocks: equal prefixes give equal ids.
pub fn prompt_blocks(ids: &[u32]) -> Blocks {
    prompt_digest(ids).0
}

/// The prompt's block ids and the emulated model's context after it, in one pass: the context is the
/// running hash whose values at block boundaries are the block ids.
fn prompt_digest(ids: &[u32]) -> (Blocks, Context) {
    let mut h = model::START;
    let mut blocks = Vec::with_capacity(ids.len() / PROMPT_BLOCK);
    for chunk in ids.chunks(PROMPT_BLOCK) {
        h = chunk.iter().fold(h, |h, &t| mix2(h, t as u64));
        if chunk.len() == PROMPT_BLOCK {
            blocks.push(h);
        }
    }
    (Blocks::from_vec(blocks), Context(h))
}

async fn completions(State(em): State<Arc<Emulator>>, req: Request) -> Response {
    match parse(&em, req, params::completion).await {
        Ok((ids, p)) => generate(em, ids, p, false).await,
        Err(e) => e.response(),
    }
}

async fn chat(State(em): State<Arc<Emulator>>, req: Request) -> Response {
    match parse(&em, req, params::chat_body).await {
        Ok((ids, p)) => generate(em, ids, p, true).await,
        Err(e) => e.response(),
    }
}

/// A request parser: the body's bytes, the vocabulary, the context limit and the tokenizer in; the
/// prompt's ids and the parameters out.
type Parser = fn(&[u8], u32, u32, Option<&crate::Words>) -> Result<(Vec<u32>, Params), Refusal>;

/// Reads the request's body within its bounds (`body::read`) and parses it on a blocking thread, one
/// request at a time (`Emulator::front_end`): a prompt of a million ids takes tens of milliseconds to
/// read, which on an async worker would stall every stream and `/health` (eight 17 MB bodies stalled
/// them 3.3 s).
async fn parse(
    em: &Arc<Emulator>,
    req: Request,
    parser: Parser,
) -> Result<(Vec<u32>, Params), Refusal> {
    let context_limit = em.cfg.deployment.context_limit;
    let limit = params::body_limit(context_limit);
    let body = body::read(
        req,
        limit,
        em.cfg.limits.body_timeout,
        &em.bodies,
        context_limit,
    )
    .await?;
    // One request at a time, first come first served; held until this one's parse is done.
    let _turn = em.front_end.lock().await;
    let em = em.clone();
    tokio::task::spawn_blocking(move || {
        // The body and its share of the budget go when the parse is done.
        parser(
            &body.bytes,
            em.cfg.vocab,
            context_limit,
            em.cfg.words.as_deref(),
        )
    })
    .await
    .unwrap_or_else(|e| {
        Err(Refusal::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the request parser stopped: {e}"),
        ))
    })
}

async fn generate(em: Arc<Emulator>, ids: Vec<u32>, p: Params, chat: bool) -> Response {
    let clock = RequestClock::start();
    let limit = em.cfg.deployment.request_limit() as u64;
    if ids.len() as u64 + p.max_tokens as u64 > limit {
        return error(StatusCode::BAD_REQUEST, &format!("this model's maximum context length is {limit} tokens; the prompt ({}) plus max_tokens ({}) exceed it", ids.len(), p.max_tokens));
    }
    if em.cfg.cuda.is_some() && p.echo {
        return error(
            StatusCode::BAD_REQUEST,
            "echo: the CUDA engine scores only the tokens it samples, not the prompt's",
        );
    }
    let (blocks, after_prompt) = prompt_digest(&ids);
    let seed = blocks
        .as_slice()
        .last()
        .copied()
        .unwrap_or(ids.len() as u64);
    // Without ignore_eos the emulated model "ends its answer" after a deterministic natural length.
    let natural = (16 + (mix2(seed, 0xE05) % 48) as u32).max(p.min_tokens);
    let output = if p.ignore_eos {
        p.max_tokens
    } else {
        natural.min(p.max_tokens)
    };
    let finish_reason = if output < p.max_tokens {
        "stop"
    } else {
        "length"
    };
    // The first `unseen` prompt tokens are cut off by a truncating fault (0 otherwise).
    let unseen = ids.len() - em.cfg.generation.fault.visible(&ids).len();
    let mut logprobs = Logprobs::new(p.logprobs, p.tokens_as_ids, em.cfg.words.clone());
    let mut echoed = String::new();
    if p.echo {
        echoed = logprobs.prompt(&em.model, &ids, unseen);
    }
    let context = if unseen == 0 {
        after_prompt
    } else {
        em.model.after(&ids[unseen..])
    };
    let (tx, rx) = mpsc::unbounded_channel();
    {
        let mut m = em.metrics.lock().expect("metrics lock");
        m.prompt_tokens += ids.len() as u64;
    }
    // The engine computes what the model sees: a truncating fault does less prefill (usage still
    // reports the whole prompt, as such a server would).
    let prompt_tokens = ids.len() as u32;
    let (ids, blocks) = if unseen == 0 {
        (ids, blocks)
    } else {
        let seen = ids[unseen..].to_vec();
        let blocks = prompt_blocks(&seen);
        (seen, blocks)
    };
    let sub = Submission {
        arrived: clock.arrived(),
        prompt_tokens: ids.len() as u32,
        ids,
        blocks,
        output,
        logprobs: p.logprobs,
        events: tx,
    };
    if em.submit.lock().expect("submit lock").send(sub).is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the engine has stopped");
    }
    let out = Output {
        rx,
        closing: em.closing.subscribe(),
        model_name: em.cfg.model_name.clone(),
        chat,
        fault: em.cfg.generation.fault,
        model: em.model,
        context,
        logprobs,
        echoed,
        produced: 0,
        prompt_tokens,
        finish_reason,
        include_usage: p.include_usage,
        id: format!("cmpl-{seed:x}"),
        clock,
        latency: em.latency.clone(),
    };
    if p.stream {
        stream_response(out)
    } else {
        whole_response(out).await
    }
}

/// The `logprobs` object of a completion (OpenAI's legacy form: tokens, their log-probabilities, the
/// most likely alternatives, and each token's character offset in the text).
struct Logprobs {
    top: Option<u8>,
    as_ids: bool,
    words: Option<Arc<crate::Words>>,
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<Value>,
    chars: usize,
}

impl Logprobs {
    fn new(top: Option<u8>, as_ids: bool, words: Option<Arc<crate::Words>>) -> Logprobs {
        Logprobs {
            top,
            as_ids,
            words,
            tokens: Vec::new(),
            token_logprobs: Vec::new(),
            top_logprobs: Vec::new(),
            text_offset: Vec::new(),
            chars: 0,
        }
    }

    /// Adds one token of the text (scored when the model saw what came before it) and returns its text.
    fn push(&mut self, model: &PseudoModel, before: Option<Context>, id: u32) -> String {
        let scores = match (self.top, before) {
            (Some(k), Some(c)) => Some((model.logprob(c, id), model.top(c, k as usize))),
            _ => None,
        };
        self.record(id, scores)
    }

    /// Adds one token an engine computed, with the scores it computed for it; returns its text.
    fn push_scored(&mut self, t: &Token) -> String {
        let scores = t.scores.as_ref().map(|s| {
            let top = s.top.iter().map(|&(id, lp)| (id, lp as f64)).collect();
            (s.logprob as f64, top)
        });
        self.record(t.id, scores)
    }

    /// Adds token `id` with its log-probability and the most likely alternatives (`None`: unscored)
    /// when log-probabilities were asked for; returns its text.
    fn record(&mut self, id: u32, scores: Option<(f64, Vec<(u32, f64)>)>) -> String {
        let text = self.word(id);
        if self.top.is_some() {
            self.tokens.push(json!(self.key(id)));
            self.text_offset.push(json!(self.chars));
            match scores {
                Some((logprob, alternatives)) => {
                    let mut top: serde_json::Map<String, Value> = alternatives
                        .into_iter()
                        .map(|(t, lp)| (self.key(t), json!(lp)))
                        .collect();
                    top.insert(self.key(id), json!(logprob));
                    self.token_logprobs.push(json!(logprob));
                    self.top_logprobs.push(Value::Object(top));
                }
                None => {
                    self.token_logprobs.push(Value::Null);
                    self.top_logprobs.push(Value::Null);
                }
            }
        }
        self.chars += text.len();
        text
    }

    fn word(&self, id: u32) -> String {
        match &self.words {
            Some(w) => w.word(id).to_string(),
            None => model::token_text(id, false),
        }
    }

    fn key(&self, id: u32) -> String {
        match &self.words {
            Some(w) if !self.as_ids => w.word(id).to_string(),
            _ => model::token_text(id, self.as_ids),
        }
    }

    /// Adds an echoed prompt whose first `unseen` tokens the model did not see; returns its text.
    fn prompt(&mut self, model: &PseudoModel, ids: &[u32], unseen: usize) -> String {
        let mut text = String::new();
        let mut c = None;
        for (i, &t) in ids.iter().enumerate() {
            if i == unseen {
                c = Some(model.start());
                text.push_str(&self.push(model, None, t));
            } else {
                text.push_str(&self.push(model, c, t));
            }
            if let Some(c) = c.as_mut() {
                model.push(c, t);
            }
        }
        text
    }

    /// The object as it stands, and a fresh one for what follows (for a streamed chunk).
    fn take(&mut self) -> Value {
        if self.top.is_none() {
            return Value::Null;
        }
        json!({
            "tokens": std::mem::take(&mut self.tokens),
            "token_logprobs": std::mem::take(&mut self.token_logprobs),
            "top_logprobs": std::mem::take(&mut self.top_logprobs),
            "text_offset": std::mem::take(&mut self.text_offset),
        })
    }
}

/// A request's output as it comes from the engine.
struct Output {
    rx: mpsc::UnboundedReceiver<EngineEvent>,
    /// True once the server stops waiting for open requests.
    closing: tokio::sync::watch::Receiver<bool>,
    model_name: String,
    chat: bool,
    fault: Fault,
    model: PseudoModel,
    /// The model's context: the prompt it saw and the output so far.
    context: Context,
    logprobs: Logprobs,
    /// The echoed prompt's text (empty without echo).
    echoed: String,
    produced: u32,
    prompt_tokens: u32,
    finish_reason: &'static str,
    include_usage: bool,
    id: String,
    clock: RequestClock,
    latency: Arc<Latency>,
}

impl Output {
    /// Text of the next `n` output tokens, one short word each: the engine's tokens when it computed
    /// them (`ids`), else the emulated model's greedy choices (unless a fault changes them).
    fn text(&mut self, n: u32, ids: &[Token]) -> String {
        let mut s = String::new();
        if !ids.is_empty() {
            for t in ids {
                s.push_str(&self.logprobs.push_scored(t));
            }
            self.produced += ids.len() as u32;
            return s;
        }
        for _ in 0..n {
            let id = self.fault.choose(&self.model, self.context);
            s.push_str(&self.logprobs.push(&self.model, Some(self.context), id));
            self.model.push(&mut self.context, id);
        }
        self.produced += n;
        s
    }

    fn chunk(&mut self, text: Option<&str>, finish: Option<&str>) -> Value {
        if self.chat {
            let delta = match text {
                Some(t) => json!({ "content": t }),
                None => json!({}),
            };
            json!({ "id": self.id, "object": "chat.completion.chunk", "created": 0, "model": self.model_name, "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] })
        } else {
            let logprobs = self.logprobs.take();
            json!({ "id": self.id, "object": "text_completion", "created": 0, "model": self.model_name, "choices": [{ "index": 0, "text": text.unwrap_or(""), "logprobs": logprobs, "finish_reason": finish }] })
        }
    }

    fn usage(&self, cached: u32) -> Value {
        json!({ "prompt_tokens": self.prompt_tokens, "completion_tokens": self.produced, "total_tokens": self.prompt_tokens + self.produced, "prompt_tokens_details": { "cached_tokens": cached } })
    }
}

/// What a request still open when the server stops waiting for it is told.
const SHUTTING_DOWN: &str =
    "the server is shutting down: this request was ended before it finished";

/// What comes next for a request's response.
enum Next {
    Event(EngineEvent),
    /// The engine dropped the request (it stopped).
    Gone,
    /// The server stops waiting for open requests.
    Closing,
}

impl Output {
    async fn next(&mut self) -> Next {
        // Closing first: a busy engine would otherwise keep the stream open with its tokens.
        tokio::select! {
            biased;
            Ok(_) = self.closing.wait_for(|c| *c) => Next::Closing,
            e = self.rx.recv() => e.map_or(Next::Gone, Next::Event),
        }
    }
}

fn sse(v: &Value) -> bytes::Bytes {
    bytes::Bytes::from(format!("data: {v}\n\n"))
}

fn stream_response(out: Output) -> Response {
    let s = futures_util::stream::unfold((out, false), |(mut out, ended)| async move {
        if ended {
            return None;
        }
        match out.next().await {
            Next::Closing => {
                // The shutdown stops waiting: say so, and end the stream as a stream ends.
                let e = json!({ "error": { "message": SHUTTING_DOWN, "type": "server_error", "code": 503 } });
                let b = format!("data: {e}\n\ndata: [DONE]\n\n");
                Some((Ok(bytes::Bytes::from(b)), (out, true)))
            }
            Next::Event(EngineEvent::Tokens(n, ids)) => {
                out.clock.tokens(n, &out.latency);
                let t = out.text(n, &ids);
                let b = sse(&out.chunk(Some(&t), None));
                Some((Ok::<_, Infallible>(b), (out, false)))
            }
            Next::Event(EngineEvent::Done { cached_tokens }) => {
                out.clock.done(&out.latency);
                let finish = out.finish_reason;
                let mut b = format!("data: {}\n\n", out.chunk(None, Some(finish)));
                if out.include_usage {
                    let mut u = out.chunk(None, None);
                    u["choices"] = json!([]);
                    u["usage"] = out.usage(cached_tokens);
                    b.push_str(&format!("data: {u}\n\n"));
                }
                b.push_str("data: [DONE]\n\n");
                Some((Ok(bytes::Bytes::from(b)), (out, true)))
            }
            Next::Gone => None,
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(s))
        .unwrap_or_else(|_| {
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "cannot build the response",
            )
        })
}

async fn whole_response(mut out: Output) -> Response {
    let mut text = std::mem::take(&mut out.echoed);
    let mut cached = 0;
    loop {
        let e = match out.next().await {
            Next::Event(e) => e,
            Next::Gone => break,
            Next::Closing => return error(StatusCode::SERVICE_UNAVAILABLE, SHUTTING_DOWN),
        };
        match e {
            EngineEvent::Tokens(n, ids) => {
                out.clock.tokens(n, &out.latency);
                text.push_str(&out.text(n, &ids));
            }
            EngineEvent::Done { cached_tokens } => {
                out.clock.done(&out.latency);
                cached = cached_tokens;
                break;
            }
        }
    }
    let choice = if out.chat {
        json!({ "index": 0, "message": { "role": "assistant", "content": text }, "finish_reason": out.finish_reason })
    } else {
        json!({ "index": 0, "text": text, "logprobs": out.logprobs.take(), "finish_reason": out.finish_reason })
    };
    let object = if out.chat {
        "chat.completion"
    } else {
        "text_completion"
    };
    Json(json!({ "id": out.id, "object": object, "created": 0, "model": out.model_name, "choices": [choice], "usage": out.usage(cached) })).into_response()
}

async fn models(State(em): State<Arc<Emulator>>) -> Json<Value> {
    Json(
        json!({ "object": "list", "data": [{ "id": em.cfg.model_name, "object": "model", "owned_by": "serverbench", "max_model_len": em.cfg.deployment.context_limit }] }),
    )
}

async fn metrics_text(State(em): State<Arc<Emulator>>) -> Response {
    let m = *em.metrics.lock().expect("metrics lock");
    let t = metrics::text(&em.cfg.model_name, &m, &em.latency);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        t,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::TokenScores;

    #[test]
    fn an_emulated_server_without_a_tokenizer_draws_from_the_model_s_vocabulary() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let cfg = ServeConfig::new(d.clone(), "m".into(), None, None);
        assert_eq!(cfg.vocab, d.model_spec().vocab);
        assert_eq!((cfg.model_name.as_str(), cfg.time_scale), ("m", 1.0));
        assert!(cfg.cuda.is_none() && cfg.words.is_none());
        assert_eq!(format!("{:?}", cfg.cost), format!("{:?}", d.cost_model()));
    }

    #[test]
    fn an_engine_token_is_written_with_the_scores_the_engine_computed() {
        let mut lp = Logprobs::new(Some(1), true, None);
        let scored = Token {
            id: 7,
            scores: Some(TokenScores {
                logprob: -0.25,
                top: vec![(3, -0.125)],
            }),
        };
        let plain = Token {
            id: 9,
            scores: None,
        };
        let text = lp.push_scored(&scored) + &lp.push_scored(&plain);
        assert_eq!(
            text,
            model::token_text(7, false) + &model::token_text(9, false)
        );
        let v = lp.take();
        assert_eq!(v["tokens"], json!(["token_id:7", "token_id:9"]));
        assert_eq!(v["token_logprobs"], json!([-0.25, null]));
        assert_eq!(
            v["top_logprobs"][0],
            json!({ "token_id:3": -0.125, "token_id:7": -0.25 })
        );
        assert_eq!(
            v["text_offset"][1],
            json!(model::token_text(7, false).len())
        );
        // Without logprobs asked, only the text is kept.
        let mut none = Logprobs::new(None, false, None);
        assert_eq!(none.push_scored(&scored), model::token_text(7, false));
        assert_eq!(none.take(), Value::Null);
    }
}
