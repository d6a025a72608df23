#!/usr/bin/env bash
# Replays the corpus's held-out Claude Code sessions (every 5th of corpus/claude-code) through the
# simulator beside the generator fitted without them, on each L40 deployment from c = 1 to past the level
# `sweep --workload agentic-coding --protocol cold` recommends there (LEVELS_<deployment> below; cold
# start, 1800 s, one seed per held-out session: seed s starts the lanes at held-out sessions s, s+1, …,
# so every session is replayed about c times over the seeds), and prints a markdown table of mean D,
# mean p90 TTFT and mean p90 TPOT over the seeds, the generator's relative error (for D with a 90 %
# interval from resampling both sides' seeds: how far the seeds alone move it), and each side's runs
# marked invalid (context overflows or errors over 1 %: a trace cannot compact at a deployment's context
# as the generator does, so on Gemma's 131K context most trace runs overflow; docs/fidelity.md).
# (`--protocol cold` names the cold start: the L40 deployments default to AgentX's protocol.)
# Where a deployment's context forces the replayed traces to compact, they compact as the fold's own fit's
# agents do (`--compact-as`: its threshold, reserve and carry), as the generator beside them does; until
# late on 2026-12-06 they compacted as the shipped spec's agents do, which on folds other than the shipped
# one compacted the two sides at different thresholds on Gemma's context (docs/fidelity.md).
# Usage: [FIT_ARGS=...] [SESSIONS=fitted] [AGAINST=fitted] [SHAPES=held] [ORDER=file|N] [DEPLOYMENTS="d1 d2"] [LEVELS_ONLY=16,24] scripts/workload_replay_check.sh [BIN] > results/workload-fit/replays.md
# (LEVELS_ONLY: these levels on every deployment instead of each one's own list below.)
# (FIT_ARGS: the `workload fit` options, by default "--app-prefixes --compact-typical --turn-in-carry
# --early-growth" as the shipped spec is fitted since 2026-12-06; FIT_ARGS="--app-prefixes
# --compact-typical --turn-in-carry" for the spec shipped before --early-growth
# (> replays-without-early-growth.md), FIT_ARGS=--app-prefixes for the one before that
# (> replays-app-prefixes.md), FIT_ARGS="--app-prefixes --session-speed" > replays-session-speed.md,
# FIT_ARGS= for one shared prefix;
# SESSIONS=fitted: replay the sessions the generator was fitted on instead of the held-out ones, one
# seed per such session, to tell the generator's own error from the held-out fifth's sampling:
# > replays-fitted-on.md, whose columns say "fitted on" where the others say "held out";
# SHUFFLE=output|think_s: that quantity of the replayed sessions' root calls shuffled across them first,
# scripts/shuffle_sessions.py, > replays-fitted-on-shuffled-output.md and -think_s.md;
# FOLDS="0 1 2 3 4": a five-fold cross-validation instead of the shipped split (`workload fit --fold K`
# holds out positions K, K+5, …; the default, 4, is the shipped spec's fifth): each fold's sessions
# replayed beside the generator fitted without them, and each cell the mean over the folds' seeds, so
# every corpus session is replayed against a fit that never saw it; a last column gives the held-out
# side's mean D on each fold, lowest to highest: how far one fifth's sample moves the measure
# (> replays-cv.md);
# AGAINST=fitted: instead of the generator, replay the sessions the fold was fitted on beside the held-out
# ones — what a generator that reproduced its fitted sessions exactly would score, so that the table's error
# is the held-out fifth's sample alone, the floor under any fitted model's held-out error
# (> replays-cv-sample-floor.md with FOLDS="0 1 2 3 4"; its columns say "fitted on" where the others say
# "generator");
# SHAPES=held: the generator is given the replayed sessions' own shapes (`workload fit` of them alone, its
# `session_shapes`, `session_app_prefixes` and `resumed_share` put into the fold's fit; every other
# distribution stays the fitted one), so that what is left is how it builds a session of a given shape,
# not which shapes the replayed fifth drew (> replays-own-shapes.md; needs PyYAML).)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/serverbench}
FOLDS=${FOLDS:-4}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  # The replayed sessions in a seeded random order: the corpus's files group them by source (the Claude
  # Code logs, then each WEKA release, whose resumed sessions start with 100K-token prompts), and seed s
  # starts its lanes at sessions s, s+1, ..., so in file order a window's lanes all come from one source
  # (on Gemma at c = 24, seeds 3-63 started 24 resumed sessions at once and thrashed the KV pool), where
  # the generator draws each lane's session from the whole corpus. ORDER=file keeps the file's order;
  # ORDER=N shuffles with seed N (0 by default): which sessions share a window is itself a draw.
cat > "$tmp/order.py" <<'PY'
import random, sys
if sys.argv[2] != "file":
    lines = open(sys.argv[1]).readlines()
    random.Random(int(sys.argv[2])).shuffle(lines)
    open(sys.argv[1], "w").writelines(lines)
PY
for k in $FOLDS; do
  mkdir -p "$tmp/k$k"
  held=$tmp/k$k/held.jsonl
  "$BIN" workload fit corpus/claude-code ${FIT_ARGS---app-prefixes --compact-typical --turn-in-carry --early-growth} --fold "$k" --held-out "$held" -o "$tmp/k$k/fit.yaml" > /dev/null
  if [ "${SESSIONS:-held}" = fitted ] || [ "${AGAINST:-generator}" = fitted ]; then
    # Every corpus session that is not held out (the fit's own few left-out sessions included).
    python3 - "$held" corpus/claude-code/*.jsonl > "$tmp/k$k/fitted.jsonl" <<'PY'
import json, sys
held = {json.loads(l)["id"] for l in open(sys.argv[1])}
for path in sys.argv[2:]:
    for line in open(path):
        if line.strip() and json.loads(line)["id"] not in held:
            sys.stdout.write(line if line.endswith("\n") else line + "\n")
PY
    if [ "${AGAINST:-generator}" = fitted ]; then
      python3 "$tmp/order.py" "$tmp/k$k/fitted.jsonl" "${ORDER:-0}"
    else
      mv "$tmp/k$k/fitted.jsonl" "$held"
    fi
  fi
  if [ -n "${SHUFFLE:-}" ]; then
    # One quantity of the root calls shuffled across the sessions (scripts/shuffle_sessions.py, seed 1).
    python3 scripts/shuffle_sessions.py "$SHUFFLE" 1 < "$held" > "$tmp/k$k/shuffled.jsonl"
    mv "$tmp/k$k/shuffled.jsonl" "$held"
  fi
  if [ "${SHAPES:-fitted}" = held ]; then
    # The replayed sessions laid out so that none falls on a position `workload fit` holds out (every
    # fifth, 4 mod 5: filled with renamed copies, which are held out), fitted alone, and their shapes put
    # into the fold's spec.
    python3 - "$held" "$tmp/k$k/own.jsonl" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
out, i = [], 0
while i < len(lines):
    if len(out) % 5 == 4:
        filler = json.loads(lines[len(out) % len(lines)])
        filler["id"] += "-filler"
        out.append(json.dumps(filler))
    else:
        out.append(lines[i])
        i += 1
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
    "$BIN" workload fit "$tmp/k$k/own.jsonl" ${FIT_ARGS---app-prefixes --compact-typical --turn-in-carry --early-growth} -o "$tmp/k$k/own.yaml" > /dev/null
    python3 - "$tmp/k$k/fit.yaml" "$tmp/k$k/own.yaml" <<'PY'
import sys, yaml
fit, own = (yaml.safe_load(open(p)) for p in sys.argv[1:3])
for key in ("session_shapes", "session_app_prefixes", "resumed_share"):
    if key in own:
        fit[key] = own[key]
yaml.safe_dump(fit, open(sys.argv[1], "w"), sort_keys=False)
PY
  fi
  python3 "$tmp/order.py" "$held" "${ORDER:-0}"
done
who=$([ "${SESSIONS:-held}" = fitted ] && echo "fitted on" || echo "held out")
nfolds=$(wc -w <<< "$FOLDS")
spread=$([ "$nfolds" -gt 1 ] && echo " D $who by fold |" || true)
gen=$([ "${AGAINST:-generator}" = fitted ] && echo "fitted on" || echo "generator")
echo "| deployment | c | D $who | D $gen | error | D error, 90 % interval | p90 TTFT $who (s) | $gen | error | p90 TPOT $who (ms) | $gen | error | invalid runs ($who / $gen) |$spread"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|$([ "$nfolds" -gt 1 ] && echo "---|" || true)"
declare -A LEVELS=([qwen3.5-9b-2xl40]=1,2,4,6,8,16 [gemma4-e4b-1xl40]=1,2,4,8,16,24,32,48 [qwen3.8-27b-int4-2xl40]=1,2,4,6,8,16)
if [ -n "${LEVELS_ONLY:-}" ]; then for d in "${!LEVELS[@]}"; do LEVELS[$d]=$LEVELS_ONLY; done; fi
for d in ${DEPLOYMENTS:-qwen3.5-9b-2xl40 gemma4-e4b-1xl40 qwen3.8-27b-int4-2xl40}; do
  for k in $FOLDS; do
    n=$(wc -l < "$tmp/k$k/held.jsonl")
    "$BIN" sweep -d "$d" -c "${LEVELS[$d]}" --seeds "0..$n" --protocol cold --trace "$tmp/k$k/held.jsonl" --compact-as "$tmp/k$k/fit.yaml" --out "$tmp/k$k/real-$d" > /dev/null
    if [ "${AGAINST:-generator}" = fitted ]; then
      m=$(wc -l < "$tmp/k$k/fitted.jsonl")
      "$BIN" sweep -d "$d" -c "${LEVELS[$d]}" --seeds "0..$m" --protocol cold --trace "$tmp/k$k/fitted.jsonl" --compact-as "$tmp/k$k/fit.yaml" --out "$tmp/k$k/gen-$d" > /dev/null
    else
      "$BIN" sweep -d "$d" -c "${LEVELS[$d]}" --seeds "0..$n" --protocol cold --workload "$tmp/k$k/fit.yaml" --out "$tmp/k$k/gen-$d" > /dev/null
    fi
  done
  # shellcheck disable=SC2086
  python3 - "$d" "${AGAINST:-generator}" $(for k in $FOLDS; do echo "$tmp/k$k/real-$d" "$tmp/k$k/gen-$d"; done) <<'PY'
import csv, json, random, sys
d, against, folders = sys.argv[1], sys.argv[2], sys.argv[3:]
pairs = list(zip(folders[0::2], folders[1::2]))
KEYS = ("d_mean", "ttft_p90_mean_s", "tpot_p90_mean_s")
def cells(folder):
    # per level: (seeds, each key's mean over them, runs marked invalid: context overflows or errors
    # over 1 %, docs/definitions.md)
    rows = {r["concurrency"]: r for r in csv.DictReader(open(f"{folder}/sweep.csv"))}
    seeds, invalid = {}, {}
    for cell in json.load(open(f"{folder}/sweep.json"))["cells"]:
        c = str(cell["concurrency"])
        seeds[c] = seeds.get(c, 0) + 1
        invalid[c] = invalid.get(c, 0) + (not cell["valid"])
    return {c: (seeds[c], [float(rows[c][k]) for k in KEYS], invalid[c]) for c in rows}
def per_seed(folder):
    # per level: each seed's D, in seed order
    runs = {}
    for cell in json.load(open(f"{folder}/sweep.json"))["cells"]:
        runs.setdefault(str(cell["concurrency"]), []).append((cell["seed"], cell["d"]))
    return {c: [d for _, d in sorted(v)] for c, v in runs.items()}
def interval(real_runs, gen_runs, c, draws=2000):
    # A 90 % interval of the generator's D error from resampling both sides' seeds (random.Random(1),
    # 2,000 draws): the replayed sessions' seeds in circular blocks of c (seed s starts its lanes at sessions
    # s, s + 1, ..., so neighbours share sessions), the generator's one by one (each draws its own; the
    # fitted-on sessions', AGAINST=fitted, in blocks of c too);
    # every fold resampled on its own and pooled.
    rng = random.Random(1)
    def resample(xs, block):
        n, out = len(xs), []
        while len(out) < n:
            start = rng.randrange(n)
            out += [xs[(start + i) % n] for i in range(block)]
        return out[:n]
    errs = []
    for _ in range(draws):
        r = [x for f in real_runs for x in resample(f[c], int(c))]
        g = [x for f in gen_runs for x in resample(f[c], int(c) if against == "fitted" else 1)]
        if sum(r) > 0:
            errs.append(100 * (sum(g) / len(g)) / (sum(r) / len(r)) - 100)
    if len(errs) < draws // 2:
        return "—"
    errs.sort()
    return f"{errs[int(0.05 * len(errs))]:+.0f} … {errs[int(0.95 * len(errs))]:+.0f} %"
def pooled(per_fold, c):
    # the mean over every fold's seeds at level c, and the runs marked invalid
    n = sum(f[c][0] for f in per_fold)
    means = [sum(f[c][0] * f[c][1][i] for f in per_fold) / n for i in range(len(KEYS))]
    return means, sum(f[c][2] for f in per_fold)
real = [cells(r) for r, _ in pairs]
gen = [cells(g) for _, g in pairs]
real_runs = [per_seed(r) for r, _ in pairs]
gen_runs = [per_seed(g) for _, g in pairs]
for c in sorted(real[0], key=int):
    (a, ai), (b, bi) = pooled(real, c), pooled(gen, c)
    out = []
    for x, y, scale in zip(a, b, (1, 1, 1e3)):
        x, y = x * scale, y * scale
        err = f"{100 * (y / x - 1):+.0f} %" if x > 0 else "—"
        out += [f"{x:.3f}" if scale == 1 else f"{x:.1f}", f"{y:.3f}" if scale == 1 else f"{y:.1f}", err]
        if scale == 1 and len(out) == 3:
            out.append(interval(real_runs, gen_runs, c))
    out.append(f"{ai} / {bi}")
    if len(pairs) > 1:
        by_fold = sorted(f[c][1][0] for f in real)
        out.append(f"{by_fold[0]:.3f}–{by_fold[-1]:.3f}")
    print(f"| {d} | {c} | " + " | ".join(out) + " |")
PY
done
