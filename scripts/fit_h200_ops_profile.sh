#!/usr/bin/env bash
# Fits h200-ops-vllm, the H200 profile made from published operator tables alone (calibration/tables/h200:
# NVIDIA aiconfigurator's H200 database of vLLM 0.24.0's kernels, the fused-MoE layer included), over
# h200-qwen3-30b-a3b-vllm for what no table times (step, sequence and front-end overheads, the eager floor,
# moe_layer_s, the fused-MoE kernel's tile table). Its fidelity against the measured vLLM replays is
# results/published-moe/ops-profile/ (docs/models-and-hardware.md).
# Usage: scripts/fit_h200_ops_profile.sh [BIN] [OUTDIR] [REPORTDIR]
#   (defaults: target/release/serverbench, presets/profiles, results/published-moe/ops-profile)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/serverbench}
OUT=${2:-presets/profiles}
REPORT=${3:-results/published-moe/ops-profile}
mkdir -p "$REPORT"
T=calibration/tables/h200
NOTES="Every efficiency from aiconfigurator's H200 tables of vLLM 0.24.0's kernels (CUDA-graph replays, one kernel at a time): GEMMs (torch linear, Cutlass fp8), FlashAttention 3 prefill and decode, the custom all-reduce over NVLink, and the Triton fused-MoE layer of the Qwen3-30B-A3B shape with balanced routing (its compute on the rows the kernel multiplies, each expert's padded to the tile table below). Kept from h200-qwen3-30b-a3b-vllm (measured on vLLM 0.26.0, no table times them): step_overhead_s, per_sequence_overhead_s, request_latency_s, frontend_s_per_token, tokenize_s_per_token, eager_s_per_layer, moe_layer_s (the router's projection and the launch tail of a whole-model step; the tables' fused-MoE rows include routing, so the layer's reading time carries part of it twice), expert_tile_rows (vLLM 0.26.0's tuned table and its kernels), expert_compile_s, int4 terms. Band: the measured MoE profile's."
"$BIN" calibrate --from-ops $T/h200_gemm_vllm_0.24.0.csv $T/h200_context_attn_vllm_0.24.0.csv \
  $T/h200_generation_attn_vllm_0.24.0.csv $T/h200_comm_vllm_0.24.0_custom_allreduce_perf.csv \
  $T/h200_moe_vllm_0.24.0.csv \
  --hardware h200 --base-profile h200-qwen3-30b-a3b-vllm --name h200-ops-vllm \
  --measured-on "no run of ours: NVIDIA aiconfigurator's H200 operator database (vLLM 0.24.0's kernels, CUDA graphs), commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce" \
  --band 0.2086,0.0665,0.0665 --notes "$NOTES" --out "$OUT/h200-ops-vllm.yaml" 2>&1 | grep -v '^wrote ' > "$REPORT/fit.md" \
  || { cat "$REPORT/fit.md" >&2; exit 1; }
echo "wrote $OUT/h200-ops-vllm.yaml and $REPORT/fit.md"
