#!/usr/bin/env python3
"""Re-simulate every stored vLLM comparison of results/h200-vllm/ with the current serverbench, on copies of
the sets (the stored folders are left as they are), and write one markdown table of D and TPOT p50 errors:
the stored simulation's beside the new one, and each set's best level by D, measured and simulated.

Usage: recompare.py SERVERBENCH OUT.md   (from the repository root; runs on a CPU, about a minute)
"""

import json
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
    ("agentx-real", f"-d qwen3-8b-200k-1xh200-vllm --protocol agentx --trace {R}/claude-code-as-replayed/logs.jsonl --trace-format corpus --max-context-length 200000 -c 2,4,8 -s 0 -w 120"),
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


def main() -> None:
    binary, out = sys.argv[1], sys.argv[2]
    lines = ["| set | c | seed | D measured | D simulated before → now (error) | TPOT p50 error before → now |",
             "|---|---:|---:|---:|---|---|"]
    picks = ["| set | best c measured | best c simulated before | now |", "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in SETS:
            copy = Path(tmp) / name
            shutil.copytree(Path(R) / name, copy)
            cmd = [binary, "compare", *args.split(), "--reuse", "--out", str(copy)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            old, new = metrics(Path(R) / name / "compare.json"), metrics(copy / "compare.json")
            for key in sorted(new):
                o, n = old[key], new[key]
                lines.append(f"| {name} | {key[0]} | {key[1]} | {n['D']['real']:.3f} | {o['D']['sim']:.3f} ({pct(o['D'])}) → "
                             f"{n['D']['sim']:.3f} ({pct(n['D'])}) | {pct(o['TPOT p50 ms'])} → {pct(n['TPOT p50 ms'])} |")
            if len({c for c, _ in new}) > 1:
                picks.append(f"| {name} | {best(new, 'real')} | {best(old, 'sim')} | {best(new, 'sim')} |")
    Path(out).write_text("\n".join(lines + [""] + picks) + "\n")


if __name__ == "__main__":
    main()
