#!/usr/bin/env python3
"""The host's gaps in vLLM's steps that no whole CUDA graph replays, from its own step traces: for every
step with prefill (vLLM 0.26.0 replays those of up to 512 tokens as piecewise graphs, attention eager
between the pieces, and runs longer ones eagerly; pure decode steps replay FULL graphs), the measured
GPU span less the profile's price of the step without any gap (`calibrate --from-steps STEPS --check
PROFILE --per-step CSV`, no `--graph-max-tokens`), pooled over the traces given, per graph mode and
size class; the medians per mode, over the model's decoder layers, are the profile's
`piecewise_gap_s_per_layer` and `eager_gap_s_per_layer`.

Each TRACE is LABEL=STEP_TRACE:CSV, STEP_TRACE the hook's file (`steps-*.jsonl.gz`) and CSV the check of
the steps `scripts/vllm/step_trace/analyse.py --write-steps` wrote from it (same order). Plain Python:

    python3 scripts/vllm/graph_gaps.py [--layers 36] LABEL=TRACE:CSV …
"""
import argparse
import csv
import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "step_trace"))
from analyse import read  # noqa: E402

GRAPH_MAX = 512
CLASSES = [(1, 128), (129, 512), (513, 1024), (1025, 2048), (2049, 4096), (4097, 8192)]


def residuals(spec):
    label, _, files = spec.partition("=")
    trace, _, check = files.partition(":")
    if not (label and trace and check):
        sys.exit(f"{spec}: give LABEL=STEP_TRACE:CSV")
    steps, rows = read(trace), list(csv.DictReader(open(check)))
    if len(steps) != len(rows):
        sys.exit(f"{spec}: {len(steps)} steps in the trace but {len(rows)} rows in the check")
    return [(label, mode(r), r["tok"], float(c["measured_ms"]) - float(c["predicted_ms"]))
            for r, c in zip(steps, rows) if r["pf"] and mode(r) in ("PIECEWISE", "NONE")]


def mode(step):
    """the step's CUDA-graph mode as the hook logged it, or (traces recorded before it logged one) vLLM
    0.26.0's rule: a step with prefill of at most GRAPH_MAX tokens replays piecewise graphs"""
    if "cg" in step:
        return step["cg"]
    return "PIECEWISE" if step["tok"] <= GRAPH_MAX else "NONE"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--layers", type=int, default=36, help="the model's decoder layers [36: Qwen3-8B]")
    a = ap.parse_args()
    every = [x for spec in a.traces for x in residuals(spec)]
    labels = sorted({x[0] for x in every})
    print("Steps with prefill: measured GPU span less the profile's price without gaps, median ms "
          "(steps)\n")
    print("| mode | tokens | " + " | ".join(labels) + " | pooled |\n|---|---|" + "---:|" * (len(labels) + 1))
    for kind in ("PIECEWISE", "NONE"):
        for lo, hi in CLASSES:
            cells = []
            for lab in labels + [None]:
                v = [x[3] for x in every if x[1] == kind and lo <= x[2] <= hi and lab in (None, x[0])]
                cells.append(f"{st.median(v):+.1f} ({len(v)})" if len(v) >= 4 else "–")
            if any(c != "–" for c in cells):
                print(f"| {kind} | {lo}-{hi} | " + " | ".join(cells) + " |")
    print()
    for kind, field in (("PIECEWISE", "piecewise_gap_s_per_layer"), ("NONE", "eager_gap_s_per_layer")):
        v = [x[3] for x in every if x[1] == kind]
        if not v:
            print(f"{kind}: no steps")
            continue
        gap = st.median(v) / 1e3 / a.layers
        print(f"{kind}: {len(v)} steps, median {st.median(v):+.2f} ms: {field} {gap:.3e} s over {a.layers} layers")


if __name__ == "__main__":
    main()
