#!/usr/bin/env python3
"""Which of vLLM's eager steps compiled a fused-MoE kernel, from its own step traces, against the rule the
simulator models (calibration/src/compile.rs): a step of M tokens outside the captured CUDA graphs runs
the configuration of the tuned table's entry nearest M (the smaller on a tie; entries of equal
configurations share one kernel, the profile's `kernel` ids), specialized on whether M × top_k is a
multiple of 16; the engine's start-up compiled its graph captures (1, 2, 4 and every multiple of 8 up to
512 tokens) and its profiling run (8,192 tokens). Each server start's traces are read in order; a step
is a compile where its variant is new. Prints, per start, every step the rule marks and every eager
step over 500 ms, with its excess over the median of the other eager steps within 25 % of its size,
then the median excess of the marked steps (the profile's `expert_compile_s`).

    python3 scripts/vllm/moe_compiles.py > results/h200-vllm-moe/compiles.md   (a CPU, from the stored traces)
"""
import gzip
import json
import re
import statistics
from pathlib import Path

R = Path("results/h200-vllm-moe")
PROFILE = Path("presets/profiles/h200-qwen3-30b-a3b-vllm.yaml")
TOP_K, GRAPH_MAX, PROFILE_RUN = 8, 512, 8192
# Each server start's step traces, in the order they ran on it.
STARTS = [("first start (2026-12-04)", ["replays/steps-moe-syn-cold.jsonl.gz", "replays/steps-moe-syn-steady.jsonl.gz"]),
          ("second start (2026-12-04), the probe first", ["warm/steps-moe-syn-cold-warm.jsonl.gz",
                                                          "warm/steps-moe-syn-steady-warm.jsonl.gz"])]


def table() -> list:
    """(tokens, kernel) of the profile's expert_tile_rows."""
    rows = re.findall(r"\{tokens: (\d+), rows: \d+, kernel: (\d+)\}", PROFILE.read_text())
    return [(int(t), int(k)) for t, k in rows]


def variant(entries: list, m: int) -> tuple:
    best = entries[0]
    for e in entries[1:]:
        if abs(e[0] - m) < abs(best[0] - m):
            best = e
    return best[1], (m * TOP_K) % 16 == 0


def steps(path: Path) -> list:
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f if '"i"' in line]


def main() -> None:
    entries = table()
    warm = {variant(entries, m) for m in [1, 2, 4, *range(8, GRAPH_MAX + 1, 8), PROFILE_RUN]}
    print("# vLLM's fused-MoE kernel compiles in its step traces, against the simulator's rule\n")
    print("`python3 scripts/vllm/moe_compiles.py` (the rule: calibration/src/compile.rs; the kernel ids: "
          "`expert_tile_rows` of presets/profiles/h200-qwen3-30b-a3b-vllm.yaml).\n")
    excess = []
    for label, files in STARTS:
        compiled, eager = set(warm), []
        for name in files:
            for s in steps(R / name):
                if s["tok"] <= GRAPH_MAX:
                    continue
                v = variant(entries, s["tok"])
                eager.append((name.split("/")[-1], s["i"], s["tok"], v, v not in compiled, s["gpu_us"] / 1e3))
                compiled.add(v)
        marked = [e for e in eager if e[4]]
        slow = [e for e in eager if e[5] > 500]
        hits = [e for e in marked if e[5] > 500]
        print(f"## {label}\n\n{len(eager)} eager steps; the rule marks {len(marked)}, {len(slow)} took over 500 ms, "
              f"{len(hits)} are both.\n")
        print("| trace | step | tokens | variant (kernel, aligned) | marked | GPU span ms | others' median ms | excess ms |")
        print("|---|---:|---:|---|---|---:|---:|---:|")
        for e in eager:
            if not (e[4] or e[5] > 500):
                continue
            peers = [x[5] for x in eager if not x[4] and x[1] != e[1] and abs(x[2] - e[2]) <= 0.25 * e[2]]
            typical = statistics.median(peers)
            if e[4] and e[5] > 500:
                excess.append(e[5] - typical)
            print(f"| {e[0]} | {e[1]} | {e[2]} | ({e[3][0]}, {str(e[3][1]).lower()}) | {'yes' if e[4] else 'no'} | "
                  f"{e[5]:.1f} | {typical:.1f} | {e[5] - typical:.1f} |")
        print()
    print(f"Excess of the marked steps over 500 ms: {', '.join(f'{x:.0f}' for x in sorted(excess))} ms; "
          f"median **{statistics.median(excess):.0f} ms** (`expert_compile_s`).")


if __name__ == "__main__":
    main()
