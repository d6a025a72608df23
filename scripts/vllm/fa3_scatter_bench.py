#!/usr/bin/env python3
"""FlashAttention 3's decode attention (vLLM 0.26.0's call, as `fa3_decode_bench.py` makes it) over KV pages
laid out as a long-running server leaves them: does reading a sequence's 16-token pages from scattered
places in a large KV pool cost more than reading them from one contiguous run?

A server that has run for a while allocates a new prompt's pages from its free list, which holds pages
freed in the order requests ended and cached prefixes were evicted: the pages of one sequence end up
spread over the whole per-layer KV tensor (about 3 GB a layer for the Qwen3-8B shape on an H200 at
vLLM's 0.9 memory fraction). A fresh server, and the probes that fitted the cost model, hand them out
in order. This bench allocates LAYERS per-layer pools of POOL_TOKENS tokens each (K and V, the shape
vLLM allocates: [pages, 16, 8 heads, 128] bf16), and times one decode step's attention — one call per
layer, as the model's layers run — for each batch of contexts with the sequences' pages
  - `contiguous`: one run of consecutive pages per sequence (a fresh pool),
  - `runs-R`: runs of R consecutive pages at random places (R = 64, 8),
  - `scattered`: every page at a random place in the pool.
Every layout draws its pages from the same pool and reads the same bytes; `num_splits` 32 as vLLM passes
it for steps in a FULL CUDA graph. Times: CUDA events around the LAYERS calls, median of ITERS steps,
reported per layer. Needs the GPU to itself: run before `vllm serve`.

Usage: [LAYERS=12] [POOL_TOKENS=750000] [ITERS=15] fa3_scatter_bench.py OUT.json
"""

import json
import os
import statistics
import sys

import torch
from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

HQ, HK, D, PAGE = 32, 8, 128, 16
LAYERS = int(os.environ.get("LAYERS", "12"))
POOL_TOKENS = int(os.environ.get("POOL_TOKENS", "750000"))
ITERS = int(os.environ.get("ITERS", "15"))
LAYOUTS = (("contiguous", 0), ("runs-64", 64), ("runs-8", 8), ("scattered", 1))

# Batches of decodes like the pure decode steps of vLLM's AgentX trace at c = 8 (1-4 decodes of 50-260K
# tokens), of the synthetic steady trace at c = 16 (12-16 decodes of 20-40K) and the FA3 bench's cases.
CASES = [[150000], [105000, 105000], [88000, 88000, 88000], [72000] * 4, [59920, 154391, 57090],
         [131072], [65536] * 2, [30000] * 12, [24576] * 16, [8192] * 16, [4096]]


def page_tables(blocks: list, pool_pages: int, run: int, gen: torch.Generator) -> list:
    """Each sequence's page ids for one layout: distinct pages of the pool, in runs of `run` consecutive
    pages at random places (0: one run per sequence, 1: every page on its own)."""
    total = sum(blocks)
    if run == 0:
        start = int(torch.randint(0, pool_pages - total, (1,), generator=gen))
        ids = torch.arange(start, start + total)
    else:
        runs = pool_pages // run
        need = -(-total // run)
        picked = torch.randperm(runs, generator=gen)[:need]
        ids = (picked[:, None] * run + torch.arange(run)[None, :]).reshape(-1)[:total]
    out, at = [], 0
    for n in blocks:
        out.append(ids[at:at + n])
        at += n
    return out


def step_time(ctxs: list, run: int, pools: list, gen: torch.Generator) -> dict:
    dev = torch.device("cuda")
    b = len(ctxs)
    blocks = [(c + PAGE - 1) // PAGE for c in ctxs]
    pool_pages = pools[0][0].shape[0]
    table = torch.zeros(b, max(blocks), dtype=torch.int32)
    for i, ids in enumerate(page_tables(blocks, pool_pages, run, gen)):
        table[i, :len(ids)] = ids.to(torch.int32)
    table = table.to(dev)
    seqused = torch.tensor(ctxs, dtype=torch.int32, device=dev)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device=dev)
    q = torch.randn(b, HQ, D, dtype=torch.bfloat16, device=dev)
    out = torch.empty_like(q)
    meta = get_scheduler_metadata(batch_size=b, max_seqlen_q=1, max_seqlen_k=max(ctxs), num_heads_q=HQ,
                                  num_heads_kv=HK, headdim=D, cache_seqlens=seqused, qkv_dtype=torch.bfloat16,
                                  cu_seqlens_q=cu_q, page_size=PAGE, causal=True, window_size=(-1, -1),
                                  num_splits=32)

    def one_step():
        for k, v in pools:
            flash_attn_varlen_func(q=q, k=k, v=v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1, seqused_k=seqused,
                                   max_seqlen_k=max(ctxs), softmax_scale=D ** -0.5, causal=True,
                                   window_size=(-1, -1), block_table=table, scheduler_metadata=meta,
                                   fa_version=3, num_splits=32)

    one_step()
    torch.cuda.synchronize()
    times = []
    for _ in range(ITERS):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        one_step()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / len(pools))
    return {"ctxs": ctxs, "run": run, "us": statistics.median(times), "us_all": [round(t, 2) for t in times]}


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    dev = torch.device("cuda")
    pages = POOL_TOKENS // PAGE
    pools = []
    for _ in range(LAYERS):
        k = torch.empty(pages, PAGE, HK, D, dtype=torch.bfloat16, device=dev).normal_()
        v = torch.empty(pages, PAGE, HK, D, dtype=torch.bfloat16, device=dev).normal_()
        pools.append((k, v))
    pool_gb = 2 * pages * PAGE * HK * D * 2 / 1e9
    res = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__, "layers": LAYERS,
           "pool_tokens": POOL_TOKENS, "pool_gb_per_layer": pool_gb, "iters": ITERS, "cases": []}
    print(f"{props.name}: {LAYERS} layers of {POOL_TOKENS} tokens ({pool_gb:.2f} GB a layer)", flush=True)
    gen = torch.Generator().manual_seed(0)
    for ctxs in CASES:
        row = []
        for name, run in LAYOUTS:
            r = step_time(ctxs, run, pools, gen)
            r["layout"] = name
            res["cases"].append(r)
            row.append(f"{name} {r['us']:8.1f}")
        print(f"{str(ctxs)[:44]:<46} us/layer: " + "  ".join(row), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
