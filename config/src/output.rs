//! A command's output files, each written whole or not at all, and an `--out` folder made ready before
//! the work that fills it. It never decides what a file says: the text comes rendered.

use std::io::Write;
use std::path::Path;

/// A file or folder that could not be written: `what` names it and says what failed (`out/x.csv:
/// cannot write`); the operating system's reason is its source.
#[derive(Debug)]
pub struct OutputError {
    /// The path and what could not be done there.
    pub what: String,
    /// Why, when the operating system said.
    pub source: Option<std::io::Error>,
}

impl std::fmt::Display for OutputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for OutputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| e as _)
    }
}

fn failed(what: String) -> impl FnOnce(std::io::Error) -> OutputError {
    move |source| OutputError {
        what,
        source: Some(source),
    }
}

/// Creates `dir` and writes `name` in it with `write`, whole or not at all: the text goes to a
/// temporary file beside it, renamed over `name` once written (a full disk leaves no half-written
/// file, and an older `name` only if the new one could not be written). A `name` that is already
/// something other than a file or folder (`/dev/null`, `/dev/stdout`, a named pipe) is written in
/// place: renamed over, the device would become a plain file.
pub fn write_file(
    dir: &Path,
    name: &str,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    std::fs::create_dir_all(dir).map_err(failed(format!(
        "{}: cannot create directory",
        dir.display()
    )))?;
    let path = dir.join(name);
    if std::fs::metadata(&path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return write_in_place(&path, write);
    }
    let partial = dir.join(format!(".{name}.partial"));
    let written = std::fs::File::create(&partial).and_then(|file| {
        let mut w = std::io::BufWriter::new(file);
        write(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()
    });
    if let Err(e) = written.and_then(|_| std::fs::rename(&partial, &path)) {
        let _ = std::fs::remove_file(&partial);
        return Err(failed(format!("{}: cannot write", path.display()))(e));
    }
    Ok(())
}

/// Writes `path`, a device or pipe, through: no temporary file, no rename.
fn write_in_place(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|file| {
            let mut w = std::io::BufWriter::new(file);
            write(&mut w)?;
            w.flush()
        });
    written.map_err(failed(format!("{}: cannot write", path.display())))
}

/// A writer that passes on only whole lines and refuses more once `stopped()` says so: a command
/// stopped by a signal while it streams JSON lines leaves every line it wrote whole (the line being
/// written is dropped), and its writes then fail (an error of kind `Other`).
pub struct WholeLines<W: Write, S: Fn() -> bool> {
    inner: W,
    line: Vec<u8>,
    stopped: S,
    /// Lines passed on so far.
    pub lines: u64,
}

impl<W: Write, S: Fn() -> bool> WholeLines<W, S> {
    /// Lines of `inner`, until `stopped()`.
    pub fn new(inner: W, stopped: S) -> Self {
        WholeLines {
            inner,
            line: Vec::new(),
            stopped,
            lines: 0,
        }
    }
}

impl<W: Write, S: Fn() -> bool> Write for WholeLines<W, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if (self.stopped)() {
            // Not `Interrupted`: `write_all` retries that kind for ever.
            return Err(std::io::Error::other("stopped by a signal"));
        }
        for part in buf.split_inclusive(|&b| b == b'\n') {
            self.line.extend_from_slice(part);
            if part.ends_with(b"\n") {
                self.inner.write_all(&self.line)?;
                self.line.clear();
                self.lines += 1;
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes JSON lines (or any lines) to the file at `path` whole or not at all, or to standard output
/// without it, through [`WholeLines`]: once `stopped()` says so the writing fails, standard output
/// keeping the lines written before, the file not written at all.
pub fn write_lines(
    path: Option<&Path>,
    stopped: impl Fn() -> bool,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    match path {
        Some(path) => write_path(path, |w| write(&mut WholeLines::new(w, stopped))),
        None => {
            let mut w = WholeLines::new(std::io::stdout().lock(), stopped);
            write(&mut w)
                .and_then(|_| w.flush())
                .map_err(failed("standard output: cannot write".into()))
        }
    }
}

/// Writes the file at `path` whole or not at all ([`write_file`] in its folder).
pub fn write_path(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), OutputError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(name) = path.file_name() else {
        let what = format!("{}: not a file name", path.display());
        return Err(OutputError { what, source: None });
    };
    write_file(dir, &name.to_string_lossy(), write)
}

/// Makes `dir` ready for a command's files before the command does its work: creates it, checks that
/// a file can be written there, and removes the files named in `owned` that an earlier run left, so
/// that no stale file stands beside this run's (a run that ends early writes fewer).
pub fn prepare_out(dir: &Path, owned: &[&str]) -> Result<(), OutputError> {
    std::fs::create_dir_all(dir).map_err(failed(format!(
        "--out {}: cannot create directory",
        dir.display()
    )))?;
    let probe = dir.join(format!(".serverbench-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"")
        .and_then(|_| std::fs::remove_file(&probe))
        .map_err(failed(format!(
            "--out {}: cannot write there",
            dir.display()
        )))?;
    for name in owned {
        let path = dir.join(name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                let what = format!("{}: cannot remove the previous run's file", path.display());
                return Err(failed(what)(e));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn whole_lines_pass_and_a_stop_drops_the_line_being_written() {
        use std::cell::Cell;
        let stop = Cell::new(false);
        let mut out = Vec::new();
        {
            let mut w = WholeLines::new(&mut out, || stop.get());
            w.write_all(b"{\"a\":1}\n{\"b\"").unwrap();
            w.write_all(b":2}\n{\"c\":").unwrap();
            stop.set(true);
            let e = w.write_all(b"3}\n").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::Other);
            assert_eq!(w.lines, 2);
        }
        assert_eq!(out, b"{\"a\":1}\n{\"b\":2}\n");
    }

    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sb-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_failed_write_leaves_the_older_file_and_no_partial_one() {
        let dir = scratch("whole");
        write_file(&dir, "a.txt", |w| w.write_all(b"old")).unwrap();
        let e = write_file(&dir, "a.txt", |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(e.to_string().ends_with("a.txt: cannot write"), "{e}");
        assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "old");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1);
        write_path(&dir.join("b.txt"), |w| w.write_all(b"b")).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("b.txt")).unwrap(), "b");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_device_or_pipe_is_written_through_and_stays_what_it_was() {
        use std::io::Read;
        use std::os::unix::fs::FileTypeExt;
        let dir = scratch("pipe");
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("out.json");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success(), "mkfifo {}", fifo.display());
        // Opened for reading and writing, a pipe's open never waits for the other end.
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .unwrap();
        write_path(&fifo, |w| w.write_all(b"{\"a\": 1}")).unwrap();
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        assert!(kind.is_fifo(), "the pipe was replaced: {kind:?}");
        let mut got = [0u8; 8];
        reader.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"{\"a\": 1}");
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            1,
            "no partial file"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_prepared_folder_keeps_no_file_of_an_earlier_run() {
        let dir = scratch("prepare");
        write_file(&dir, "x.csv", |w| w.write_all(b"1")).unwrap();
        write_file(&dir, "keep.txt", |w| w.write_all(b"1")).unwrap();
        prepare_out(&dir, &["x.csv", "y.csv"]).unwrap();
        assert!(!dir.join("x.csv").exists() && dir.join("keep.txt").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
