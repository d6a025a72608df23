#!/usr/bin/env bash
# Conformance run of AgentX itself (agentx-harness 1.0.12) against `serverbench serve`, beside
# `serverbench simulate --protocol agentx` on the same traces, seed, concurrency and deployment
# (issue 37, item 3). Kept out of CI: it needs AgentX's Python environment (it installs
# agentx-harness from PyPI into $AGENTX_VENV when that is missing) and runs in real time.
#
# Usage:
#   scripts/agentx/conformance.sh TRACE_DIR OUT_DIR [LEVEL...]
#
# Environment (defaults in brackets):
#   SERVERBENCH   the serverbench binary [target/release/serverbench]
#   AGENTX_VENV   AgentX's virtualenv [venv-agentx]; created with agentx-harness==1.0.12 if missing
#   DEPLOYMENT    deployment preset or YAML [qwen3.5-9b-2xl40]
#   SEED          random seed, both sides [42]
#   DURATION      AgentX --benchmark-duration = simulate --window, seconds [600]
#                 (AgentX's floor of 900 s is a scenario lock that --unsafe-override downgrades to a
#                 warning; --unsafe-override is needed anyway for a local weka_trace directory)
#   PORT          serve's port [8000]
#   TOKENIZER_JSON  a Hugging Face tokenizer.json used by both AgentX (prompt synthesis) and serve
#                 (token counting) [tests/fixtures/tokenizers/byte-level-bpe-3k.json]
#   SKIP_AGENTX=1 / SKIP_SIM=1  skip one side (reuse what OUT_DIR holds)
#   SERVE_CPUS, AGENTX_CPUS  CPU lists (taskset -c) to pin serve and AgentX apart, so that AgentX's
#                 processes do not delay serve's wall-clock engine [unset: both share every CPU]
#   SERVE_FRONTEND_S_PER_TOKEN  the simulated side's chat front end, seconds per prompt token [9e-7]:
#                 what `serve` itself spends on a request before its engine sees it (the body read, the
#                 JSON, tokenizing the messages), measured on AgentX's records as the time from a
#                 request's start to serve's 200 acknowledgement per prompt token (median at c = 1 on a
#                 two-core machine, 2026-12-04: 0.90 µs); charged as the profile's `tokenize_s_per_token`
#                 (a deployment file over the DEPLOYMENT preset, OUT_DIR/sim-deployment.yaml), as for a real
#                 server's front end; 0 simulates the preset's own profile alone. A DEPLOYMENT file is
#                 simulated as it is (give its profile the term).
#
# Writes, for each level C (default 1 4 16):
#   OUT_DIR/agentx/cC/   AgentX's artifact dir (profile_export.jsonl: per-request records of the
#                        warm-up and profiling phases; profile_export_aiperf.json; logs/aiperf.log),
#                        agentx.log (its console), probe.jsonl (lanes, t*, handoff and first-dispatch
#                        offsets, recycles and every idle-cap timer shift, read from AgentX's own
#                        objects by scripts/agentx/probe/sitecustomize.py), plan.json
#                        (scripts/agentx/reference_plan.py: AgentX's primer schedule), serve.log,
#                        serve_metrics.txt (serve's /metrics at the end), wall.txt
#   OUT_DIR/sim/cC/      simulate --out (records.jsonl, summary.json, agentx_lanes.json), stdout.txt
# then runs scripts/agentx/compare_runs.py OUT_DIR.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
trace_dir=$(cd "${1:?usage: conformance.sh TRACE_DIR OUT_DIR [LEVEL...]}" && pwd)
out=${2:?usage: conformance.sh TRACE_DIR OUT_DIR [LEVEL...]}
shift 2
levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(1 4 16)
mkdir -p "$out"
out=$(cd "$out" && pwd)

sb=${SERVERBENCH:-$repo/target/release/serverbench}
venv=${AGENTX_VENV:-$repo/venv-agentx}
deployment=${DEPLOYMENT:-qwen3.5-9b-2xl40}
frontend=${SERVE_FRONTEND_S_PER_TOKEN:-9e-7}
seed=${SEED:-42}
duration=${DURATION:-600}
port=${PORT:-8000}
tok_json=${TOKENIZER_JSON:-$repo/tests/fixtures/tokenizers/byte-level-bpe-3k.json}

if [ ! -x "$venv/bin/agentx" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet agentx-harness==1.0.12
fi

# AgentX loads a tokenizer *directory*; serve takes the tokenizer.json itself.
tok_dir="$out/tokenizer"
mkdir -p "$tok_dir"
cp "$tok_json" "$tok_dir/tokenizer.json"
echo '{"tokenizer_class": "PreTrainedTokenizerFast"}' > "$tok_dir/tokenizer_config.json"

{
    echo "# trace files (AgentX reads *.json in file-name order), sha256"
    (cd "$trace_dir" && ls -1 *.json | LC_ALL=C sort | xargs sha256sum)
} > "$out/traces.txt"
{
    echo "serverbench: $sb ($("$sb" --version 2>/dev/null || echo unknown))"
    echo "agentx: $("$venv/bin/pip" show agentx-harness 2>/dev/null | grep -i '^version' || true)"
    echo "deployment=$deployment seed=$seed duration=$duration levels=${levels[*]}"
    echo "trace_dir=$trace_dir tokenizer=$tok_json"
} > "$out/settings.txt"

serve_pid=
stop_serve() {
    if [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null; then
        kill -TERM "$serve_pid" 2>/dev/null || true
        wait "$serve_pid" 2>/dev/null || true
    fi
    serve_pid=
}
trap stop_serve EXIT

for c in "${levels[@]}"; do
    if [ "${SKIP_AGENTX:-0}" != 1 ]; then
        d="$out/agentx/c$c"
        rm -rf "$d"
        mkdir -p "$d"
        # A fresh server for every run: the simulator starts each run with an empty cache. Refuse
        # to run against whatever else answers on the port.
        if curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null; then
            echo "port $port already answers: stop that server first" >&2
            exit 1
        fi
        ${SERVE_CPUS:+taskset -c "$SERVE_CPUS"} "$sb" serve -d "$deployment" --port "$port" --time-scale 1 \
            --tokenizer "$tok_dir/tokenizer.json" > "$d/serve.log" 2>&1 &
        serve_pid=$!
        for _ in $(seq 100); do
            curl -sf "http://127.0.0.1:$port/v1/models" > /dev/null && break
            sleep 0.2
        done
        if ! kill -0 "$serve_pid" 2>/dev/null; then
            echo "serve did not start:" >&2
            cat "$d/serve.log" >&2
            exit 1
        fi
        model=$(curl -sf "http://127.0.0.1:$port/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
        # AgentX's own plan for these lanes (primer schedule), computed offline by its code.
        "$venv/bin/python" "$here/reference_plan.py" "$trace_dir" --seed "$seed" \
            --concurrency "$c" --tokenizer "$tok_dir" > "$d/plan.json" 2> "$d/plan.log"
        start=$(date +%s.%N)
        AGENTX_PROBE_DIR="$d" AGENTX_PROBE_TIMERS=1 PYTHONPATH="$here/probe${PYTHONPATH:+:$PYTHONPATH}" \
            ${AGENTX_CPUS:+taskset -c "$AGENTX_CPUS"} "$venv/bin/agentx" profile --unsafe-override \
            --model "$model" --url "http://127.0.0.1:$port" \
            --input-file "$trace_dir" --custom-dataset-type weka_trace \
            --concurrency "$c" --random-seed "$seed" --tokenizer "$tok_dir" \
            --benchmark-duration "$duration" --ui none \
            --artifact-dir "$d/art" > "$d/agentx.log" 2>&1 || echo "agentx exited $?" >> "$d/agentx.log"
        end=$(date +%s.%N)
        python3 -c "print(f'agentx profile wall {$end - $start:.1f} s')" | tee "$d/wall.txt"
        curl -sf "http://127.0.0.1:$port/metrics" > "$d/serve_metrics.txt" || true
        stop_serve
    fi
    if [ "${SKIP_SIM:-0}" != 1 ]; then
        s="$out/sim/c$c"
        rm -rf "$s"
        mkdir -p "$s"
        # The simulated server: the deployment, with serve's own front end (SERVE_FRONTEND_S_PER_TOKEN).
        case $deployment in
            */*|*.yaml|*.yml) sim_dep=$deployment
                echo "DEPLOYMENT is a file: its own profile's tokenize_s_per_token stands (SERVE_FRONTEND_S_PER_TOKEN not applied)" ;;
            *) sim_dep="$out/sim-deployment.yaml"
                printf 'base: %s\nprofile:\n  tokenize_s_per_token: %s\n' "$deployment" "$frontend" > "$sim_dep" ;;
        esac
        start=$(date +%s.%N)
        "$sb" simulate -d "$sim_dep" --protocol agentx --trace "$trace_dir" --trace-format weka \
            -c "$c" --seed "$seed" -w "$duration" --out "$s" > "$s/stdout.txt" 2>&1
        end=$(date +%s.%N)
        python3 -c "print(f'simulate wall {$end - $start:.2f} s')" | tee "$s/wall.txt"
    fi
done

python3 "$here/compare_runs.py" "$out" --deployment "$deployment" --sb "$sb" --duration "$duration" \
    --trace-dir "$trace_dir" | tee "$out/comparison.md"
