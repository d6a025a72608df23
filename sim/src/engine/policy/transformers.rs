//! `transformers serve --continuous-batching`'s FIFO scheduler (transformers 5.17,
//! `generation/continuous_batching/scheduler.py`, `FIFOScheduler`): decoding requests first, then the
//! running requests' prefill chunks, then waiting requests in arrival order, each taking what is left
//! of the token budget; once fewer than 15 % of the KV blocks are free, only decodes are added to a
//! step that already holds work (its safety margin).

use super::{Admission, DecodeBudget, SchedulingPolicy, Shortage, StepBuilder};

/// The FIFO scheduler's policy.
pub struct Transformers;

/// Fraction of the KV blocks under which no prefill work joins a step that already holds some
/// (`FIFOScheduler`'s default `safety_margin`).
pub const SAFETY_MARGIN: f64 = 0.15;

impl SchedulingPolicy for Transformers {
    fn name(&self) -> &'static str {
        "transformers"
    }

    fn summary(&self) -> &'static str {
        "decode first, then prefill chunks in arrival order; no new prefill below 15 % free blocks"
    }

    /// 8192 tokens per step (its `max_batch_tokens` when memory allows) and 1024 requests
    /// (`max_requests_per_batch`'s fallback).
    fn default_budgets(&self) -> (u32, u32) {
        (8192, 1024)
    }

    fn next_batch(&self, b: &mut StepBuilder<'_>) {
        b.decode_running(DecodeBudget::Counted);
        if b.is_empty() || !b.free_blocks_below(SAFETY_MARGIN) {
            b.prefill_running(Shortage::Skip);
        }
        if b.is_empty() || !b.free_blocks_below(SAFETY_MARGIN) {
            b.admit_waiting(Admission::FirstChunk);
        }
    }

    /// Decode steps only use more blocks, so the margin and the first waiting request's room only
    /// shrink: a request left waiting stays waiting (unless the step preempted, which frees blocks).
    fn waiting_stays_blocked(&self, preempted: bool) -> bool {
        !preempted
    }

    /// Blocks are marked cacheable after the step that computed them, unless the request finished in
    /// that step (`PagedAttentionCache.mark_shareable_blocks_as_complete` skips finished requests): a
    /// one-token request leaves its last prefill chunk uncached. The prompt is taken as chunked from its
    /// start at the full budget.
    fn warm_tokens(&self, tokens: u32, budget: u32) -> u32 {
        let last_chunk = tokens.saturating_sub(1) % budget.max(1) + 1;
        tokens.saturating_sub(last_chunk)
    }
}
