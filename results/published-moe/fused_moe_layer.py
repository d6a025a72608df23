#!/usr/bin/env python3
"""One fused-MoE layer on an H200 in bf16, published against the shipped MoE profile's terms by hand.

Published: vLLM PR #44818 (https://github.com/vllm-project/vllm/pull/44818, 2026-06-08, the PR's own
benchmark table as the search index holds it): vLLM's Triton fused-MoE layer (`benchmark_moe.py`-style
sweep: routing, both expert GEMMs, activation and the weighted sum; 500 iterations a point) for a Gemma 4
mixture of experts, E = 128 experts, top-8, hidden K = 2,816, expert intermediate N = 704, bf16, on an
H200, with vLLM's default kernel configuration and with the tuned one (taken from SGLang PR #26588).
The closest published shape to Qwen3-30B-A3B (E 128, top-8, K 2,048, N 768) on Hopper in bf16.

Modelled: the terms `h200-qwen3-30b-a3b-vllm` gives the routed experts (presets/profiles/), applied by
hand to one layer of this shape: the distinct experts a batch of M tokens routes to under uniform
routing, E · (1 − (1 − k/E)^M), their weights read at `expert_memory_efficiency` of the H200's
bandwidth; the experts' GEMMs (2 · M · k · 3 · N · K FLOPs) at `expert_gemm_efficiency` of its bf16 peak;
the larger of the two (the step form `kernel_sum` takes the larger of weights and GEMMs), plus the fixed
`moe_layer_s`. Then the same with the kernel's tile padding made explicit: `moe_align_block_size` pads
each expert's rows to a multiple of the kernel's BLOCK_SIZE_M, which vLLM 0.26.0's tuned table for
E=128, N=768 on the H200 (vllm/model_executor/layers/fused_moe/configs/) sets by the table key nearest M
(16 up to 128 tokens, 32 at 256, 64 at 512, 128 from 1,024 on; assumed for this shape); an expert's rows
are Binomial(M · k, 1/E), the padded rows' expectation is summed exactly, and the GEMM efficiency is
re-based so that the 8,192-token steps it was fitted to keep their time (0.392 × that step's padding).
This is an analysis, not the simulator: the cost model does not pad (docs/models-and-hardware.md).

    python3 results/published-moe/fused_moe_layer.py > results/published-moe/fused-moe-layer.md
"""
import math

E, TOPK, K, N = 128, 8, 2816, 704
BW, PEAK = 4.8e12, 989e12                      # presets/hardware/h200.yaml
EXPERT_MEM, EXPERT_GEMM, LAYER_S = 0.8791173273690776, 0.392, 0.000050658723791882455
PUBLISHED = [  # M: (default µs, tuned µs)
    (1, 189.2, 185.1), (2, 187.0, 188.9), (4, 185.4, 185.1), (8, 200.0, 204.4), (16, 257.8, 264.1),
    (24, 314.4, 314.4), (32, 341.1, 324.9), (48, 382.8, 365.5), (64, 391.8, 384.1), (96, 405.6, 390.3),
    (128, 409.1, 396.4), (256, 419.8, 419.6), (512, 442.2, 442.3), (1024, 536.5, 528.4),
    (1536, 585.4, 582.0), (2048, 742.9, 728.2), (3072, 992.9, 962.9), (4096, 1249.5, 1189.6)]
TILE_KEYS = {1: 16, 2: 16, 4: 16, 8: 16, 16: 16, 24: 16, 32: 16, 48: 16, 64: 16, 96: 16, 128: 16,
             256: 32, 512: 64, 1024: 128, 1536: 128, 2048: 128, 3072: 128, 4096: 128}


def block_m(m):
    return TILE_KEYS[min(TILE_KEYS, key=lambda k: abs(k - m))]


def padding(m):
    """expected padded rows over routed rows for M tokens"""
    n, p, b = m * TOPK, 1.0 / E, block_m(m)
    # E[ceil(X / b)] for X ~ Binomial(n, p), summed over the pmf (log-space for large n)
    tiles, x_max = 0.0, min(n, int(n * p + 12 * math.sqrt(n * p) + 2 * b))
    for x in range(1, x_max + 1):
        logpmf = (math.lgamma(n + 1) - math.lgamma(x + 1) - math.lgamma(n - x + 1)
                  + x * math.log(p) + (n - x) * math.log1p(-p))
        tiles += math.exp(logpmf) * math.ceil(x / b)
    return E * tiles * b / n


def layer_s(m, padded):
    distinct = E * (1 - (1 - TOPK / E) ** m)
    read = distinct * 3 * N * K * 2 / (BW * EXPERT_MEM)
    eff = EXPERT_GEMM * (padding(8192) if padded else 1.0)
    gemm = 2 * m * TOPK * 3 * N * K / (PEAK * eff) * (padding(m) if padded else 1.0)
    return max(read, gemm) + LAYER_S


def main():
    print("# One fused-MoE layer on an H200, bf16: published against the MoE profile's terms\n")
    for part in __doc__.split("\n\n")[1:3]:
        print(part.replace("\n", " ") + "\n")
    print("`python3 results/published-moe/fused_moe_layer.py` (its docstring: sources and the model). "
          f"Padding at 8,192 tokens: {padding(8192):.3f}, so the re-based GEMM efficiency is "
          f"{EXPERT_GEMM * padding(8192):.3f}.\n")
    print("| tokens M | published default / tuned µs | profile's terms µs (error vs tuned) | with tile padding µs (error) | BLOCK_SIZE_M, padding |")
    print("|---:|---|---|---|---|")
    for m, d, t in PUBLISHED:
        a, b = layer_s(m, False) * 1e6, layer_s(m, True) * 1e6
        print(f"| {m} | {d:.1f} / {t:.1f} | {a:.1f} ({100 * (a / t - 1):+.0f} %) | {b:.1f} ({100 * (b / t - 1):+.0f} %) "
              f"| {block_m(m)}, ×{padding(m):.2f} |")


if __name__ == "__main__":
    main()
