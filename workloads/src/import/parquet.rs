//! Parquet files of trace rows (the files of a Hugging Face dataset a user has on disk) read as JSON
//! lines: one object per row, null fields left out (a dataset's schema joins every row's fields, so
//! a field a row does not have is null), so the format's importer reads them as it reads JSONL and
//! names a bad row by its line. Reading is the `parquet` crate's; nothing else is interpreted here.

use crate::error::InputError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;
use std::io::Write;
use std::path::Path;

/// Whether `path` names a Parquet file (by its extension).
pub fn is_parquet(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "parquet")
}

/// The rows of a Parquet file as JSON lines (row `n` on line `n`, from 1), at most `limit` bytes of
/// text; an error names the file, and the row when one cannot be read.
pub fn rows_as_jsonl(path: &Path, limit: u64) -> Result<String, InputError> {
    let name = path.display().to_string();
    let fail = |row: usize, why: String| InputError::new(&name, row, "", why);
    let size = std::fs::metadata(path)
        .map_err(|e| fail(0, format!("cannot read: {e}")))?
        .len();
    if size > limit {
        return Err(fail(
            0,
            format!("{size} bytes, more than the {limit} a data file may have"),
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| fail(0, format!("cannot read: {e}")))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| fail(0, format!("not a readable Parquet file: {e}")))?;
    let rows = reader
        .get_row_iter(None)
        .map_err(|e| fail(0, format!("cannot read its rows: {e}")))?;
    let mut out: Vec<u8> = Vec::new();
    for (i, row) in rows.enumerate() {
        let row = row.map_err(|e| fail(i + 1, format!("row {}: cannot be read: {e}", i + 1)))?;
        let value = without_nulls(row.to_json_value());
        serde_json::to_writer(&mut out, &value).expect("JSON values serialise");
        out.write_all(b"\n").expect("writing to memory");
        if out.len() as u64 > limit {
            return Err(fail(
                i + 1,
                format!("its rows hold more than the {limit} bytes a data file may have"),
            ));
        }
    }
    String::from_utf8(out).map_err(|e| fail(0, format!("rows that are not UTF-8 text: {e}")))
}

/// `v` with every null-valued field of every object left out.
fn without_nulls(v: Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.into_iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k, without_nulls(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(without_nulls).collect()),
        x => x,
    }
}
