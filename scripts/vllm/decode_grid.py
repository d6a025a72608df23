#!/usr/bin/env python3
"""Decode steps of chosen batches through a running vLLM server, for its step trace (STEP_TRACE=1): each
case caches B distinct prompts of given lengths (max_tokens 1, one at a time), then streams all B at once
with DECODE_TOKENS tokens each (ignore_eos), so the engine runs pure decode steps of exactly those contexts.
Cases separate the number of sequences from the context they read: B = 1-16 over 1,024 tokens each (the
steps' weights and per-sequence work), B = 1-8 sharing 131,072 tokens of context between them, and a few
unequal batches. The wall-clock window of each case is written beside the streams' gaps, so that the step
trace's lines (whose contexts also name the case) can be matched to it.

Usage: decode_grid.py URL MODEL OUT.json   (stdlib only; peer_probe.py's client)
"""

import json
import statistics
import sys
import time

from peer_probe import ids, parallel, stream

DECODE_TOKENS = 40


def cases() -> list:
    out = [[1024] * b for b in (1, 2, 3, 4, 6, 8, 16)]
    out += [[131072 // b] * b for b in (1, 2, 3, 4, 8)]
    out += [[98304] * 2, [65536] * 3, [49152] * 4]
    out += [[16384, 16384, 16384, 147456], [59920, 154391, 57090]]
    return out


def run_case(url: str, model: str, ctxs: list, salt: int) -> dict:
    prompts = [ids(c, salt * 1000 + i) for i, c in enumerate(ctxs)]
    for p in prompts:
        stream(url, model, p, 1)
    t0 = time.time_ns()
    res = parallel(lambda p: stream(url, model, p, DECODE_TOKENS), [(p,) for p in prompts])
    t1 = time.time_ns()
    errors = [r["error"] for r in res if "error" in r]
    gaps = []
    for r in res:
        if "times" in r:
            ts = r["times"]
            gaps += [b - a for a, b in zip(ts[1:], ts[2:])]
    return {"ctxs": ctxs, "t0_ns": t0, "t1_ns": t1, "errors": errors[:2],
            "gap_p50_ms": 1e3 * statistics.median(gaps) if gaps else None}


def main() -> None:
    url, model, out = sys.argv[1], sys.argv[2], sys.argv[3]
    stream(url, model, ids(64, 1), 4)
    rows = []
    for i, ctxs in enumerate(cases()):
        r = run_case(url, model, ctxs, 500 + i)
        rows.append(r)
        print(f"{str(ctxs)[:50]:<52} gap p50 {r['gap_p50_ms']} ms {r['errors'] or ''}", flush=True)
        with open(out, "w") as f:
            json.dump({"url": url, "model": model, "cases": rows}, f, indent=1)


if __name__ == "__main__":
    main()
