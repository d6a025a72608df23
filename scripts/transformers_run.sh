#!/usr/bin/env bash
# Fidelity runs against `transformers serve --continuous-batching` on the GPU machine (a server nobody
# here wrote), one device call per part or a few parts per call:
#   setup      — install the serving wheels (.whl/), build the model directory (Qwen3-8B shape, 36 layers,
#                random bf16, word-level tokenizer: scripts/transformers_model.py), start the server and
#                wait until a request completes. Every other part runs it first if the server is down.
#   check      — one request by hand: usage.prompt_tokens against the words sent, exact output length
#                through `generation_config`, the 422 for vLLM's fields; the server's cache sizing
#   calibrate  — `serverbench calibrate --endpoint` (black box) with long prompts and long-context streams,
#                the probes kept as a step log
#   levels     — `compare --url` at LEVELS (1,4,8,16), seed 0, LEVEL_WINDOW (120) s
#   seeds      — `compare --url` at SEED_C (4), seeds SEEDS (1..8), SEED_WINDOW (35) s
# The same seeds, levels and windows as results/h200-fidelity/ (the CUDA engine), for the side-by-side.
# Results are packed into $OUT/<part>.tar.gz as they come (a call stopped at its limit still returns
# them); the server's log goes to $OUT/server.log.gz. Usage (repo root; binary built on a CPU machine):
#   BIN=.carry/serverbench OUT=/tmp/out bash scripts/transformers_run.sh setup check calibrate levels
set -u
BIN=${BIN:-target/release/serverbench}
OUT=${OUT:-/tmp/serverbench-transformers}
WORK=${WORK:-/tmp/sb-transformers}
MODEL=${MODEL:-$WORK/model}
PORT=${PORT:-8000}
URL=http://127.0.0.1:$PORT
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site

pack() { tar -C "$WORK" -czf "$OUT/$1.tar.gz.tmp" "$1" 2>/dev/null && mv "$OUT/$1.tar.gz.tmp" "$OUT/$1.tar.gz"; }
keep_packing() { ( while sleep 30; do pack "$1"; done ) & packer=$!; }
stop_packing() { kill "$packer" 2>/dev/null; wait "$packer" 2>/dev/null; }
save_log() { [ -f "$WORK/server.log" ] && gzip -c "$WORK/server.log" > "$OUT/server.log.gz"; }

# A prompt of N words ` wK` (one token each with the word-level tokenizer).
words() { python3 -c "import sys; print(''.join(f' w{100 + (i * 7919) % 150000}' for i in range(int(sys.argv[1]))))" "$1"; }

completion() { # PROMPT_WORDS MAX_TOKENS EXTRA_JSON
  curl -s -m 300 "$URL/v1/completions" -H 'content-type: application/json' -d "{\"model\":\"$MODEL\",\"prompt\":\"$(words "$1")\",\"max_tokens\":$2,\"stream\":true,\"temperature\":0$3}"
}

up() { completion 8 2 "" 2>/dev/null | grep -q '"usage"'; }

setup() {
  if up; then echo "server already up"; return 0; fi
  if [ ! -d /tmp/site ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || return 1
    export PYTHONPATH=/tmp/site
  fi
  python3 -c "import torch, transformers, fastapi, uvicorn, openai; print('torch', torch.__version__, 'transformers', transformers.__version__, 'fastapi', fastapi.__version__)"
  if [ ! -f "$MODEL/config.json" ]; then
    local t=$(date +%s)
    python3 "$HERE/transformers_model.py" "$MODEL" || return 1
    echo "model directory built in $(( $(date +%s) - t )) s"
  fi
  # `transformers serve` lists models by scanning the hub cache, which must exist.
  mkdir -p "${HF_HOME:-$HOME/.cache/huggingface}/hub"
  local t=$(date +%s)
  setsid python3 "$HERE/transformers_serve.py" "$MODEL" --continuous-batching --port "$PORT" \
    --host 127.0.0.1 --log-level info > "$WORK/server.log" 2>&1 < /dev/null &
  for _ in $(seq 1 300); do
    if up; then echo "server up in $(( $(date +%s) - t )) s"; return 0; fi
    sleep 1
  done
  echo "the server did not come up"; tail -50 "$WORK/server.log"; return 1
}

check() {
  mkdir -p "$WORK/check"
  local f=$WORK/check/requests.txt
  {
    echo "## 300 words, max_tokens 40, exact length through generation_config"
    completion 300 40 ',"stream_options":{"include_usage":true},"generation_config":"{\"eos_token_id\": -1}"' | tail -2
    echo "## 300 words, vLLM's fields (expected: HTTP 422)"
    completion 300 4 ',"ignore_eos":true,"min_tokens":4'
    echo; echo "## 5000 words, max_tokens 3"
    completion 5000 3 ',"generation_config":"{\"eos_token_id\": -1}"' | tail -2
  } > "$f" 2>&1
  cat "$f"
  grep ContinuousBatchingLogger "$WORK/server.log" | grep -v "generated a useless" | head -20 | tee "$WORK/check/cb_log.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv | tee "$WORK/check/gpu.txt"
  pack check
}

calibrate() {
  mkdir -p "$WORK/calibrate"
  keep_packing calibrate
  "$BIN" calibrate --endpoint "$URL" --api text --server transformers --served-model "$MODEL" \
    --model qwen3-8b --hardware h200 --name h200-qwen3-8b-transformers \
    --probe-prompts 64,256,512,1024,2048,4096,8192 --probe-long-streams 1,4,16 \
    --probe-log "$WORK/calibrate/probes.jsonl" \
    --measured-on "NVIDIA H200 lent by the device tool; transformers serve --continuous-batching (transformers $(python3 -c 'import transformers; print(transformers.__version__)')), probed as a black box; $(date -u +%F)" \
    --out "$WORK/calibrate/h200-qwen3-8b-transformers.yaml" 2>&1 | tee "$WORK/calibrate/log"
  stop_packing; pack calibrate
}

compare_part() {
  local name=$1; shift
  keep_packing "$name"
  "$BIN" compare -d qwen3-8b-1xh200 --start steady --url "$URL" --api text --server transformers --model "$MODEL" \
    --reuse "$@" --out "$WORK/$name" 2>&1 | tee -a "$WORK/$name.log"
  for d in "$WORK/$name"/real/*/; do gzip -f "$d"/*.jsonl 2>/dev/null; done
  stop_packing; pack "$name"
}

for part in ${*:-setup check calibrate levels seeds}; do
  start=$(date +%s)
  case $part in
    setup) setup || { save_log; exit 1; } ;;
    check) setup && check ;;
    calibrate) setup && calibrate ;;
    levels) setup && compare_part levels -c "${LEVELS:-1,4,8,16}" -s 0 -w "${LEVEL_WINDOW:-120}" ;;
    seeds) setup && compare_part seeds -c "${SEED_C:-4}" -s "${SEEDS:-1,2,3,4,5,6,7,8}" -w "${SEED_WINDOW:-35}" ;;
    *) echo "unknown part $part" ;;
  esac
  save_log
  echo "part $part took $(( $(date +%s) - start )) s"
done
