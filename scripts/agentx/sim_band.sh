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
here=$(cd "$(dirname "$0")" && pwd)
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
            python3 - "$here" "$work/out" "$seed" "$c" "$r" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from compare_runs import quantile, sim_side
side = sim_side(Path(sys.argv[2]))
done = [r for r in side["records"] if r["completed"]]
ttft = [r["ttft"] for r in done if r["ttft"] is not None]
tpot = [r["tpot"] for r in done if r["tpot"] is not None]
s = side["summary"]
print(f"| {sys.argv[3]} | {sys.argv[4]} | {sys.argv[5]} | {s['requests']} | {s['score']['d']:.3f} | {quantile(ttft, 0.9):.3f} | {quantile(tpot, 0.9) * 1e3:.1f} |")
PY
        done
    done
done
