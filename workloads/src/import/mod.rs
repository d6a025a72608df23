//! Trace importers, one file per format (Weka/Claude-Code, Mooncake, Qwen-Bailian, the native JSONL
//! format) behind [`Importer`], and the shared pieces they use. Importers accept unknown fields and
//! meaningful nulls, and reject what makes a trace meaningless, naming the file, line and field. They
//! never panic on input.
//!
//! Adding a format: a file beside `mooncake.rs` with a unit struct implementing [`Importer`], and one
//! line in the `formats!` list below.

pub(super) use crate::corpus::lines;
use crate::corpus::Session;
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
    /// Reads the whole text; errors name `file`, the line and the field. A format that reads
    /// several files as one input (`reduce`) reads a single file through that.
    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
        let files = [SourceFile {
            name: file.to_string(),
            text: text.to_string(),
        }];
        match self.reduce(&files, false) {
            Some(r) => Ok(r?.trees()),
            None => Err(InputError::new(file, 0, "", "this format reads no trees")),
        }
    }
    /// For formats that record each model call's numbers (agents' own logs, the corpus): the files
    /// (one session's log with its sub-agents' files, or many sessions) reduced to corpus sessions,
    /// with what was left out and why. `None` for formats that are only trees. `lenient`: a session
    /// that cannot be reduced is left out and counted in `skipped` (with the error) instead of
    /// stopping the read.
    fn reduce(&self, _files: &[SourceFile], _lenient: bool) -> Option<Result<Reduced, InputError>> {
        None
    }
}

/// One input file: its name (for errors) and its text.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// The path as the user gave it (or as found under a folder they gave).
    pub name: String,
    /// Its text.
    pub text: String,
}

/// Something an importer left out, where and why (counted in its summary, never silently dropped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip {
    /// The file.
    pub file: String,
    /// 1-based line (0 for a whole file).
    pub line: usize,
    /// What was left out and why, in words that group alike skips.
    pub what: String,
}

impl Skip {
    /// What a lenient read left out because of `e` (the whole session, or the file).
    pub fn unreadable(e: &InputError) -> Skip {
        let field = if e.field.is_empty() {
            String::new()
        } else {
            format!("{}: ", e.field)
        };
        Skip {
            file: e.file.clone(),
            line: e.line,
            what: format!("a session that cannot be reduced ({field}{})", e.reason),
        }
    }

    /// A skip at `file:line`.
    pub fn new(file: &str, line: usize, what: impl Into<String>) -> Skip {
        Skip {
            file: file.to_string(),
            line,
            what: what.into(),
        }
    }
}

/// Sessions reduced from logs, and what was left out.
#[derive(Clone, Debug, Default)]
pub struct Reduced {
    /// The sessions, in a stable order.
    pub sessions: Vec<Session>,
    /// What was left out (entries that are not model calls, sessions without one), and why.
    pub skipped: Vec<Skip>,
    /// Per session, the files it was read from (a log with its sub-agents' files).
    pub origins: Vec<Vec<String>>,
    /// The format's own trees, one per session in order, where they say more than a session's one
    /// prefix per call can (a Weka trace's hash ids: a sub-agent's system prompt shared with its
    /// siblings); replays use them.
    pub own_trees: Option<Vec<SessionTree>>,
}

impl Reduced {
    /// Adds a session read from `files`.
    pub fn push(&mut self, session: Session, files: Vec<String>) {
        self.sessions.push(session);
        self.origins.push(files);
    }

    /// The sessions as trees, numbered in order.
    pub fn trees(&self) -> Vec<SessionTree> {
        self.sessions
            .iter()
            .enumerate()
            .map(|(i, s)| s.to_tree(i as u64))
            .collect()
    }

    /// What was skipped, grouped by reason: `(count, reason)`, most frequent first.
    pub fn skip_counts(&self) -> Vec<(usize, String)> {
        let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
        for s in &self.skipped {
            *by.entry(&s.what).or_default() += 1;
        }
        let mut v: Vec<(usize, String)> = by.into_iter().map(|(w, n)| (n, w.to_string())).collect();
        v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        v
    }
}

mod bailian;
mod claude_code;
mod codex;
mod corpus;
mod mooncake;
mod native;
mod parquet;
mod requests;
mod trajectory;
mod weka;
pub use weka::{write_weka, WekaExportError, MAX_SUBAGENT_DEPTH};

/// Declares the registry: every format, in detection order (the first whose `detects` holds wins).
macro_rules! formats {
    ($($module:ident :: $ty:ident),+ $(,)?) => {
        const ALL: &[&dyn Importer] = &[$(&$module::$ty),+];
    };
}

formats![
    corpus::Corpus,
    claude_code::ClaudeCode,
    codex::Codex,
    trajectory::Trajectory,
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
    /// Claude Code's session logs.
    pub const CLAUDE_CODE: TraceFormat = TraceFormat(&claude_code::ClaudeCode);
    /// Codex CLI rollouts.
    pub const CODEX: TraceFormat = TraceFormat(&codex::Codex);
    /// SWE-agent and mini-swe-agent trajectories.
    pub const TRAJECTORY: TraceFormat = TraceFormat(&trajectory::Trajectory);
    /// The corpus format: real sessions reduced to numbers.
    pub const CORPUS: TraceFormat = TraceFormat(&corpus::Corpus);

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

/// The last component of a file name (ids built from it do not depend on where the file lies).
pub(super) fn base_name(name: &str) -> &str {
    name.rsplit(['/', '\\']).next().unwrap_or(name)
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

    /// Wraps shared trees (at least one).
    pub fn of_shared(trees: Vec<Arc<SessionTree>>) -> Option<Trace> {
        (!trees.is_empty()).then_some(Trace { trees })
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

/// Reads a trace: a file, or a folder of files of one format (a Claude Code project folder, a folder
/// of trajectories); `format` `None` detects it from the content.
pub fn read_trace(
    path: &std::path::Path,
    format: Option<TraceFormat>,
) -> Result<Trace, InputError> {
    import(&[path], format)?.trace()
}

/// What reading some inputs gave.
#[derive(Clone, Debug)]
pub struct Imported {
    /// The format they were read as.
    pub format: TraceFormat,
    /// The session trees.
    pub trees: Vec<SessionTree>,
    /// For formats that reduce to corpus sessions: the sessions (one per tree, in order) and what
    /// was left out.
    pub reduced: Option<Reduced>,
    /// Files found under folders that were not of the format, left unread.
    pub unread: Vec<Skip>,
}

impl Imported {
    /// The import as corpus sessions, each with the files it was read from: a log's reduced sessions
    /// as read (with their recorded times and cache reads), or any other format's trees with their
    /// prefixes found from block ids (read from no file of their own).
    pub fn into_corpus(self) -> (Vec<Session>, Vec<Vec<String>>) {
        if let Some(r) = self.reduced {
            return (r.sessions, r.origins);
        }
        let source = self.format.name();
        let sessions: Vec<Session> = self
            .trees
            .iter()
            .map(|t| Session::from_tree(t, source))
            .collect();
        let origins = vec![Vec::new(); sessions.len()];
        (sessions, origins)
    }

    /// Leaves out every tree whose peak context (prompt + output of any request, sub-agents' included)
    /// passes `max_context`, as AgentX's `--max-context-length` does, with its session; says so in
    /// what was left out. Returns how many trees were left out; an error when none is left.
    pub fn keep_within(&mut self, max_context: u32) -> Result<usize, InputError> {
        let keep: Vec<bool> = self
            .trees
            .iter()
            .map(|t| t.peak_context() <= max_context as u64)
            .collect();
        let scanned = keep.len();
        let dropped = keep.iter().filter(|k| !**k).count();
        if dropped == 0 {
            return Ok(0);
        }
        if dropped == scanned {
            return Err(InputError::new(
                "the inputs",
                0,
                "",
                format!("all {scanned} traces have a request longer than --max-context-length {max_context} (prompt + output)"),
            ));
        }
        let why = format!(
            "a trace whose peak context (prompt + output) passes --max-context-length {max_context}"
        );
        self.retain(&keep, &why);
        Ok(dropped)
    }

    /// Keeps only the trees `keep` accepts, with their sessions; each one left out is counted with
    /// `why` among what was left out. Returns how many were left out.
    pub fn keep_sessions(&mut self, keep: impl Fn(&SessionTree) -> bool, why: &str) -> usize {
        let flags: Vec<bool> = self.trees.iter().map(keep).collect();
        self.retain(&flags, why)
    }

    fn retain(&mut self, keep: &[bool], why: &str) -> usize {
        let scanned = keep.len();
        let dropped = keep.iter().filter(|k| !**k).count();
        if dropped == 0 {
            return 0;
        }
        let mut k = keep.iter();
        self.trees.retain(|_| *k.next().expect("one flag per tree"));
        let r = self.reduced.get_or_insert_with(Reduced::default);
        if r.sessions.len() == scanned {
            let mut k = keep.iter();
            r.sessions
                .retain(|_| *k.next().expect("one flag per session"));
            let mut k = keep.iter();
            r.origins
                .retain(|_| *k.next().expect("one flag per session"));
        }
        r.skipped
            .extend((0..dropped).map(|_| Skip::new("the inputs", 0, why.to_string())));
        dropped
    }

    /// The trees as a trace (an error when there are none, naming the first input).
    pub fn trace(self) -> Result<Trace, InputError> {
        Trace::new(self.trees)
            .ok_or_else(|| InputError::new("the inputs", 0, "", "they hold no request"))
    }
}

/// Most files one command reads from the folders it is given.
pub const MAX_INPUT_FILES: usize = 100_000;

/// The files a list of paths names: each file itself, each folder's data files (recursively, in name
/// order: `.json`, `.jsonl`, `.traj`, `.gz` and `.parquet` files, hidden folders skipped; a folder's
/// other files, a LICENSE or a README, are not read). A Parquet file is read as JSON lines, one per row
/// (null fields left out).
pub fn source_files(paths: &[&std::path::Path]) -> Result<Vec<SourceFile>, InputError> {
    let mut names = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for &p in paths {
        if p.is_dir() {
            let before = names.len();
            walk(p, &mut names, &mut seen)?;
            if names.len() == before {
                return Err(InputError::new(
                    &p.display().to_string(),
                    0,
                    "",
                    "a folder with no trace file in it (.json, .jsonl, .traj, .gz or .parquet; hidden folders are skipped)",
                ));
            }
        } else {
            names.push(p.to_path_buf());
        }
    }
    if names.len() > MAX_INPUT_FILES {
        return Err(InputError::new(
            &paths[0].display().to_string(),
            0,
            "",
            format!("more than {MAX_INPUT_FILES} files"),
        ));
    }
    names
        .into_iter()
        .map(|p| {
            let text = if parquet::is_parquet(&p) {
                parquet::rows_as_jsonl(&p, serverbench_config::MAX_DATA_BYTES)?
            } else {
                serverbench_config::read_text(&p, serverbench_config::MAX_DATA_BYTES)?
            };
            Ok(SourceFile {
                name: p.display().to_string(),
                text,
            })
        })
        .collect()
}

/// Appends `dir`'s data files. Links are followed, but every folder and file is read once, by its
/// real path: a link to a folder above it (a loop) or a second link to the same data adds nothing.
fn walk(
    dir: &std::path::Path,
    out: &mut Vec<std::path::PathBuf>,
    seen: &mut std::collections::HashSet<std::path::PathBuf>,
) -> Result<(), InputError> {
    let err = |e: std::io::Error| {
        InputError::new(
            &dir.display().to_string(),
            0,
            "",
            format!("cannot list: {e}"),
        )
    };
    if !seen.insert(std::fs::canonicalize(dir).map_err(err)?) {
        return Ok(());
    }
    let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(err)?
        .map(|e| e.map(|e| e.path()).map_err(err))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for p in entries {
        let hidden = p
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        let data = p.extension().is_some_and(|e| {
            ["json", "jsonl", "traj", "gz", "parquet"]
                .iter()
                .any(|x| e == *x)
        });
        // Hidden names (`.DS_Store`, `.git`) are skipped, except trace files themselves; so are the
        // files of a folder that hold no data (a LICENSE, a README).
        if hidden && !(p.is_file() && data) {
            continue;
        }
        if p.is_file() && !data {
            continue;
        }
        if p.is_dir() {
            walk(&p, out, seen)?;
        } else if p.is_file() {
            if !seen.insert(std::fs::canonicalize(&p).map_err(err)?) {
                continue;
            }
            out.push(p);
            if out.len() > MAX_INPUT_FILES {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Reads files and folders of one format; `format` `None` detects it from the first file, and then
/// reads only the files that look like it (the others are listed in `unread`).
pub fn import(
    paths: &[&std::path::Path],
    format: Option<TraceFormat>,
) -> Result<Imported, InputError> {
    let files = source_files(paths)?;
    import_files(files, format, false)
}

/// [`import`] of files already read; `lenient` leaves out (and counts) sessions that cannot be
/// reduced, for formats that reduce.
pub fn import_files(
    files: Vec<SourceFile>,
    format: Option<TraceFormat>,
    lenient: bool,
) -> Result<Imported, InputError> {
    let Some(first) = files.first() else {
        return Err(InputError::new("the inputs", 0, "", "no file to read"));
    };
    let unknown = |name: &str| {
        InputError::new(
            name,
            1,
            "",
            format!(
                "unknown trace format (expected records of one of: {})",
                TraceFormat::names()
            ),
        )
    };
    let (format, files, unread) = match format {
        Some(f) => (f, files, Vec::new()),
        None => {
            let f = files
                .iter()
                .find_map(|x| TraceFormat::detect(&x.text))
                .ok_or_else(|| unknown(&first.name))?;
            let (mine, other): (Vec<SourceFile>, Vec<SourceFile>) = files
                .into_iter()
                .partition(|x| TraceFormat::detect(&x.text) == Some(f));
            let unread = other
                .iter()
                .map(|x| Skip::new(&x.name, 0, format!("a file that is not {}", f.name())))
                .collect();
            (f, mine, unread)
        }
    };
    let several = files.len() > 1;
    if let Some(mut r) = format.0.reduce(&files, lenient).transpose()? {
        // Sessions that become trees here are checked first; a format that builds its own trees
        // (Weka) has checked its counts as it read them.
        if r.own_trees.is_none() {
            checked(&mut r, lenient)?;
        }
        let trees = match r.own_trees.take() {
            Some(t) if several => renumbered(t),
            Some(t) => t,
            None => r.trees(),
        };
        return Ok(Imported {
            format,
            trees,
            reduced: Some(r),
            unread,
        });
    }
    let mut trees = Vec::new();
    for f in &files {
        let mut t = format.0.parse(&f.name, &f.text)?;
        if t.is_empty() {
            return Err(InputError::new(&f.name, 0, "", "the file holds no request"));
        }
        trees.append(&mut t);
    }
    Ok(Imported {
        format,
        trees: if several { renumbered(trees) } else { trees },
        reduced: None,
        unread,
    })
}

/// Applies the corpus's own checks to every session an importer reduced, before any becomes a tree
/// (whose blocks follow its token counts): a session that fails is an error naming its first file
/// and the field, or, `lenient`, left out and counted.
fn checked(r: &mut Reduced, lenient: bool) -> Result<(), InputError> {
    let mut bad = Vec::new();
    for (i, s) in r.sessions.iter().enumerate() {
        if let Err((field, why)) = s.check() {
            let file = r.origins[i].first().cloned().unwrap_or_default();
            let e = InputError::new(&file, 0, format!("session {}: {field}", s.id), why);
            if !lenient {
                return Err(e);
            }
            r.skipped.push(Skip::unreadable(&e));
            bad.push(i);
        }
    }
    // A copy of a session (the same id: the same source and original id) would be fitted twice and
    // could land on both sides of a held-out split: the first is kept, the copies counted.
    let mut seen = std::collections::HashSet::new();
    for (i, s) in r.sessions.iter().enumerate() {
        if !bad.contains(&i) && !seen.insert(s.id.as_str()) {
            r.skipped.push(Skip {
                file: r.origins[i].first().cloned().unwrap_or_default(),
                line: 0,
                what: "a copy of a session read before (the same id)".into(),
            });
            bad.push(i);
        }
    }
    bad.sort_unstable();
    for &i in bad.iter().rev() {
        r.sessions.remove(i);
        r.origins.remove(i);
    }
    Ok(())
}

/// Trees of several files, numbered in order (each file numbers its own from 0).
fn renumbered(trees: Vec<SessionTree>) -> Vec<SessionTree> {
    trees
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.with_session_id(i as u64))
        .collect()
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

/// Writes trees in the export format `format` names: `native` ([`write_native`]), `aiperf`
/// ([`write_aiperf`]) or `weka` ([`write_weka`]); another name is an `InvalidInput` error (sessions'
/// `corpus` format is `corpus::write_corpus`'s).
pub fn write_trees<W: Write>(
    format: &str,
    trees: impl IntoIterator<Item = Arc<SessionTree>>,
    w: W,
) -> std::io::Result<()> {
    match format {
        "native" => write_native(trees, w),
        "aiperf" => write_aiperf(trees, w),
        "weka" => write_weka(trees, w),
        other => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("no export format {other:?} of trees: expected native, aiperf or weka"),
        )),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Generator, WorkloadSpec};

    #[test]
    fn an_import_becomes_its_reduced_sessions_or_its_trees_as_sessions() {
        let g = Generator::new(WorkloadSpec::preset("synthetic-v1").unwrap(), 1, 40_960).unwrap();
        let trees: Vec<SessionTree> = (0..3).map(|k| g.generate(k)).collect();
        let plain = Imported {
            format: TraceFormat::NATIVE,
            trees: trees.clone(),
            reduced: None,
            unread: Vec::new(),
        };
        let (sessions, origins) = plain.into_corpus();
        assert_eq!(sessions.len(), 3);
        assert_eq!(sessions[1], Session::from_tree(&trees[1], "native"));
        assert!(origins.iter().all(Vec::is_empty) && origins.len() == 3);
        let mut reduced = Reduced::default();
        reduced.push(sessions[2].clone(), vec!["log.jsonl".into()]);
        let logged = Imported {
            format: TraceFormat::CORPUS,
            trees,
            reduced: Some(reduced),
            unread: Vec::new(),
        };
        let (sessions, origins) = logged.into_corpus();
        assert_eq!(sessions.len(), 1, "the log's own sessions, not its trees");
        assert_eq!(origins, [vec!["log.jsonl".to_string()]]);
    }

    /// Each tree format's name writes what its writer does; an unknown name is refused, naming it.
    #[test]
    fn a_tree_format_name_picks_its_writer() {
        let g = Generator::new(WorkloadSpec::preset("synthetic-v1").unwrap(), 1, 40_960).unwrap();
        let trees: Vec<Arc<SessionTree>> = (0..2).map(|k| g.tree(k)).collect();
        type Writer = fn(Vec<Arc<SessionTree>>, &mut Vec<u8>) -> std::io::Result<()>;
        let writers: [(&str, Writer); 3] = [
            ("native", |t, w| write_native(t, w)),
            ("aiperf", |t, w| write_aiperf(t, w)),
            ("weka", |t, w| write_weka(t, w)),
        ];
        for (name, writer) in writers {
            let (mut by_name, mut direct) = (Vec::new(), Vec::new());
            write_trees(name, trees.clone(), &mut by_name).unwrap();
            writer(trees.clone(), &mut direct).unwrap();
            assert!(!by_name.is_empty() && by_name == direct, "{name}");
        }
        let e = write_trees("corpus", trees, Vec::new()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("\"corpus\""), "{e}");
    }
}
