#!/usr/bin/env python3
"""vLLM's fused-MoE layer measured alone (scripts/vllm/moe_kernel_bench.py, one layer of the Qwen3-30B-A3B
shape on the H200) against the simulator's terms for one routed layer (presets/profiles/h200-qwen3-30b-a3b-vllm.yaml):

  - padding: the rows the kernel multiplies (moe_align_block_size's count, measured) over the routed rows,
    against calibration/src/padding.rs's expectation (exact at the first tile, a normal tail above it);
  - time: the larger of the distinct experts' weight reads (at expert_memory_efficiency of 4.8 TB/s) and the
    padded rows' GEMMs (at expert_gemm_efficiency of 989 TFLOP/s), plus moe_layer_s, against the top-k plus
    the experts replayed from a CUDA graph; and the same GEMMs without padding;
  - the efficiency the kernel itself reaches on its padded rows where it is bound by compute (M >= 2,048):
    padded rows x FLOPs a row / (time less the fixed term), against the profile's.

    python3 results/h200-vllm-moe/kernel/padding.py results/h200-vllm-moe/kernel/moe-bench.json > results/h200-vllm-moe/kernel/padding.md
"""
import json
import math
import re
import statistics
import sys

E, K_TOP, HIDDEN, INTER = 128, 8, 2048, 768
BW, PEAK = 4.8e12, 989e12  # presets/hardware/h200.yaml
PROFILE = "presets/profiles/h200-qwen3-30b-a3b-vllm.yaml"


def profile():
    text = open(PROFILE).read()
    num = lambda key: float(re.search(rf"^{key}: *([0-9.e-]+)", text, re.M).group(1))
    tiles = [(int(a), int(b)) for a, b in re.findall(r"- \{tokens: (\d+), rows: (\d+)\}", text)]
    return num("expert_memory_efficiency"), num("expert_gemm_efficiency"), num("moe_layer_s"), tiles


def tile(tiles, m):
    best = tiles[0]
    for t in tiles[1:]:
        if abs(t[0] - m) < abs(best[0] - m):
            best = t
    return best[1]


def expected_padded(m, b):
    """calibration/src/padding.rs: E[padded rows] under uniform routing"""
    routed = m * K_TOP
    if routed * 4 <= E:
        return routed * b
    q = K_TOP / E
    mean, sd = m * q, math.sqrt(m * q * (1 - q))
    tiles, j = 1 - (1 - q) ** m, 1
    while j * b < m and j * b <= mean + 10 * sd:
        tiles += 0.5 * math.erfc((j * b + 0.5 - mean) / (sd * math.sqrt(2)))
        j += 1
    return E * tiles * b


def main():
    bench = json.load(open(sys.argv[1]))
    mem_eff, gemm_eff, layer_s, tiles = profile()
    expert_bytes = 3 * INTER * HIDDEN * 2
    flops_row = 2 * 3 * INTER * HIDDEN
    print("# vLLM's fused-MoE layer alone against the simulator's terms for one routed layer\n")
    print(f"Measured: {bench['device']}, torch {bench['torch']}, one layer of the Qwen3-30B-A3B shape (E {E}, top-{K_TOP}, "
          f"hidden {HIDDEN}, intermediate {INTER}, bf16, random weights, uniform routing), {bench['draws']} routing "
          f"draws a size, the median of {bench['iters']} CUDA-event timings each (`scripts/vllm/moe_kernel_bench.py`). "
          f"Modelled: `{PROFILE}` (expert_memory_efficiency {mem_eff:.3f}, expert_gemm_efficiency {gemm_eff:.3f}, "
          f"moe_layer_s {layer_s * 1e6:.1f} µs, its tile table). `python3 results/h200-vllm-moe/kernel/padding.py "
          f"results/h200-vllm-moe/kernel/moe-bench.json`.\n")
    print("| M | tile | padded / routed: measured, modelled | distinct experts | top-k + experts, graph µs | eager µs "
          "| modelled µs (error) | modelled without padding µs (error) | bound |")
    print("|---:|---:|---|---:|---:|---:|---|---|---|")
    effs, errs, errs_plain = [], [], []
    for r in bench["sizes"]:
        m, b = r["m"], r["block_size_m"]
        assert b == tile(tiles, m), f"M {m}: the bench's tile {b} is not the profile's {tile(tiles, m)}"
        routed = m * K_TOP
        model_padded = expected_padded(m, b)
        distinct = E * (1 - (1 - K_TOP / E) ** m)
        reads = distinct * expert_bytes / (BW * mem_eff)
        gemm = model_padded * flops_row / (PEAK * gemm_eff)
        gemm_plain = routed * flops_row / (PEAK * gemm_eff)
        model = max(reads, gemm) + layer_s
        plain = max(reads, gemm_plain) + layer_s
        measured = (r["experts_graph_ms"] + r["topk_graph_ms"]) * 1e-3
        err, err_plain = 100 * (model / measured - 1), 100 * (plain / measured - 1)
        errs.append((m, err))
        errs_plain.append((m, err_plain))
        if m >= 2048:
            effs.append((m, r["padded_rows"] * flops_row / (PEAK * (measured - layer_s))))
        print(f"| {m} | {b} | {r['padded_rows'] / routed:.3f}, {model_padded / routed:.3f} | {r['distinct_experts']:.0f} "
              f"| {measured * 1e6:.1f} | {r['experts_eager_ms'] * 1e3:.1f} | {model * 1e6:.1f} ({err:+.1f} %) "
              f"| {plain * 1e6:.1f} ({err_plain:+.1f} %) | {'GEMM' if gemm > reads else 'reads'} |")
    big = [e for m, e in errs if m >= 1024]
    big_plain = [e for m, e in errs_plain if m >= 1024]
    print(f"\nFrom 1,024 tokens on ({len(big)} sizes): median |error| {statistics.median(abs(e) for e in big):.1f} % with "
          f"padding, {statistics.median(abs(e) for e in big_plain):.1f} % without; largest {max(big, key=abs):+.1f} % "
          f"and {max(big_plain, key=abs):+.1f} %.")
    if effs:
        print(f"The kernel's own efficiency on its padded rows from 2,048 tokens on (time less moe_layer_s): "
              + ", ".join(f"{e:.3f} at {m}" for m, e in effs)
              + f"; median {statistics.median(e for _, e in effs):.3f} against the profile's {gemm_eff:.3f}.")


if __name__ == "__main__":
    main()
