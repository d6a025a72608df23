#!/usr/bin/env bash
# Refits the shipped L40 profiles from the measured operator tables in calibration/tables/l40-class:
# l40-ops-sglang (SGLang 0.5.14's kernels, the engine of the benchmark's reference measurements) and
# l40-ops-vllm (vLLM 0.24's). Both take their compute-bound efficiencies from the RTX 4090 tables and
# their bandwidth-bound ones from the L40S tables (calibration/tables/l40-class/README.md says why).
# Usage: scripts/fit_l40_profiles.sh [BIN] [OUTDIR] [REPORTDIR]
#   (defaults: target/release/serverbench, presets/profiles, results/l40-ops: each fit's per-class table)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/serverbench}
OUT=${2:-presets/profiles}
REPORT=${3:-results/l40-ops}
mkdir -p "$REPORT"
T=calibration/tables/l40-class
NOTES="Corrections: compute-bound efficiencies (GEMM compute, prefill attention) are the RTX 4090's, as fractions of its 165 TFLOP/s, applied to the L40's 181 (both half-rate Ada parts, which reach 95-100 % of spec; the full-rate L40S is power-limited at about 72 % and does not carry over); bandwidth-bound ones (weights, decode KV, all-reduce over PCIe) are the L40S's at 1.0x (same 864 GB/s GDDR6, same 96 MB L2), fitted only on rows moving more than 128 MiB; fp8 and int4 factors are ratios to the bf16 GEMM of the same shape on the L40S (int4: TensorRT-LLM's weight-only kernel, a proxy for Marlin/AWQ). Not covered by any table, kept from l40-datasheet: step_overhead_s, per_sequence_overhead_s, request_latency_s, int4_bandwidth_efficiency (no int4 row moves more than the L2 holds); Gated DeltaNet layers are priced by the model's FLOPs at attention_efficiency. Band: compute terms +-15 %, bandwidth terms +-10 %, host overheads +-50 % (no L40 measurement)."
for fw in sglang vllm; do
  case $fw in
    sglang) files="$T/l40s_gemm_sglang_0.5.14.csv $T/l40s_context_attn_sglang_0.5.14.csv $T/l40s_generation_attn_sglang_0.5.14.csv $T/l40s_comm_sglang_0.5.14_custom_allreduce_perf.csv";;
    vllm) files="$T/l40s_gemm_vllm_0.24.0.csv $T/l40s_context_attn_vllm_0.24.0.csv $T/l40s_generation_attn_vllm_0.24.0.csv $T/l40s_comm_vllm_0.22.0_custom_allreduce_perf.csv";;
  esac
  # shellcheck disable=SC2086
  "$BIN" calibrate --from-ops $files $T/l40s_gemm_trtllm_1.0.0.csv $T/4090_dense.csv $T/4090_attention.csv \
    --hardware l40 --compute-gpu rtx4090 --memory-gpu l40s --base-profile l40-datasheet \
    --name "l40-ops-$fw" \
    --measured-on "no L40: NVIDIA aiconfigurator's L40S operator database ($fw kernels, CUDA graphs) and LLMServingSim's RTX 4090 profile of Llama-3.1-8B (vLLM 0.19, eager)" \
    --band 0.15,0.10,0.5 --notes "$NOTES" --out "$OUT/l40-ops-$fw.yaml" 2>&1 | grep -v '^wrote ' > "$REPORT/fit_$fw.md" || { cat "$REPORT/fit_$fw.md" >&2; exit 1; }
  echo "wrote $OUT/l40-ops-$fw.yaml and $REPORT/fit_$fw.md"
done
