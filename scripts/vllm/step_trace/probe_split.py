#!/usr/bin/env python3
"""Each lone TTFT probe of `calibrate --endpoint` split into vLLM's GPU time and the host's time around it.

    python3 scripts/vllm/step_trace/probe_split.py PROBES.jsonl STEPS.jsonl.gz > split.md

PROBES.jsonl is calibrate's probe log (or idle_gap_probe.py's: then a table by idle gap follows), STEPS the step trace vLLM wrote while the probes ran (vllm_run.sh
STEP_TRACE=1 ... calibrate). A lone probe's request is one run of consecutive steps that prefill one
prompt and nothing else (no decodes, one request): its chunks, in order. The probes and those runs come in
the same order, so each TTFT probe takes the next run whose new tokens and cached prefix are the probe's
(runs that match no probe, such as the warm-ups that put a prefix in the cache, are skipped). For each:
the time to first token the client measured, the GPU span of the request's steps (first chunk's start to
last chunk's end on the GPU, CUDA events), and the host time (the first less the second: HTTP, the
front end's tokenizer and detokenizer, the engine core's schedule and input preparation before the first
step, the hand-back of the token). The host time is then fitted as a + b * prompt tokens by least squares.
Plain Python.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from analyse import read, read_jsonl  # noqa: E402


def lone_runs(steps):
    """[(new tokens, cached prefix, [steps])] for each request prefilled alone, in order"""
    runs, cur = [], None
    for s in steps:
        pf = s.get("pf") or []
        lone = s.get("nd", 0) == 0 and s.get("nreq") == 1 and len(pf) == 1
        if lone and cur is not None and pf[0][2] == cur[2] and pf[0][1] == cur[3]:
            cur[1].append(s)
            cur[3] += pf[0][0]
            continue
        if cur is not None:
            runs.append(cur)
            cur = None
        if lone:
            tok, before, prompt = pf[0]
            cur = [before, [s], prompt, before + tok]
    if cur is not None:
        runs.append(cur)
    return [(r[3] - r[0], r[0], r[1]) for r in runs if r[3] == r[2]]


def as_probe(line):
    """A line of idle_gap_probe.py's log in calibrate's probe-log form (its gap in the name); others as they are"""
    if "shape" not in line:
        return line
    return {"probe": f"TTFT {line['shape']} after {line['gap_s']:g} s", "gap_s": line["gap_s"],
            "prefill": [[line["prompt"] - line["cached"], line["cached"]]], "wall_ms": line["ttft_s"] * 1e3}


def split(probes, steps):
    runs = lone_runs(steps)
    out, k = [], 0
    for p in map(as_probe, probes):
        if not p.get("probe", "").startswith("TTFT") or len(p.get("prefill", [])) != 1 or p.get("decode"):
            continue
        new, cached = p["prefill"][0]
        while k < len(runs) and (runs[k][0], runs[k][1]) != (new, cached):
            k += 1
        if k == len(runs):
            break
        _, _, rs = runs[k]
        k += 1
        gpu_ms = (rs[-1]["g1_ns"] - rs[0]["g0_ns"]) / 1e6
        busy_ms = sum(s["gpu_us"] for s in rs) / 1e3
        out.append({"probe": p["probe"], "new": new, "cached": cached, "chunks": len(rs),
                    "ttft_ms": p["wall_ms"], "gpu_ms": gpu_ms, "busy_ms": busy_ms,
                    "host_ms": p["wall_ms"] - gpu_ms, "cg": rs[0].get("cg"), "gap_s": p.get("gap_s")})
    return out


def fit_line(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - b * mx, b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("probes")
    ap.add_argument("steps")
    a = ap.parse_args()
    rows = split(read_jsonl(a.probes), read(a.steps))
    print(f"# Lone TTFT probes split into GPU and host time\n\n`probe_split.py {a.probes} {a.steps}`\n")
    print("| probe | chunks | graph | TTFT ms | GPU span ms | GPU busy ms | host ms |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['probe']} | {r['chunks']} | {r['cg']} | {r['ttft_ms']:.2f} | {r['gpu_ms']:.2f} | "
              f"{r['busy_ms']:.2f} | {r['host_ms']:.2f} |")
    xs = [r["new"] + r["cached"] for r in rows]
    a0, b0 = fit_line(xs, [r["host_ms"] for r in rows])
    fresh = [r for r in rows if r["cached"] == 0]
    a1, b1 = fit_line([r["new"] for r in fresh], [r["host_ms"] for r in fresh])
    print(f"\n{len(rows)} probes matched. Host time = {a0:.2f} ms + {b0 * 1e3:.3f} µs × prompt tokens "
          f"(all); fresh prompts alone: {a1:.2f} ms + {b1 * 1e3:.3f} µs × tokens ({len(fresh)} probes).")
    by_gap(rows)


def by_gap(rows):
    """idle_gap_probe.py's probes: median GPU span and host time per shape and idle gap before the request"""
    gaps = sorted({r["gap_s"] for r in rows if r["gap_s"] is not None})
    if not gaps:
        return
    print("\nMedian GPU span / host time, ms, by the idle gap before the request:\n")
    print("| shape | " + " | ".join(f"after {g:g} s" for g in gaps) + " |")
    print("|---|" + "---:|" * len(gaps))
    shapes = []
    for r in rows:
        name = r["probe"].split()[1]
        if name not in shapes:
            shapes.append(name)
    for name in shapes:
        cells = []
        for g in gaps:
            rs = [r for r in rows if r["probe"].split()[1] == name and r["gap_s"] == g]
            cells.append(f"{median([r['gpu_ms'] for r in rs]):.1f} / {median([r['host_ms'] for r in rs]):.1f}"
                         if rs else "–")
        print(f"| {name} | " + " | ".join(cells) + " |")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2


if __name__ == "__main__":
    main()
