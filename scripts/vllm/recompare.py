#!/usr/bin/env python3
"""Re-simulate every stored vLLM comparison (results/h200-vllm/, results/h200-vllm-moe/replays/) with the
current serverbench, on copies of the sets (the stored folders are left as they are), and write one
markdown table of D, TTFT p90 and TPOT p50 errors: the stored simulation's (or, given BEFORE, that
binary's) beside the new one, and each set's best level by D, measured and simulated. The step-trace
sets (results/h200-vllm/step-trace/) are left out: with vLLM's step hook their measured D is far below
the same replays' without it (0.84 against 4.06 under AgentX at c = 8, 1.18 against 2.46 for syn-steady
at c = 16: the same throughput, fewer requests under the TPOT target), so they serve the per-step
analysis, not fidelity.

Usage: recompare.py SERVERBENCH OUT.md [BEFORE]   (from the repository root; runs on a CPU, a few minutes)
EXTRA_ARGS: more `compare` arguments for the new side only (e.g. `--profile presets/profiles/h200-ops-vllm.yaml`:
the stored simulation beside the same sets under another profile).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

R = "results/h200-vllm"
SETS = [
    ("syn-steady", "-d qwen3-8b-1xh200-vllm --start steady -c 1,4,8,16,32,64 -s 0 -w 120"),
    ("syn-cold", "-d qwen3-8b-1xh200-vllm --start cold -c 1,2,4,8,16,32,64 -s 0 -w 30"),
    ("syn-cold-seeds", "-d qwen3-8b-1xh200-vllm --start cold -c 8 -s 1,2,3,4,5,6,7,8 -w 30"),
    ("fit-cold", f"-d qwen3-8b-200k-1xh200-vllm --start cold -c 1,4,16 -s 0 -w 120 --workload {R}/agentic-coding-as-replayed.yaml"),
    ("fit-cold-w30", f"-d qwen3-8b-200k-1xh200-vllm --start cold -c 2,8,32 -s 0 -w 30 --workload {R}/agentic-coding-as-replayed.yaml"),
    ("real-cold", f"-d qwen3-8b-200k-1xh200-vllm --start cold --trace {R}/claude-code-as-replayed --trace-format corpus -c 4 -s 0 -w 120"),
    ("real-cold-w30", f"-d qwen3-8b-200k-1xh200-vllm --start cold --trace {R}/claude-code-as-replayed --trace-format corpus -c 2,8 -s 0 -w 30"),
    ("real-cold-w120", "-d qwen3-8b-200k-1xh200-vllm --start cold --trace corpus/claude-code --trace-format corpus -c 2,4,8 -s 0 -w 120"),
    ("agentx-real", f"-d qwen3-8b-200k-1xh200-vllm --protocol agentx --trace {R}/claude-code-as-replayed/logs.jsonl --trace-format corpus --max-context-length 200000 -c 2,4,8 -s 0 -w 120"),
    ("prefill-chunks/syn-cold-trace", "-d qwen3-8b-1xh200-vllm --start cold -c 8,16,32 -s 0 -w 30"),
    ("../h200-vllm-moe/replays/moe-syn-cold", "-d scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml --start cold -c 1,4,8,16 -s 0 -w 30"),
    ("../h200-vllm-moe/replays/moe-syn-steady", "-d scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml --start steady -c 4,16 -s 0 -w 60"),
    ("../h200-vllm-moe/warm/moe-syn-cold-warm", "-d scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml --start cold -c 1,4,8,16 -s 0 -w 30"),
    ("../h200-vllm-moe/warm/moe-syn-steady-warm", "-d scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml --start steady -c 8 -s 0 -w 60"),
]


def metrics(path: Path) -> dict:
    rows = json.loads(path.read_text())["rows"]
    return {(r["concurrency"], r["seed"]): {m["metric"]: m for m in r["metrics"]} for r in rows}


def pct(m: dict) -> str:
    return f"{100 * m['rel_error']:+.1f} %" if m.get("rel_error") is not None else "n/a"


def best(rows: dict, side: str) -> int:
    by_c = {}
    for (c, _), m in rows.items():
        by_c.setdefault(c, []).append(m["D"][side])
    return max(by_c, key=lambda c: sum(by_c[c]) / len(by_c[c]))


def simulate(binary: str, name: str, args: str, tmp: str, tag: str) -> dict:
    copy = Path(tmp) / tag / name.replace("../", "").replace("/", "_")
    shutil.copytree(Path(R) / name, copy)
    extra = os.environ.get("EXTRA_ARGS", "").split() if tag == "new" else []
    cmd = [binary, "compare", *args.split(), *extra, "--reuse", "--out", str(copy)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return metrics(copy / "compare.json")


def main() -> None:
    binary, out = sys.argv[1], sys.argv[2]
    before = sys.argv[3] if len(sys.argv) > 3 else None
    lines = ["| set | c | seed | D measured | D simulated before → now (error) | TTFT p90 error before → now | TPOT p50 error before → now |",
             "|---|---:|---:|---:|---|---|---|"]
    picks = ["| set | best c measured | best c simulated before | now |", "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in SETS:
            if not (Path(R) / name / "compare.json").is_file():
                continue
            new = simulate(binary, name, args, tmp, "new")
            old = simulate(before, name, args, tmp, "old") if before else metrics(Path(R) / name / "compare.json")
            for key in sorted(new):
                o, n = old[key], new[key]
                lines.append(f"| {name} | {key[0]} | {key[1]} | {n['D']['real']:.3f} | {o['D']['sim']:.3f} ({pct(o['D'])}) → "
                             f"{n['D']['sim']:.3f} ({pct(n['D'])}) | {pct(o['TTFT p90 s'])} → {pct(n['TTFT p90 s'])} | "
                             f"{pct(o['TPOT p50 ms'])} → {pct(n['TPOT p50 ms'])} |")
            if len({c for c, _ in new}) > 1:
                picks.append(f"| {name} | {best(new, 'real')} | {best(old, 'sim')} | {best(new, 'sim')} |")
    Path(out).write_text("\n".join(lines + [""] + picks) + "\n")


if __name__ == "__main__":
    main()
