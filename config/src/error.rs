//! The error type for everything a user hands in: it names the file, the line (or record) and the
//! field, and says why.

use std::fmt;

/// Input that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    /// The file (a path, a preset name, or a flag such as `--engine-config`).
    pub file: String,
    /// 1-based line, 0 when unknown or when the file is not line-oriented.
    pub line: usize,
    /// The field, as a path (`engine.max_num_seqs`, `requests[3].in`); empty when the whole record is at fault.
    pub field: String,
    /// Why it was rejected (lowercase, no final period).
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

/// A value that breaks a rule, found by a type's own check: the field (a path inside the value) and
/// why. [`FieldError::in_file`] places it in the file it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field, as a path (`engine.block_size`).
    pub field: String,
    /// Why.
    pub reason: String,
}

impl FieldError {
    /// `field` breaks a rule for `reason`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The same error for a value nested at `prefix` (`engine` + `block_size` = `engine.block_size`).
    pub fn under(self, prefix: &str) -> FieldError {
        let field = match (prefix.is_empty(), self.field.is_empty()) {
            (true, _) => self.field,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{}", self.field),
        };
        FieldError { field, ..self }
    }

    /// The error in `file`, at the line of `text` that sets the field (0 when `text` does not set it).
    pub fn in_file(self, file: &str, text: &str) -> InputError {
        let line = crate::yaml::line_of(text, &self.field);
        InputError::new(file, line, self.field, self.reason)
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

impl std::error::Error for FieldError {}
