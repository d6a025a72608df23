//! Admission: waiting requests become running when their blocks fit (a cached prefix is shared, not
//! allocated), a swapped-out request comes back over the host link, and SGLang's longest-prefix
//! ordering of the queue. Bookkeeping only; the policy decides when each is called.

use super::policy::Admission;
use super::seq::{Scheduled, SeqId};
use super::Replica;
use crate::kv::{Match, ROOT};

impl Replica {
    /// Admits waiting requests in queue order while their first chunk fits under `rule`, the token
    /// budget and the sequence cap; the first that does not fit stops admission.
    pub(crate) fn admit_waiting(&mut self, budget: &mut u32, rule: Admission) {
        let ebs = self.cfg.block_size;
        let reserve = rule.reserve();
        while *budget > 0 && self.running.len() < self.cfg.max_num_seqs as usize {
            let Some(&id) = self.waiting.front() else {
                break;
            };
            if self.seqs[id.at()].swapped > 0 {
                if !self.swap_in(id, budget, reserve) {
                    break;
                }
                continue;
            }
            let s = &self.seqs[id.at()];
            let m = if self.cfg.prefix_caching {
                self.kv.cache.lookup(ROOT, 0, s.hashable, &s.prompt)
            } else {
                Match::default()
            };
            let computed = (m.blocks * ebs).min(s.known() - 1);
            let n = (s.known() - computed).min(*budget);
            let need = (computed + n).div_ceil(ebs).saturating_sub(m.blocks) + self.state_blocks;
            let room = match rule {
                Admission::FirstChunk => need as u64,
                Admission::WholeRequest {
                    reserve,
                    output_ratio,
                    output_cap,
                } => {
                    let rest = (s.input.saturating_sub(computed)).div_ceil(ebs) as u64;
                    let out = (s.output_left().min(output_cap) as f64 * output_ratio / ebs as f64)
                        .ceil() as u64;
                    reserve + rest.max(need as u64) + out
                }
            };
            if room > self.kv.available() - m.evictable {
                break;
            }
            let node = self.kv.cache.acquire(&m, ROOT);
            let ok = self.kv.allocate(need as u64);
            debug_assert!(ok, "admission checked the room");
            let s = &mut self.seqs[id.at()];
            s.kv_node = node;
            s.shared = m.blocks;
            s.private = 0;
            s.computed = computed;
            self.grant(id, need);
            let s = &mut self.seqs[id.at()];
            if !s.admitted {
                s.admitted = true;
                if self.opts.report_tokens {
                    self.admitted_now.push(s.tag);
                }
                s.progress.cached_tokens = computed;
                self.stats.lookup_tokens += s.input as u64;
                self.stats.hit_tokens += computed as u64;
            }
            self.start_running(id, n, computed, budget);
        }
    }

    /// Moves the waiting queue's head `id` to the running set, its `n` tokens from `start` into the step.
    fn start_running(&mut self, id: SeqId, n: u32, start: u32, budget: &mut u32) {
        self.waiting.pop_front();
        self.running.push(id);
        self.step.push(Scheduled {
            seq: id,
            tokens: n,
            start,
        });
        *budget -= n;
        self.scheduled_to(id, start + n);
    }

    /// Brings a swapped-out sequence back: all its KV into private blocks, copied over the host link.
    fn swap_in(&mut self, id: SeqId, budget: &mut u32, reserve: u64) -> bool {
        let s = &self.seqs[id.at()];
        let computed = s.swapped;
        let n = (s.known() - computed).min(*budget);
        let need = (computed + n).div_ceil(self.cfg.block_size) + self.state_blocks;
        if need as u64 + reserve > self.kv.available() || !self.kv.allocate(need as u64) {
            return false;
        }
        self.swap.bring_back(computed);
        let s = &mut self.seqs[id.at()];
        s.private = 0;
        s.computed = computed;
        s.swapped = 0;
        self.grant(id, need);
        let s = &mut self.seqs[id.at()];
        s.inserted = true; // its prompt blocks stay private: swapped KV is not re-shared
        self.start_running(id, n, computed, budget);
        true
    }

    /// Sorts the waiting queue by longest cached prefix (ties keep arrival order) while it holds at
    /// most `max_queue` requests; longer queues, and engines without a prefix cache, keep arrival order.
    pub(crate) fn order_waiting_by_cached_prefix(&mut self, max_queue: usize) {
        if self.waiting.len() < 2 || self.waiting.len() > max_queue || !self.cfg.prefix_caching {
            return;
        }
        let mut keyed: Vec<(u32, SeqId)> = self
            .waiting
            .iter()
            .map(|&id| {
                let s = &self.seqs[id.at()];
                (
                    self.kv.cache.lookup(ROOT, 0, s.hashable, &s.prompt).blocks,
                    id,
                )
            })
            .collect();
        keyed.sort_by_key(|k| std::cmp::Reverse(k.0)); // stable: equal matches keep their order
        self.waiting = keyed.into_iter().map(|(_, id)| id).collect();
    }
}
