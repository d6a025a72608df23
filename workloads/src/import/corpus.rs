//! The corpus format: real sessions reduced to numbers (`crate::corpus`), one per line.

use super::{has_key, Importer, Reduced, Skip, SourceFile};
use crate::corpus::{parse_corpus, CORPUS_FORMAT};
use crate::error::InputError;

/// Corpus JSONL.
pub struct Corpus;

impl Importer for Corpus {
    fn name(&self) -> &'static str {
        "corpus"
    }

    fn summary(&self) -> &'static str {
        "serverbench's corpus of real sessions reduced to numbers: one session per line"
    }

    fn detects(&self, head: &str) -> bool {
        has_key(head, "format") && head.contains(CORPUS_FORMAT)
    }

    fn reduce(&self, files: &[SourceFile], lenient: bool) -> Option<Result<Reduced, InputError>> {
        let mut out = Reduced::default();
        for f in files {
            match parse_corpus(&f.name, &f.text) {
                Ok(sessions) => {
                    for s in sessions {
                        out.push(s, vec![f.name.clone()]);
                    }
                }
                Err(e) if lenient => out.skipped.push(Skip::unreadable(&e)),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(out))
    }
}
