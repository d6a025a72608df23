#!/usr/bin/env bash
# Everything serverbench runs on the GPU machine, in one call (the device lease is short):
# correctness against transformers, the engine's speed table, and replays against the CUDA engine
# that write step logs for calibration and records for fidelity.
# Usage (on the GPU machine, from the repo root, with the binary built elsewhere):
#   BIN=.carry/serverbench OUT=/tmp/out bash scripts/gpu_run.sh [check] [bench] [replay]
set -u
BIN=${BIN:-target/release/serverbench}
OUT=${OUT:-/tmp/serverbench-gpu}
WINDOW=${WINDOW:-60}
mkdir -p "$OUT"
parts=${*:-check bench replay}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm --format=csv
for p in $parts; do
  case $p in
    check)
      PYTHONUNBUFFERED=1 python3 scripts/cuda_check.py --bin "$BIN" --out "$OUT/check" 2>&1 | tail -n 40
      cp "$OUT/check/check.json" "$OUT/check.json" 2>/dev/null ;;
    bench)
      "$BIN" cuda-bench --out "$OUT/bench" 2>&1
      cp "$OUT/bench/bench.json" "$OUT/bench.json"; gzip -c "$OUT/bench/steps.jsonl" > "$OUT/bench_steps.jsonl.gz" ;;
    replay)
      for c in ${CONCURRENCY:-4 16 64}; do
        "$BIN" replay --engine cuda -d qwen3-8b-1xh200 -c "$c" -w "$WINDOW" --no-probe \
          --step-log "$OUT/steps_c$c.jsonl" --out "$OUT/replay_c$c" 2>&1 | tail -n 30
        cp "$OUT/replay_c$c/summary.json" "$OUT/summary_c$c.json"
        gzip -c "$OUT/replay_c$c/records.jsonl" > "$OUT/records_c$c.jsonl.gz"
        gzip "$OUT/steps_c$c.jsonl"
      done ;;
  esac
done
