#!/usr/bin/env python3
"""The page-coincidence L2 model (l2_reuse_model.py) on vLLM's own decode steps: for every pure decode
step of a `synthetic-v1` replay whose decodes all read the workload's shared 20,000-token system prompt,
the shipped profile's step time (with FlashAttention 3's split-KV schedule, `calibrate --check
--split-kv`) less the re-reads the model serves from the L2, against the step's measured time. A re-read
is served from the L2 when another sequence's thread block read the same 128-key block less than W
block-times earlier, with every thread block started at once and walking its piece from its last block
to its first (`--forward`: first to last); it then costs ALPHA of a read from memory, so the step saves
(1 − ALPHA) · T per re-read key, T the profile's time per decode context token.

Each TRACE is LABEL=STEPS:CSV, STEPS the step log `scripts/vllm/step_trace/analyse.py --write-steps`
wrote and CSV what `serverbench calibrate --from-steps STEPS --check h200-qwen3-8b-vllm --split-kv
--per-step CSV` wrote for it (the same steps in the same order). Prints, per trace and number of
decodes, the median error of the profile alone and with the model, and the share of the step's context
the model serves from the L2. Plain Python; about ten seconds a trace.

    python3 scripts/vllm/l2_reuse_steps.py cold=/tmp/cold.jsonl:/tmp/cold.csv … [--w 4 | --soft TAU] [--alpha 0.7]
        [--forward] [--by-count] [--order s,h,j] [--batch-order] [--priced]   (--by-count: a row per number of decodes, those with fewer
        than 20 steps left out; --order: thread blocks start as the SMs free up in that launch order, so that
        a batch of more thread blocks than SMs reads in waves, instead of all at once; --batch-order: the
        profile's split-KV schedule re-timed with its thread blocks started in the batch's order, the
        step log's decode order, instead of longest first; --priced: the CSVs come from `calibrate --check
        --split-kv --shared-prefix 20000`, which prices both in serverbench itself: their own error alone)
"""
import argparse
import csv
import json
import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from l2_reuse_model import BLOCK, ORDERS, once_hits, span_s  # noqa: E402


def coincident_tokens(ctxs, shared_blocks, w, reverse, tau=None, order=None):
    """context tokens of one KV head's reads the model serves from the L2 (the heads' mean)"""
    return once_hits(ctxs, shared_blocks, reverse, w, tau, order) * BLOCK


def steps(spec, shared):
    label, _, files = spec.partition("=")
    log, _, check = files.partition(":")
    if not (label and log and check):
        sys.exit(f"{spec}: give LABEL=STEPS:CSV")
    try:
        rows = list(csv.DictReader(open(check)))
        logged = [json.loads(line) for line in open(log) if line.strip()]
    except (OSError, ValueError) as e:
        sys.exit(f"{spec}: {e}")
    if len(rows) != len(logged):
        sys.exit(f"{spec}: {len(logged)} steps in the log but {len(rows)} rows in the check")
    out = []
    for s, r in zip(logged, rows):
        d = s["decode"]
        if s["prefill"] or len(d) < 2 or min(d) < shared:
            continue
        out.append((d, float(r["measured_ms"]), float(r["predicted_ms"])))
    return label, out


def priced(traces, shared):
    """The CSVs' own error (serverbench's pricing), a row per number of decodes with 20 steps or more."""
    print(f"serverbench's own price of each step (its CSV); error = predicted / measured − 1 (median), pure decode "
          f"steps of 2 or more decodes over the shared {shared:,} tokens\n")
    print("| trace | decodes | steps | error |\n|---|---|---:|---:|")
    for label, rows in traces:
        classes = {}
        for d, measured, predicted in rows:
            k = str(min(len(d), 16)) + ("+" if len(d) >= 16 else "")
            classes.setdefault(k, []).append(predicted / measured - 1)
        every = [e for v in classes.values() for e in v]
        for k in sorted(classes, key=lambda k: int(k.rstrip("+"))) + ["all"]:
            v = every if k == "all" else classes[k]
            if k != "all" and len(v) < 20:
                continue
            print(f"| {label} | {k} | {len(v)} | {100 * st.median(v):+.1f} % |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--w", type=float, default=4.0, help="block-times within which a re-read hits [4]")
    ap.add_argument("--alpha", type=float, default=0.7, help="an L2 hit's cost over a memory read [0.7]")
    ap.add_argument("--shared", type=int, default=20000, help="tokens every decode shares [20000]")
    ap.add_argument("--ms-per-token", type=float, default=32e-6,
                    help="the profile's decode read time per context token, ms [32e-6: 32 µs per 1K tokens]")
    ap.add_argument("--forward", action="store_true", help="pieces read from their first block")
    ap.add_argument("--soft", type=float, default=None, metavar="TAU",
                    help="a soft window instead of W: a re-read hits with probability exp(-gap / TAU)")
    ap.add_argument("--by-count", action="store_true", help="one row per number of decodes (16 and more together)")
    ap.add_argument("--batch-order", action="store_true",
                    help="the split-KV schedule's thread blocks started in the batch's order, not longest first: "
                         "each step gets the time model's difference (l2_reuse_model.span_s) over --layers")
    ap.add_argument("--layers", type=int, default=36, help="attention layers a step runs [36: Qwen3-8B]")
    ap.add_argument("--priced", action="store_true",
                    help="the CSVs already price the schedule and the L2 (calibrate --check --split-kv --shared-prefix): "
                         "print their own error per number of decodes, nothing modelled here")
    ap.add_argument("--order", choices=ORDERS, default="once",
                    help="thread blocks all started at once [once], or as the 132 SMs free up in this launch order")
    a = ap.parse_args()
    shared_blocks = a.shared // BLOCK
    traces = [steps(spec, a.shared) for spec in a.traces]
    if a.priced:
        priced(traces, a.shared)
        return
    window = f"a soft window of {a.soft:g} block-times" if a.soft else f"W = {a.w:g} block-times"
    started = "every thread block started at once" if a.order == "once" else f"thread blocks started as SMs free up, order {a.order}"
    if a.batch_order:
        started += "; the split-KV schedule in the batch's order"
    print(f"{window}, ALPHA = {a.alpha:g}, pieces read {'forward' if a.forward else 'from their last block'}, {started}; "
          f"error = predicted / measured − 1 (median), pure decode steps of 2 or more decodes over the shared "
          f"{a.shared:,} tokens\n")
    print("| trace | decodes | steps | profile | with the model | served from L2 (share of context) |")
    print("|---|---|---:|---:|---:|---:|")
    for label, rows in traces:
        classes, every = {}, []
        for d, measured, predicted in rows:
            saved = coincident_tokens(d, shared_blocks, a.w, not a.forward, a.soft, a.order)
            with_model = predicted - saved * (1 - a.alpha) * a.ms_per_token
            if a.batch_order:
                with_model += (span_s(d, False) - span_s(d, True)) * 1e3 * a.layers
            if a.by_count:
                k = str(min(len(d), 16)) + ("+" if len(d) >= 16 else "")
            else:
                k = "2-3" if len(d) < 4 else "4-7" if len(d) < 8 else "8-11" if len(d) < 12 else "12+"
            item = (predicted / measured - 1, with_model / measured - 1, saved / sum(d))
            classes.setdefault(k, []).append(item)
            every.append(item)
        for k in sorted(classes, key=lambda k: int(k.split("-")[0].rstrip("+"))) + ["all"]:
            v = every if k == "all" else classes[k]
            if a.by_count and k != "all" and len(v) < 20:
                continue
            print(f"| {label} | {k} | {len(v)} | {100 * st.median(x for x, _, _ in v):+.1f} % | "
                  f"{100 * st.median(y for _, y, _ in v):+.1f} % | {st.median(z for _, _, z in v):.2f} |")


if __name__ == "__main__":
    main()
