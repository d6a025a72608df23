//! Prompt text that a real tokenizer counts exactly (`--tokenizer tokenizer.json`): the workload's token
//! ids become words of the tokenizer's own vocabulary, each of which it encodes as exactly one token
//! wherever it stands, so a server with that tokenizer counts the prompt the workload describes (equal
//! ids, equal words: prefix sharing is kept). It reads one Hugging Face `tokenizer.json` with the
//! `tokenizers` crate; it never fetches anything.

use std::path::Path;
use tokenizers::Tokenizer;

/// Reads a Hugging Face `tokenizer.json`; the error names the file.
pub(crate) fn read_tokenizer(path: &Path) -> Result<Tokenizer, String> {
    Tokenizer::from_file(path).map_err(|e| {
        format!(
            "{}: not a tokenizer.json the tokenizers crate reads: {e}",
            path.display()
        )
    })
}

/// A tokenizer file of `tests/fixtures/tokenizers` (the tests of this crate's tokenizer users).
#[cfg(test)]
pub(crate) fn tokenizer_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/tokenizers")
        .join(name)
}

/// Fewest one-token words a tokenizer must offer for prompts to be built from it.
const MIN_WORDS: usize = 64;

/// Words of one tokenizer that it encodes one token each, in any sequence.
pub struct Words {
    tokenizer: Tokenizer,
    /// `" word"` strings, in token-id order.
    words: Vec<String>,
    /// Their token ids.
    ids: Vec<u32>,
    /// Tokens the tokenizer adds to a prompt around its text (a beginning-of-sequence token, say), as a
    /// server does.
    special: u32,
}

impl std::fmt::Debug for Words {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Words")
            .field("words", &self.words.len())
            .field("special", &self.special)
            .finish()
    }
}

impl Words {
    /// Reads `path` and finds its one-token words: vocabulary entries that decode to a space and two or
    /// more lower-case ASCII letters and that encode back to themselves alone, then kept only if a text
    /// of all of them, in two orders, encodes to exactly their ids.
    pub fn from_file(path: &Path) -> Result<Words, String> {
        let at = path.display();
        let tokenizer = read_tokenizer(path)?;
        let mut vocab: Vec<u32> = tokenizer.get_vocab(false).into_values().collect();
        vocab.sort_unstable();
        let mut words = Vec::new();
        let mut ids = Vec::new();
        for id in vocab {
            let Ok(text) = tokenizer.decode(&[id], false) else {
                continue;
            };
            let w = text.trim_start();
            if w.len() < 2 || !w.bytes().all(|b| b.is_ascii_lowercase()) {
                continue;
            }
            let candidate = format!(" {w}");
            let one = tokenizer
                .encode(candidate.as_str(), false)
                .map(|e| e.get_ids() == [id])
                .unwrap_or(false);
            if one {
                words.push(candidate);
                ids.push(id);
            }
        }
        let mut w = Words {
            tokenizer,
            words,
            ids,
            special: 0,
        };
        w.keep_what_composes(&at.to_string())?;
        let probe = w.text_of(&[0, 1, 2]);
        let with = w.count_with_special(&probe)?;
        w.special = with.saturating_sub(3);
        Ok(w)
    }

    /// Drops words that merge with their neighbours, until a text of all of them encodes to their ids
    /// in id order and reversed; fails when fewer than [`MIN_WORDS`] remain.
    fn keep_what_composes(&mut self, at: &str) -> Result<(), String> {
        for _round in 0..8 {
            let mut bad = vec![false; self.words.len()];
            for reversed in [false, true] {
                let order: Vec<usize> = if reversed {
                    (0..self.words.len()).rev().collect()
                } else {
                    (0..self.words.len()).collect()
                };
                let text: String = order.iter().map(|&i| self.words[i].as_str()).collect();
                let got = self.encode(&text)?;
                let want: Vec<u32> = order.iter().map(|&i| self.ids[i]).collect();
                if got == want {
                    continue;
                }
                // Mark the words from the first difference on to the next place where both agree.
                let first = got.iter().zip(&want).take_while(|(a, b)| a == b).count();
                let span = (first + 2).min(order.len());
                for &i in &order[first.min(order.len() - 1)..span] {
                    bad[i] = true;
                }
            }
            if !bad.iter().any(|&b| b) {
                if self.words.len() < MIN_WORDS {
                    return Err(format!("{at}: only {} words encode as one token each; at least {MIN_WORDS} are needed to build prompts", self.words.len()));
                }
                return Ok(());
            }
            let mut i = 0;
            self.words.retain(|_| {
                i += 1;
                !bad[i - 1]
            });
            let mut i = 0;
            self.ids.retain(|_| {
                i += 1;
                !bad[i - 1]
            });
        }
        Err(format!(
            "{at}: the tokenizer merges its words with their neighbours; no prompt text with an exact token count could be built"
        ))
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("the tokenizer cannot encode a prompt: {e}"))
    }

    fn count_with_special(&self, text: &str) -> Result<u32, String> {
        self.prompt_tokens(text).map(|ids| ids.len() as u32)
    }

    /// One-token words found.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True when there are none (never, for a `Words` that was built).
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Tokens the tokenizer adds around a prompt's text (what a server counts beyond the workload's).
    pub fn special_tokens(&self) -> u32 {
        self.special
    }

    /// The text of a prompt of workload token ids: one word per id (`id mod` the words found).
    pub fn text(&self, ids: &[u32]) -> String {
        let idx: Vec<usize> = ids.iter().map(|&t| t as usize % self.words.len()).collect();
        self.text_of(&idx)
    }

    fn text_of(&self, idx: &[usize]) -> String {
        let mut s = String::with_capacity(idx.len() * 8);
        for &i in idx {
            s.push_str(&self.words[i]);
        }
        s
    }

    /// The text of output token `id` (a word of the vocabulary, so a client's own tokenizer counts it
    /// as one token).
    pub fn word(&self, id: u32) -> &str {
        &self.words[id as usize % self.words.len()]
    }

    /// The tokenizer's token ids of `text` (without the special tokens it adds to a prompt).
    pub fn tokens(&self, text: &str) -> Result<Vec<u32>, String> {
        self.encode(text)
    }

    /// The token ids of a prompt's text as a server counts them: with the special tokens the tokenizer
    /// adds (a beginning-of-sequence token, say).
    pub fn prompt_tokens(&self, text: &str) -> Result<Vec<u32>, String> {
        self.tokenizer
            .encode(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| format!("the tokenizer cannot encode a prompt: {e}"))
    }

    /// Vocabulary size (with added tokens).
    pub fn vocab_size(&self) -> u32 {
        self.tokenizer.get_vocab_size(true) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokenizer_fixture as fixture;

    /// For both tokenizer families, a prompt of n workload ids encodes to exactly n tokens (plus the
    /// tokenizer's own special tokens), and equal ids give equal text.
    #[test]
    fn prompts_encode_to_exactly_their_length() {
        for (name, special) in [("byte-level-bpe-3k.json", 0), ("metaspace-bpe-3k.json", 1)] {
            let w = Words::from_file(&fixture(name)).unwrap();
            assert!(w.len() >= MIN_WORDS, "{name}: {} words", w.len());
            assert_eq!(w.special_tokens(), special, "{name}");
            for seed in 0..20u64 {
                let ids: Vec<u32> = (0..500u64)
                    .map(|i| (serverbench_workloads::hash::mix2(seed, i) % 150_000) as u32)
                    .collect();
                let text = w.text(&ids);
                assert_eq!(
                    w.tokens(&text).unwrap().len(),
                    ids.len(),
                    "{name} seed {seed}"
                );
                assert_eq!(
                    w.count_with_special(&text).unwrap(),
                    ids.len() as u32 + special
                );
                assert!(text.starts_with(&w.text(&ids[..100])));
            }
        }
    }

    #[test]
    fn a_file_that_is_no_tokenizer_is_refused_with_its_name() {
        let e = Words::from_file(&fixture("README.md")).unwrap_err();
        assert!(
            e.contains("README.md") && e.contains("not a tokenizer.json"),
            "{e}"
        );
    }
}
