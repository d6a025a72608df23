#!/usr/bin/env bash
# Third-party clients against `serverbench serve --tokenizer`: AIPerf (completions and chat, counting
# tokens client-side with the same tokenizer) and the `openai` Python SDK (scripts/openai_sdk_check.py).
# Writes OUT/ (default results/third-party-clients): each tool's console output and AIPerf's JSON export,
# and the server's /metrics after each run. Needs: a release build, and `pip install aiperf openai
# tokenizers` (a virtual environment's bin/ as PY_BIN, default: the python3 on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/third-party-clients}
BIN=${BIN:-target/release/serverbench}
PY_BIN=${PY_BIN:-$(dirname "$(command -v python3)")}
TOK=tests/fixtures/tokenizers/byte-level-bpe-3k.json
PORT=${PORT:-8124}
mkdir -p "$OUT"
tokdir=$(mktemp -d)
cp "$TOK" "$tokdir/tokenizer.json"
echo '{"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1000000}' > "$tokdir/tokenizer_config.json"
"$BIN" serve --port "$PORT" --time-scale 10 --model m --tokenizer "$TOK" > "$OUT/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$tokdir"' EXIT
sleep 2
url=http://127.0.0.1:$PORT
for endpoint in completions chat; do
    art=$(mktemp -d)
    "$PY_BIN/aiperf" profile -m m --url "$url" --endpoint-type "$endpoint" --streaming --tokenizer "$tokdir" \
        --request-count 24 --concurrency 4 --synthetic-input-tokens-mean 300 --synthetic-input-tokens-stddev 0 \
        --output-tokens-mean 40 --output-tokens-stddev 0 --extra-inputs ignore_eos:true --random-seed 1 \
        --artifact-dir "$art" > /dev/null 2>&1
    cp "$art/profile_export_console.txt" "$OUT/aiperf_$endpoint.txt"
    cp "$art/profile_export_aiperf.json" "$OUT/aiperf_$endpoint.json"
    rm -rf "$art"
    curl -s "$url/metrics" | grep -E '^vllm:(prompt_tokens|generation_tokens|request_success)_total' > "$OUT/metrics_after_aiperf_$endpoint.txt"
done
"$PY_BIN/python3" scripts/openai_sdk_check.py "$url" "$TOK" > "$OUT/openai_sdk.txt"
cat "$OUT"/metrics_after_aiperf_*.txt "$OUT/openai_sdk.txt"
