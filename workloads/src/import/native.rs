//! The native format: this tool's own export, one session tree per line (`workload export`).

use super::{has_key, lines, typed_line, Importer};
use crate::error::InputError;
use crate::tree::SessionTree;

/// The native JSONL format.
pub struct Native;

impl Importer for Native {
    fn name(&self) -> &'static str {
        "native"
    }

    fn summary(&self) -> &'static str {
        "serverbench's own JSONL export: one session tree per line"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "session_id")
    }

    fn parse(&self, file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
        native(file, text)
    }
}

fn native(file: &str, text: &str) -> Result<Vec<SessionTree>, InputError> {
    lines(text).map(|(n, l)| typed_line(file, n, l)).collect()
}
