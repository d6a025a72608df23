#!/usr/bin/env bash
# The benchmark's SLO-freezing procedure in the simulator for the three L40 deployments, against the
# measured references (SPEC §3: the maximum over seeds of SGLang's p90 TTFT / TPOT at its reference
# concurrency on L40s): `slo`, cold start, 8 seeds, 1800 s, for each engine preset (`--engine-config
# sglang` at 1, 2, 4; `vllm` at 1, 8, 1), each profile (the datasheet estimate and the operator-table fit), and with the prefix
# cache on and off (what the gap's cause is bracketed by), on the built-in generator (`agentic-coding`,
# fitted to the Claude Code corpus), on the hand-set spec it replaced (`synthetic-v1`), and on the public
# Claude Code session with its sub-agents (tests/fixtures/weka/sample_trace_with_subagent.json, repeated
# as new sessions: `--trace-repeat fresh`). Then the same freezing replayed as the benchmark's final run
# replays it, through AgentX's protocol (`--protocol agentx`, SGLang preset, operator-table profile,
# prefix cache on): on the fitted workload, the public session, and five WEKA traces of the corpus's
# probable earlier release (tests/fixtures/weka-kvt/traces, traces longer than the deployment's context left
# out as AgentX's --max-context-length does). Last, the freeze as `slo` runs it by default: each
# deployment's reference arm, AgentX's protocol, the deployment's own spec, and that spec after the
# benchmark corpus's first four rows. Writes a markdown table to stdout.
# Usage: scripts/l40_validation.sh [BIN] > results/l40-ops/validation.md
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/serverbench}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "| deployment | engine | c | profile | prefix cache | workload | protocol | frozen p90 TTFT (s) | reference (s) | error | frozen p90 TPOT (ms) | reference (ms) | error |"
echo "|---|---|---:|---|---|---|---|---:|---:|---:|---:|---:|---:|"
kvt=tests/fixtures/weka-kvt/traces
row() { # deployment ref_ttft ref_tpot engine c profile cache [workload: generator (default) | traces | kvt]; $P the protocol (cold)
  # The engine preset's defaults for this deployment (`--engine-config vllm|sglang`), printed as a
  # deployment file so that the prefix cache can be switched off on top of them.
  # `arm`: the deployment's reference arm instead (its engine preset, at most c running, memory 0.90).
  local own=(--as-deployed)
  if [ "$4" = arm ]; then "$BIN" slo -d "$1" --print-config > "$tmp/d.yaml"; own=()
  else "$BIN" slo -d "$1" --engine-config "$4" --print-config > "$tmp/d.yaml"; fi
  [ "$7" = off ] && sed -i 's/^  prefix_caching: true$/  prefix_caching: false/' "$tmp/d.yaml"
  local w=${8:-generator} src=(--workload agentic-coding)
  [ "$w" = spec ] && src=()
  [ "$w" = first-rows ] && src=(--first-rows corpus/agentx-062126-256k/rows-0-3.jsonl.gz)
  [ "$w" = traces ] && src=(--trace tests/fixtures/weka/sample_trace_with_subagent.json --trace-repeat fresh)
  [ "$w" = synthetic-v1 ] && src=(--workload synthetic-v1)
  [ "$w" = kvt ] && src=(--trace "$kvt" --trace-format weka --max-context-length "$("$BIN" slo -d "$1" --print-config | sed -n 's/^context_limit: //p')")
  local p=${P:-cold}
  line=$("$BIN" slo -d "$tmp/d.yaml" "${own[@]}" -c "$5" --seeds 8 -w 1800 --protocol "$p" --profile "presets/profiles/$6.yaml" "${src[@]}" 2>/dev/null | grep 'frozen:')
  ttft=$(sed -E 's/.*τ_first = ([0-9.]+) s.*/\1/' <<< "$line"); tpot=$(sed -E 's/.*τ_token = ([0-9.]+) ms.*/\1/' <<< "$line")
  awk -v d="$1" -v e="$4" -v c="$5" -v p="$6" -v k="$7" -v w="$w" -v pr="$p" -v t="$ttft" -v rt="$2" -v o="$tpot" -v ro="$3" 'BEGIN {
    printf "| %s | %s | %d | %s | %s | %s | %s | %.3f | %.3f | %+.0f %% | %.1f | %.1f | %+.0f %% |\n", d, e, c, p, k, w, pr, t, rt, 100*(t/rt-1), o, ro, 100*(o/ro-1) }' | sed 's/| traces |/| Claude Code trace |/; s/| generator |/| agentic-coding |/; s/| kvt |/| WEKA traces (kv-cache-tester) |/' \
    | sed "s/| spec |/| $(sed -n 's/^workload: //p' "$tmp/d.yaml") |/; s/| first-rows |/| the corpus's rows 0–3, then $(sed -n 's/^workload: //p' "$tmp/d.yaml") |/; s/| arm |/| reference arm: $(sed -n 's/^  engine: \(sglang-[0-9.]*\)$/\1/p' "$tmp/d.yaml" | head -1) |/"
}
for prof in l40-ops-sglang l40-datasheet; do
  for cache in on off; do
    row qwen3.5-9b-2xl40 4.10028 23.4974 sglang 1 $prof $cache
    row gemma4-e4b-1xl40 2.52693 121.7057 sglang 2 $prof $cache
    row qwen3.8-27b-int4-2xl40 10.2988 48.3769 sglang 4 $prof $cache
  done
done
for cache in on off; do
  row qwen3.5-9b-2xl40 4.10028 23.4974 vllm 1 l40-ops-vllm $cache
  row gemma4-e4b-1xl40 2.52693 121.7057 vllm 8 l40-ops-vllm $cache
  row qwen3.8-27b-int4-2xl40 10.2988 48.3769 vllm 1 l40-ops-vllm $cache
done
for w in synthetic-v1 traces; do
  for e in "sglang 1 2 4 l40-ops-sglang" "vllm 1 8 1 l40-ops-vllm"; do
    set -- $e
    row qwen3.5-9b-2xl40 4.10028 23.4974 "$1" "$2" "$5" on $w
    row gemma4-e4b-1xl40 2.52693 121.7057 "$1" "$3" "$5" on $w
    row qwen3.8-27b-int4-2xl40 10.2988 48.3769 "$1" "$4" "$5" on $w
  done
done
for w in generator traces kvt; do
  P=agentx row qwen3.5-9b-2xl40 4.10028 23.4974 sglang 1 l40-ops-sglang on $w
  P=agentx row gemma4-e4b-1xl40 2.52693 121.7057 sglang 2 l40-ops-sglang on $w
  P=agentx row qwen3.8-27b-int4-2xl40 10.2988 48.3769 sglang 4 l40-ops-sglang on $w
done
# The freeze as the benchmark ran it (the default of `slo` on these deployments): each deployment's
# reference arm (SGLang 0.5.19 with at most c running and memory fraction 0.90), AgentX's protocol, on the
# deployment's stand-in for the benchmark's corpus (agentx-062126, or -256k for Gemma's context) and on
# the five WEKA traces; and on the benchmark corpus's own first rows, the spec's after them
# (`--first-rows`, corpus/agentx-062126-256k/README.md).
for w in spec kvt first-rows; do
  P=agentx row qwen3.5-9b-2xl40 4.10028 23.4974 arm 1 l40-ops-sglang on $w
  P=agentx row gemma4-e4b-1xl40 2.52693 121.7057 arm 2 l40-ops-sglang on $w
  P=agentx row qwen3.8-27b-int4-2xl40 10.2988 48.3769 arm 4 l40-ops-sglang on $w
done
