//! Mooncake JSONL (FAST'25 release): one request per line with `timestamp` (ms), `input_length`,
//! `output_length` and `hash_ids` (one id per 512-token block, the last one partial). Each request is a
//! tree of its own, with its timestamp as its recorded arrival.

use super::{arrival_ns, at_least_one, has_key, lines, prompt_chain, typed_line, Ids, Importer};
use crate::error::InputError;
use crate::tree::{Request, RequestKind, SessionTree};
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
        let r = Request {
            id: 0,
            agent: 0,
            kind: RequestKind::RootTurn,
            deps: vec![],
            think_ns: 0,
            blocks,
            input_tokens: input,
            output_tokens: output,
            background: false,
            turn: 0,
        };
        let tree = SessionTree::new(trees.len() as u64, 512, vec![r])
            .and_then(|t| t.with_arrivals(vec![at]))
            .map_err(|e| InputError::new(file, n, "", e.to_string()))?;
        trees.push(tree);
    }
    Ok(trees)
}
