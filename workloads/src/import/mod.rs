//! Trace importers, one file per format (Weka/Claude-Code, Mooncake, Qwen-Bailian, the native JSONL
//! format) behind [`Importer`], and the shared pieces they use. Importers accept unknown fields and
//! meaningful nulls, and reject what makes a trace meaningless, naming the file, line and field. They
//! never panic on input.
//!
//! Adding a format: a file beside `mooncake.rs` with a unit struct implementing [`Importer`], and one
//! line in the `formats!` list below.

use crate::error::InputError;
use crate::generator::TreeSource;
use crate::hash::chain_ids;
use crate::tree::{Blocks, SessionTree};
use serde::Deserialize;
use std::io::Write;
use std::sync::Arc;

/// One trace format: how to recognise it and how to read it into session trees.
pub trait Importer: Sync + 'static {
    /// The name `--trace-format` takes.
    fn name(&self) -> &'static str;
    /// Other names it is known by.
    fn aliases(&self) -> &'static [&'static str] {
        &[]
    }
    /// One line for help texts: what the format is.
    fn summary(&self) -> &'static str;
    /// Whether the start of a file (its first record's keys) looks like this format.
    fn detects(&self, head: &str) -> bool;
    /// Reads the whole text; errors name `file`, the line and the field.
    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError>;
}

mod bailian;
mod mooncake;
mod native;
mod requests;
mod weka;
pub use weka::{write_weka, WekaExportError};

/// Declares the registry: every format, in detection order (the first whose `detects` holds wins).
macro_rules! formats {
    ($($module:ident :: $ty:ident),+ $(,)?) => {
        const ALL: &[&dyn Importer] = &[$(&$module::$ty),+];
    };
}

formats![
    native::Native,
    bailian::Bailian,
    mooncake::Mooncake,
    requests::Requests,
    weka::Weka
];

/// A trace format of the registry.
#[derive(Clone, Copy)]
pub struct TraceFormat(&'static dyn Importer);

impl TraceFormat {
    /// Weka / Claude-Code agent traces.
    pub const WEKA: TraceFormat = TraceFormat(&weka::Weka);
    /// Mooncake JSONL.
    pub const MOONCAKE: TraceFormat = TraceFormat(&mooncake::Mooncake);
    /// Qwen-Bailian JSONL.
    pub const BAILIAN: TraceFormat = TraceFormat(&bailian::Bailian);
    /// Single timestamped requests (`arrival_s`, `input_tokens`, `output_tokens`).
    pub const REQUESTS: TraceFormat = TraceFormat(&requests::Requests);
    /// This tool's own export.
    pub const NATIVE: TraceFormat = TraceFormat(&native::Native);

    /// Every format, in detection order.
    pub fn all() -> impl Iterator<Item = TraceFormat> {
        ALL.iter().map(|&f| TraceFormat(f))
    }

    /// The format a name (or alias) stands for.
    pub fn parse(name: &str) -> Option<TraceFormat> {
        Self::all().find(|f| f.name() == name || f.0.aliases().contains(&name))
    }

    /// Names of every format, comma-separated (for help and error messages).
    pub fn names() -> String {
        Self::all().map(|f| f.name()).collect::<Vec<_>>().join(", ")
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        self.0.name()
    }

    /// Other names it is known by.
    pub fn aliases(self) -> &'static [&'static str] {
        self.0.aliases()
    }

    /// What it is, in one line.
    pub fn summary(self) -> &'static str {
        self.0.summary()
    }

    /// Guesses the format from the keys of the first record.
    pub fn detect(text: &str) -> Option<TraceFormat> {
        let head: String = text.chars().take(4096).collect();
        Self::all().find(|f| f.0.detects(&head))
    }
}

impl PartialEq for TraceFormat {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for TraceFormat {}

impl std::fmt::Debug for TraceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `head` holds the JSON key `key`.
pub(super) fn has_key(head: &str, key: &str) -> bool {
    head.contains(&format!("\"{key}\""))
}

/// Session trees read from a file; as a stream it cycles through the very same trees (`TraceRepeat::Same`;
/// `FreshRepeats` makes later passes new sessions).
#[derive(Clone, Debug)]
pub struct Trace {
    trees: Vec<Arc<SessionTree>>,
}

impl Trace {
    /// Wraps trees (at least one).
    pub fn new(trees: Vec<SessionTree>) -> Option<Trace> {
        (!trees.is_empty()).then(|| Trace {
            trees: trees.into_iter().map(Arc::new).collect(),
        })
    }

    /// The trees in file order.
    pub fn trees(&self) -> &[Arc<SessionTree>] {
        &self.trees
    }
}

impl TreeSource for Trace {
    fn tree(&self, k: u64) -> Arc<SessionTree> {
        self.trees[(k % self.trees.len() as u64) as usize].clone()
    }

    fn finite_len(&self) -> Option<u64> {
        Some(self.trees.len() as u64)
    }
}

/// Reads a trace file; `format` `None` detects it from the content.
pub fn read_trace(
    path: &std::path::Path,
    format: Option<TraceFormat>,
) -> Result<Trace, InputError> {
    let text = serverbench_config::read_text(path, serverbench_config::MAX_DATA_BYTES)?;
    parse_trace(&path.display().to_string(), &text, format)
}

/// Parses trace text; `file` only names the source in errors.
pub fn parse_trace(
    file: &str,
    text: &str,
    format: Option<TraceFormat>,
) -> Result<Trace, InputError> {
    let Some(format) = format.or_else(|| TraceFormat::detect(text)) else {
        return Err(InputError::new(
            file,
            1,
            "",
            format!(
                "unknown trace format (expected records of one of: {})",
                TraceFormat::names()
            ),
        ));
    };
    let trees = format.0.parse(file, text)?;
    Trace::new(trees).ok_or_else(|| InputError::new(file, 0, "", "the file holds no request"))
}

/// Writes trees in the native format: one JSON tree per line.
pub fn write_native<W: Write>(
    trees: impl IntoIterator<Item = Arc<SessionTree>>,
    mut w: W,
) -> std::io::Result<()> {
    for t in trees {
        serde_json::to_writer(&mut w, &*t)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// Writes trees as AIPerf's multi-turn Mooncake trace (`--custom-dataset-type mooncake_trace`): one JSON
/// line per request, `session_id` naming its tree, `input_length`, `output_length`, `hash_ids` (one per
/// full block of the tree's `block_size` tokens, numbered 0, 1, 2… in order of first use, equal blocks
/// equal ids: give AIPerf the same `--isl-block-size`) and, from a session's second request on, `delay`
/// (its think time, ms). AIPerf plays a session's turns one after another, so sub-agents run in turn
/// rather than in parallel and joins become sequential waits.
pub fn write_aiperf<W: Write>(
    trees: impl IntoIterator<Item = Arc<SessionTree>>,
    mut w: W,
) -> std::io::Result<()> {
    let mut ids: std::collections::HashMap<u64, u64> = Default::default();
    for (k, t) in trees.into_iter().enumerate() {
        for r in t.requests() {
            let hash_ids: Vec<u64> = r
                .blocks
                .as_slice()
                .iter()
                .map(|b| {
                    let next = ids.len() as u64;
                    *ids.entry(*b).or_insert(next)
                })
                .collect();
            let mut line = serde_json::json!({
                "session_id": format!("tree-{k}-{}", t.session_id),
                "input_length": r.input_tokens,
                "output_length": r.output_tokens,
                "hash_ids": hash_ids,
            });
            if r.id > 0 {
                line["delay"] = serde_json::json!(r.think_ns / 1_000_000);
            }
            serde_json::to_writer(&mut w, &line)?;
            w.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// Non-empty lines with their 1-based numbers.
pub(super) fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
}

/// Deserialises one JSON line, naming the field at fault (and refusing a second record on the line).
pub(super) fn typed_line<T: for<'de> Deserialize<'de>>(
    file: &str,
    line: usize,
    text: &str,
) -> Result<T, InputError> {
    serverbench_config::parse_json_line(file, line, text)
}

/// Whether a format gives an id to a trailing partial block.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Ids {
    /// Only full blocks have ids (Weka, Bailian).
    FullBlocks,
    /// The last, partial block has an id too (Mooncake: `ceil(input / 512)` ids).
    WithPartial,
}

/// A chain of `ids` for a prompt of `input` tokens in blocks of `block_size`; a trailing id for a
/// partial block is dropped where the format has one (it cannot be cached), a longer chain is an error.
pub(super) fn prompt_chain(
    ids: &[u64],
    input: u64,
    block_size: u64,
    salt: u64,
    kind: Ids,
) -> Result<Blocks, String> {
    let full = (input / block_size) as usize;
    let keep = if ids.len() <= full {
        ids.len()
    } else if kind == Ids::WithPartial && ids.len() == full + 1 && input % block_size != 0 {
        full
    } else {
        return Err(format!(
            "{} blocks of {block_size} tokens exceed the input of {input} tokens",
            ids.len()
        ));
    };
    Ok(Blocks::from_vec(chain_ids(&ids[..keep], salt)))
}

/// A trace line that is a whole session: one root request with its recorded arrival.
pub(super) struct OneRequest {
    pub input: u32,
    pub output: u32,
    pub blocks: Blocks,
    pub block_size: u32,
    pub arrival_ns: u64,
}

impl OneRequest {
    /// Tree `id` of one request, from line `line` of `file` (the error names them).
    pub fn tree(self, file: &str, line: usize, id: u64) -> Result<SessionTree, InputError> {
        let r = crate::tree::Request {
            id: 0,
            agent: 0,
            kind: crate::tree::RequestKind::RootTurn,
            deps: vec![],
            think_ns: 0,
            blocks: self.blocks,
            input_tokens: self.input,
            output_tokens: self.output,
            background: false,
            turn: 0,
        };
        SessionTree::new(id, self.block_size, vec![r])
            .and_then(|t| t.with_arrivals(vec![self.arrival_ns]))
            .map_err(|e| InputError::new(file, line, "", e.to_string()))
    }
}

/// A recorded time in `unit_ns` nanoseconds per unit as nanoseconds; the error names the field.
pub(super) fn arrival_ns(
    file: &str,
    line: usize,
    field: &str,
    t: f64,
    unit_ns: f64,
) -> Result<u64, InputError> {
    let ns = t * unit_ns;
    if !(t >= 0.0 && ns < u64::MAX as f64) {
        return Err(InputError::new(
            file,
            line,
            field,
            format!("must be a non-negative time, got {t}"),
        ));
    }
    Ok(ns.round() as u64)
}

pub(super) fn at_least_one(
    file: &str,
    line: usize,
    field: &str,
    v: u64,
) -> Result<u32, InputError> {
    match v {
        0 => Err(InputError::new(file, line, field, "must be at least 1")),
        v if v > u32::MAX as u64 => Err(InputError::new(file, line, field, "too large")),
        v => Ok(v as u32),
    }
}
