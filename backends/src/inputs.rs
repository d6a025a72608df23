//! A real run's and a server's inputs resolved from the values of their flags (no clap): `--api` and
//! `--server`, the client's configuration (`ClientChoice`), `serve`'s configuration (`ServeChoice`), its
//! limits on its clients and the
//! token ids prompts are drawn from; errors name the flag. It reads the tokenizer files a user names;
//! it never prints (what it would say goes to the caller's `note`) and reads no environment variable.

use crate::{Api, ClientConfig, OutputCounter, ServeLimits, Server, Words};
use crate::{CudaServe, Fault, Generation, ServeConfig};
use anyhow::{anyhow, bail, Result};
use serverbench_sim::Deployment;
use serverbench_study::inputs::timeout;
use serverbench_workloads::tokens::{Vocab, FIRST_PROMPT_TOKEN};
use std::path::Path;
use std::sync::Arc;

/// `--api`: `tokens`, `text` or `chat`.
pub fn api(s: &str) -> Result<Api> {
    Api::parse(s).ok_or_else(|| anyhow!("--api: expected tokens, text or chat, got {s:?}"))
}

/// Whether `--api` sends prompts as text for the server to tokenize (`text`, `chat`): the simulated
/// side of a comparison then charges the profile's `tokenize_s_per_token`
/// ([`serverbench_sim::RunConfig::text_prompts`]).
pub fn text_prompts(s: &str) -> Result<bool> {
    Ok(api(s)? != Api::CompletionsTokens)
}

/// `--server`: a server kind.
pub fn server(s: &str) -> Result<Server> {
    Server::parse(s)
        .ok_or_else(|| anyhow!("--server: expected one of {}, got {s:?}", Server::names()))
}

/// `serve`'s limits on its clients: `--max-connections` and its three timeouts, in seconds.
pub fn serve_limits(
    max_connections: usize,
    header_s: f64,
    body_s: f64,
    drain_s: f64,
) -> Result<ServeLimits> {
    if max_connections == 0 || max_connections > 1 << 20 {
        bail!("--max-connections: must be between 1 and {}", 1 << 20);
    }
    Ok(ServeLimits {
        max_connections,
        header_timeout: timeout("header-timeout", header_s)?,
        body_timeout: timeout("body-timeout", body_s)?,
        drain_timeout: timeout("drain-timeout", drain_s)?,
    })
}

/// `serve`'s flags beside its deployment, model and engine, as given.
#[derive(Clone, Copy, Debug)]
pub struct ServeChoice<'a> {
    /// `--time-scale`.
    pub time_scale: f64,
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--header-timeout`, `--body-timeout` and `--drain-timeout`, seconds.
    pub timeouts: [f64; 3],
    /// `--model-seed`.
    pub model_seed: u64,
    /// `--fault`.
    pub fault: &'a str,
    /// `--tokenizer`.
    pub tokenizer: Option<&'a Path>,
}

/// The server's configuration: `d` served as `model`, by the CUDA engine when `cuda` is given, with
/// `serve`'s flags (a tokenizer only for the emulated engine, which writes its words).
pub fn serve_config(
    d: &Deployment,
    model: &str,
    cuda: Option<CudaServe>,
    c: &ServeChoice<'_>,
) -> Result<ServeConfig> {
    let words = match c.tokenizer {
        None => None,
        Some(_) if cuda.is_some() => {
            bail!("--tokenizer: the CUDA engine's server writes its own tokens; the tokenizer is for the emulated engine")
        }
        Some(path) => Some(Arc::new(
            Words::from_file(path).map_err(|e| anyhow!("--tokenizer: {e}"))?,
        )),
    };
    let [header, body, drain] = c.timeouts;
    Ok(ServeConfig {
        time_scale: c.time_scale,
        limits: serve_limits(c.max_connections, header, body, drain)?,
        generation: Generation {
            model_seed: c.model_seed,
            fault: Fault::parse(c.fault).map_err(|e| anyhow!("--fault: {e}"))?,
        },
        ..ServeConfig::new(d.clone(), model.to_string(), cuda, words)
    })
}

/// The token ids prompts are drawn from: `[100, --vocab)`, by default the model's whole vocabulary
/// (`model_vocab`, of the model `vocab_of` names). A `--vocab` past it is refused here: every prompt
/// would hold ids the model does not have, and every request would fail (4294967295 failed all 15
/// requests of a 60 s replay with 400s).
pub fn prompt_vocab(given: Option<u32>, model_vocab: u32, vocab_of: &str) -> Result<Vocab> {
    Vocab::for_prompts(given, model_vocab).ok_or_else(|| {
        anyhow!(
            "--vocab: must be between {} and {model_vocab} (the vocabulary of {vocab_of}), got {}",
            FIRST_PROMPT_TOKEN + 1,
            given.unwrap_or(model_vocab)
        )
    })
}

/// `replay`'s client flags, as given.
#[derive(Clone, Debug)]
pub struct ClientChoice<'a> {
    /// `--api`.
    pub api: &'a str,
    /// The replay's protocol: AgentX's send chat completions whatever `--api` says.
    pub protocol: &'a str,
    /// Whether the protocol is one of AgentX's.
    pub agentx: bool,
    /// `--server`.
    pub server: &'a str,
    /// `--timeout`, seconds.
    pub timeout: f64,
    /// The API key (the caller reads it from `--api-key-env`'s variable).
    pub api_key: Option<String>,
    /// `--affinity-header`.
    pub affinity_header: Option<&'a str>,
    /// `--header NAME:VALUE`, each.
    pub headers: &'a [String],
    /// `--api-key-over-http`.
    pub key_over_plain_http: bool,
    /// `--tokenizer`.
    pub tokenizer: Option<&'a Path>,
    /// `--output-tokenizer`.
    pub output_tokenizer: Option<&'a Path>,
}

/// The client's configuration for `model` at `url`, its tokenizers read.
pub fn client_config(
    c: &ClientChoice<'_>,
    url: &str,
    model: String,
    note: &dyn Fn(&str),
) -> Result<ClientConfig> {
    let timeout = timeout("timeout", c.timeout)?;
    let asked = api(c.api)?;
    let api = asked.under_protocol(c.agentx);
    // A note when --api asked for text (`tokens` is the default, not a choice).
    if api != asked && asked != Api::CompletionsTokens {
        note(&format!(
            "note: --protocol {} sends chat completions with messages, as AgentX does (not --api {})",
            c.protocol, c.api
        ));
    }
    // In the flags' order, so that the first bad one is the one named.
    let (server, headers) = (server(c.server)?, headers(c.headers)?);
    Ok(ClientConfig {
        base_url: url.to_string(),
        api,
        server,
        model,
        timeout,
        api_key: c.api_key.clone(),
        affinity_header: c.affinity_header.map(str::to_string),
        headers,
        key_over_plain_http: c.key_over_plain_http,
        words: words(c.tokenizer, api, note)?,
        output_counter: output_counter(c.output_tokenizer)?,
    })
}

/// `--header NAME:VALUE` flags as name and value, trimmed.
fn headers(given: &[String]) -> Result<Vec<(String, String)>> {
    given
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| anyhow!("--header: expected NAME:VALUE, got {h:?}"))
        })
        .collect()
}

/// `--tokenizer`'s one-token words, for text prompts (token-id prompts need none).
fn words(path: Option<&Path>, api: Api, note: &dyn Fn(&str)) -> Result<Option<Arc<Words>>> {
    let Some(path) = path else { return Ok(None) };
    if api == Api::CompletionsTokens {
        bail!("--tokenizer: prompts of --api tokens are token ids, counted exactly already; give --api text or --api chat");
    }
    let w = Words::from_file(path).map_err(|e| anyhow!("--tokenizer: {e}"))?;
    note(&format!(
        "prompts from {} one-token words of {} ({} special token(s) added per prompt)",
        w.len(),
        path.display(),
        w.special_tokens()
    ));
    Ok(Some(Arc::new(w)))
}

/// `--output-tokenizer`'s counter of streamed output.
fn output_counter(path: Option<&Path>) -> Result<Option<Arc<OutputCounter>>> {
    path.map(|p| {
        OutputCounter::from_file(p)
            .map(Arc::new)
            .map_err(|e| anyhow!("--output-tokenizer: {e}"))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice<'a>(api: &'a str, protocol: &'a str, headers: &'a [String]) -> ClientChoice<'a> {
        ClientChoice {
            api,
            protocol,
            agentx: protocol.starts_with("agentx"),
            server: "vllm",
            timeout: 600.0,
            api_key: None,
            affinity_header: Some("X-Session-ID"),
            headers,
            key_over_plain_http: false,
            tokenizer: None,
            output_tokenizer: None,
        }
    }

    /// Only a prompt of token ids reaches the server untokenized; a bad `--api` names the flag.
    #[test]
    fn text_and_chat_prompts_are_tokenized_by_the_server() {
        assert!(!text_prompts("tokens").unwrap());
        assert!(text_prompts("text").unwrap());
        assert!(text_prompts("chat").unwrap());
        assert!(text_prompts("words")
            .unwrap_err()
            .to_string()
            .contains("--api"));
    }

    /// Headers are split at their first colon and trimmed; AgentX's protocols send chat completions,
    /// with a note only when another form was asked for.
    #[test]
    fn a_client_is_configured_from_its_flags() {
        let notes = std::cell::RefCell::new(Vec::<String>::new());
        let note = |n: &str| notes.borrow_mut().push(n.into());
        let h = ["A: b:c".to_string()];
        let c =
            client_config(&choice("tokens", "cold", &h), "http://h", "m".into(), &note).unwrap();
        assert_eq!(c.headers, [("A".to_string(), "b:c".to_string())]);
        assert_eq!((c.api, c.timeout.as_secs()), (Api::CompletionsTokens, 600));
        assert_eq!(c.affinity_header.as_deref(), Some("X-Session-ID"));
        let x = client_config(&choice("tokens", "agentx", &[]), "u", "m".into(), &note).unwrap();
        assert_ne!(x.api, Api::CompletionsTokens);
        assert!(notes.borrow().is_empty());
        client_config(&choice("text", "agentx", &[]), "u", "m".into(), &note).unwrap();
        assert!(notes.borrow()[0].contains("--protocol agentx sends chat completions"));
        let bad = ["nocolon".to_string()];
        let e = client_config(&choice("tokens", "cold", &bad), "u", "m".into(), &note);
        assert!(e
            .unwrap_err()
            .to_string()
            .starts_with("--header: expected NAME:VALUE"));
        let e = client_config(&choice("nope", "cold", &[]), "u", "m".into(), &note);
        assert!(e.unwrap_err().to_string().starts_with("--api:"));
        let tokenized = ClientChoice {
            tokenizer: Some(Path::new("t.json")),
            ..choice("tokens", "cold", &[])
        };
        let e = client_config(&tokenized, "u", "m".into(), &note).unwrap_err();
        assert!(e
            .to_string()
            .contains("prompts of --api tokens are token ids"));
    }

    /// `serve`'s flags give its configuration; a tokenizer file that cannot be read and a fault that
    /// cannot be parsed are refused, naming their flag.
    #[test]
    fn a_server_is_configured_from_its_flags() {
        let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
        let c = ServeChoice {
            time_scale: 4.0,
            max_connections: 8,
            timeouts: [1.0, 2.0, 3.0],
            model_seed: 5,
            fault: "none",
            tokenizer: None,
        };
        let cfg = serve_config(&d, "m", None, &c).unwrap();
        assert_eq!((cfg.time_scale, cfg.limits.max_connections), (4.0, 8));
        assert_eq!(
            (cfg.generation.model_seed, cfg.model_name.as_str()),
            (5, "m")
        );
        let e = serve_config(&d, "m", None, &ServeChoice { fault: "x", ..c }).unwrap_err();
        assert!(e.to_string().starts_with("--fault:"), "{e}");
        let missing = Some(Path::new("/nonexistent/tokenizer.json"));
        let e = serve_config(
            &d,
            "m",
            None,
            &ServeChoice {
                tokenizer: missing,
                ..c
            },
        );
        assert!(e.unwrap_err().to_string().starts_with("--tokenizer:"));
    }

    /// `serve`'s limits and the prompts' vocabulary are refused outside their ranges, naming the flag.
    #[test]
    fn limits_and_vocabularies_name_their_flag() {
        let l = serve_limits(8, 1.0, 2.0, 3.0).unwrap();
        assert_eq!((l.max_connections, l.drain_timeout.as_secs()), (8, 3));
        assert!(serve_limits(0, 1.0, 1.0, 1.0)
            .unwrap_err()
            .to_string()
            .starts_with("--max-connections"));
        assert!(serve_limits(1, 1.0, -1.0, 1.0)
            .unwrap_err()
            .to_string()
            .starts_with("--body-timeout"));
        assert!(prompt_vocab(None, 1000, "model m").is_ok());
        let e = prompt_vocab(Some(2000), 1000, "model m")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--vocab: must be between 101 and 1000 (the vocabulary of model m), got 2000"
        );
    }
}
