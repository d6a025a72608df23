//! Progress bars and result files: each written whole or not at all, and `--out` made ready before
//! a command's work. What the files and tables say is rendered by the libraries.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serverbench_study::report::{Meta, Report};
use std::io::Write;
use std::path::Path;

/// A progress bar over `n` replays (hidden unless `show`).
pub fn replays_bar(n: usize, show: bool) -> ProgressBar {
    let bar = if show {
        ProgressBar::new(n as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(
            "  {bar:40} {pos}/{len} replays  {elapsed} elapsed, ETA {eta}",
        )
        .expect("valid template"),
    );
    bar
}

/// Creates `dir` and writes `name` in it with `write`, whole or not at all: the text goes to a
/// temporary file beside it, renamed over `name` once written (a full disk leaves no half-written
/// file, and an older `name` only if the new one could not be written).
pub fn write_file(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    let path = dir.join(name);
    let partial = dir.join(format!(".{name}.partial"));
    let written = std::fs::File::create(&partial).and_then(|file| {
        let mut w = std::io::BufWriter::new(file);
        write(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    });
    if let Err(e) = written.and_then(|_| std::fs::rename(&partial, &path)) {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("{}: cannot write", path.display()));
    }
    Ok(())
}

/// Writes the file at `path` whole or not at all ([`write_file`] in its folder).
pub fn write_path(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .with_context(|| format!("{}: not a file name", path.display()))?
        .to_string_lossy()
        .into_owned();
    write_file(dir, &name, write)
}

/// Makes `dir` ready for a command's files before the command does its work: creates it, checks that
/// a file can be written there, and removes the files named in `owned` that an earlier run left, so
/// that no stale file stands beside this run's (a run that ends early writes fewer).
pub fn prepare_out(dir: &Path, owned: &[&str]) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--out {}: cannot create directory", dir.display()))?;
    let probe = dir.join(format!(".serverbench-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|_| std::fs::remove_file(&probe))
        .with_context(|| format!("--out {}: cannot write there", dir.display()))?;
    for name in owned {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| {
                    format!("{}: cannot remove the previous run's file", path.display())
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// Writes `value` as pretty JSON in `dir/name`, with `meta` added as its `meta` field (an object's; anything
/// else is written as `{"meta": …, "value": …}`).
pub fn write_json<T: Serialize>(dir: &Path, name: &str, meta: &Meta, value: &T) -> Result<()> {
    let mut v = serde_json::to_value(value)?;
    let meta = serde_json::to_value(meta)?;
    match &mut v {
        serde_json::Value::Object(m) => {
            m.insert("meta".into(), meta);
        }
        other => v = serde_json::json!({ "meta": meta, "value": other.take() }),
    }
    write_file(dir, name, |w| {
        serde_json::to_writer_pretty(&mut *w, &v)?;
        w.write_all(b"\n")
    })
}

/// Writes a command's HTML page to `path` (creating its folder).
pub fn write_report(page: &Report, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    }
    std::fs::write(path, page.html())
        .with_context(|| format!("{}: cannot write the report", path.display()))
}

/// `println!` that returns an `io::Result` instead of panicking when standard output is closed (a
/// command piped into `head`); `main` ends quietly on that error.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `print!` that returns an `io::Result` (see [`outln!`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}
