#!/usr/bin/env python3
"""The same few requests against any OpenAI-compatible server (stdlib only), so that two engines on one GPU
are timed through the same client and the same HTTP path: decode TPOT at batch 1, 16 and 64 over 4,096-token
prompts, TTFT of a fresh 2,048-token prompt, of 2,048 new tokens over a cached 32,768-token prefix, and of a
16-token prompt (what a request costs the server besides its prefill).

Decode: each stream's prompt is sent once with max_tokens 1 (so it is cached), then all B streams at once
with max_tokens DECODE_TOKENS; TPOT is each stream's median gap between streamed tokens inside the interval
in which every stream is decoding (from the last first token to the first last token), and the case reports
the median over streams. Prompts are token ids, distinct per stream and per case (no shared prefix: some
engines run a shared prefix's attention once). Prefill: the median TTFT of REPS fresh prompts (max_tokens 1).

Usage: peer_probe.py URL MODEL OUT.json [LABEL]   (prints a table and writes every number)
"""

import json
import statistics
import sys
import threading
import time
import urllib.parse
import http.client

DECODE_BATCHES = (1, 16, 64)
DECODE_CONTEXT = 4096
DECODE_TOKENS = 128
REPS = 5


def ids(n: int, salt: int) -> list[int]:
    """n token ids in [100, 150100), a different run for every salt."""
    return [100 + (i * 7919 + salt * 104729 + (salt * salt) % 9973) % 150000 for i in range(n)]


def stream(url: str, model: str, prompt: list[int], max_tokens: int) -> dict:
    """One streamed completion: send time, the arrival time of every token-bearing chunk, of the first chunk
    with a choice (`first`: the first token's, even where its text is empty), usage."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=600)
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "min_tokens": max_tokens,
                       "ignore_eos": True, "stream": True, "temperature": 0,
                       "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"content-type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    times, usage, first = [], None, None
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
            if first is None:
                first = now
            if ch.get("text") or ch.get("token_ids"):
                times.append(now)
        if ev.get("usage"):
            usage = ev["usage"]
    conn.close()
    return {"sent": t0, "times": times, "usage": usage, "first": first}


def parallel(fn, args: list) -> list:
    out = [None] * len(args)

    def run(i):
        try:
            out[i] = fn(*args[i])
        except Exception as e:  # a failed stream is reported, not hidden
            out[i] = {"error": str(e)}

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def decode_case(url: str, model: str, batch: int, salt: int) -> dict:
    prompts = [ids(DECODE_CONTEXT, salt * 1000 + i) for i in range(batch)]
    parallel(lambda p: stream(url, model, p, 1), [(p,) for p in prompts])  # cache every prompt first
    res = parallel(lambda p: stream(url, model, p, DECODE_TOKENS), [(p,) for p in prompts])
    bad = [r for r in res if "error" in r or len(r["times"]) < DECODE_TOKENS // 2]
    if bad:
        return {"case": f"decode b={batch}", "error": str(bad[0])[:300]}
    start = max(r["times"][0] for r in res)
    end = min(r["times"][-1] for r in res)
    tpots = []
    for r in res:
        inside = [t for t in r["times"] if start <= t <= end]
        gaps = [b - a for a, b in zip(inside, inside[1:])]
        if gaps:
            tpots.append(statistics.median(gaps))
    # A stream's mean time per token after its first, over the whole stream, for comparison.
    means = [(r["times"][-1] - r["times"][0]) / (len(r["times"]) - 1) for r in res]
    return {"case": f"decode b={batch} ctx={DECODE_CONTEXT}", "batch": batch,
            "tpot_ms": 1e3 * statistics.median(tpots) if tpots else None,
            "mean_tpot_ms": 1e3 * statistics.median(means), "all_decoding_s": end - start,
            "streams": len(res), "completion_tokens": [r["usage"]["completion_tokens"] for r in res if r["usage"]][:3]}


def ttft(url: str, model: str, prompt: list[int]) -> float:
    r = stream(url, model, prompt, 1)
    return r["times"][0] - r["sent"]


def prefill_case(url: str, model: str, new: int, cached: int, salt: int) -> dict:
    xs = []
    for k in range(REPS):
        prefix = ids(cached, salt * 100 + k) if cached else []
        if cached:
            ttft(url, model, prefix)  # cache the prefix
        xs.append(ttft(url, model, prefix + ids(new, salt * 100 + 50 + k)))
    name = f"prefill {new}" + (f" over {cached} cached" if cached else "")
    return {"case": name, "new": new, "cached": cached, "ttft_ms": 1e3 * statistics.median(xs),
            "ttft_ms_all": [round(1e3 * x, 3) for x in xs]}


def main() -> None:
    url, model, out = sys.argv[1], sys.argv[2], sys.argv[3]
    label = sys.argv[4] if len(sys.argv) > 4 else url
    ttft(url, model, ids(64, 1))  # a first request of its own
    cases = [prefill_case(url, model, 16, 0, 2), prefill_case(url, model, 2048, 0, 3),
             prefill_case(url, model, 2048, 32768, 4)]
    for i, b in enumerate(DECODE_BATCHES):
        cases.append(decode_case(url, model, b, 10 + i))
    with open(out, "w") as f:
        json.dump({"server": label, "url": url, "model": model, "cases": cases}, f, indent=1)
    print(f"peer probe of {label}")
    for c in cases:
        v = c.get("tpot_ms", c.get("ttft_ms"))
        what = "TPOT" if "tpot_ms" in c else "TTFT"
        print(f"  {c['case']:<34} {what} {v:9.2f} ms" if v is not None else f"  {c['case']:<34} {c.get('error')}")


if __name__ == "__main__":
    main()
