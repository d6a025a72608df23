//! Mooncake JSONL (FAST'25 release): one request per line with `timestamp` (ms), `input_length`,
//! `output_length` and `hash_ids` (one id per 512-token block, the last one partial). Each request is a
//! tree of its own, with its timestamp as its recorded arrival.

use super::{
    arrival_ns, at_least_one, has_key, lines, prompt_chain, typed_line, Ids, Importer, OneRequest,
};
use crate::error::InputError;
use crate::tree::SessionTree;
use serde::Deserialize;

#[derive(Deserialize)]
struct MooncakeLine {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
}

/// Mooncake JSONL.
pub struct Mooncake;

impl Importer for Mooncake {
    fn name(&self) -> &'static str {
        "mooncake"
    }

    fn summary(&self) -> &'static str {
        "Mooncake JSONL: one request per line, 512-token blocks; each request is a tree of its own"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "input_length")
    }

    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
        mooncake(file, text)
    }
}

fn mooncake(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    let mut trees = Vec::new();
    for (n, l) in lines(text) {
        let m: MooncakeLine = typed_line(file, n, l)?;
        let at = arrival_ns(file, n, "timestamp", m.timestamp, 1e6)?;
        let input = at_least_one(file, n, "input_length", m.input_length)?;
        let output = at_least_one(file, n, "output_length", m.output_length)?;
        let blocks = prompt_chain(&m.hash_ids, m.input_length, 512, 0, Ids::WithPartial)
            .map_err(|e| InputError::new(file, n, "hash_ids", e))?;
        let one = OneRequest {
            input,
            output,
            blocks,
            block_size: 512,
            arrival_ns: at,
        };
        trees.push(one.tree(file, n, trees.len() as u64)?);
    }
    Ok(trees)
}
