#!/usr/bin/env python3
"""vLLM 0.26.0's Triton fused-MoE layer on the GPU, alone, for one layer of the Qwen3-30B-A3B shape (128 experts,
top-8, hidden 2,048, expert intermediate 768, bf16, random weights), as the MoE replays' server runs it: the
routing top-k (`fused_topk`, softmax, renormalised), then `fused_experts_impl` (moe_align_block_size, the
gate/up GEMM, SiLU-and-mul, the down GEMM, the weighted sum) with the kernel configuration vLLM picks for the
step's token count M from its tuned table for E=128, N=768 on the H200.

For each M the script reports, over several routing draws (random gating logits: uniform routing, as the
random-weight model routes):
  - the padded rows `moe_align_block_size` returns (`num_tokens_post_padded`) against the routed rows M · k,
    and the distinct experts the draw routes to;
  - the median GPU time of the top-k and of the expert part, each replayed from a CUDA graph (as vLLM runs
    decode-sized steps; no host launch gaps in the figure) and, for the expert part, also eagerly (the host
    launches between kernels included, as steps above vLLM's CUDA-graph sizes run): one call alone, and
    per call of 48 calls back to back (a whole model's routed layers: the host's work for one call
    overlaps the GPU's for the one before, so what stays above the graph's time is not hidden).
The layer's weights are 1.2 GB, far above the 50 MB L2, so every call reads them from HBM. Needs the GPU to
itself: run before `vllm serve`. The simulator's padding model (docs/models-and-hardware.md, "Tile padding")
is checked against this table by results/h200-vllm-moe/kernel/padding.py.

Usage: moe_kernel_bench.py OUT.json [M,M,...]
"""

import json
import statistics
import sys
import time

import torch
from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts_impl, try_get_optimal_moe_config
from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size
from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk

E, TOPK, K, N = 128, 8, 2048, 768
DRAWS, ITERS = 3, 30
RUN = 48  # eager calls back to back, as a whole model's 48 routed layers would issue them
SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1280, 1536, 1792, 2048,
         2560, 3072, 4096, 6144, 8192, 12288, 16384]


def timed(fn, iters: int) -> float:
    """median milliseconds of fn() between CUDA events"""
    out = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def graphed(fn):
    """fn captured in a CUDA graph (after warm-up on a side stream), returned as its replay"""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def one_size(m: int, w1, w2, gen) -> dict:
    cfg = try_get_optimal_moe_config(w1.size(), w2.size(), TOPK, None, m)
    naive = m * TOPK * 4 <= E  # _prepare_expert_assignment's naive block assignment
    rows = []
    for draw in range(DRAWS):
        x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.1
        logits = torch.randn(m, E, device="cuda", dtype=torch.float32, generator=gen)
        weights, ids, _ = fused_topk(x, logits, TOPK, True)
        _, _, padded = moe_align_block_size(ids, cfg["BLOCK_SIZE_M"], E)
        if naive:  # vLLM skips the alignment: one block of BLOCK_SIZE_M rows per (token, expert) pair
            padded = torch.tensor(m * TOPK * cfg["BLOCK_SIZE_M"])
        experts = lambda: fused_experts_impl(x, w1, w2, weights, ids, activation="silu")
        topk = lambda: fused_topk(x, logits, TOPK, True)
        experts()  # compiles the Triton kernel for this configuration on first use
        torch.cuda.synchronize()
        rows.append({
            "padded_rows": int(padded.item()),
            "distinct_experts": int(torch.unique(ids).numel()),
            "experts_graph_ms": timed(graphed(experts), ITERS),
            "experts_eager_ms": timed(experts, ITERS),
            "experts_eager_run_ms": timed(lambda: [experts() for _ in range(RUN)], 5) / RUN,
            "topk_graph_ms": timed(graphed(topk), ITERS),
        })
    med = lambda key: statistics.median(r[key] for r in rows)
    return {"m": m, "block_size_m": cfg["BLOCK_SIZE_M"], "naive_assignment": naive, "config": cfg, "routed_rows": m * TOPK,
            "padded_rows": med("padded_rows"), "distinct_experts": med("distinct_experts"),
            "experts_graph_ms": med("experts_graph_ms"), "experts_eager_ms": med("experts_eager_ms"),
            "experts_eager_run_ms": med("experts_eager_run_ms"),
            "topk_graph_ms": med("topk_graph_ms"), "draws": rows}


def main() -> None:
    out_path = sys.argv[1]
    sizes = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else SIZES
    gen = torch.Generator(device="cuda").manual_seed(0)
    w1 = torch.randn(E, 2 * N, K, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    w2 = torch.randn(E, K, N, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    result = {"shape": {"E": E, "topk": TOPK, "hidden": K, "intermediate": N, "dtype": "bfloat16"},
              "device": torch.cuda.get_device_name(), "torch": torch.__version__, "draws": DRAWS,
              "iters": ITERS, "sizes": []}
    print(f"{'M':>6} {'BM':>4} {'padded/routed':>13} {'experts':>7} {'graph us':>9} {'eager us':>9} {'run us':>8} {'topk us':>8}")
    for m in sizes:
        t = time.time()
        r = one_size(m, w1, w2, gen)
        result["sizes"].append(r)
        print(f"{m:>6} {r['block_size_m']:>4} {r['padded_rows'] / r['routed_rows']:>13.3f} "
              f"{r['distinct_experts']:>7} {r['experts_graph_ms'] * 1e3:>9.1f} {r['experts_eager_ms'] * 1e3:>9.1f} "
              f"{r['experts_eager_run_ms'] * 1e3:>8.1f} "
              f"{r['topk_graph_ms'] * 1e3:>8.1f}  ({time.time() - t:.1f} s)", flush=True)
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
