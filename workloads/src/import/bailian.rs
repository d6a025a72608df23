//! Qwen-Bailian usage traces: one request per line (`chat_id`, `parent_chat_id`, `timestamp` in
//! seconds, lengths, `hash_ids` of 16-token blocks); sessions are the trees `parent_chat_id` forms, and
//! each request's timestamp is its recorded arrival.

use super::{at_least_one, has_key, lines, prompt_chain, typed_line, Ids, Importer};
use crate::error::InputError;
use crate::tree::{Request, RequestKind, SessionTree};
use serde::Deserialize;
use std::collections::HashMap;

#[derive(Deserialize)]
struct BailianLine {
    chat_id: i64,
    parent_chat_id: i64,
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    #[allow(dead_code)]
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    turn: Option<u64>,
    hash_ids: Vec<u64>,
}

/// Qwen-Bailian JSONL.
pub struct Bailian;

impl Importer for Bailian {
    fn name(&self) -> &'static str {
        "bailian"
    }

    fn aliases(&self) -> &'static [&'static str] {
        &["qwen-bailian"]
    }

    fn summary(&self) -> &'static str {
        "Qwen-Bailian JSONL: one request per line, trees by parent_chat_id, 16-token blocks"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "chat_id")
    }

    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
        bailian(file, text)
    }
}

fn bailian(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    // chat_id -> (tree index, request index, timestamp)
    let mut where_is: HashMap<i64, (usize, u32, f64)> = HashMap::new();
    // per tree: its requests, their arrival times and the line it starts on
    let mut trees: Vec<(Vec<Request>, Vec<u64>, usize)> = Vec::new();
    for (n, l) in lines(text) {
        let b: BailianLine = typed_line(file, n, l)?;
        if !(b.timestamp >= 0.0 && b.timestamp.is_finite()) {
            return Err(InputError::new(
                file,
                n,
                "timestamp",
                "must be a non-negative number of seconds",
            ));
        }
        let input = at_least_one(file, n, "input_length", b.input_length)?;
        let output = at_least_one(file, n, "output_length", b.output_length)?;
        let blocks = prompt_chain(&b.hash_ids, b.input_length, 16, 0, Ids::FullBlocks)
            .map_err(|e| InputError::new(file, n, "hash_ids", e))?;
        let (tree, deps, think_s) = if b.parent_chat_id < 0 {
            trees.push((Vec::new(), Vec::new(), n));
            (trees.len() - 1, vec![], 0.0)
        } else {
            let &(t, r, ts) = where_is.get(&b.parent_chat_id).ok_or_else(|| {
                InputError::new(
                    file,
                    n,
                    "parent_chat_id",
                    format!(
                        "chat {} does not appear on an earlier line",
                        b.parent_chat_id
                    ),
                )
            })?;
            (t, vec![r], (b.timestamp - ts).max(0.0))
        };
        trees[tree].1.push((b.timestamp * 1e9).round() as u64);
        let requests = &mut trees[tree].0;
        let id = requests.len() as u32;
        let turn = b.turn.map_or(id, |t| t.min(u32::MAX as u64) as u32);
        requests.push(Request {
            id,
            agent: 0,
            kind: RequestKind::RootTurn,
            deps,
            think_ns: (think_s * 1e9) as u64,
            blocks,
            input_tokens: input,
            output_tokens: output,
            background: false,
            turn,
        });
        if where_is
            .insert(b.chat_id, (tree, id, b.timestamp))
            .is_some()
        {
            return Err(InputError::new(
                file,
                n,
                "chat_id",
                format!("chat {} appears twice", b.chat_id),
            ));
        }
    }
    trees
        .into_iter()
        .enumerate()
        .map(|(i, (reqs, arrivals, line))| {
            SessionTree::new(i as u64, 16, reqs)
                .and_then(|t| t.with_arrivals(arrivals))
                .map_err(|e| InputError::new(file, line, "", e.to_string()))
        })
        .collect()
}
