#!/usr/bin/env python3
"""Decode and prefill timings of an OpenAI-compatible server (stdlib only), made for vLLM serving the
Qwen3-30B-A3B shape (scripts/vllm_run.sh with MOE=1), so that a mixture-of-experts cost model can be read
against a real engine: how a decode step's time grows with the batch (more distinct experts read per step)
and what a fresh prefill costs.

Cases, in this order (each written to OUT.json as soon as it is done, so a call stopped early keeps them):
  prefill   TTFT of fresh prompts of 512, 2,048, 8,192 and 16,384 tokens (max_tokens 1): one untimed prompt of
            each length first (it meets any kernel not yet compiled for that size), then REPS timed ones; the
            case reports the median, every value, and the cached tokens vLLM reported (0 = fresh)
  cached    TTFT of NEW fresh tokens after a PREFIX-token prompt that is already cached (PREFIX, NEW = 8,192 and
            512 or 2,048; 16,384 and 2,048 or 8,192; 32,768 and 2,048): the prefix is sent once (max_tokens 1),
            then one untimed and REPS timed prompts of the prefix and a fresh suffix each; cached tokens reported
  decode    B streams over CONTEXT-token prompts, B = 1, 2, 4, …, 256 over 2,048 and B = 1, 16 over 16,384: each
            stream's prompt is sent once with max_tokens 1 (so it is cached), then all B at once with
            max_tokens DECODE_TOKENS (ignore_eos, min_tokens); TPOT is, per stream, the median gap between its
            streamed tokens inside the interval in which every stream decodes (from the last first token to
            the first last token), and the case reports the median over streams (peer_probe.py's measure)
Prompts are token-id lists, distinct per stream and per case (no shared prefix: every prompt starts with a
different token, so not one prefix-cache block is shared), never reused across cases.

The KV pool (vLLM's /metrics `cache_config_info`: num_gpu_blocks × block_size) is read first; a decode case
whose streams do not fit it at once is still run and says so (`fits_kv_pool`).

The fresh lengths cover every size the Triton fused-MoE kernel's tuned table keys from 512 to 4,096 tokens
(512, 1,024, 1,536, 2,048, 3,072, 4,096), each as a multiple of 16 and as a length 3 short of it: Triton
compiles a kernel again for an integer argument not divisible by 16, and vLLM compiles at first use (over
a second a step). Measured with the multiples alone (results/h200-vllm-moe/warm/README.md): the replays
after the probe still met compiles at their first 4,027-, 2,489- and 747-token steps; the lengths 3 short
were added after that run.

Usage: moe_probe.py URL MODEL OUT.json [--label L] [--table OUT.txt] [--deadline-s S] [--quick] [--salt-base N]
                    [--only prefill,cached,decode]
  --deadline-s  skip the cases that would not end within S seconds of the start (estimated), and say so
  --quick       small sizes (a local dry run against a fake server)
  --salt-base   the prompts' first salt (default: from the clock, so a second run meets no cached prompt)
"""

import argparse
import http.client
import json
import os
import re
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_probe import parallel, stream  # noqa: E402  (stdlib client: one streamed completion, threads)

DECODE_TOKENS = 128
REPS = 5
PREFILL_LENGTHS = (512, 1024, 1536, 2048, 3072, 4096, 8192, 16384, 32768, 509, 1021, 1533, 2045, 3069, 4093)
CACHED_CASES = [(8192, 512), (8192, 2048), (16384, 2048), (16384, 8192), (32768, 2048)]
DECODE_CASES = [(b, 2048) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)] + [(1, 16384), (16, 16384)]

_used_offsets: set[int] = set()
_next_salt = [1]  # set from --salt-base: a second run against the same server must not meet its cached prompts


def fresh_prompt(n: int) -> list[int]:
    """n token ids in [100, 150100) whose first id no earlier prompt of this run began with (peer_probe.ids'
    sequence, its salt advanced past any offset already used)."""
    while True:
        salt = _next_salt[0]
        _next_salt[0] += 1
        off = (salt * 104729 + (salt * salt) % 9973) % 150000
        if off not in _used_offsets:
            _used_offsets.add(off)
            return [100 + (i * 7919 + off) % 150000 for i in range(n)]


def kv_pool(url: str) -> dict:
    """vLLM's cache_config_info labels (num_gpu_blocks, block_size, …) from /metrics, if it has them."""
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    except Exception as e:  # another server: no pool known
        return {"error": str(e)[:200]}
    m = re.search(r"^vllm:cache_config_info\{([^}]*)\}", text, re.M)
    if not m:
        return {}
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    out = {k: labels[k] for k in ("num_gpu_blocks", "block_size", "enable_prefix_caching", "gpu_memory_utilization",
                                  "cache_dtype") if k in labels}
    try:
        out["tokens"] = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    except (KeyError, ValueError):
        pass
    return out


def stream_together(url: str, model: str, prompt: list[int], max_tokens: int, barrier: threading.Barrier) -> dict:
    """peer_probe.stream, but connected and encoded before a barrier that every stream of the case waits on, so
    that the B requests leave (nearly) at once: a client that sends them one by one spreads their first tokens
    over many decode steps and shortens the interval in which all B decode."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
                       "ignore_eos": True, "stream": True, "temperature": 0,
                       "stream_options": {"include_usage": True}}).encode()
    conn.connect()
    barrier.wait(timeout=120)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    times, usage = [], None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        ev = json.loads(data)
        now = time.monotonic()
        for ch in ev.get("choices") or []:
            if ch.get("text") or ch.get("token_ids"):
                times.append(now)
        if ev.get("usage"):
            usage = ev["usage"]
    conn.close()
    return {"sent": t0, "times": times, "usage": usage}


def cached_tokens(usage: dict | None) -> int | None:
    return ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")


def ttft(r: dict) -> float:
    """Time to the first chunk with a choice: the one token of a max_tokens-1 request, even where its text is
    empty (a 3,072-token case once failed on such a token, results/h200-vllm-moe/warm/README.md)."""
    if r.get("first") is None:
        raise RuntimeError("the stream ended without a chunk")
    return r["first"] - r["sent"]


def prefill_case(url: str, model: str, n: int, reps: int) -> dict:
    stream(url, model, fresh_prompt(n), 1)  # untimed: kernels for this size
    xs, cached = [], []
    for _ in range(reps):
        r = stream(url, model, fresh_prompt(n), 1)
        xs.append(ttft(r))
        cached.append(cached_tokens(r["usage"]))
    return {"case": f"prefill {n}", "kind": "prefill", "new": n, "ttft_ms": 1e3 * statistics.median(xs),
            "ttft_ms_all": [round(1e3 * x, 3) for x in xs], "cached_tokens": cached,
            "prompt_tokens": (r["usage"] or {}).get("prompt_tokens")}


def cached_case(url: str, model: str, prefix_len: int, new: int, reps: int) -> dict:
    prefix = fresh_prompt(prefix_len)
    stream(url, model, prefix, 1)  # cached from here on
    stream(url, model, prefix + fresh_prompt(new), 1)  # untimed: kernels for this size
    xs, cached = [], []
    for _ in range(reps):
        r = stream(url, model, prefix + fresh_prompt(new), 1)
        xs.append(ttft(r))
        cached.append(cached_tokens(r["usage"]))
    return {"case": f"cached {prefix_len}+{new}", "kind": "cached", "prefix": prefix_len, "new": new,
            "ttft_ms": 1e3 * statistics.median(xs), "ttft_ms_all": [round(1e3 * x, 3) for x in xs],
            "cached_tokens": cached, "prompt_tokens": (r["usage"] or {}).get("prompt_tokens")}


def decode_case(url: str, model: str, batch: int, context: int, pool_tokens: int | None) -> dict:
    name = f"decode b={batch} ctx={context}"
    prompts = [fresh_prompt(context) for _ in range(batch)]
    t0 = time.monotonic()
    warm = parallel(lambda p: stream(url, model, p, 1), [(p,) for p in prompts])  # cache every prompt first
    cache_s = time.monotonic() - t0
    barrier = threading.Barrier(batch)
    res = parallel(lambda p: stream_together(url, model, p, DECODE_TOKENS, barrier), [(p,) for p in prompts])
    need = batch * (context + DECODE_TOKENS)
    out = {"case": name, "kind": "decode", "batch": batch, "context": context, "decode_tokens": DECODE_TOKENS,
           "cache_pass_s": round(cache_s, 3), "kv_tokens_needed": need,
           "fits_kv_pool": None if not pool_tokens else need <= pool_tokens,
           "warm_errors": sum(1 for w in warm if "error" in w)}
    bad = [r for r in res if "error" in r or len(r["times"]) < 2]
    if bad:
        out["error"] = f"{len(bad)} of {batch} streams failed: {str(bad[0])[:300]}"
        return out
    start = max(r["times"][0] for r in res)
    end = min(r["times"][-1] for r in res)
    tpots, gaps_in = [], []
    for r in res:
        inside = [t for t in r["times"] if start <= t <= end]
        gaps = [b - a for a, b in zip(inside, inside[1:])]
        gaps_in.append(len(gaps))
        if gaps:
            tpots.append(statistics.median(gaps))
    tokens = [(r["usage"] or {}).get("completion_tokens") for r in res]
    # a stream's mean time per token after its first, over the whole stream (tokens from usage: a chunk can
    # carry more than one token when the server's front end falls behind)
    means = [(r["times"][-1] - r["times"][0]) / ((t or len(r["times"])) - 1) for r, t in zip(res, tokens)]
    q = statistics.quantiles(tpots, n=10) if len(tpots) >= 2 else None
    out.update({
        "tpot_ms": 1e3 * statistics.median(tpots) if tpots else None,
        "tpot_ms_p10_p90_over_streams": [round(1e3 * q[0], 3), round(1e3 * q[-1], 3)] if q else None,
        "mean_tpot_ms": 1e3 * statistics.median(means),
        "all_decoding_s": round(end - start, 4),
        "gaps_inside_median": statistics.median(gaps_in),
        "first_token_spread_s": round(start - min(r["times"][0] for r in res), 4),
        "send_spread_s": round(max(r["sent"] for r in res) - min(r["sent"] for r in res), 4),
        # each stream's median gap over its whole stream, the median over streams: a fallback where the streams
        # overlap too little (a batch of them still admitted while the first ones finish)
        "median_gap_whole_ms": 1e3 * statistics.median(statistics.median(b - a for a, b in zip(r["times"], r["times"][1:]))
                                                       for r in res),
        "chunks_median": statistics.median(len(r["times"]) for r in res),
        "completion_tokens": sorted(set(tokens)),
        "cached_tokens_median": statistics.median([c for c in (cached_tokens(r["usage"]) for r in res)
                                                   if c is not None] or [0]),
        "streams": len(res),
    })
    if not tpots:
        out["error"] = "no interval in which every stream decoded (streams did not overlap)"
    return out


def estimate_s(kind: str, a: int, b: int) -> float:
    """A generous guess of a case's wall time on an H200 (prefill ~20K tokens/s, a decode step <= 60 ms)."""
    if kind == "prefill":
        return 5 + (REPS + 1) * (0.2 + a / 20000)
    if kind == "cached":
        return 5 + (REPS + 2) * (0.2 + (a + b) / 20000)
    return 8 + a * b / 20000 + DECODE_TOKENS * 0.06


def table(doc: dict) -> str:
    lines = [f"moe probe of {doc['server']} ({doc['model']}); KV pool {doc['kv_pool'].get('tokens', '?')} tokens",
             "| case | TTFT ms (median) | TPOT ms (median over streams) | p10-p90 over streams | mean TPOT ms | "
             "streams all decoding s | fits KV pool |",
             "|---|---|---|---|---|---|---|"]
    for c in doc["cases"]:
        if "skipped" in c or "error" in c:
            lines.append(f"| {c['case']} | {c.get('skipped') or c.get('error')} | | | | | |")
        elif c["kind"] in ("prefill", "cached"):
            lines.append(f"| {c['case']} | {c['ttft_ms']:.1f} | | | | | |")
        else:
            p = c["tpot_ms_p10_p90_over_streams"]
            lines.append(f"| {c['case']} | | {c['tpot_ms']:.2f} | {f'{p[0]:.2f}-{p[1]:.2f}' if p else ''} | "
                         f"{c['mean_tpot_ms']:.2f} | {c['all_decoding_s']:.2f} | {c['fits_kv_pool']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--label", default=None)
    ap.add_argument("--table", default=None)
    ap.add_argument("--deadline-s", type=float, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="prefill,cached,decode", help="the kinds of case to run, comma-separated")
    ap.add_argument("--salt-base", type=int, default=None, help="the first prompt's salt (default: from the clock)")
    args = ap.parse_args()
    _next_salt[0] = args.salt_base if args.salt_base is not None else int(time.time()) % 1000000 * 1000
    global DECODE_TOKENS, REPS, PREFILL_LENGTHS, DECODE_CASES, CACHED_CASES
    if args.quick:
        DECODE_TOKENS, REPS, PREFILL_LENGTHS = 16, 3, (64, 256)
        CACHED_CASES = [(256, 64)]
        DECODE_CASES = [(1, 128), (4, 128), (32, 128), (2, 512)]
    t_start = time.monotonic()
    url = args.url.rstrip("/")
    doc = {"server": args.label or url, "url": url, "model": args.model, "decode_tokens": DECODE_TOKENS,
           "reps": REPS, "salt_base": _next_salt[0], "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "kv_pool": kv_pool(url), "cases": []}
    pool_tokens = doc["kv_pool"].get("tokens")
    stream(url, args.model, fresh_prompt(64), 4)  # a first request of its own

    def save():
        with open(args.out + ".tmp", "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(args.out + ".tmp", args.out)

    only = set(args.only.split(","))
    plan = [("prefill", n, 0) for n in PREFILL_LENGTHS] + [("cached", p, n) for p, n in CACHED_CASES] + \
        [("decode", b, ctx) for b, ctx in DECODE_CASES]
    for kind, a, b in [p for p in plan if p[0] in only]:
        name = {"prefill": f"prefill {a}", "cached": f"cached {a}+{b}"}.get(kind, f"decode b={a} ctx={b}")
        left = None if args.deadline_s is None else args.deadline_s - (time.monotonic() - t_start)
        if left is not None and left < estimate_s(kind, a, b):
            doc["cases"].append({"case": name, "kind": kind, "skipped": f"~{estimate_s(kind, a, b):.0f} s needed, "
                                                                         f"{left:.0f} s left"})
            print(f"  {name:<28} skipped: {left:.0f} s left", flush=True)
            save()
            continue
        t = time.monotonic()
        try:
            if kind == "prefill":
                c = prefill_case(url, args.model, a, REPS)
            elif kind == "cached":
                c = cached_case(url, args.model, a, b, REPS)
            else:
                c = decode_case(url, args.model, a, b, pool_tokens)
        except Exception as e:  # a failed case is reported, the rest still run
            c = {"case": name, "kind": kind, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        c["wall_s"] = round(time.monotonic() - t, 2)
        doc["cases"].append(c)
        save()
        v = c.get("ttft_ms", c.get("tpot_ms"))
        what = "TPOT" if kind == "decode" else "TTFT"
        print(f"  {name:<28} {what} {v:9.2f} ms  ({c['wall_s']} s)" if v is not None else
              f"  {name:<28} {c.get('error')}", flush=True)
    doc["wall_s"] = round(time.monotonic() - t_start, 2)
    doc["kv_pool_after"] = kv_pool(url)
    save()
    text = table(doc)
    print(text, end="")
    if args.table:
        with open(args.table, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
