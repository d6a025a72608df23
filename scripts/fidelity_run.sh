#!/usr/bin/env bash
# Calibration and fidelity runs on the GPU machine (issue #7), one device call per part:
#   micro   — `calibrate --microbench` (GEMM curves, copy bandwidth, a grid of forward steps, a fitted profile)
#   levels  — `compare` at several concurrency levels (seed 0) against the CUDA engine
#   seeds   — `compare` over several seeds at one concurrency (seed screening fidelity)
#   long    — `compare` with long windows at LONG_LEVELS (4,8), LONG_WINDOW (150) s, CUDA graphs off so the
#             engine is the one the shipped profile was fitted to
# Results are packed into $OUT/<part>.tar.gz after every run, so a call stopped at its limit still
# returns what finished. Usage (from the repo root, binary built on a CPU machine):
#   BIN=.carry/serverbench OUT=/tmp/out bash scripts/fidelity_run.sh micro levels
# Knobs: LEVELS (1,4,8,16), LEVEL_WINDOW (60), SEEDS (1,...,8), SEED_C (4), SEED_WINDOW (40).
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
for part in ${*:-micro levels seeds}; do
  start=$(date +%s)
  case $part in
    micro)
      mkdir -p "$WORK/micro"
      "$BIN" calibrate --microbench --name h200-qwen3-8b-microbench \
        --measured-on "NVIDIA H200 lent by the device tool; serverbench CUDA engine microbenchmarks; $(date -u +%F)" \
        --out "$WORK/micro/h200-qwen3-8b-microbench.yaml" 2>&1 | tee "$WORK/micro/log"
      pack micro ;;
    levels)
      keep_packing levels
      "$BIN" compare -d qwen3-8b-1xh200 --engine cuda -c "${LEVELS:-1,4,8,16}" -s 0 \
        -w "${LEVEL_WINDOW:-60}" --out "$WORK/levels" 2>&1 | tee "$WORK/levels.log"
      cp "$WORK/levels.log" "$WORK/levels/" 2>/dev/null
      for d in "$WORK"/levels/real/*/; do gzip -f "$d"/*.jsonl 2>/dev/null; done
      stop_packing; pack levels ;;
    seeds)
      keep_packing seeds
      "$BIN" compare -d qwen3-8b-1xh200 --engine cuda -c "${SEED_C:-4}" -s "${SEEDS:-1,2,3,4,5,6,7,8}" \
        -w "${SEED_WINDOW:-40}" --out "$WORK/seeds" 2>&1 | tee "$WORK/seeds.log"
      cp "$WORK/seeds.log" "$WORK/seeds/" 2>/dev/null
      for d in "$WORK"/seeds/real/*/; do gzip -f "$d"/*.jsonl 2>/dev/null; done
      stop_packing; pack seeds ;;
    long)
      keep_packing long
      SERVERBENCH_NO_CUDA_GRAPHS=1 "$BIN" compare -d qwen3-8b-1xh200 --engine cuda -c "${LONG_LEVELS:-4,8}" -s 0 \
        -w "${LONG_WINDOW:-150}" --out "$WORK/long" 2>&1 | tee "$WORK/long.log"
      for d in "$WORK"/long/real/*/; do gzip -f "$d"/*.jsonl 2>/dev/null; done
      stop_packing; pack long ;;
  esac
  echo "part $part took $(( $(date +%s) - start )) s"
done
