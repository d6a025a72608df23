#!/usr/bin/env python3
"""vLLM's fused-MoE layer of the Qwen3-30B-A3B shape on an H200 as NVIDIA aiconfigurator published it
(calibration/tables/h200/h200_moe_vllm_0.24.0.csv: vLLM 0.24.0's Triton kernel, balanced routing, bf16, one
GPU, a CUDA graph replayed; routing, both GEMMs, the activation and the weighted sum, not the router's own
projection) against the shipped MoE profile's terms for one routed layer (presets/profiles/
h200-qwen3-30b-a3b-vllm.yaml): the larger of the distinct experts' weight reads and the GEMMs on the rows
the kernel multiplies, plus moe_layer_s. Balanced routing gives every expert exactly M·8/128 rows, so the
padding to the tile table's BLOCK_SIZE_M is exact here (the simulator takes its expectation under random
routing). Also the same without padding.

    python3 results/published-moe/aiconfigurator_moe.py > results/published-moe/aiconfigurator-moe.md
"""
import csv
import math
import statistics
import sys

sys.path.insert(0, "results/h200-vllm-moe/kernel")
from padding import profile, tile  # noqa: E402  (the profile's terms and the tile rule, read once)

E, K, HIDDEN, INTER = 128, 8, 2048, 768
BW, PEAK = 4.8e12, 989e12  # presets/hardware/h200.yaml
TABLE = "calibration/tables/h200/h200_moe_vllm_0.24.0.csv"


def main():
    mem, gemm_eff, fixed, tiles = profile()
    rows = [r for r in csv.DictReader(open(TABLE)) if r["distribution"] == "balanced"]
    print("# vLLM's fused-MoE layer on an H200 as aiconfigurator published it, against the MoE profile's terms\n")
    print(f"`python3 results/published-moe/aiconfigurator_moe.py` (its docstring: the source and the model). Profile "
          f"`h200-qwen3-30b-a3b-vllm`: expert_memory_efficiency {mem:.3f}, expert_gemm_efficiency {gemm_eff:.3f} "
          f"(fitted to whole-model prefill steps on padded rows), moe_layer_s {fixed * 1e6:.1f} µs (fitted to whole-model "
          f"decode steps: it includes the router's projection, which this table leaves out).\n")
    print("| M | rows an expert → padded | published µs | profile's terms µs (error) | without padding µs (error) | bound |")
    print("|---:|---|---:|---|---|---|")
    errs, errs_plain = [], []
    for r in rows:
        m = int(r["num_tokens"])
        t = float(r["latency"]) * 1e-3
        per = math.ceil(m * K / E)
        b = tile(tiles, m)
        naive = m * K * 4 <= E  # vLLM's naive assignment: a tile per (token, expert) pair
        padded = m * K * b if naive else E * math.ceil(per / b) * b
        reads = min(E, m * K) * 3 * HIDDEN * INTER * 2 / (BW * mem)
        flops = 6 * HIDDEN * INTER
        g = padded * flops / (PEAK * gemm_eff)
        g_plain = m * K * flops / (PEAK * gemm_eff)
        model, plain = max(reads, g) + fixed, max(reads, g_plain) + fixed
        e, ep = 100 * (model / t - 1), 100 * (plain / t - 1)
        errs.append((m, e))
        errs_plain.append((m, ep))
        print(f"| {m} | {m * K / E:g} → {'(naive) ' + str(b) if naive else padded // E} | {t * 1e6:.1f} | {model * 1e6:.1f} ({e:+.1f} %) "
              f"| {plain * 1e6:.1f} ({ep:+.1f} %) | {'GEMM' if g > reads else 'reads'} |")
    for lo, hi in ((1, 8), (16, 512), (768, 16384)):
        a = [abs(e) for m, e in errs if lo <= m <= hi]
        b = [abs(e) for m, e in errs_plain if lo <= m <= hi]
        print(f"\n{lo}–{hi} tokens: median |error| {statistics.median(a):.1f} % with padding, {statistics.median(b):.1f} % without.",
              end="")
    print()


if __name__ == "__main__":
    main()
