#!/usr/bin/env bash
# Replays the corpus's held-out Claude Code sessions (every 5th of corpus/claude-code) through the
# simulator beside the generator fitted without them, on each L40 deployment from c = 1 to past the level
# `sweep --workload agentic-coding --protocol cold` recommends there (LEVELS_<deployment> below; cold
# start, 1800 s, one seed per held-out session: seed s starts the lanes at held-out sessions s, s+1, …,
# so every session is replayed about c times over the seeds), and prints a markdown table of mean D,
# mean p90 TTFT and mean p90 TPOT over the seeds, the generator's relative error, and each side's runs
# marked invalid (context overflows or errors over 1 %: a trace cannot compact at a deployment's context
# as the generator does, so on Gemma's 131K context most trace runs overflow; docs/fidelity.md).
# (`--protocol cold` names the cold start: the L40 deployments default to AgentX's protocol.)
# Usage: [FIT_ARGS=...] [SESSIONS=fitted] [ORDER=file|N] [DEPLOYMENTS="d1 d2"] scripts/workload_replay_check.sh [BIN] > results/workload-fit/replays.md
# (FIT_ARGS: the `workload fit` options, by default --app-prefixes as the shipped spec is fitted; e.g.
# FIT_ARGS="--app-prefixes --session-speed" > replays-session-speed.md, FIT_ARGS= for one shared prefix;
# SESSIONS=fitted: replay the sessions the generator was fitted on instead of the held-out ones, one
# seed per such session, to tell the generator's own error from the held-out fifth's sampling:
# > replays-fitted-on.md, whose columns say "fitted on" where the others say "held out";
# SHUFFLE=output|think_s: that quantity of the replayed sessions' root calls shuffled across them first,
# scripts/shuffle_sessions.py, > replays-fitted-on-shuffled-output.md and -think_s.md.)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/serverbench}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BIN" workload fit corpus/claude-code ${FIT_ARGS---app-prefixes} --held-out "$tmp/held.jsonl" -o "$tmp/fit.yaml" > /dev/null
if [ "${SESSIONS:-held}" = fitted ]; then
  # Every corpus session that is not held out (the fit's own few left-out sessions included).
  python3 - "$tmp/held.jsonl" corpus/claude-code/*.jsonl > "$tmp/fitted.jsonl" <<'PY'
import json, sys
held = {json.loads(l)["id"] for l in open(sys.argv[1])}
for path in sys.argv[2:]:
    for line in open(path):
        if line.strip() and json.loads(line)["id"] not in held:
            sys.stdout.write(line if line.endswith("\n") else line + "\n")
PY
  mv "$tmp/fitted.jsonl" "$tmp/held.jsonl"
fi
if [ -n "${SHUFFLE:-}" ]; then
  # One quantity of the root calls shuffled across the sessions (scripts/shuffle_sessions.py, seed 1).
  python3 scripts/shuffle_sessions.py "$SHUFFLE" 1 < "$tmp/held.jsonl" > "$tmp/shuffled.jsonl"
  mv "$tmp/shuffled.jsonl" "$tmp/held.jsonl"
fi
if [ "${ORDER:-0}" != file ]; then
  # The replayed sessions in a seeded random order: the corpus's files group them by source (the Claude
  # Code logs, then each WEKA release, whose resumed sessions start with 100K-token prompts), and seed s
  # starts its lanes at sessions s, s+1, ..., so in file order a window's lanes all come from one source
  # (on Gemma at c = 24, seeds 3-63 started 24 resumed sessions at once and thrashed the KV pool), where
  # the generator draws each lane's session from the whole corpus. ORDER=file keeps the file's order;
  # ORDER=N shuffles with seed N (0 by default): which sessions share a window is itself a draw.
  python3 - "$tmp/held.jsonl" "${ORDER:-0}" <<'PY'
import random, sys
lines = open(sys.argv[1]).readlines()
random.Random(int(sys.argv[2])).shuffle(lines)
open(sys.argv[1], "w").writelines(lines)
PY
fi
n=$(wc -l < "$tmp/held.jsonl")
who=$([ "${SESSIONS:-held}" = fitted ] && echo "fitted on" || echo "held out")
echo "| deployment | c | D $who | D generator | error | p90 TTFT $who (s) | generator | error | p90 TPOT $who (ms) | generator | error | invalid runs ($who / generator) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
declare -A LEVELS=([qwen3.5-9b-2xl40]=1,2,4,6,8,16 [gemma4-e4b-1xl40]=1,2,4,8,16,24,32,48 [qwen3.8-27b-int4-2xl40]=1,2,4,6,8,16)
for d in ${DEPLOYMENTS:-qwen3.5-9b-2xl40 gemma4-e4b-1xl40 qwen3.8-27b-int4-2xl40}; do
  "$BIN" sweep -d "$d" -c "${LEVELS[$d]}" --seeds "0..$n" --protocol cold --trace "$tmp/held.jsonl" --out "$tmp/real" > /dev/null
  "$BIN" sweep -d "$d" -c "${LEVELS[$d]}" --seeds "0..$n" --protocol cold --workload "$tmp/fit.yaml" --out "$tmp/gen" > /dev/null
  python3 - "$d" "$tmp/real/sweep.csv" "$tmp/gen/sweep.csv" "$tmp/real/sweep.json" "$tmp/gen/sweep.json" <<'PY'
import csv, json, sys
d, real, gen, real_json, gen_json = sys.argv[1:]
def rows(p):
    return {r["concurrency"]: r for r in csv.DictReader(open(p))}
def invalid(p):
    # runs marked invalid per level (context overflows or errors over 1 %: docs/definitions.md)
    out = {}
    for cell in json.load(open(p))["cells"]:
        out[str(cell["concurrency"])] = out.get(str(cell["concurrency"]), 0) + (not cell["valid"])
    return out
r, g, ri, gi = rows(real), rows(gen), invalid(real_json), invalid(gen_json)
for c in sorted(r, key=int):
    a, b = r[c], g[c]
    cells = []
    for k, scale in (("d_mean", 1), ("ttft_p90_mean_s", 1), ("tpot_p90_mean_s", 1e3)):
        x, y = float(a[k]) * scale, float(b[k]) * scale
        err = f"{100 * (y / x - 1):+.0f} %" if x > 0 else "—"
        cells += [f"{x:.3f}" if scale == 1 else f"{x:.1f}", f"{y:.3f}" if scale == 1 else f"{y:.1f}", err]
    cells.append(f"{ri.get(c, 0)} / {gi.get(c, 0)}")
    print(f"| {d} | {c} | " + " | ".join(cells) + " |")
PY
done
