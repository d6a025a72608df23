//! The one error type of this crate: it names the file, the line (or record) and the field, and says why.

use std::fmt;

/// A workload file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The file (or `<input>` for in-memory text).
    pub file: String,
    /// 1-based line of the record, 0 when the file is not line-oriented.
    pub line: usize,
    /// The field, as a path (`requests[3].in`); empty when the whole record is at fault.
    pub field: String,
    /// Why it was rejected.
    pub reason: String,
}

impl InputError {
    /// An error at `file:line`, field `field`.
    pub fn new(
        file: &str,
        line: usize,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        InputError {
            file: file.to_string(),
            line,
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ": line {}", self.line)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for InputError {}
