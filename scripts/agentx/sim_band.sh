#!/usr/bin/env bash
# The simulated side of a conformance run (conformance.sh) at several rates of serve's front end: how far
# D, the request count and the p90s move when each request's parse takes a little more or less, i.e.
# how much of a gap between AgentX and the simulator one run's chaos can make (a few requests whose
# TPOT or TTFT sits within milliseconds of its target flip when arrivals are reordered). Kept out of CI.
#
# Usage: scripts/agentx/sim_band.sh TRACE_DIR "SEED..." "LEVEL..." "RATE..."   (RATE: µs per prompt token)
#   e.g. scripts/agentx/sim_band.sh /tmp/conf/traces "42 7" "4 16" "1.11 1.30 1.52 1.75 2.06"
# Environment: SERVERBENCH [target/release/serverbench], DEPLOYMENT [qwen3.5-9b-2xl40], DURATION [600].
# Prints one Markdown row per (seed, level, rate).
set -euo pipefail
[ $# -eq 4 ] || { sed -n 2,10p "$0" >&2; exit 2; }
traces=$1 seeds=$2 levels=$3 rates=$4
sb=${SERVERBENCH:-target/release/serverbench}
deployment=${DEPLOYMENT:-qwen3.5-9b-2xl40}
duration=${DURATION:-600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| seed | c | front end (µs/token) | requests | D | p90 TTFT (s) | p90 TPOT (ms) |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for seed in $seeds; do
    for c in $levels; do
        for r in $rates; do
            printf 'base: %s\nprofile:\n  tokenize_s_per_token: %se-6\n' "$deployment" "$r" > "$work/dep.yaml"
            "$sb" simulate -d "$work/dep.yaml" --protocol agentx --trace "$traces" --trace-format weka \
                -c "$c" --seed "$seed" -w "$duration" --out "$work/out" > /dev/null
            python3 - "$work/out/records.jsonl" "$work/out/summary.json" "$seed" "$c" "$r" <<'PY'
import json, sys
sys.path.insert(0, "scripts/agentx")
from compare_runs import quantile
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
s = json.load(open(sys.argv[2]))["summary"]
done = [r for r in recs if r["outcome"] == "completed" and r.get("first_token_ns") is not None]
ttft = [(r["first_token_ns"] - r["send_ns"]) / 1e9 for r in done]
tpot = [(r["last_token_ns"] - r["first_token_ns"]) / 1e9 / (r["output_tokens"] - 1) if r["output_tokens"] > 1 else 0.0 for r in done]
print(f"| {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | {s['requests']} | {s['score']['d']:.3f} | {quantile(ttft, 0.9):.3f} | {quantile(tpot, 0.9) * 1e3:.1f} |")
PY
        done
    done
done
