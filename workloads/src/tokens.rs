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

/// First token id of synthesised prompts: ids below are left to special tokens.
pub const FIRST_PROMPT_TOKEN: u32 = 100;

impl Vocab {
    /// The ids prompts to a model of `model_vocab` ids are drawn from: `[FIRST_PROMPT_TOKEN, hi)`,
    /// `hi` by default the whole vocabulary. `None` when `hi` is past the model's vocabulary (every
    /// prompt would hold ids the model does not have, and every request would fail) or leaves the
    /// range empty.
    pub fn for_prompts(hi: Option<u32>, model_vocab: u32) -> Option<Vocab> {
        let hi = hi.unwrap_or(model_vocab);
        Vocab::new(FIRST_PROMPT_TOKEN, hi).filter(|_| hi <= model_vocab)
    }

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

/// Who a message of a chat prompt is from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The declared system and tool prompt.
    System,
    /// The user (or tool results).
    User,
    /// The model's earlier answers, as the recording sized them (never what a server generated).
    Assistant,
}

impl Role {
    /// Its name in a chat request.
    pub fn name(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A request's prompt as the chat messages AgentX sends for it, as token ranges of the prompt: the
/// declared system prompt (whole blocks of the tree's application prefix) and the first user
/// message; then, turn by turn along the request's agent, the previous prompt cut at the blocks it
/// shares with this one, an assistant message of the previous answer's length in blocks (at most the
/// new blocks, one left to the user when it would take them all) and a user message with the rest.
/// Every range is non-empty and they cover the prompt in order.
pub fn messages(tree: &crate::tree::SessionTree, id: u32) -> Vec<(Role, std::ops::Range<usize>)> {
    let reqs = tree.requests();
    let me = &reqs[id as usize];
    let bs = tree.block_size as usize;
    let turns: Vec<&Request> = reqs
        .iter()
        .filter(|r| r.agent == me.agent && r.id <= id)
        .collect();
    let app: std::collections::HashSet<u64> = tree.app_prefix().iter().copied().collect();
    let first = turns[0];
    let system = first
        .blocks
        .as_slice()
        .iter()
        .take_while(|b| app.contains(b))
        .count()
        * bs;
    let system = system.min(first.input_tokens as usize - 1);
    let mut msgs: Vec<(Role, std::ops::Range<usize>)> = Vec::new();
    if system > 0 {
        msgs.push((Role::System, 0..system));
    }
    msgs.push((Role::User, system..first.input_tokens as usize));
    for w in turns.windows(2) {
        let (prev, cur) = (w[0], w[1]);
        let shared = prev
            .blocks
            .as_slice()
            .iter()
            .zip(cur.blocks.as_slice())
            .take_while(|(a, b)| a == b)
            .count();
        let cut = (shared * bs).min(cur.input_tokens as usize - 1);
        msgs.retain(|m| m.1.start < cut);
        if let Some(last) = msgs.last_mut() {
            last.1.end = last.1.end.min(cut);
        }
        let end = cur.input_tokens as usize;
        let new_blocks = (end - cut) / bs;
        let mut answer = (prev.output_tokens as usize).div_ceil(bs).min(new_blocks) * bs;
        if cut + answer >= end {
            answer = answer.saturating_sub(bs).min(end - cut - 1);
        }
        if answer > 0 {
            msgs.push((Role::Assistant, cut..cut + answer));
        }
        msgs.push((Role::User, cut + answer..end));
    }
    msgs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_cover_the_prompt_and_follow_the_agents_turns() {
        use crate::tree::{Blocks, RequestKind, SessionTree};
        let req = |id: u32, deps: Vec<u32>, ids: Vec<u64>, input: u32, output: u32| Request {
            id,
            agent: 0,
            kind: RequestKind::RootTurn,
            deps,
            think_ns: 0,
            input_tokens: input,
            output_tokens: output,
            background: false,
            turn: id,
            blocks: Blocks::from_vec(ids),
        };
        // Turn 0: 2 system blocks + 1 user block + 10 tail tokens; turn 1 keeps all 3 blocks and adds
        // 4 (an answer of 100 tokens: 2 blocks, then 2 of tool output); turn 2 shares only 2 blocks.
        let t = SessionTree::new(
            0,
            64,
            vec![
                req(0, vec![], vec![1, 2, 3], 202, 100),
                req(1, vec![0], vec![1, 2, 3, 4, 5, 6, 7], 460, 30),
                req(2, vec![1], vec![1, 2, 9], 200, 5),
            ],
        )
        .unwrap()
        .with_app_prefix(vec![1, 2]);
        let names = |id| {
            messages(&t, id)
                .into_iter()
                .map(|(r, x)| (r.name(), x))
                .collect::<Vec<_>>()
        };
        assert_eq!(names(0), vec![("system", 0..128), ("user", 128..202)]);
        assert_eq!(
            names(1),
            vec![
                ("system", 0..128),
                ("user", 128..192),
                ("assistant", 192..320),
                ("user", 320..460)
            ]
        );
        // Cut at 2 blocks: only the system message survives; a 1-block answer, then the user.
        assert_eq!(
            names(2),
            vec![
                ("system", 0..128),
                ("assistant", 128..192),
                ("user", 192..200)
            ]
        );
    }

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

    #[test]
    fn prompts_draw_from_the_model_s_ids_above_the_special_ones() {
        let whole = Vocab::for_prompts(None, 1000).unwrap();
        assert_eq!((whole.lo, whole.hi), (FIRST_PROMPT_TOKEN, 1000));
        assert_eq!(Vocab::for_prompts(Some(500), 1000).unwrap().hi, 500);
        assert!(
            Vocab::for_prompts(Some(1001), 1000).is_none(),
            "past the model's ids"
        );
        assert!(
            Vocab::for_prompts(Some(FIRST_PROMPT_TOKEN), 1000).is_none(),
            "empty"
        );
    }
}
