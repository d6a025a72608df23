//! vLLM's scheduler (V1, chunked prefill on): running decodes first, then the running requests'
//! prefill chunks, then waiting requests in arrival order while their first chunk fits; when blocks
//! run out, the newest running request is preempted, and a step that preempted admits nothing.

use super::{Admission, DecodeBudget, SchedulingPolicy, Shortage, StepBuilder};

/// vLLM's policy.
pub struct Vllm;

impl SchedulingPolicy for Vllm {
    fn name(&self) -> &'static str {
        "vllm"
    }

    fn summary(&self) -> &'static str {
        "decode first, then prefill chunks in arrival order; recompute preemption of the newest request"
    }

    fn default_budgets(&self) -> (u32, u32) {
        (8192, 256)
    }

    fn next_batch(&self, b: &mut StepBuilder<'_>) {
        b.decode_running(DecodeBudget::Counted);
        b.prefill_running(Shortage::PreemptNewest);
        if !b.preempted() {
            b.admit_waiting(Admission::FirstChunk);
        }
    }

    /// Admission ran in the step unless it preempted, and the waiting head did not fit: decode steps
    /// only use more blocks and the same budget, so it still does not fit.
    fn waiting_stays_blocked(&self, preempted: bool) -> bool {
        !preempted
    }

    /// Blocks are cached as they are computed: the whole prompt.
    fn warm_tokens(&self, tokens: u32, _budget: u32) -> u32 {
        tokens
    }
}
