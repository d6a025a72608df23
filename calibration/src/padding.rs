//! The rows a fused mixture-of-experts kernel multiplies in one step: each expert's routed rows padded up
//! to the kernel's row tile (vLLM's `moe_align_block_size` before its Triton fused-MoE GEMMs). Pure
//! arithmetic over a step's token count; never reads a file, never holds state between steps.
//!
//! A step of `n` tokens routes each token to `per_token` experts; expert `e` gets `X_e ~ Binomial(n, q_e)`
//! rows (`q_e = per_token ÷ count` under uniform routing, the Zipf inclusion probabilities under skew)
//! and the kernel computes `b · ⌈X_e / b⌉` of them, `b` the tile's rows for a step of `n` tokens. The
//! expected padded rows are `Σ_e b · Σ_{j ≥ 0} P(X_e > j·b)`: the `j = 0` term exactly
//! (`1 − (1 − q_e)^n`, the chance the expert is chosen at all), the others from the normal
//! approximation with a continuity correction (they matter only where `X_e` is near or above a tile,
//! hundreds of tokens per expert, where the binomial is close to normal). A step that routes at most a
//! quarter as many (token, expert) pairs as there are experts skips the alignment in vLLM: each pair gets
//! a tile of its own, `n · per_token · b` rows.

use crate::model::Experts;
use crate::profile::ExpertTile;

/// The tile's rows for a step of `tokens` tokens under a table ([`nearest_tile`]); `None` for an empty
/// table.
pub fn tile_rows(tiles: &[ExpertTile], tokens: f64) -> Option<u32> {
    nearest_tile(tiles, tokens).map(|t| t.rows)
}

/// The entry a step of `tokens` tokens takes: the one whose tokens is nearest (the smaller on a tie),
/// as vLLM picks from its tuned configuration table; `None` for an empty table.
pub fn nearest_tile(tiles: &[ExpertTile], tokens: f64) -> Option<&ExpertTile> {
    let mut best = tiles.first()?;
    for t in &tiles[1..] {
        if (t.tokens as f64 - tokens).abs() < (best.tokens as f64 - tokens).abs() {
            best = t;
        }
    }
    Some(best)
}

/// A kernel's tile table and the routing it pads.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ExpertPadding {
    /// The kernel's tile table, never empty.
    tiles: Vec<ExpertTile>,
    count: f64,
    per_token: f64,
    /// Skewed routing: each expert's chance `q_e` that one token picks it. `None`: uniform.
    skewed: Option<Vec<f64>>,
}

impl ExpertPadding {
    /// The padding of `experts` under the profile's tile table; `None` when the table is empty (the
    /// GEMMs then count routed rows only).
    pub(crate) fn new(experts: &Experts, tiles: &[ExpertTile], skew: f64) -> Option<ExpertPadding> {
        if tiles.is_empty() {
            return None;
        }
        Some(ExpertPadding {
            tiles: tiles.to_vec(),
            count: experts.count as f64,
            per_token: experts.per_token as f64,
            skewed: (skew > 0.0).then(|| experts.inclusion_probabilities(skew)),
        })
    }

    /// The tile's rows for a step of `tokens` tokens ([`tile_rows`]).
    pub(crate) fn tile_rows(&self, tokens: f64) -> f64 {
        tile_rows(&self.tiles, tokens).unwrap_or(1) as f64
    }

    /// Expected rows the kernel multiplies beyond the `tokens × per_token` routed ones.
    pub(crate) fn excess_rows(&self, tokens: f64) -> f64 {
        if tokens <= 0.0 {
            return 0.0;
        }
        let b = self.tile_rows(tokens);
        let routed = tokens * self.per_token;
        if routed * 4.0 <= self.count {
            return routed * (b - 1.0);
        }
        let padded = match &self.skewed {
            None => self.count * tiles_of(tokens, self.per_token / self.count, b),
            Some(q) => q.iter().map(|&q| tiles_of(tokens, q, b)).sum(),
        } * b;
        (padded - routed).max(0.0)
    }
}

/// `E[⌈X / b⌉]` for `X ~ Binomial(n, q)`, in at most about two dozen terms whatever `n`: where the spread
/// is at least a tile the residue `X mod b` is as good as uniform, so `⌈X / b⌉ = (X + pad) / b` with a
/// mean pad of `(b − 1) / 2`; otherwise `Σ_j P(X > j·b)`, the terms far below the mean counted as 1.
fn tiles_of(n: f64, q: f64, b: f64) -> f64 {
    if q <= 0.0 {
        return 0.0;
    }
    let q = q.min(1.0);
    let mean = n * q;
    let sd = (n * q * (1.0 - q)).max(0.0).sqrt();
    if sd >= b {
        return (mean + (b - 1.0) / 2.0) / b;
    }
    if sd == 0.0 {
        return (mean / b).ceil(); // q = 1: every token picks the expert
    }
    let chosen = 1.0 - (1.0 - q).powf(n);
    // tiles j ≥ 1 whose edge lies more than 10 sd below the mean are passed with certainty
    let certain = ((mean - 10.0 * sd) / b).floor().max(0.0);
    let mut sum = chosen + certain;
    let mut j = certain + 1.0;
    // the tail beyond mean + 10 sd is below 1e-23
    while j * b < n && j * b <= mean + 10.0 * sd {
        sum += 0.5 * libm::erfc((j * b + 0.5 - mean) / (sd * std::f64::consts::SQRT_2));
        j += 1.0;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3_30b() -> Experts {
        Experts {
            layers: 48,
            count: 128,
            per_token: 8,
            params_per_expert: 3.0 * 768.0 * 2048.0,
        }
    }

    /// vLLM 0.26.0's tuned table for E=128, N=768 on the H200 (`fused_moe/configs/`), BLOCK_SIZE_M by key.
    fn h200_table() -> Vec<ExpertTile> {
        [
            (1, 16),
            (128, 16),
            (256, 32),
            (512, 64),
            (1024, 128),
            (4096, 128),
        ]
        .into_iter()
        .map(|(tokens, rows)| ExpertTile {
            tokens,
            rows,
            kernel: None,
        })
        .collect()
    }

    /// `E[⌈X/b⌉]` summed over the binomial's probabilities (in log space, within 15 sd of the mean), for
    /// the check.
    fn exact(n: u64, q: f64, b: u64) -> f64 {
        let (nf, mean) = (n as f64, n as f64 * q);
        let sd = (mean * (1.0 - q)).sqrt();
        let lo = (mean - 15.0 * sd).max(1.0) as u64;
        let hi = ((mean + 15.0 * sd) as u64 + b).min(n);
        let ln_pmf = |x: f64| {
            libm::lgamma(nf + 1.0) - libm::lgamma(x + 1.0) - libm::lgamma(nf - x + 1.0)
                + x * q.ln()
                + (nf - x) * (1.0 - q).ln()
        };
        (lo..=hi)
            .map(|x| ln_pmf(x as f64).exp() * x.div_ceil(b) as f64)
            .sum()
    }

    #[test]
    fn the_expected_tiles_match_the_binomial_sum() {
        // decode-sized steps (a tile is rarely exceeded), prefill-sized ones (several tiles an expert) and
        // long ones whose spread passes a tile (the uniform-residue form)
        for (n, b) in [
            (64, 16),
            (200, 16),
            (256, 32),
            (512, 64),
            (1024, 128),
            (1536, 128),
            (2048, 128),
            (4096, 128),
            (8192, 128),
            (16384, 16),
            (65536, 32),
            (262144, 128),
        ] {
            let (got, want) = (
                tiles_of(n as f64, 1.0 / 16.0, b as f64),
                exact(n, 1.0 / 16.0, b),
            );
            // the normal tail is within 0.4 % where a tile sits at the mean (2,048 tokens)
            assert!(
                (got / want - 1.0).abs() < 5e-3,
                "n {n}, b {b}: {got} vs {want}"
            );
        }
    }

    /// A certain expert (q = 1) and an absurdly long step cost a handful of terms, not one per tile.
    #[test]
    fn long_steps_and_certain_experts_are_closed_forms() {
        assert_eq!(tiles_of(1e9, 1.0, 16.0), (1e9f64 / 16.0).ceil());
        let t = tiles_of(1e9, 0.999_999, 1.0);
        assert!((t - 1e9 * 0.999_999).abs() / t < 1e-6, "{t}");
        assert_eq!(tiles_of(1e6, 0.0, 16.0), 0.0);
    }

    #[test]
    fn padding_follows_the_kernels_tile_table() {
        let p = ExpertPadding::new(&qwen3_30b(), &h200_table(), 0.0).unwrap();
        // nearest key, the smaller on a tie
        assert_eq!(p.tile_rows(192.0), 16.0);
        assert_eq!(p.tile_rows(193.0), 32.0);
        assert_eq!(p.tile_rows(8192.0), 128.0);
        // 1,024 tokens: each expert's ~64 rows take one 128-row tile, so the kernel multiplies twice
        // the routed rows; 4,096 (~256 an expert, rarely a whole number of tiles) about 1.24 times
        let ratio = |n: f64| 1.0 + p.excess_rows(n) / (n * 8.0);
        assert!((ratio(1024.0) - 2.0).abs() < 1e-3, "{}", ratio(1024.0));
        assert!((ratio(4096.0) - 1.24).abs() < 0.01, "{}", ratio(4096.0));
        assert!(ratio(8192.0) < ratio(4096.0) && ratio(8192.0) > 1.05);
        // vLLM's naive assignment: 4 tokens × 8 experts ≤ 128 / 4, a 16-row tile per pair
        assert_eq!(p.excess_rows(4.0), 4.0 * 8.0 * 15.0);
        assert_eq!(p.excess_rows(0.0), 0.0);
        assert!(ExpertPadding::new(&qwen3_30b(), &[], 0.0).is_none());
    }

    #[test]
    fn skewed_routing_pads_its_rare_experts_more() {
        let (uniform, skewed) = (
            ExpertPadding::new(&qwen3_30b(), &h200_table(), 0.0).unwrap(),
            ExpertPadding::new(&qwen3_30b(), &h200_table(), 1.0).unwrap(),
        );
        // at 1,024 tokens uniform routing gives each expert about half a tile (8,192 rows of padding);
        // under a Zipf skew of 1 the popular experts fill their tiles and the ~100 rare ones, about 13
        // rows each, waste most of theirs (about 12,000)
        let (u, s) = (uniform.excess_rows(1024.0), skewed.excess_rows(1024.0));
        assert!((u - 8192.0).abs() < 1.0, "{u}");
        assert!(s > 1.3 * u && s < 1.6 * u, "{u} vs {s}");
    }
}
