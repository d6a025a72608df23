//! Reading the files a user names, with a size limit: a path that turns out to be endless (`/dev/zero`,
//! a pipe that never closes) or enormous is refused once the limit is passed, never read into memory
//! whole.

use crate::InputError;
use std::io::Read;
use std::path::Path;

/// Largest configuration file read (deployment, engine, profile, workload spec), bytes.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;
/// Largest trace or step log read (after decompression), bytes.
pub const MAX_DATA_BYTES: u64 = 1 << 30;

/// The text of `path`, at most `limit` bytes of UTF-8; gunzipped first when the name ends in `.gz`
/// (the limit applies to the text). Text holds no NUL byte: the first one ends the read with an error
/// (so `/dev/zero` is refused at once). Errors name the file and say why.
pub fn read_text(path: &Path, limit: u64) -> Result<String, InputError> {
    let file = path.display().to_string();
    let err = |reason: String| InputError::new(&file, 0, "", reason);
    let f = std::fs::File::open(path).map_err(|e| err(format!("cannot read: {e}")))?;
    if let Ok(meta) = f.metadata() {
        if meta.is_file() && meta.len() > limit && !path.extension().is_some_and(|e| e == "gz") {
            return Err(err(format!(
                "larger than {} MiB, the most this command reads",
                limit >> 20
            )));
        }
    }
    let mut reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(f).take(limit + 1))
    } else {
        Box::new(f.take(limit + 1))
    };
    let mut bytes = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match reader.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(err(format!("cannot read: {e}"))),
        };
        if let Some(at) = chunk[..n].iter().position(|&b| b == 0) {
            return Err(err(format!(
                "not a text file (a NUL byte at byte {})",
                bytes.len() + at
            )));
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    if bytes.len() as u64 > limit {
        return Err(err(format!(
            "larger than {} MiB, the most this command reads",
            limit >> 20
        )));
    }
    let mut text = String::from_utf8(bytes).map_err(|e| {
        err(format!(
            "not UTF-8 text (byte {} is not part of a character)",
            e.utf8_error().valid_up_to()
        ))
    })?;
    // A byte-order mark (editors on Windows write one) is not part of the text.
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_oversized_files_are_refused_not_read_whole() {
        let e = read_text(Path::new("/dev/zero"), 1 << 30).unwrap_err();
        assert!(e.reason.contains("NUL byte at byte 0"), "{e}");
        let dir = std::env::temp_dir().join(format!("sb-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.yaml");
        std::fs::write(&big, vec![b'a'; (1 << 20) + 1]).unwrap();
        let e = read_text(&big, 1 << 20).unwrap_err();
        assert!(e.reason.contains("larger than 1 MiB"), "{e}");
        let bad = dir.join("bad.yaml");
        std::fs::write(&bad, [b'a', 0xff, b'b']).unwrap();
        let e = read_text(&bad, 1 << 20).unwrap_err();
        assert!(
            e.reason.contains("not UTF-8") && e.file.ends_with("bad.yaml"),
            "{e}"
        );
        let bom = dir.join("bom.yaml");
        std::fs::write(&bom, "\u{feff}a: 1\n").unwrap();
        assert_eq!(read_text(&bom, 100).unwrap(), "a: 1\n");
        let e = read_text(&dir.join("missing.yaml"), 10).unwrap_err();
        assert!(e.reason.starts_with("cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
