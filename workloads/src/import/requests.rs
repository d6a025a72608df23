//! The `requests` format: single timestamped requests, one JSON object per line, the shape a request-rate
//! benchmark exports — `arrival_s` (seconds from any origin), `input_tokens`, `output_tokens`, and
//! optionally `hash_ids` (one id per full prompt block, the id at `i` naming the prefix up to block
//! `i`) with their `block_size` (16 when absent). Each request is a tree of its own; it never reads a
//! timestamp as a dependency.

use super::{
    arrival_ns, at_least_one, has_key, lines, prompt_chain, typed_line, Ids, Importer, OneRequest,
};
use crate::error::InputError;
use crate::tree::SessionTree;
use serde::Deserialize;

/// Largest `block_size` the format accepts.
const MAX_BLOCK_SIZE: u64 = 1 << 20;

#[derive(Deserialize)]
struct RequestLine {
    arrival_s: f64,
    input_tokens: u64,
    output_tokens: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
    #[serde(default)]
    block_size: Option<u64>,
}

/// Single timestamped requests.
pub struct Requests;

impl Importer for Requests {
    fn name(&self) -> &'static str {
        "requests"
    }

    fn summary(&self) -> &'static str {
        "single timestamped requests: arrival_s, input_tokens, output_tokens, optional hash_ids and block_size"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "arrival_s")
    }

    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
        requests(file, text)
    }
}

fn requests(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    let mut trees = Vec::new();
    for (n, l) in lines(text) {
        let r: RequestLine = typed_line(file, n, l)?;
        let at = arrival_ns(file, n, "arrival_s", r.arrival_s, 1e9)?;
        let input = at_least_one(file, n, "input_tokens", r.input_tokens)?;
        let output = at_least_one(file, n, "output_tokens", r.output_tokens)?;
        let block_size = r.block_size.unwrap_or(16);
        if block_size == 0 || block_size > MAX_BLOCK_SIZE {
            return Err(InputError::new(
                file,
                n,
                "block_size",
                format!("must be between 1 and {MAX_BLOCK_SIZE} tokens"),
            ));
        }
        let blocks = prompt_chain(&r.hash_ids, r.input_tokens, block_size, 0, Ids::FullBlocks)
            .map_err(|e| InputError::new(file, n, "hash_ids", e))?;
        let one = OneRequest {
            input,
            output,
            blocks,
            block_size: block_size as u32,
            arrival_ns: at,
        };
        trees.push(one.tree(file, n, trees.len() as u64)?);
    }
    Ok(trees)
}
