#!/usr/bin/env python3
"""vLLM's steps beside the simulator's for one replay: where the time goes, by kind of step and by the number
of sequences a pure decode step carries, in the warm-up and in the scored window. It tells whether a replay's
TPOT error is the price of the steps (the same mix, each kind priced differently) or the schedule (another mix).

    python3 scripts/vllm/step_mix.py STEPS.jsonl.gz TIMELINE.csv WARMUP_REAL_S WARMUP_SIM_S [WINDOW_S]

STEPS is vLLM's step trace (scripts/vllm/step_trace/), TIMELINE the simulator's `--timeline` CSV of the same
replay (`simulate … --timeline --out DIR`); the warm-ups are each side's AgentX warm-up length (the real run's
summary.json `summary.agentx.warmup_s`, the simulator's run line). vLLM's side starts at its first prefill
over more than 20,000 tokens of context (the first AgentX primer; the server's own start-up requests are
shorter); WINDOW_S defaults to 120. Prints a Markdown table.
"""
import collections
import csv
import gzip
import json
import sys


def real_steps(path):
    """(seconds from the first AgentX primer, decodes, prefill chunks, GPU span ms) of every vLLM step."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = [r for r in map(json.loads, f) if "i" in r and r.get("gpu_us") is not None]
    first = next(r for r in rows if r["pf"] and max(p[2] for p in r["pf"]) > 20000)
    return [((r["t0_ns"] - first["t0_ns"]) / 1e9, r["nd"], len(r["pf"]), r["gpu_us"] / 1000) for r in rows]


def sim_steps(path):
    with open(path) as f:
        return [(float(r["start_s"]), int(r["decode_seqs"]), int(r["prefill_tokens"]), float(r["step_ms"]))
                for r in csv.DictReader(f)]


def mix(steps, lo, hi):
    """Seconds of pure decode and of steps with prefill in [lo, hi); per decode count (4 and more pooled
    from 5 on): share of the decode time and mean step ms."""
    time, count, prefill = collections.Counter(), collections.Counter(), 0.0
    for t, decodes, chunks, ms in steps:
        if not lo <= t < hi:
            continue
        if chunks:
            prefill += ms
        elif decodes:
            k = min(decodes, 5)
            time[k] += ms
            count[k] += 1
    return sum(time.values()) / 1000, prefill / 1000, {k: (time[k], time[k] / count[k]) for k in time}


def main():
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    real, sim = real_steps(sys.argv[1]), sim_steps(sys.argv[2])
    wu_real, wu_sim = float(sys.argv[3]), float(sys.argv[4])
    window = float(sys.argv[5]) if len(sys.argv) == 6 else 120.0
    label = {1: "1", 2: "2", 3: "3", 4: "4", 5: "5+"}
    print("| part | side | pure decode s | steps with prefill s | " +
          " | ".join(f"{label[k]} decodes: share, mean ms" for k in label) + " |")
    print("|---|---|---:|---:|" + "---|" * len(label))
    for part, (r_lo, r_hi), (s_lo, s_hi) in [
        ("warm-up", (0, wu_real), (0, wu_sim)),
        ("window", (wu_real, wu_real + window), (wu_sim, wu_sim + window)),
    ]:
        for side, steps, lo, hi in [("vLLM", real, r_lo, r_hi), ("simulator", sim, s_lo, s_hi)]:
            dec, pre, per = mix(steps, lo, hi)
            cells = [f"{100 * per[k][0] / (dec * 1000):.0f} %, {per[k][1]:.1f}" if k in per else "–"
                     for k in label]
            print(f"| {part} | {side} | {dec:.1f} | {pre:.1f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
