#!/usr/bin/env python3
"""Where the simulator and the stored vLLM runs part (docs/fidelity.md, vLLM, "Per run"): for each level of
results/h200-vllm/syn-steady, the simulated twin of the run (`simulate --timeline`, same deployment, seed,
window and start) beside what was measured:

- think gap: each lane's gap from an answer to its next request, for pairs of consecutive main-agent turns
  present in both (median of measured minus simulated);
- running requests and KV pool in use: the simulator's time-weighted means beside the mean of vLLM's own
  ten-second log lines (`Running: N reqs`, `GPU KV cache usage`) during that run; the runs' time spans in
  server.log.gz are read off its order (call 2 ran c = 1 then 4, call 3 c = 16, 8, 32, 64 one after
  another, each starting with the burst of prompts a steady start sends) and written below;
- the p50 inter-token gap (every gap between output chunks), simulated / measured.

Usage: loop_check.py SERVERBENCH_BINARY [RESULTS_DIR]   (RESULTS_DIR: results/h200-vllm)
"""

import csv
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

LEVELS = (4, 8, 16, 32, 64)
# Each run's ten-second log lines in server.log.gz (HH:MM:SS of the first and last line inside the run;
# c = 4 ran in call 2, after c = 1).
LOG_SPANS = {4: ("06:33:31", "06:35:01"), 16: ("06:36:01", "06:37:41"), 8: ("06:38:11", "06:39:51"),
             32: ("06:40:21", "06:42:11"), 64: ("06:42:51", "06:44:41")}
STATS = re.compile(r"(\d\d:\d\d:\d\d) \[loggers\.py.*Running: (\d+) reqs.*GPU KV cache usage: ([\d.]+)%")


def records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return {(r["tree"], r["request"]): r for r in map(json.loads, f) if r}


def think_gap_ms(sim, real):
    diffs = []
    for (tree, req), r in real.items():
        nxt = (tree, req + 1)
        pair = [(tree, req), nxt]
        if nxt in real and all(k in sim for k in pair) and r["agent"] == real[nxt]["agent"] == 0:
            gap = lambda rs: rs[nxt]["send_ns"] - rs[(tree, req)]["finish_ns"]
            diffs.append((gap(real) - gap(sim)) / 1e6)
    return statistics.median(diffs) if diffs else float("nan"), len(diffs)


def timeline_means(path):
    rows = list(csv.DictReader(open(path)))
    total = sum(float(r["step_ms"]) for r in rows)
    mean = lambda k: sum(float(r["step_ms"]) * float(r[k]) for r in rows) / total
    return mean("running"), 100 * mean("kv_occupancy")


def vllm_log_means(root):
    lines = gzip.open(os.path.join(root, "server.log.gz"), "rt").read().splitlines()
    stats = [m.groups() for m in map(STATS.search, lines) if m]
    out = {}
    for c, (a, b) in LOG_SPANS.items():
        inside = [(int(n), float(kv)) for t, n, kv in stats if a <= t <= b]
        out[c] = (statistics.mean(n for n, _ in inside), statistics.mean(kv for _, kv in inside), len(inside))
    return out


def main():
    binary = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else "results/h200-vllm"
    log = vllm_log_means(root)
    print("c | think gap, measured - simulated (median ms, pairs) | running: simulated / vLLM log | "
          "KV in use %: simulated / vLLM log | p50 inter-token gap ms: simulated / measured (error)")
    with tempfile.TemporaryDirectory() as tmp:
        for c in LEVELS:
            out = os.path.join(tmp, f"c{c}")
            subprocess.run([binary, "simulate", "-d", "qwen3-8b-1xh200-vllm", "-c", str(c), "-s", "0",
                            "-w", "120", "--start", "steady", "--timeline", "--out", out],
                           check=True, stdout=subprocess.DEVNULL)
            real_dir = os.path.join(root, "syn-steady", "real", f"c{c}_s0")
            gap, pairs = think_gap_ms(records(os.path.join(out, "records.jsonl")),
                                      records(os.path.join(real_dir, "records.jsonl.gz")))
            running, kv = timeline_means(os.path.join(out, "timeline.csv"))
            itl = lambda d: json.load(open(os.path.join(d, "summary.json")))["summary"]["itl_s"]["p50"] * 1e3
            s_itl, r_itl = itl(out), itl(real_dir)
            v_run, v_kv, n = log.get(c, (float("nan"), float("nan"), 0))
            print(f"{c} | {gap:+.2f} ({pairs}) | {running:.1f} / {v_run:.1f} ({n} lines) | {kv:.1f} / {v_kv:.1f} | "
                  f"{s_itl:.2f} / {r_itl:.2f} ({100 * (s_itl / r_itl - 1):+.1f} %)")


if __name__ == "__main__":
    main()
