//! Preemption: when a running sequence needs blocks that are not free, the newest running sequences
//! give theirs back, either dropped (recompute: prompt and output are computed again when it is
//! rescheduled) or copied to host memory over the host link (swap, while host space lasts).

use super::config::Preemption;
use super::seq::SeqId;
use super::Replica;

/// Host memory for swapped-out KV and the time the current step spends moving it.
#[derive(Clone, Debug, Default)]
pub(crate) struct SwapSpace {
    /// KV bytes of one token on one GPU.
    pub(crate) kv_bytes_per_token: f64,
    /// Host link bandwidth, bytes/s.
    pub(crate) host_bandwidth: f64,
    /// Host memory still free for swapped KV, bytes.
    pub(crate) host_free_bytes: f64,
    /// Transfer time the scheduled step spends, ns (taken once by the driver).
    pub(crate) transfer_ns: u64,
}

impl SwapSpace {
    /// Swaps out `tokens` of KV if host memory holds them; true if it did.
    fn take(&mut self, tokens: u32) -> bool {
        let bytes = tokens as f64 * self.kv_bytes_per_token;
        if bytes > 0.0 && bytes <= self.host_free_bytes {
            self.host_free_bytes -= bytes;
            self.transfer(bytes);
            true
        } else {
            false
        }
    }

    /// Copies `tokens` of swapped KV back to the GPU.
    pub(crate) fn bring_back(&mut self, tokens: u32) {
        let bytes = tokens as f64 * self.kv_bytes_per_token;
        self.host_free_bytes += bytes;
        self.transfer(bytes);
    }

    fn transfer(&mut self, bytes: f64) {
        self.transfer_ns += (bytes / self.host_bandwidth * 1e9).round() as u64;
    }
}

impl Replica {
    /// Allocates `add` blocks for `id`, preempting the newest running sequences while they do not fit.
    /// Returns false if `id` itself had to be preempted.
    pub(crate) fn make_room(
        &mut self,
        id: SeqId,
        add: u32,
        budget: &mut u32,
        preempted: &mut bool,
    ) -> bool {
        while !self.kv.allocate(add as u64) {
            let victim = *self
                .running
                .last()
                .expect("a sequence that needs blocks is running");
            self.preempt(victim, budget);
            *preempted = true;
            if victim == id {
                return false;
            }
        }
        true
    }

    /// Takes the newest running sequence `id` out of the step and the running set and gives back its KV.
    fn preempt(&mut self, id: SeqId, budget: &mut u32) {
        self.running.pop();
        if let Some(pos) = self.step.iter().position(|e| e.seq == id) {
            *budget += self.step.remove(pos).tokens;
        }
        self.release_kv(id);
        let computed = self.seqs[id.at()].computed;
        if self.cfg.preemption == Preemption::Swap && self.swap.take(computed) {
            self.stats.swaps += 1;
            self.seqs[id.at()].swapped = computed;
        }
        let s = &mut self.seqs[id.at()];
        s.computed = 0;
        s.progress.preemptions += 1;
        self.stats.preemptions += 1;
        self.waiting.push_front(id);
    }
}
