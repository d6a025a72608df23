#!/usr/bin/env python3
"""The vLLM fidelity targets of docs/fidelity.md checked on every stored set (the sets of scripts/regret.py,
seed 0): |D error| at every level up to the real best (target 10 %), and p50 and p90 TPOT (5 %) and TTFT
(15 %) errors at every level up to two measured levels past it; then the seeds' Spearman ρ of every set
that has several (target 0.9). Each cell gives the levels that miss, with their errors. Beside them, not a
target: the TPOT and TTFT of the same requests on both sides (`compare`'s second table, the median of each
shared request's error) at the p50 cells' levels, which tells the price from which requests a window holds.
Prints markdown:

    python3 scripts/vllm/targets.py > results/h200-vllm/targets.md   (from the stored compares; a CPU, a second)
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from regret import SETS, metric, set_name  # noqa: E402

CHECKS = [("D", 0.10, 0), ("TPOT p50 ms", 0.05, 2), ("TPOT p90 ms", 0.05, 2),
          ("TTFT p50 s", 0.15, 2), ("TTFT p90 s", 0.15, 2)]


def misses(rows, levels, name, bound):
    out = []
    for r in rows:
        if r["concurrency"] in levels:
            e = metric(r, name)["rel_error"]
            if e is not None and abs(e) > bound:
                out.append(f"{r['concurrency']}: {100 * e:+.0f} %")
    return ", ".join(out) or "–"


def seed_zero(s):
    """A set's seed-0 rows by level, its levels, and the level of the best measured D."""
    d = json.load(open(f"results/h200-vllm/{s}/compare.json"))
    rows = sorted((r for r in d["rows"] if r.get("seed", 0) == 0), key=lambda r: r["concurrency"])
    real = {r["concurrency"]: metric(r, "D")["real"] for r in rows}
    return rows, [r["concurrency"] for r in rows], max(real, key=real.get)


def main():
    head = " | ".join(f"{n} (±{100 * b:.0f} %{', to best' if k == 0 else ', to best + 2'})" for n, b, k in CHECKS)
    print(f"| set | levels | real best | {head} |")
    print("|---|---|---:|" + "---|" * len(CHECKS))
    total, met = 0, 0
    for s in SETS:
        rows, levels, best = seed_zero(s)
        cells = []
        for name, bound, past in CHECKS:
            upto = levels[: levels.index(best) + 1 + past]
            cell = misses(rows, upto, name, bound)
            total += 1
            met += cell == "–"
            cells.append(cell)
        print(f"| {set_name(s)} | {','.join(map(str, levels))} | {best} | " + " | ".join(cells) + " |")
    print(f"\n{met} of {total} (set, metric) cells within their target.\n")
    same_requests()
    print("| set | level | seeds | Spearman ρ of D (target ≥ 0.9) |\n|---|---:|---:|---:|")
    for p in sorted(Path("results").glob("h200-vllm*/**/compare.json")):
        for r in json.loads(p.read_text()).get("seed_rankings", []):
            print(f"| {p.parent.name} | {r['concurrency']} | {r['seeds']} | {r['spearman_d']:.2f} |")


def same_requests():
    """Per set, the levels (to the real best + 2) where the window's p50 or the same requests' median
    error passes its bound: TPOT 5 %, TTFT 15 %."""
    checks = [("TPOT p50 ms", "tpot_rel_error", 0.05), ("TTFT p50 s", "ttft_rel_error", 0.15)]
    print("| set | " + " | ".join(f"{n.split()[0]} p50 (±{100 * b:.0f} %) | {n.split()[0]} of the same requests, "
                                    f"median of each (±{100 * b:.0f} %)" for n, _, b in checks) + " |")
    print("|---|" + "---|---|" * len(checks))
    window_met, same_met = [0] * len(checks), [0] * len(checks)
    for s in SETS:
        rows, levels, best = seed_zero(s)
        upto = levels[: levels.index(best) + 3]
        cells = []
        for i, (name, key, bound) in enumerate(checks):
            window = misses(rows, upto, name, bound)
            out = []
            for r in rows:
                e = (r.get("same_requests") or {}).get(key)
                if r["concurrency"] in upto and e is not None and abs(e) > bound:
                    n = r["same_requests"]["both"]
                    out.append(f"{r['concurrency']}: {100 * e:+.0f} % ({n} request{'s' if n != 1 else ''})")
            window_met[i] += window == "–"
            same_met[i] += not out
            cells += [window, ", ".join(out) or "–"]
        print(f"| {set_name(s)} | " + " | ".join(cells) + " |")
    print("\n" + "; ".join(f"{n.split()[0]} p50 within its bound on {w} of {len(SETS)} sets, the same requests' on {m}"
                            for (n, _, _), w, m in zip(checks, window_met, same_met)) +
          " (not targets: the window's quantiles are).\n")


if __name__ == "__main__":
    main()
