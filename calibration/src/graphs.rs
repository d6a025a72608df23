//! Which steps an engine replays as captured CUDA graphs: a step's token count and whether it
//! prefills decide it. Pure arithmetic; never prices a step (the cost model does) and never holds state.

/// Which steps an engine replays as captured CUDA graphs; the others run eagerly and take at least the
/// host's launch time ([`crate::Profile::eager_s_per_layer`] per layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphRule {
    /// Decode-only steps of at most this many tokens replay a graph (0: none does).
    pub max_tokens: u32,
    /// Steps with prefill tokens of at most this many tokens replay (piecewise) graphs: vLLM's
    /// `max_tokens` too, SGLang's 0 before 0.5.10 (extend batches run eagerly), 4096 after for the
    /// models it lists.
    pub prefill_max_tokens: u32,
}

impl GraphRule {
    /// Decode and prefill steps alike replay graphs up to `max_tokens` (vLLM's piecewise graphs).
    pub const fn mixed(max_tokens: u32) -> Self {
        GraphRule {
            max_tokens,
            prefill_max_tokens: max_tokens,
        }
    }

    /// Whether a step of `tokens` tokens (`prefill`: some of them prefill) replays a graph.
    #[inline]
    pub fn replays_tokens(&self, tokens: u64, prefill: bool) -> bool {
        let cap = if prefill {
            self.prefill_max_tokens
        } else {
            self.max_tokens
        };
        tokens <= cap as u64
    }
}
