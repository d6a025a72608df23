//! SGLang's scheduler: a prefill batch (running chunks, then waiting requests by longest cached prefix
//! unless `waiting_order: fcfs`, admitted conservatively) whenever prefill work fits; otherwise a decode batch of every running
//! request, which the chunk budget does not limit.

use super::{Admission, DecodeBudget, SchedulingPolicy, Shortage, StepBuilder};
use crate::engine::WaitingOrder;

/// SGLang's policy.
pub struct Sglang;

/// SGLang's longest-prefix-match ordering is used while the waiting queue is at most this long;
/// longer queues are served first come, first served.
const LPM_MAX_QUEUE: usize = 128;

/// Output tokens of one request that admission's estimate counts at most (SGLang's
/// `CLIP_MAX_NEW_TOKENS_ESTIMATION`).
const OUTPUT_ESTIMATE_CAP: u32 = 4096;

impl SchedulingPolicy for Sglang {
    fn name(&self) -> &'static str {
        "sglang"
    }

    fn summary(&self) -> &'static str {
        "prefill batches first, waiting queue by longest cached prefix, conservative admission"
    }

    /// 4096 tokens: SGLang's chunked-prefill size on 40–60 GB GPUs.
    fn default_budgets(&self) -> (u32, u32) {
        (4096, 1024)
    }

    fn next_batch(&self, b: &mut StepBuilder<'_>) {
        b.prefill_running(Shortage::Skip);
        if b.config().waiting_order != Some(WaitingOrder::Fcfs) {
            b.order_waiting_by_cached_prefix(LPM_MAX_QUEUE);
        }
        let ratio = b.config().new_token_ratio;
        let block = b.config().block_size as f64;
        // Blocks kept free for the output the running requests have still to generate.
        let tokens: f64 = b
            .running_output_left()
            .map(|left| left.min(OUTPUT_ESTIMATE_CAP) as f64)
            .sum();
        let reserve = (tokens * ratio / block).ceil() as u64;
        b.admit_waiting(Admission::WholeRequest {
            reserve,
            output_ratio: ratio,
            output_cap: OUTPUT_ESTIMATE_CAP,
        });
        if b.is_empty() {
            b.decode_running(DecodeBudget::Unlimited);
        }
    }

    /// Its admission reserves room for the running requests' remaining output, which shrinks as they
    /// decode: a request left waiting can become admissible during a run of decode steps.
    fn waiting_stays_blocked(&self, _preempted: bool) -> bool {
        false
    }

    /// The radix cache takes a finished request's whole prompt.
    fn warm_tokens(&self, tokens: u32, _budget: u32) -> u32 {
        tokens
    }
}
