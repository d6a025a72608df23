//! `--engine` and the CUDA engine's flags resolved (no clap): the emulated engine, or the CUDA engine's
//! set-up (model shape, weights, GPU, step log, and the kernel options of the `SERVERBENCH_*`
//! environment variables the caller looks up, docs/cuda-engine.md); and the server a replay talks to, `--url` or the CUDA
//! engine started in this process, with the client connected to it (`connect`). Built without the feature `cuda`, the CUDA engine is an error that
//! says how to build it. It never prints.

use crate::client::{check_model, ServerFlags};
use crate::inputs::{client_config, ClientChoice};
use crate::{unless_interrupted, HttpClient, Interrupt};
use crate::{CudaServe, LocalServer, Runtime, ServeConfig};
use anyhow::{anyhow, bail, Context, Result};
use serverbench_sim::Deployment;
use std::path::Path;
use std::sync::Arc;

/// Which engine serves, and the CUDA engine's flags, as given.
#[derive(Clone, Copy, Debug)]
pub struct EngineChoice<'a> {
    /// `--engine`: `emulated` or `cuda`.
    pub engine: &'a str,
    /// `--model-dir`: a Hugging Face config.json's folder (and its weights').
    pub model_dir: Option<&'a Path>,
    /// `--weights`: `random` or a safetensors file or folder.
    pub weights: &'a str,
    /// `--gpu`.
    pub gpu: usize,
    /// `--step-log`.
    pub step_log: Option<&'a Path>,
    /// The environment variables the CUDA engine's kernel options come from (the caller reads them:
    /// this crate reads none).
    pub vars: fn(&str) -> Option<String>,
}

/// The error of `what`, which needs the CUDA engine this build leaves out.
pub fn not_built(what: &str) -> anyhow::Error {
    anyhow!(
        "{what}: this serverbench is built without the CUDA engine; \
         build it with `cargo build --release --features cuda` (docs/cuda-engine.md)"
    )
}

/// The CUDA engine's set-up for `model` when `--engine cuda`, else `None`.
pub fn cuda_serve(e: &EngineChoice<'_>, model: &str) -> Result<Option<CudaServe>> {
    match e.engine {
        "emulated" => Ok(None),
        "cuda" => cuda::serve(e, model).map(Some),
        other => bail!("--engine: expected emulated or cuda, got {other:?}"),
    }
}

/// The vocabulary prompts are drawn from, and how an error names it: the CUDA engine's model's, or the
/// deployment's.
pub fn model_vocab(e: &EngineChoice<'_>, d: &Deployment, model: &str) -> Result<(u32, String)> {
    if e.engine != "cuda" {
        return Ok((d.model_spec().vocab, format!("model {}", d.model.name)));
    }
    let vocab = cuda::vocab(e, model)?;
    Ok((vocab, format!("the CUDA engine's model {model}")))
}

/// The server a replay talks to: `url`, or the CUDA engine started in this process (stop it before the
/// process ends, to release the GPU and flush its step log).
pub fn replay_server(
    url: Option<&str>,
    e: &EngineChoice<'_>,
    d: &Deployment,
    model: &str,
    rt: &Runtime,
) -> Result<(String, Option<LocalServer>)> {
    match (url, e.engine) {
        (Some(u), "emulated") => Ok((u.to_string(), None)),
        (None, "cuda") => {
            let cuda = cuda_serve(e, model)?;
            let cfg = ServeConfig::new(d.clone(), model.to_string(), cuda, None);
            let server = rt
                .block_on(crate::spawn_local_server(cfg))
                .context("cannot start the CUDA engine")?;
            Ok((server.url.clone(), Some(server)))
        }
        (None, "emulated") => bail!(
            "--url: required (or --engine cuda to replay against the CUDA engine in this process)"
        ),
        (Some(_), "cuda") => bail!("--url and --engine cuda exclude each other"),
        (_, other) => bail!("--engine: expected emulated or cuda, got {other:?}"),
    }
}

/// Built without the CUDA engine: each of its set-ups is an error.
#[cfg(not(feature = "cuda"))]
mod cuda {
    use super::{not_built, EngineChoice};
    use crate::CudaServe;

    pub fn serve(_: &EngineChoice<'_>, _model: &str) -> anyhow::Result<CudaServe> {
        Err(not_built("--engine cuda"))
    }

    pub fn vocab(_: &EngineChoice<'_>, _model: &str) -> anyhow::Result<u32> {
        Err(not_built("--engine cuda"))
    }
}

/// Where a replay sends its requests, and how: `url` or the engine, the client's flags and the
/// environment variable its API key came from (named in a warning), and the model sent.
#[derive(Clone, Debug)]
pub struct ReplayTarget<'a> {
    /// `--url`.
    pub url: Option<&'a str>,
    /// `--engine` and the CUDA engine's flags.
    pub engine: EngineChoice<'a>,
    /// The client's flags.
    pub client: ClientChoice<'a>,
    /// `--api-key-env`.
    pub key_env: &'a str,
    /// The model name sent.
    pub model: &'a str,
}

/// A replay's connection: the server's URL, the CUDA engine when it was started here, and the client.
pub struct Connection {
    /// The server's base URL.
    pub url: String,
    /// The CUDA engine started in this process, to stop before the process ends.
    pub local: Option<LocalServer>,
    /// The client configured for it.
    pub client: Arc<HttpClient>,
}

/// Finds or starts the server ([`replay_server`]), configures the client for it (its notes to `note`),
/// warns when the API key is withheld, and checks that a server given by URL serves the model (unless
/// `stop` is requested first: the run then stops at once and says so).
pub fn connect(
    t: &ReplayTarget<'_>,
    d: &Deployment,
    rt: &Runtime,
    stop: &Interrupt,
    note: &(dyn Fn(&str) + Sync),
) -> Result<Connection> {
    let (url, local) = replay_server(t.url, &t.engine, d, t.model, rt)?;
    let config = client_config(&t.client, &url, t.model.to_string(), note)?;
    let client = Arc::new(HttpClient::new(config)?);
    if client.key_withheld() {
        note(&format!(
            "warning: the API key in ${} is not sent: {url} is plain HTTP to another machine (--api-key-over-http sends it anyway)",
            t.key_env
        ));
    }
    if t.url.is_some() {
        let flags = ServerFlags {
            url: &url,
            url_flag: "--url",
            model_flag: "--model",
        };
        let warn = |w: String| note(&w);
        let checked = check_model(&client, &flags, t.model, t.client.timeout, &warn);
        if let Some(checked) = rt.block_on(unless_interrupted(stop, checked)) {
            checked?;
        }
    }
    Ok(Connection { url, local, client })
}

/// The CUDA engine's model, weights and options from their flags.
#[cfg(feature = "cuda")]
pub mod cuda {
    use super::EngineChoice;
    use crate::CudaServe;
    use anyhow::{anyhow, Result};
    use serverbench_cuda::{CudaOptions, ModelConfig, Weights};
    use std::path::{Path, PathBuf};

    /// The CUDA engine's set-up for `model`.
    pub fn serve(e: &EngineChoice<'_>, model: &str) -> Result<CudaServe> {
        Ok(CudaServe {
            gpu: e.gpu,
            model: model_config(e.model_dir, model)?,
            weights: weights(e.weights),
            step_log: e.step_log.map(Path::to_path_buf),
            options: options(e.vars)?,
        })
    }

    /// The vocabulary size of the CUDA engine's model.
    pub fn vocab(e: &EngineChoice<'_>, model: &str) -> Result<u32> {
        Ok(model_config(e.model_dir, model)?.vocab_size)
    }

    /// The model shape: `model_dir`'s config.json, else the preset `model`.
    pub fn model_config(model_dir: Option<&Path>, model: &str) -> Result<ModelConfig> {
        match model_dir {
            Some(dir) => Ok(ModelConfig::from_file(&dir.join("config.json"))?),
            None => ModelConfig::preset(model).ok_or_else(|| {
                anyhow!(
                    "--model: no CUDA model preset {model:?} (presets: qwen3-8b); or give --model-dir"
                )
            }),
        }
    }

    /// `--weights`: `random` (generated on the GPU) or a safetensors file or folder.
    pub fn weights(w: &str) -> Weights {
        match w {
            "random" => Weights::Random { seed: 0 },
            p => Weights::Safetensors(PathBuf::from(p)),
        }
    }

    /// The CUDA engine's build and kernel options, from the environment variables `vars` looks up
    /// (`SERVERBENCH_CUDA_INCLUDE`, `SERVERBENCH_PREFILL_ATTN`, `SERVERBENCH_GEMV_MAX_ROWS`,
    /// `SERVERBENCH_NO_CUDA_GRAPHS`; docs/cuda-engine.md).
    pub fn options(vars: fn(&str) -> Option<String>) -> Result<CudaOptions> {
        Ok(CudaOptions::from_vars(vars)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(engine: &str) -> EngineChoice<'_> {
        EngineChoice {
            engine,
            model_dir: None,
            weights: "random",
            gpu: 0,
            step_log: None,
            vars: |_| None,
        }
    }

    #[test]
    fn the_emulated_engine_needs_no_set_up_and_an_unknown_one_is_refused() {
        assert!(cuda_serve(&choice("emulated"), "qwen3-8b")
            .unwrap()
            .is_none());
        let e = cuda_serve(&choice("tpu"), "qwen3-8b").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--engine: expected emulated or cuda, got \"tpu\""
        );
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let (vocab, of) = model_vocab(&choice("emulated"), &d, "x").unwrap();
        assert_eq!(
            (vocab, of),
            (d.model_spec().vocab, format!("model {}", d.model.name))
        );
    }

    #[test]
    fn a_replay_talks_to_its_url_or_to_the_cuda_engine_never_both() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let rt = Runtime::new().unwrap();
        let (url, local) =
            replay_server(Some("http://h:1"), &choice("emulated"), &d, "m", &rt).unwrap();
        assert_eq!(url, "http://h:1");
        assert!(local.is_none());
        let refused = |url, engine| {
            let r = replay_server(url, &choice(engine), &d, "m", &rt);
            r.err().expect("refused").to_string()
        };
        let none = refused(None, "emulated");
        assert!(none.to_string().starts_with("--url: required"), "{none}");
        let both = refused(Some("u"), "cuda");
        assert_eq!(both, "--url and --engine cuda exclude each other");
    }

    /// Stopped before the check, a connection to a URL sends nothing; a key for another machine over
    /// plain HTTP is withheld, with a warning that names its variable.
    #[test]
    fn a_connection_warns_of_a_withheld_key_and_skips_the_check_once_stopped() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let rt = Runtime::new().unwrap();
        let stop = Interrupt::new();
        stop.request("SIGINT");
        let target = ReplayTarget {
            url: Some("http://10.1.2.3:9"),
            engine: choice("emulated"),
            client: ClientChoice {
                api: "tokens",
                protocol: "cold",
                agentx: false,
                server: "vllm",
                timeout: 5.0,
                api_key: Some("k".into()),
                affinity_header: None,
                headers: &[],
                key_over_plain_http: false,
                tokenizer: None,
                output_tokenizer: None,
            },
            key_env: "MY_KEY",
            model: "m",
        };
        let notes = std::sync::Mutex::new(Vec::<String>::new());
        let note = |n: &str| notes.lock().unwrap().push(n.to_string());
        let c = connect(&target, &d, &rt, &stop, &note).unwrap();
        assert_eq!(
            (c.url.as_str(), c.local.is_none()),
            ("http://10.1.2.3:9", true)
        );
        let notes = notes.into_inner().unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].starts_with("warning: the API key in $MY_KEY is not sent"));
    }
}
