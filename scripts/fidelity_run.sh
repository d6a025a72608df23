#!/usr/bin/env bash
# Calibration and fidelity runs on the GPU machine (issue #7), one device call per part:
#   micro   — `calibrate --microbench` (GEMM curves, copy bandwidth, a grid of forward steps, a fitted profile)
#   levels  — `compare` at several concurrency levels (seed 0) against the CUDA engine
#   seeds   — `compare` over several seeds at one concurrency (seed screening fidelity)
#   long    — `compare` with long windows at LONG_LEVELS (4,8), LONG_WINDOW (150) s
# Results are packed into $OUT/<part>.tar.gz after every run, so a call stopped at its limit still
# returns what finished. Usage (from the repo root, binary built on a CPU machine with the CUDA engine:
# `cargo build --release --features cuda`):
#   BIN=.carry/serverbench OUT=/tmp/out bash scripts/fidelity_run.sh micro levels
# Knobs: LEVELS (1,4,8,16), LEVEL_WINDOW (60), SEEDS (1,...,8), SEED_C (4), SEED_WINDOW (35).
set -u
BIN=${BIN:-target/release/serverbench}
OUT=${OUT:-/tmp/serverbench-fidelity}
WORK=${WORK:-/tmp/sb-fidelity}
mkdir -p "$OUT" "$WORK"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
pack() { tar -C "$WORK" -czf "$OUT/$1.tar.gz.tmp" "$1" 2>/dev/null && mv "$OUT/$1.tar.gz.tmp" "$OUT/$1.tar.gz"; }
# Pack the part in progress every 30 s too, so a call stopped at its limit returns finished runs.
keep_packing() { ( while sleep 30; do pack "$1"; done ) & packer=$!; }
stop_packing() { kill "$packer" 2>/dev/null; wait "$packer" 2>/dev/null; }
# One `compare` against the CUDA engine into $WORK/NAME (logs and step logs gzipped), packed as it goes.
# The engine runs as it serves (CUDA graphs on); session 4's runs had them off to match a profile fitted
# before graphs existed (docs/fidelity.md).
compare_part() {
  local name=$1; shift
  keep_packing "$name"
  "$BIN" compare -d qwen3-8b-1xh200 --engine cuda --start steady "$@" \
    --out "$WORK/$name" 2>&1 | tee "$WORK/$name.log"
  for d in "$WORK/$name"/real/*/; do gzip -f "$d"/*.jsonl 2>/dev/null; done
  # How the shipped profile predicts these new steps, per class of step (held out from its fit).
  "$BIN" calibrate --check h200-qwen3-8b-cuda --from-steps "$WORK/$name"/real/*/steps.jsonl.gz \
    > "$WORK/$name/check.md" 2>&1
  stop_packing; pack "$name"
}
for part in ${*:-micro levels seeds long}; do
  start=$(date +%s)
  case $part in
    micro)
      mkdir -p "$WORK/micro"
      "$BIN" calibrate --microbench --name h200-qwen3-8b-microbench \
        --measured-on "NVIDIA H200 lent by the device tool; serverbench CUDA engine microbenchmarks; $(date -u +%F)" \
        --out "$WORK/micro/h200-qwen3-8b-microbench.yaml" 2>&1 | tee "$WORK/micro/log"
      pack micro ;;
    levels) compare_part levels -c "${LEVELS:-1,4,8,16}" -s 0 -w "${LEVEL_WINDOW:-60}" ;;
    seeds) compare_part seeds -c "${SEED_C:-4}" -s "${SEEDS:-1,2,3,4,5,6,7,8}" -w "${SEED_WINDOW:-35}" ;;
    long) compare_part long -c "${LONG_LEVELS:-4,8}" -s 0 -w "${LONG_WINDOW:-150}" ;;
  esac
  echo "part $part took $(( $(date +%s) - start )) s"
done
