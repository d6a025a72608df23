#!/usr/bin/env python3
"""FlashAttention 3's decode attention as vLLM 0.26.0 calls it on the GPU, alone: one layer of the Qwen3-8B
shape (32 query heads, 8 KV heads, head size 128, bf16, 16-token pages) for batches of given contexts, with
vLLM's arguments (`get_scheduler_metadata` then `flash_attn_varlen_func`, `num_splits` 32 as vLLM sets it
for steps in a FULL CUDA graph, and 0 — FA3's own heuristic — beside it). Each case reports the median time
of one layer's attention call (CUDA events, the scheduler metadata computed once as vLLM does per step), and
the metadata FA3 returned (its per-sequence split counts are in it). KV caches are cycled so that no case is
served from the 50 MB L2. Needs the GPU to itself: run before `vllm serve`.

With SHARED=1, each case instead gives every sequence the same first SHARED_PREFIX keys (the same pages
in every block table, as a prefix cache shares them) followed by keys of its own, and times it beside
the same contexts on pages of their own: what reading a shared prefix (from L2 after its first reader)
does to the schedule's time.

SHARED_CASES (JSON: a list of cases, each the own keys of its sequences) replaces the shared cases below, and
SHARED_PREFIX (20,480) sets the prefix's length. `fa3_cases/l2_delta.json` holds the cases that test which
way FA3 walks a piece (2026-12-05): 16 one-piece sequences whose own keys step by 0–32 blocks of 128 (read from
each piece's end, a shared block's readers drift apart by the step; read forward, they stay together), 24
equal and 24 stepped ones, five batches of 12–28 decodes taken from vLLM's own steady c = 16 and cold c = 8–32
steps, and the shuffled steady batch of `fa3-shared-steady.json` again.

With MIXED=1, each case is one prefill chunk of L new tokens over P cached ones (its keys are the P + L
tokens, causal from the bottom right as vLLM calls it), alone or after decodes of given contexts, in one
varlen call as a step that prefills while others decode: `num_splits` 32 where the step has at most 512
tokens (vLLM 0.26.0 then passes its CUDA-graph bound even though such a step's attention runs outside a
full graph) and 0 (FA3's heuristic) above, each case timed with both values and the one vLLM passes
marked `vllm`. MIXED_CASES (JSON: a list of [L, P, [decode contexts]]) replaces the cases below.

Usage: [SHARED=1 [SHARED_PREFIX=N] [SHARED_CASES=JSON]] [MIXED=1 [MIXED_CASES=JSON]] fa3_decode_bench.py OUT.json
"""

import json
import os
import statistics
import sys

import torch
from vllm.vllm_flash_attn import flash_attn_varlen_func, get_scheduler_metadata

HQ, HK, D, PAGE = 32, 8, 128, 16
ITERS = 20
SHARED = os.environ.get("SHARED", "0") != "0"
SHARED_PREFIX = int(os.environ.get("SHARED_PREFIX", "20480"))
MIXED = os.environ.get("MIXED", "0") != "0"
GRAPH_TOKENS = 512  # vLLM's largest CUDA-graph size for this model: steps up to it get num_splits 32


def cases() -> list:
    out = []
    for b in (1, 2, 3, 4, 6, 8, 16):
        out.append([1024] * b)
    for total in (131072, 262144):
        for b in (1, 2, 3, 4, 6, 8, 16):
            out.append([total // b] * b)
    for b in (2, 3, 4, 8):
        out.append([65536] * b)
    out += [[16384, 16384, 16384, 147456], [32768, 98304], [8192, 122880], [20000, 60000, 180000],
            [59920, 154391, 57090], [70000, 72000, 75000, 71000], [24576] * 16, [28672] * 16]
    return out


def shared_cases() -> list:
    """Own keys after the shared prefix, per sequence."""
    if os.environ.get("SHARED_CASES"):
        return json.loads(os.environ["SHARED_CASES"])
    return [[1365] * 6, [1365] * 4, [4096] * 8, [1000 * (i + 1) for i in range(8)], [512, 4096, 8192, 16384],
            [2048 + 384 * i for i in range(16)], [8192] * 16, [300, 600, 900, 1200, 1500, 1800],
            [20000, 2000, 2000, 2000], [100] * 8]


def mixed_cases() -> list:
    """[chunk tokens, cached prefix, decode contexts] per case."""
    if os.environ.get("MIXED_CASES"):
        return json.loads(os.environ["MIXED_CASES"])
    out = []
    for prefix in (0, 16384, 65536, 147456):
        for chunk in (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192):
            out.append([chunk, prefix, []])
    for decodes in ([60000] * 2, [24576] * 8):
        for prefix in (65536, 147456):
            for chunk in (64, 256, 512, 2048):
                out.append([chunk, prefix, decodes])
    return out


def kv_caches(nblk: int, copies_for: dict, dev) -> list:
    """Copies of a paged K and V cache of `nblk` pages, enough of them that cycling through them reads at
    least 256 MiB (past the L2); made once per size and kept in `copies_for`."""
    case_bytes = nblk * PAGE * HK * D * 2 * 2
    copies = max(1, -(-256 * 2**20 // case_bytes))
    if (nblk, copies) not in copies_for:
        copies_for[(nblk, copies)] = [
            (torch.randn(nblk, PAGE, HK, D, dtype=torch.bfloat16, device=dev),
             torch.randn(nblk, PAGE, HK, D, dtype=torch.bfloat16, device=dev)) for _ in range(copies)]
    return copies_for[(nblk, copies)]


def one_mixed(chunk: int, prefix: int, decodes: list, num_splits: int, copies_for: dict) -> dict:
    """One varlen call: the decodes (one query each) then the chunk's `chunk` queries over `prefix` + `chunk`
    keys."""
    dev = torch.device("cuda")
    keys = decodes + [prefix + chunk]
    qlens = [1] * len(decodes) + [chunk]
    b = len(keys)
    blocks = [(c + PAGE - 1) // PAGE for c in keys]
    nblk = sum(blocks)
    kv = kv_caches(nblk, copies_for, dev)
    table = torch.zeros(b, max(blocks), dtype=torch.int32, device=dev)
    start = 0
    for i, n in enumerate(blocks):
        table[i, :n] = torch.arange(start, start + n, dtype=torch.int32, device=dev)
        start += n
    seqused = torch.tensor(keys, dtype=torch.int32, device=dev)
    cu = [0]
    for n in qlens:
        cu.append(cu[-1] + n)
    cu_q = torch.tensor(cu, dtype=torch.int32, device=dev)
    q = torch.randn(cu[-1], HQ, D, dtype=torch.bfloat16, device=dev)
    out = torch.empty_like(q)
    mq = max(qlens)
    meta = get_scheduler_metadata(batch_size=b, max_seqlen_q=mq, max_seqlen_k=max(keys), num_heads_q=HQ,
                                  num_heads_kv=HK, headdim=D, cache_seqlens=seqused, qkv_dtype=torch.bfloat16,
                                  cu_seqlens_q=cu_q, page_size=PAGE, causal=True, window_size=(-1, -1),
                                  num_splits=num_splits)

    def call(k, v):
        flash_attn_varlen_func(q=q, k=k, v=v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=mq, seqused_k=seqused,
                               max_seqlen_k=max(keys), softmax_scale=D ** -0.5, causal=True,
                               window_size=(-1, -1), block_table=table, scheduler_metadata=meta,
                               fa_version=3, num_splits=num_splits)

    times = timed(call, kv)
    return {"chunk": chunk, "prefix": prefix, "decodes": decodes, "num_splits": num_splits,
            "vllm": num_splits == (32 if cu[-1] <= GRAPH_TOKENS else 0), "us": statistics.median(times),
            "us_all": [round(t, 2) for t in times], "kv_copies": len(kv),
            "metadata": meta.tolist() if meta is not None else None}


def timed(call, kv: list) -> list:
    """Microseconds of each of ITERS calls, cycling the KV copies, after one warm call per copy."""
    for k, v in kv:
        call(k, v)
    torch.cuda.synchronize()
    times = []
    for it in range(ITERS):
        k, v = kv[it % len(kv)]
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        call(k, v)
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    return times


def one(ctxs: list, num_splits: int, copies_for: dict, shared: int = 0) -> dict:
    dev = torch.device("cuda")
    b = len(ctxs)
    blocks = [(c + PAGE - 1) // PAGE for c in ctxs]
    common = shared // PAGE  # pages every sequence reads first (0: none shared)
    nblk = sum(blocks) - (len(ctxs) - 1) * common
    kv = kv_caches(nblk, copies_for, dev)
    table = torch.zeros(b, max(blocks), dtype=torch.int32, device=dev)
    start = common
    for i, n in enumerate(blocks):
        table[i, :common] = torch.arange(0, common, dtype=torch.int32, device=dev)
        table[i, common:n] = torch.arange(start, start + n - common, dtype=torch.int32, device=dev)
        start += n - common
    seqused = torch.tensor(ctxs, dtype=torch.int32, device=dev)
    cu_q = torch.arange(b + 1, dtype=torch.int32, device=dev)
    q = torch.randn(b, HQ, D, dtype=torch.bfloat16, device=dev)
    out = torch.empty_like(q)
    meta = get_scheduler_metadata(batch_size=b, max_seqlen_q=1, max_seqlen_k=max(ctxs), num_heads_q=HQ,
                                  num_heads_kv=HK, headdim=D, cache_seqlens=seqused, qkv_dtype=torch.bfloat16,
                                  cu_seqlens_q=cu_q, page_size=PAGE, causal=True, window_size=(-1, -1),
                                  num_splits=num_splits)

    def call(k, v):
        flash_attn_varlen_func(q=q, k=k, v=v, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1, seqused_k=seqused,
                               max_seqlen_k=max(ctxs), softmax_scale=D ** -0.5, causal=True,
                               window_size=(-1, -1), block_table=table, scheduler_metadata=meta,
                               fa_version=3, num_splits=num_splits)

    times = timed(call, kv)
    return {"ctxs": ctxs, "shared": shared, "num_splits": num_splits, "us": statistics.median(times),
            "us_all": [round(t, 2) for t in times], "kv_copies": len(kv),
            "metadata": meta.tolist() if meta is not None else None}


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    res = {"gpu": props.name, "sms": props.multi_processor_count, "torch": torch.__version__, "cases": []}
    pool = {}
    if MIXED:
        for chunk, prefix, decodes in mixed_cases():
            for ns in (32, 0):
                r = one_mixed(chunk, prefix, decodes, ns, pool)
                res["cases"].append(r)
                mark = " (vllm)" if r["vllm"] else ""
                print(f"chunk {chunk:>5} over {prefix:>6} + decodes {str(decodes)[:30]:<32} splits-arg {ns:>2}: "
                      f"{r['us']:9.1f} us/layer{mark}", flush=True)
            pool.clear()
            torch.cuda.empty_cache()
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, indent=1)
        return
    if SHARED:
        for own in shared_cases():
            ctxs = [SHARED_PREFIX + o for o in own]
            for shared in (SHARED_PREFIX, 0):
                r = one(ctxs, 32, pool, shared)
                res["cases"].append(r)
                print(f"{str(own)[:50]:<52} shared {shared:>5}: {r['us']:8.1f} us/layer", flush=True)
            pool.clear()
            torch.cuda.empty_cache()
        with open(sys.argv[1], "w") as f:
            json.dump(res, f, indent=1)
        return
    for ctxs in cases():
        for ns in (32, 0):
            r = one(ctxs, ns, pool)
            res["cases"].append(r)
            print(f"{str(ctxs)[:60]:<62} splits-arg {ns:>2}: {r['us']:8.1f} us/layer", flush=True)
        pool.clear()
        torch.cuda.empty_cache()
    with open(sys.argv[1], "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
