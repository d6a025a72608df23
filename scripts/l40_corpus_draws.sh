#!/usr/bin/env bash
# The benchmark's SLO freeze (each L40 deployment's reference arm, AgentX's protocol, its corpus
# stand-in spec, 8 seeds, 1800 s) on 20 corpus draws of the spec (`slo --corpus-draws 20`: generator
# seeds 0..20, each replayed with the same rows on every seed): how much of the frozen targets is which
# sessions come first. Writes the three tables to stdout. FIRST_ROWS=FILE starts every draw with those
# rows as recorded (`--first-rows`): the corpus's own rows 0-3, the spec's draws after them.
# Usage: scripts/l40_corpus_draws.sh [BIN] > results/l40-ops/corpus-draws.txt
#        FIRST_ROWS=corpus/agentx-062126-256k/rows-0-3.jsonl.gz scripts/l40_corpus_draws.sh > results/l40-ops/first-rows-draws.txt
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/serverbench}
for d in qwen3.5-9b-2xl40 gemma4-e4b-1xl40 qwen3.8-27b-int4-2xl40; do
  "$BIN" slo -d "$d" --corpus-draws 20 -w 1800 ${FIRST_ROWS:+--first-rows "$FIRST_ROWS"} 2>/dev/null
  echo
done
