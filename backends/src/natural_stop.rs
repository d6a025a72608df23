//! `replay`'s natural-stop check: one request without `ignore_eos`, on a prompt of its own (no block of
//! any workload, so that even a cold start finds an empty prefix cache), and whether the server ended
//! it at end-of-sequence. Never prints; the caller renders the answer.

use crate::client::HttpClient;
use serde::Serialize;
use serverbench_workloads::hash::mix2;
use serverbench_workloads::tokens::{block_tokens, Vocab};

/// The probe's prompt and its output limit, tokens.
pub const NATURAL_STOP_TOKENS: u32 = 256;

/// What the probe saw.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NaturalStop {
    /// Why the request failed, if it did.
    pub error: Option<String>,
    /// The stream's finish reason.
    pub finish_reason: Option<String>,
    /// Output tokens received.
    pub tokens: u32,
}

impl NaturalStop {
    /// Whether the server stopped the request at end-of-sequence, before the output limit.
    pub fn honoured(&self) -> bool {
        self.finish_reason.as_deref() == Some("stop") && self.tokens < NATURAL_STOP_TOKENS
    }
}

/// The probe's prompt for the replay of `seed`: [`NATURAL_STOP_TOKENS`] tokens of a block no
/// workload uses.
pub fn natural_stop_prompt(seed: u64, vocab: Vocab) -> Vec<u32> {
    let mut prompt = Vec::new();
    block_tokens(
        mix2(seed, 0x5709_7E57),
        NATURAL_STOP_TOKENS,
        vocab,
        &mut prompt,
    );
    prompt
}

/// Sends the probe of the replay of `seed`.
pub async fn natural_stop_probe(client: &HttpClient, seed: u64, vocab: Vocab) -> NaturalStop {
    let prompt = natural_stop_prompt(seed, vocab);
    let r = client
        .stream(0, &prompt, NATURAL_STOP_TOKENS, false, None)
        .await;
    NaturalStop {
        finish_reason: r.finish_reason.clone(),
        tokens: r.tokens(),
        error: r.error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_is_the_seed_s_own_and_inside_the_vocabulary() {
        let v = Vocab::new(100, 1000).unwrap();
        let p = natural_stop_prompt(7, v);
        assert_eq!(p.len(), NATURAL_STOP_TOKENS as usize);
        assert!(p.iter().all(|&t| (100..1000).contains(&t)));
        assert_eq!(p, natural_stop_prompt(7, v));
        assert_ne!(p, natural_stop_prompt(8, v));
    }

    #[test]
    fn only_a_stop_before_the_limit_is_honoured() {
        let at = |reason: &str, tokens| NaturalStop {
            error: None,
            finish_reason: Some(reason.into()),
            tokens,
        };
        assert!(at("stop", 60).honoured());
        assert!(!at("stop", NATURAL_STOP_TOKENS).honoured());
        assert!(!at("length", 60).honoured());
        let json = serde_json::to_string(&at("stop", 60)).unwrap();
        assert_eq!(json, r#"{"error":null,"finish_reason":"stop","tokens":60}"#);
    }
}
