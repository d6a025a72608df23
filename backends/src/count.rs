//! Output counted from the streamed text (`--output-tokenizer tokenizer.json`): the benchmark counts a
//! request's output by tokenizing what was streamed, and so can a client given the served model's
//! tokenizer. It confirms a stream that put several tokens in one chunk (its `usage` is then backed by
//! text); it never replaces the output count itself, and it reads one file with the `tokenizers` crate.

use std::path::Path;
use tokenizers::Tokenizer;

/// At most this many bytes of streamed text are kept per output token asked for: no token's text is
/// longer, so a stream past it carries more than any tokenizer could count as the request's output.
pub const TEXT_BYTES_PER_TOKEN: usize = 256;

/// A tokenizer that counts the tokens of streamed output text.
pub struct OutputCounter {
    tokenizer: Tokenizer,
}

impl std::fmt::Debug for OutputCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputCounter")
            .field("vocab", &self.tokenizer.get_vocab_size(true))
            .finish()
    }
}

impl OutputCounter {
    /// Reads a Hugging Face `tokenizer.json`; the error names the file.
    pub fn from_file(path: &Path) -> Result<OutputCounter, String> {
        Ok(OutputCounter {
            tokenizer: crate::words::read_tokenizer(path)?,
        })
    }

    /// Tokens of `text`, without the special tokens a tokenizer adds around a prompt; `None` when it
    /// cannot be encoded.
    pub fn count(&self, text: &str) -> Option<u32> {
        self.tokenizer
            .encode(text, false)
            .ok()
            .map(|e| e.get_ids().len().min(u32::MAX as usize) as u32)
    }
}

/// Whether `text_tokens` backs a usage count of `usage` output tokens: at least 95 % of them (decoded
/// text re-encodes to a few tokens fewer where a tokenizer merges across the boundaries the model
/// chose; a word-level tokenizer gives them exactly).
pub fn backs(text_tokens: u32, usage: u64) -> bool {
    text_tokens as u64 * 20 >= usage * 19
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::words::tokenizer_fixture as fixture;

    /// The words a tokenizer encodes one token each count one each, in any order and spacing of
    /// chunks: the text of n of them is n tokens.
    #[test]
    fn streamed_words_count_one_token_each() {
        let path = fixture("byte-level-bpe-3k.json");
        let words = crate::Words::from_file(&path).unwrap();
        let counter = OutputCounter::from_file(&path).unwrap();
        let ids: Vec<u32> = (0..300u32).map(|i| i * 7919 % 150_000).collect();
        let text = words.text(&ids);
        assert_eq!(counter.count(&text), Some(300));
        assert_eq!(counter.count(""), Some(0));
    }

    #[test]
    fn text_backs_a_usage_within_five_percent() {
        assert!(backs(100, 100) && backs(95, 100) && backs(120, 100));
        assert!(!backs(94, 100) && !backs(0, 1) && !backs(1, 256));
        assert!(backs(0, 0));
    }

    #[test]
    fn a_file_that_is_no_tokenizer_is_refused_with_its_name() {
        let e = OutputCounter::from_file(&fixture("README.md")).unwrap_err();
        assert!(
            e.contains("README.md") && e.contains("not a tokenizer.json"),
            "{e}"
        );
    }
}
