//! Which fused mixture-of-experts kernel an eager step runs, and whether the engine has compiled it
//! yet: vLLM's Triton fused-MoE kernel is compiled the first time a step needs a variant no earlier
//! step (or the engine's start-up) did, and that step waits for the compiler. Pure arithmetic over a
//! step's token count and the profile's tuned table; never holds the set of compiled variants (the
//! engine's replica does) and never reads a clock.
//!
//! The rule, read from vLLM 0.26.0 and Triton and checked on vLLM's own step traces
//! (`results/h200-vllm-moe/compiles.md`): a step of `M` tokens takes the configuration of the tuned
//! table's entry nearest `M` (the smaller on a tie), and Triton specializes the kernel on whether its
//! integer arguments are multiples of 16 — here the routed pairs `M × top_k` — so a variant is (the
//! configuration, `M × top_k` a multiple of 16). Entries whose whole configurations are equal share one
//! compiled kernel (the profile's `kernel` ids). Steps that replay captured CUDA graphs never compile:
//! the engine captured them at start-up, at its capture sizes (1, 2, 4 and every multiple of 8 up to
//! its largest graph), which with the profiling run over `max_num_batched_tokens` tokens are the
//! variants warm when it starts serving.

use crate::graphs::GraphRule;
use crate::padding::nearest_tile;
use crate::profile::ExpertTile;

/// One compiled fused-MoE kernel: the configuration's id and whether the routed pairs are a multiple
/// of 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVariant {
    /// The `kernel` id of the tuned table's entry the step takes.
    pub kernel: u32,
    /// `tokens × top_k` is a multiple of 16 (Triton's integer specialization).
    pub aligned: bool,
}

/// A deployment's fused-MoE kernel variants and what compiling one costs.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeCompiles {
    tiles: Vec<ExpertTile>,
    top_k: u32,
    graphs: GraphRule,
    compile_ns: u64,
}

impl MoeCompiles {
    /// `None` unless every entry of the table names its kernel, the compile costs something and the
    /// engine says which steps replay graphs.
    pub fn new(
        tiles: &[ExpertTile],
        top_k: u32,
        graphs: Option<GraphRule>,
        compile_s: f64,
    ) -> Option<MoeCompiles> {
        let named = !tiles.is_empty() && tiles.iter().all(|t| t.kernel.is_some());
        if !named || compile_s <= 0.0 || top_k == 0 {
            return None;
        }
        Some(MoeCompiles {
            tiles: tiles.to_vec(),
            top_k,
            graphs: graphs?,
            compile_ns: (compile_s * 1e9).round() as u64,
        })
    }

    /// What compiling one variant holds its step up, ns.
    pub fn compile_ns(&self) -> u64 {
        self.compile_ns
    }

    /// The variant a step of `tokens` tokens runs.
    pub fn variant(&self, tokens: u64) -> KernelVariant {
        let tile = nearest_tile(&self.tiles, tokens as f64).expect("a named table is not empty");
        KernelVariant {
            kernel: tile.kernel.unwrap_or(0),
            aligned: (tokens * self.top_k as u64) % 16 == 0,
        }
    }

    /// The variant a step of `tokens` tokens (`prefill`: some of them prefill) runs outside the
    /// captured graphs, which is where a compile can happen; `None` for a step that replays a graph or
    /// has no tokens.
    pub fn eager_variant(&self, tokens: u64, prefill: bool) -> Option<KernelVariant> {
        (!self.graphs.replays_tokens(tokens, prefill)).then(|| self.variant(tokens))
    }

    /// The variants the engine compiled before serving: its graph captures and its profiling run.
    pub fn warm(&self, max_num_batched_tokens: u32) -> Vec<KernelVariant> {
        let largest = self.graphs.max_tokens.max(self.graphs.prefill_max_tokens) as u64;
        let captures = [1, 2, 4]
            .into_iter()
            .chain((8..=largest).step_by(8))
            .filter(|&n| n <= largest);
        let mut out: Vec<KernelVariant> = captures
            .chain(std::iter::once(max_num_batched_tokens as u64))
            .map(|n| self.variant(n))
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vLLM 0.26.0's tuned table for Qwen3-30B-A3B's experts on the H200
    /// (`E=128,N=768,device_name=NVIDIA_H200.json`): keys and the ids of equal configurations.
    fn h200_table() -> Vec<ExpertTile> {
        let keys = [
            (1, 16, 0),
            (2, 16, 1),
            (4, 16, 2),
            (8, 16, 3),
            (16, 16, 4),
            (24, 16, 5),
            (32, 16, 2),
            (48, 16, 6),
            (64, 16, 7),
            (96, 16, 8),
            (128, 16, 8),
            (256, 32, 9),
            (512, 64, 10),
            (1024, 128, 11),
            (1536, 128, 12),
            (2048, 128, 12),
            (3072, 128, 12),
            (4096, 128, 11),
        ];
        keys.iter()
            .map(|&(tokens, rows, kernel)| ExpertTile {
                tokens,
                rows,
                kernel: Some(kernel),
            })
            .collect()
    }

    /// vLLM 0.26.0's graphs: every step of at most 512 tokens.
    const VLLM: Option<GraphRule> = Some(GraphRule::mixed(512));

    /// The eager steps of vLLM's first cold replay of the MoE server (`steps-moe-syn-cold`): the rule
    /// marks exactly the four that took 0.7-1.4 s (4,027, 2,032, 2,489 and 747 tokens) as compiles,
    /// and none of the others, whose sizes repeat kernels already compiled or warm from the start.
    #[test]
    fn the_first_steps_of_each_new_variant_compile_as_vllm_did() {
        let c = MoeCompiles::new(&h200_table(), 8, VLLM, 1.25).unwrap();
        let mut compiled: std::collections::BTreeSet<_> = c.warm(8192).into_iter().collect();
        let steps = [
            4027, 4096, 8192, 2032, 1024, 2489, 2048, 684, 1500, 747, 749, 3001, 1024,
        ];
        let compiles: Vec<u64> = steps
            .iter()
            .filter(|&&n| compiled.insert(c.eager_variant(n, true).unwrap()))
            .copied()
            .collect();
        assert_eq!(compiles, vec![4027, 2032, 2489, 747]);
    }

    #[test]
    fn graph_steps_never_compile_and_odd_sizes_are_their_own_variant() {
        let c = MoeCompiles::new(&h200_table(), 8, VLLM, 1.25).unwrap();
        assert_eq!(c.eager_variant(512, true), None);
        assert_eq!(c.eager_variant(0, true), None);
        let (even, odd) = (c.variant(2488), c.variant(2489));
        assert_eq!(even.kernel, odd.kernel);
        assert!(even.aligned && !odd.aligned);
        // 1,024 and 4,096 share a configuration: one kernel, warm from the profiling run.
        assert_eq!(c.variant(1024), c.variant(8192));
        assert!(c.warm(8192).contains(&c.variant(1024)));
        assert_eq!(c.compile_ns(), 1_250_000_000);
    }

    #[test]
    fn a_table_without_kernel_ids_or_a_free_compile_models_none() {
        let mut plain = h200_table();
        plain[3].kernel = None;
        assert!(MoeCompiles::new(&plain, 8, VLLM, 1.25).is_none());
        assert!(MoeCompiles::new(&h200_table(), 8, VLLM, 0.0).is_none());
        assert!(MoeCompiles::new(&h200_table(), 8, None, 1.25).is_none());
    }
}
