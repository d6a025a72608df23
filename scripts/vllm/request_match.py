#!/usr/bin/env python3
"""A replay's TPOT, request by request: the measured run's records beside the simulator's records of the same
replay (the same tree and request ids: a replay sends the same requests on both sides, in its own time).
It splits a window's TPOT p50 error into the price of the requests both sides completed and the requests
only one side completed in the window (a closed loop that runs ahead finishes more of them).

    python3 scripts/vllm/request_match.py SIM_RECORDS.jsonl REAL_RECORDS.jsonl[.gz]…

SIM_RECORDS is `simulate … --out DIR`'s records.jsonl; each REAL_RECORDS a stored run's records (e.g.
results/h200-vllm/agentx-real/real/c8_s0/records.jsonl.gz). TPOT here is a request's (last token − first
token) / (tokens − 1), over completed requests of more than one token. Prints a Markdown table.
"""
import gzip
import json
import statistics
import sys


def records(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return {(r["tree"], r["request"]): r for r in map(json.loads, f) if r.get("outcome") == "completed"}


def tpot_ms(r):
    n = r["output_tokens"]
    return (r["last_token_ns"] - r["first_token_ns"]) / 1e6 / (n - 1) if n > 1 else None


def pct(a, b):
    return f"{100 * (a / b - 1):+.1f} %"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sim = {k: tpot_ms(r) for k, r in records(sys.argv[1]).items() if tpot_ms(r)}
    print("| measured run | both | only simulated | only measured | matched: median of each request's error |"
          " p50 over both, sim / real | p50 over each side's own, sim / real | the simulated-only requests' TPOT ms |")
    print("|---|---:|---:|---:|---:|---|---|---|")
    for path in sys.argv[2:]:
        real = {k: tpot_ms(r) for k, r in records(path).items() if tpot_ms(r)}
        both = [k for k in real if k in sim]
        if not both:
            print(f"| {path} | 0 | | | | | | |")
            continue
        only_sim = sorted(sim[k] for k in sim if k not in real)
        only_real = [k for k in real if k not in sim]
        each = statistics.median(sim[k] / real[k] - 1 for k in both)
        s_both, r_both = statistics.median(sim[k] for k in both), statistics.median(real[k] for k in both)
        s_all, r_all = statistics.median(sim.values()), statistics.median(real.values())
        print(f"| {path} | {len(both)} | {len(only_sim)} | {len(only_real)} | {100 * each:+.1f} % | "
              f"{s_both:.2f} / {r_both:.2f} ({pct(s_both, r_both)}) | {s_all:.2f} / {r_all:.2f} ({pct(s_all, r_all)}) | "
              f"{', '.join(f'{t:.1f}' for t in only_sim)} |")


if __name__ == "__main__":
    main()
