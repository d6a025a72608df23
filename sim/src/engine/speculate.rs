//! Speculative decoding's verify draws: how many drafts a verify step accepts. A draw is a hash of the
//! replica's seed, the request and its output position, never the next number of a stream, so the same
//! request at the same position gets the same draw whatever shares its batch and however steps are
//! merged into runs. Pure arithmetic.

use super::config::Speculative;
use super::seq::SeqId;
use super::Replica;
use serverbench_workloads::RequestKind;

/// Per request kind, the thresholds α^j · 2⁶⁴ (j = 1..=k): a draw below the j-th accepts the j-th draft.
#[derive(Clone, Debug, Default)]
pub(crate) struct Acceptance {
    below: [Vec<u64>; 3],
}

/// Index of a request kind in per-kind tables.
fn kind_index(kind: RequestKind) -> usize {
    match kind {
        RequestKind::RootTurn => 0,
        RequestKind::SubagentTurn => 1,
        RequestKind::Compaction => 2,
    }
}

impl Acceptance {
    /// The thresholds of `spec`; empty without speculation.
    pub(crate) fn new(spec: Option<&Speculative>) -> Acceptance {
        let kinds = [
            RequestKind::RootTurn,
            RequestKind::SubagentTurn,
            RequestKind::Compaction,
        ];
        Acceptance {
            below: kinds.map(|kind| {
                spec.map_or_else(Vec::new, |sp| {
                    let alpha = sp.alpha(kind);
                    // `as` saturates: α = 1 gives u64::MAX (accepted but for one draw in 2⁶⁴).
                    (1..=sp.k)
                        .map(|j| (alpha.powi(j as i32) * 18_446_744_073_709_551_616.0) as u64)
                        .collect()
                })
            }),
        }
    }

    fn for_kind(&self, kind: RequestKind) -> &[u64] {
        &self.below[kind_index(kind)]
    }
}

/// The uniform 64-bit draw of a request's verify step starting at output `position`: SplitMix64 at
/// that position of the request's own sequence (`key` from the replica's seed and the request's tag).
#[inline]
fn acceptance_draw(key: u64, position: u64) -> u64 {
    serverbench_workloads::hash::mix64(
        key.wrapping_add(position.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    )
}

/// Drafts accepted for the uniform 64-bit draw `h`, given the thresholds α^j · 2⁶⁴ (j = 1..=k).
#[inline]
fn accepted_drafts(h: u64, below: &[u64]) -> u32 {
    below.iter().filter(|&&t| h < t).count() as u32
}

impl Replica {
    /// Tokens a verify step emits for sequence `id` when it still wants `left` tokens: accepted drafts
    /// (each accepted with α until the first rejection, at most `k`) plus the verifier's own token.
    pub(crate) fn draw_tokens(&self, id: SeqId, left: u32) -> u32 {
        let s = &self.seqs[id.at()];
        let position = (s.output - left) as u64;
        let h = acceptance_draw(s.draw_key, position);
        // P(accepted ≥ j) = α^j, so one uniform decides them all: accepted = #{j ≤ k : u < α^j}
        // (the same distribution as drawing each draft until the first rejection). Counted without
        // an early exit, so the random outcome costs no mispredicted branch.
        (accepted_drafts(h, self.acceptance.for_kind(s.kind)) + 1).min(left)
    }

    /// Tokens a decode entry reserves KV for: the next token plus any draft tokens being verified.
    #[inline]
    pub(crate) fn decode_reserve(&self) -> u32 {
        1 + self.spec.as_ref().map_or(0, |s| s.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashed_acceptance_draws_follow_the_truncated_geometric_law() {
        let spec = Speculative {
            method: crate::engine::SpecMethod::Mtp,
            k: 3,
            acceptance: 0.7,
            acceptance_by_kind: Default::default(),
            draft_params: None,
        };
        let a = Acceptance::new(Some(&spec));
        let below = a.for_kind(RequestKind::RootTurn);
        let key = serverbench_workloads::hash::mix2(7, 42);
        let n = 200_000u64;
        let mut counts = [0u64; 4];
        for pos in 0..n {
            counts[accepted_drafts(acceptance_draw(key, pos), below) as usize] += 1;
        }
        // P(accepted = j) = α^j (1 − α) for j < k, and α^k for j = k.
        let want = [0.3, 0.21, 0.147, 0.343];
        for (j, (&c, w)) in counts.iter().zip(want).enumerate() {
            let got = c as f64 / n as f64;
            assert!((got - w).abs() < 0.004, "accepted = {j}: {got} vs {w}");
        }
        let sure = Speculative {
            acceptance: 1.0,
            ..spec
        };
        let a = Acceptance::new(Some(&sure));
        assert_eq!(
            accepted_drafts(u64::MAX - 1, a.for_kind(RequestKind::Compaction)),
            3
        );
        assert!(Acceptance::new(None).below.iter().all(|t| t.is_empty()));
    }
}
