#!/usr/bin/env bash
# `serverbench verify` on the GPU machine, in one call: serverbench's CUDA engine as the candidate against
# a plain transformers reference (scripts/reference_server.py, float32) serving the same random checkpoint
# (scripts/verify_model.py), and three broken candidates that must fail: the same engine and weights
# truncating every prompt to its last 256 tokens (`serve --fault truncate-prompt:256`: less prefill, usage
# still reporting the whole prompt), reading cached prefixes through a corrupted block table (`--fault
# corrupt-prefix-cache`: cold prompts are right, reused KV is not), and the engine on other weights of
# the same shape (`--weights random`: another checkpoint). One frozen file, verified against each.
# Usage (on the GPU machine, from the repo root, with the binary built elsewhere with the CUDA engine:
# `cargo build --release --features cuda`):
#   BIN=.carry/serverbench OUT=/tmp/out bash scripts/verify_h200.sh
# Everything it writes (frozen file, each verify's verify.json, records and output, the servers' logs)
# ends up in OUT/verify_h200.tgz; results/h200-verify/ holds one such set.
set -u
BIN=${BIN:-target/release/serverbench}
RESULT=${OUT:-/tmp/serverbench-verify}
OUT=$(mktemp -d)
WINDOW=${WINDOW:-30}
HELD_OUT=${HELD_OUT:-2}
C=${C:-8}
D=qwen3-8b-1xh200
M="$OUT/model"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv
python3 scripts/verify_model.py "$M" 2>&1 | tail -n 3

pids=()
python3 scripts/reference_server.py --model-dir "$M" --port 8200 > "$OUT/reference.log" 2>&1 &
pids+=($!)
serve() { # name port flags...
  local name=$1 port=$2; shift 2
  "$BIN" serve -d "$D" --engine cuda --model-dir "$M" --port "$port" "$@" > "$OUT/serve_$name.log" 2>&1 &
  pids+=($!)
}
serve correct 8101 --weights "$M"
serve truncating 8102 --weights "$M" --fault truncate-prompt:256
serve other-weights 8103 --weights random
serve corrupt-cache 8104 --weights "$M" --fault corrupt-prefix-cache
up() { python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "http://127.0.0.1:$1/health" 2> /dev/null; }
for port in 8200 8101 8102 8103 8104; do
  for _ in $(seq 240); do up "$port" && break; sleep 0.5; done
  up "$port" && echo "port $port up" || echo "port $port NOT up"
done

"$BIN" keygen --out "$OUT/evaluator" > /dev/null
"$BIN" freeze -d "$D" -c "$C" --held-out "$HELD_OUT" -w "$WINDOW" --url http://127.0.0.1:8101 --server vllm \
  --key "$OUT/evaluator.key" -o "$OUT/frozen.json" 2>&1 | tail -n 3
for cand in correct:8101 truncating:8102 other-weights:8103 corrupt-cache:8104; do
  name=${cand%%:*} port=${cand##*:}
  start=$(date +%s)
  "$BIN" verify "$OUT/frozen.json" --public-key "$OUT/evaluator.pub" --url "http://127.0.0.1:$port" --reference http://127.0.0.1:8200 \
    --out "$OUT/verify_$name" > "$OUT/verify_$name.txt" 2>&1
  echo "== $name: exit $? in $(( $(date +%s) - start )) s"
  tail -n 12 "$OUT/verify_$name.txt"
done
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
tail -n 5 "$OUT"/serve_*.log "$OUT/reference.log"
rm -rf "$M"
mkdir -p "$RESULT"
tar czf "$RESULT/verify_h200.tgz" -C "$OUT" .
