#!/usr/bin/env bash
# The two engines measured on the same H200, workload, seeds and windows, side by side: serverbench's
# CUDA engine (results/h200-fidelity/) and transformers serve (results/h200-transformers/), each scored
# under both deployments' targets (the measured records re-scored by `compare --reuse`). CPU only.
# Usage: BIN=target/release/serverbench bash scripts/peer_table.sh > results/h200-transformers/peers.md
set -eu
BIN=${BIN:-target/release/serverbench}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() { # NAME SOURCE DEPLOYMENT ARGS...
  local name=$1 src=$2 dep=$3; shift 3
  mkdir -p "$TMP/$name"; cp -r "$src/real" "$TMP/$name/"
  "$BIN" compare -d "$dep" --start steady --reuse --out "$TMP/$name" "$@" > /dev/null 2>&1
}
for dep in qwen3-8b-1xh200 qwen3-8b-1xh200-transformers; do
  run "cuda-levels-$dep" results/h200-fidelity/levels "$dep" -c 1,4,8,16 -s 0 -w 120
  run "tf-levels-$dep" results/h200-transformers/levels "$dep" -c 1,4,8,16 -s 0 -w 120
done
python3 - "$TMP" <<'PY'
import json, sys
tmp = sys.argv[1]
print("# serverbench's CUDA engine and transformers serve on one H200 (measured)\n")
print("Seed 0, 120 s windows, steady start, the same workload and requests. Each cell: CUDA engine / transformers serve.")
print("Made by `scripts/peer_table.sh` from results/h200-fidelity/levels and results/h200-transformers/levels.\n")
for dep, label in [("qwen3-8b-1xh200", "the benchmark deployment's targets (TTFT 2 s, TPOT 20 ms)"),
                   ("qwen3-8b-1xh200-transformers", "the targets frozen on transformers serve (TTFT 5.664 s, TPOT 330 ms)")]:
    rows = {}
    for engine in ["cuda", "tf"]:
        v = json.load(open(f"{tmp}/{engine}-levels-{dep}/compare.json"))
        for r in v["rows"]:
            m = {x["metric"]: x["real"] for x in r["metrics"]}
            m["completed"] = r["completed"][1]
            rows.setdefault(r["concurrency"], {})[engine] = m
    print(f"\n## Scored under {label}\n")
    print("| c | completed | D | G | f | TTFT p90 s | TPOT p90 ms |")
    print("|---|---|---|---|---|---|---|")
    for c in sorted(rows):
        a, b = rows[c]["cuda"], rows[c]["tf"]
        fmt = lambda k, p: f"{a[k]:.{p}f} / {b[k]:.{p}f}"
        print(f"| {c} | {a['completed']} / {b['completed']} | {fmt('D',3)} | {fmt('G',3)} | {fmt('f',3)} | {fmt('TTFT p90 s',2)} | {fmt('TPOT p90 ms',1)} |")
PY
