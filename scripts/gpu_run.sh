#!/usr/bin/env bash
# Everything serverbench runs on the GPU machine, in one call (the device lease is short):
# correctness against transformers, the engine's speed table, and replays against the CUDA engine
# that write step logs for calibration and records for fidelity.
# Usage (on the GPU machine, from the repo root, with the binary built elsewhere with the CUDA engine:
# `cargo build --release --features cuda`):
#   BIN=.carry/serverbench OUT=/tmp/out bash scripts/gpu_run.sh [check] [bench] [gemv] [profile] [attn] [replay]
# gemv: the small-batch decode steps with the weight-streaming kernel limited to 0, 1, 2 and 4 rows
# (0 = cuBLAS only). attn: each prefill attention kernel in VARIANTS checked and timed (CASES, REPS).
# profile: Nsight Compute on the attention and GEMV kernels of three steps.
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
    gemv)
      for r in 0 1 2 4; do
        echo "SERVERBENCH_GEMV_MAX_ROWS=$r"
        SERVERBENCH_GEMV_MAX_ROWS=$r "$BIN" cuda-bench --cases decode:1:4096,decode:2:4096,decode:4:4096,decode:8:4096 \
          --out "$OUT/gemv$r" 2>&1 | grep decode
      done ;;
    profile)
      NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -n 1)
      sections="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
      # the prefill attention of an sm_90 GPU is attn_prefill_wg (SERVERBENCH_PREFILL_ATTN=mma: attn_prefill)
      for spec in attn_prefill_wg:prefill:2048:32768 attn_prefill_wg:prefill:2048:0 attn_decode_partial:decode:16:32768 gemv_small:decode:1:4096; do
        k=${spec%%:*}; case=${spec#*:}
        echo "== $k in $case"
        "$NCU" --clock-control none --kernel-name "$k" --launch-skip 2 --launch-count 1 $sections \
          "$BIN" cuda-bench --cases "$case" --reps 1 --out "$OUT/ncu_tmp" > "$OUT/ncu_${k}_${case//:/_}.txt" 2>&1
        grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|Stall|L2 Hit|Mem Busy|Max Bandwidth|Issue Slots Busy|Executed Ipc" \
          "$OUT/ncu_${k}_${case//:/_}.txt" | head -n 40
      done
      rm -rf "$OUT/ncu_tmp" ;;
    attn)
      # each prefill attention kernel (SERVERBENCH_PREFILL_ATTN) checked against transformers, then timed
      for v in ${VARIANTS:-wg mma}; do
        echo "== SERVERBENCH_PREFILL_ATTN=$v"
        SERVERBENCH_PREFILL_ATTN=$v PYTHONUNBUFFERED=1 timeout 150 python3 scripts/cuda_check.py --bin "$BIN" \
          --out "$OUT/check_$v" 2>&1 | grep -E "^(case|alone|batch|chunked|prefix)|rror|failed|Traceback" | head -n 12
        cp "$OUT/check_$v/check.json" "$OUT/check_$v.json" 2>/dev/null
        SERVERBENCH_PREFILL_ATTN=$v timeout 150 "$BIN" cuda-bench --reps ${REPS:-5} \
          --cases ${CASES:-prefill:2048:32768,prefill:2048:0,prefill:512:16384,prefill:8192:0,prefill:512:0} \
          --out "$OUT/bench_$v" 2>&1 | grep prefill
        cp "$OUT/bench_$v/bench.json" "$OUT/bench_$v.json" 2>/dev/null
      done ;;
    replay)
      for c in ${CONCURRENCY:-4 16 64}; do
        "$BIN" replay --engine cuda -d qwen3-8b-1xh200 --start steady -c "$c" -w "$WINDOW" --no-probe \
          --step-log "$OUT/steps_c$c.jsonl" --out "$OUT/replay_c$c" 2>&1 | tail -n 30
        cp "$OUT/replay_c$c/summary.json" "$OUT/summary_c$c.json"
        gzip -c "$OUT/replay_c$c/records.jsonl" > "$OUT/records_c$c.jsonl.gz"
        gzip "$OUT/steps_c$c.jsonl"
      done ;;
  esac
done
