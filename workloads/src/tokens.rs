//! Token synthesis for real backends: block ids become token ids deterministically.
//! Equal block ids give equal tokens, so a server's prefix cache sees exactly the sharing the workload describes.

use crate::hash::{mix2, mix64};
use crate::tree::Request;

/// A half-open range of token ids that synthesised prompts may use (leave out special tokens), and
/// the salt mixed into every token: runs with different salts share no prompt block, so a server that
/// lives across runs cannot serve one run's prompts from another's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vocab {
    /// First usable token id.
    pub lo: u32,
    /// One past the last usable token id.
    pub hi: u32,
    /// Mixed into every synthesised token (0: the unsalted prompts).
    pub salt: u64,
}

impl Vocab {
    /// A range `[lo, hi)`, unsalted; `None` when it is empty.
    pub fn new(lo: u32, hi: u32) -> Option<Vocab> {
        (hi > lo).then_some(Vocab { lo, hi, salt: 0 })
    }

    /// The same range with prompts salted by `salt`.
    pub fn salted(self, salt: u64) -> Vocab {
        Vocab { salt, ..self }
    }

    /// Maps a well-mixed hash into the range without a division (multiply-high reduction).
    #[inline]
    fn pick(&self, h: u64) -> u32 {
        self.lo + ((h as u128 * (self.hi - self.lo) as u128) >> 64) as u32
    }
}

/// The `block_size` tokens of block `block_id`, appended to `out`.
pub fn block_tokens(block_id: u64, block_size: u32, vocab: Vocab, out: &mut Vec<u32>) {
    let key = mix2(block_id, 0xB10C ^ vocab.salt);
    out.extend((0..block_size as u64).map(|j| vocab.pick(mix64(key.wrapping_add(j)))));
}

/// The full prompt of a request: its blocks' tokens, then tail tokens unique to (session, request).
pub fn prompt_tokens(
    session_id: u64,
    request: &Request,
    block_size: u32,
    vocab: Vocab,
) -> Vec<u32> {
    prompt_tokens_from(session_id, request, block_size, vocab, 0)
}

/// The prompt from block `from` on (`prompt_tokens` without its first `from` blocks).
pub fn prompt_tokens_from(
    session_id: u64,
    request: &Request,
    block_size: u32,
    vocab: Vocab,
    from: usize,
) -> Vec<u32> {
    let from = from.min(request.blocks.len());
    let mut out = Vec::with_capacity(request.input_tokens as usize - from * block_size as usize);
    for &b in &request.blocks.as_slice()[from..] {
        block_tokens(b, block_size, vocab, &mut out);
    }
    let tail_key = mix2(mix2(session_id, 0x7A11 ^ vocab.salt), request.id as u64);
    let tail = request.tail_tokens(block_size) as u64;
    out.extend((0..tail).map(|j| vocab.pick(mix64(tail_key.wrapping_add(j)))));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_ids_give_equal_tokens_inside_the_vocabulary() {
        let v = Vocab::new(100, 151_000).unwrap();
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        block_tokens(42, 64, v, &mut a);
        block_tokens(42, 64, v, &mut b);
        block_tokens(43, 64, v, &mut c);
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.len(), 64);
        assert!(a.iter().chain(&c).all(|&t| (100..151_000).contains(&t)));
        assert!(Vocab::new(5, 5).is_none());
        // A salt changes every block's tokens (and no salt is the unsalted prompt).
        let mut salted = Vec::new();
        block_tokens(42, 64, v.salted(7), &mut salted);
        assert_eq!(salted.len(), 64);
        assert!(salted.iter().zip(&a).filter(|(x, y)| x == y).count() < 4);
        let mut zero = Vec::new();
        block_tokens(42, 64, v.salted(0), &mut zero);
        assert_eq!(zero, a);
    }
}
