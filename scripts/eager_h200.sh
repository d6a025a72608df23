#!/usr/bin/env bash
# Eager (no CUDA graph) decode steps on the GPU machine, in one call: the host's launch time per decoder
# layer of the Hugging Face implementations of the L40 deployments' architectures
# (scripts/eager_host.py), and serverbench's CUDA engine's decode steps with and without its CUDA graphs.
# Usage (on the GPU machine, from the repo root; the binary built with `cargo build --release --features cuda`):
#   BIN=.carry/serverbench OUT=$OUT bash scripts/eager_h200.sh
set -u
BIN=${BIN:-target/release/serverbench}
OUT=${OUT:-/tmp/serverbench-eager}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
lscpu | grep -E "Model name|^CPU\(s\)|MHz" | head -n 4
PYTHONUNBUFFERED=1 timeout 420 python3 scripts/eager_host.py --out "$OUT/eager_host.json" 2>&1 \
  | grep -v -E "Warning|warn\(|forward_call|falling back|output = func" | tail -n 40
cases=decode:1:512,decode:32:512,decode:64:512,decode:128:512
for mode in graphs eager; do
  echo "== engine decode steps, $mode"
  if [ $mode = eager ]; then export SERVERBENCH_NO_CUDA_GRAPHS=1; fi
  timeout 120 "$BIN" cuda-bench --engine cuda --cases $cases --reps 20 --out "$OUT/engine_$mode" 2>&1 | grep -E "decode|rror"
  cp "$OUT/engine_$mode/bench.json" "$OUT/engine_$mode.json" 2>/dev/null
done
