//! Progress bars, standard output and result files (written whole or not at all by
//! `serverbench_config::write_file`). What the files and tables say is rendered by the libraries.

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

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
pub use serverbench_config::{prepare_out, write_file, write_path};
use serverbench_study::report::{Meta, OutFiles, Report};
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

/// Writes `text` as `dir/name`, whole or not at all.
pub fn write_text(dir: &Path, name: &str, text: &str) -> Result<()> {
    Ok(write_file(dir, name, |w| w.write_all(text.as_bytes()))?)
}

/// Writes `value` as pretty JSON in `dir/name`, with `meta` added ([`Meta::json`]).
pub fn write_json<T: Serialize>(dir: &Path, name: &str, meta: &Meta, value: &T) -> Result<()> {
    write_text(dir, name, &meta.json(value)?)
}

/// Writes each group's files in `dir`, whole or not at all, each group followed by its line.
pub fn write_files(dir: &Path, groups: &[OutFiles]) -> Result<()> {
    for group in groups {
        for (name, text) in &group.files {
            write_text(dir, name, text)?;
        }
        outln!("{}", group.line)?;
    }
    Ok(())
}

/// Writes a command's HTML page to `path` (creating its folder), and says so.
pub fn write_report(page: &Report, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create directory", dir.display()))?;
    }
    std::fs::write(path, page.html())
        .with_context(|| format!("{}: cannot write the report", path.display()))?;
    outln!("  wrote the report {}", path.display())?;
    Ok(())
}
