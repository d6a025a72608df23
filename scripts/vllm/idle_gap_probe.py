#!/usr/bin/env python3
"""Time to first token of lone requests sent after the server sat idle for a while (stdlib only), against an
OpenAI-compatible server (made for vLLM through scripts/vllm_run.sh's `idle-gap` part).

Why: `calibrate --endpoint` sends its probes back to back, but a closed loop at low concurrency leaves the
engine idle between a session's turns (the client's think time). The replays' first tokens at c = 1 wait longer
than the back-to-back probes predict (results/h200-vllm/probe-trace/README.md); this measures whether an idle
gap before a request changes its time to first token, and — with the step trace (STEP_TRACE=1) and the GPU
clock log beside it — whether the time goes to the GPU (its steps run slower: clocks) or to the host.

Shapes (each prompt distinct: no prefix-cache block shared, except the cached prefixes on purpose):
  fresh-N        a fresh prompt of N tokens (512, 2,048, 8,192)
  cached-P+S     S fresh tokens after a P-token prefix sent once before (16 over 32,768; 512 over 8,192)
Gaps: 0 (sent the moment the previous request ended), 0.25, 1, 3 and 8 s of nothing in flight. Each
(shape, gap) is sent REPS times; the order runs over reps, then gaps, then shapes, so any drift of the
server over the run spreads over every cell. Every request asks for MAX_TOKENS tokens (ignore_eos), so the
first few decode steps after the gap are timed too.

One JSON line per request in OUT.jsonl, written as it ends: shape, prompt and cached tokens, the gap asked
and the gap actually left (from the previous request's last byte), the wall clock at send (ns, to match the
step trace's t0_ns), time to first token, the gaps between tokens. A summary table (medians per shape and
gap) goes to stdout at the end.

Usage: idle_gap_probe.py URL MODEL OUT.jsonl [--reps N] [--deadline-s S] [--quick]
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_probe import stream  # noqa: E402  (stdlib client: one streamed completion)
from moe_probe import fresh_prompt, _next_salt  # noqa: E402  (distinct prompts, no block shared)

GAPS = (0.0, 0.25, 1.0, 3.0, 8.0)
MAX_TOKENS = 6


def shapes(quick: bool) -> list[tuple[str, int, int]]:
    """(name, cached prefix tokens, fresh tokens)."""
    if quick:
        return [("fresh-64", 0, 64), ("cached-256+16", 256, 16)]
    return [("fresh-512", 0, 512), ("fresh-2048", 0, 2048), ("fresh-8192", 0, 8192),
            ("cached-32768+16", 32768, 16), ("cached-8192+512", 8192, 512)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--deadline-s", type=float, default=1e9)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    start = time.monotonic()
    _next_salt[0] = int(time.time()) % 100000 * 7 + 1
    cases = shapes(a.quick)
    prefixes = {name: fresh_prompt(p) for name, p, _ in cases if p > 0}
    # Warm: each prefix cached once, and one untimed request of every shape (any kernel first compiled).
    for name, p, n in cases:
        pre = prefixes.get(name, [])
        if pre:
            stream(a.url, a.model, pre, 1)
        stream(a.url, a.model, pre + fresh_prompt(n), MAX_TOKENS)
    rows = []
    last_end = time.monotonic()
    with open(a.out, "w") as out:
        for rep in range(a.reps):
            for gap in GAPS:
                for name, p, n in cases:
                    if time.monotonic() - start + gap + 5 > a.deadline_s:
                        print(f"deadline: stopped at rep {rep}, gap {gap}", file=sys.stderr)
                        return summarise(rows)
                    prompt = prefixes.get(name, []) + fresh_prompt(n)
                    time.sleep(max(0.0, gap - (time.monotonic() - last_end)))
                    left = time.monotonic() - last_end
                    wall = time.time_ns()
                    r = stream(a.url, a.model, prompt, MAX_TOKENS)
                    last_end = time.monotonic()
                    ts = r["times"]
                    usage = r["usage"] or {}
                    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                    row = {"shape": name, "rep": rep, "gap_s": gap, "idle_s": round(left, 6),
                           "prompt": len(prompt), "cached": cached, "sent_wall_ns": wall,
                           "ttft_s": (r["first"] or ts[0]) - r["sent"],
                           "itl_s": [b - a_ for a_, b in zip(ts, ts[1:])],
                           "e2e_s": last_end - r["sent"]}
                    rows.append(row)
                    out.write(json.dumps(row) + "\n")
                    out.flush()
    summarise(rows)


def summarise(rows: list[dict]) -> None:
    print(f"{'shape':>18} " + " ".join(f"{'gap ' + str(g) + ' s':>12}" for g in GAPS) + "   (median TTFT ms; TPOT ms)")
    for name in dict.fromkeys(r["shape"] for r in rows):
        cells = []
        for g in GAPS:
            x = [r for r in rows if r["shape"] == name and r["gap_s"] == g]
            if not x:
                cells.append(f"{'-':>12}")
                continue
            ttft = statistics.median(r["ttft_s"] for r in x) * 1e3
            itl = [v for r in x for v in r["itl_s"]]
            tpot = statistics.median(itl) * 1e3 if itl else float("nan")
            cells.append(f"{ttft:7.1f};{tpot:4.1f}")
        print(f"{name:>18} " + " ".join(cells))


if __name__ == "__main__":
    main()
