#!/usr/bin/env bash
# Re-makes every simulated number of README.md (about 10 s on two cores): the traces, the derived H100
# profile, each simulation (records under runs/NAME/, not kept in git; the printed summaries are
# runs/NAME.txt), sim_metrics*.txt and compare.md. BIN defaults to the release build of this checkout.
set -euo pipefail
cd "$(dirname "$0")"
B=${BIN:-../../target/release/serverbench}
python3 make_traces.py > /dev/null
$B calibrate --derive-from h200-qwen3-30b-a3b-vllm --hardware h100-sxm \
  --name h100-sxm-derived-qwen3-30b-a3b-vllm \
  --notes "derived for results/published-moe: h200-qwen3-30b-a3b-vllm's efficiencies and overheads on the h100-sxm datasheet peaks; not measured on an H100" \
  --out h100-sxm-derived-qwen3-30b-a3b-vllm.yaml > /dev/null 2>&1
$B calibrate --derive-from h200-qwen3-30b-a3b-vllm --hardware a100-80gb \
  --name a100-80gb-derived-qwen3-30b-a3b-vllm \
  --notes "derived for results/published-moe: h200-qwen3-30b-a3b-vllm's efficiencies and overheads on the a100-80gb datasheet peaks; not measured on an A100" \
  --out a100-80gb-derived-qwen3-30b-a3b-vllm.yaml > /dev/null 2>&1
mkdir -p runs
run() { # DEPLOYMENT TRACE TAG [simulate flags…]
  local dep=$1 tr=$2 tag=$3; shift 3
  local o=runs/$tr$tag
  $B simulate -d "$dep" --trace "traces/$tr.jsonl" --arrivals trace -w 1800 "$@" --out "$o" > "$o.txt"
  echo "$tr$tag $(python3 metrics.py "$o")"
}
P=h100-sxm-derived-qwen3-30b-a3b-vllm.yaml
{
  for t in throughput-1k-128 long-32k-100 genheavy-1k-2k; do
    run a-qwen3.5-35b-a3b-1xh200-vllm.yaml a-$t "" --max-open 512; done
  for t in 32k-100 4k-200 2k-100 128-4; do run b1-gpt-oss-120b-1xh100-vllm.yaml b1-$t ""; done
  for t in 32k-100 4k-200 2k-100 128-4; do run b2-gpt-oss-120b-2xh100-vllm.yaml b2-$t ""; done
  for t in 32k-100 4k-200 2k-100 128-4; do run c1-qwen3-235b-a22b-8xh100-vllm.yaml c1-$t ""; done
  for t in 32k-100 4k-200 2k-100 128-4; do run c2-qwen3-235b-a22b-fp8-4xh100-vllm.yaml c2-$t ""; done
  for t in 128-128 128-1024 1024-128 2048-128 3072-128 4096-128 8192-128; do
    run d-qwen3-30b-a3b-1xa100-vllm.yaml d-$t "" --max-open 1; done
} > sim_metrics.txt
{
  for t in 32k-100 4k-200 2k-100 128-4; do run b1-gpt-oss-120b-1xh100-vllm.yaml b1-$t -derived --profile $P; done
  for t in 32k-100 4k-200 2k-100 128-4; do run b2-gpt-oss-120b-2xh100-vllm.yaml b2-$t -derived --profile $P; done
  for t in 32k-100 4k-200 2k-100 128-4; do run c1-qwen3-235b-a22b-8xh100-vllm.yaml c1-$t -derived --profile $P; done
  for t in 32k-100 4k-200 2k-100 128-4; do run c2-qwen3-235b-a22b-fp8-4xh100-vllm.yaml c2-$t -derived --profile $P; done
  for t in 128-128 128-1024 1024-128 2048-128 3072-128 4096-128 8192-128; do
    run d-qwen3-30b-a3b-1xa100-vllm.yaml d-$t -derived --max-open 1 --profile a100-80gb-derived-qwen3-30b-a3b-vllm.yaml; done
} > sim_metrics_derived.txt
python3 compare.py > compare.md
