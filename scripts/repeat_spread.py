#!/usr/bin/env python3
"""How far real vLLM is from itself: the same replay (deployment, workload, start, level, seed, window) on two
starts of the same server, from the stored sets that were run twice (results/h200-vllm/*/compare.json).
For each level both sets measured: each metric's real value on the first and the second start and their
difference (second / first − 1), and beside it the simulator's error against each start. A fidelity target
tighter than the server's own start-to-start spread cannot be told apart from noise.

    python3 scripts/repeat_spread.py > results/h200-vllm/repeat-spread.md

Plain Python, no arguments.
"""
import json

# (first start, second start) of the same replays
PAIRS = [("syn-cold", "syn-cold-rep"), ("syn-steady", "syn-steady-rep"),
         ("../h200-vllm-moe/replays/moe-syn-cold", "../h200-vllm-moe/warm/moe-syn-cold-warm")]
METRICS = ["D", "TTFT p50 s", "TTFT p90 s", "TPOT p50 ms", "TPOT p90 ms"]


def rows(s):
    d = json.load(open(f"results/h200-vllm/{s}/compare.json"))
    return {r["concurrency"]: {m["metric"]: m for m in r["metrics"]} for r in d["rows"] if r.get("seed", 0) == 0}


def pct(x):
    return f"{100 * x:+.1f} %"


def main():
    print(__doc__.split("\n\n")[0].replace("\n", " ") + "\n")
    print("`python3 scripts/repeat_spread.py`; each cell: first start → second start (difference); sim error "
          "against the first / the second start\n")
    spread = {m: [] for m in METRICS}
    for a, b in PAIRS:
        ra, rb = rows(a), rows(b)
        print(f"## {a.split('/')[-1]} and {b.split('/')[-1]}\n")
        print("| c | " + " | ".join(METRICS) + " |")
        print("|---|" + "---|" * len(METRICS))
        for c in sorted(set(ra) & set(rb)):
            cells = []
            for m in METRICS:
                x, y = ra[c][m]["real"], rb[c][m]["real"]
                diff = y / x - 1 if x else 0.0
                spread[m].append(abs(diff))
                cells.append(f"{x:.3g} → {y:.3g} ({pct(diff)}); sim {pct(ra[c][m]['rel_error'])} / "
                             f"{pct(rb[c][m]['rel_error'])}")
            print(f"| {c} | " + " | ".join(cells) + " |")
        print()
    print("Median |start-to-start difference| over every level of every pair: " + ", ".join(
        f"{m} {100 * sorted(v)[len(v) // 2]:.1f} %" for m, v in spread.items()) + ".")


if __name__ == "__main__":
    main()
