#!/usr/bin/env bash
# The conformance run (conformance.sh) on a lent machine with many cores, where each level's `serve`
# and AgentX get cores of their own and the three levels run side by side (issue 37, item 3). Kept out
# of CI. On a two-core machine serve's wall-clock engine shares its one core with its own front end,
# which tokenizes sixteen lanes' prompts; here it has several.
#
# The machine has no network: AgentX (agentx-harness 1.0.12 and whatever of its requirements the
# machine's Python lacks) travels as wheels, with the stripped, xz-compressed serverbench binary and
# the xz-compressed traces, in .carry/ax-1, -2 and -3 (ignored through .git/info/exclude), one piece per
# call because the repository and a piece together must stay under the device's 64 MiB (2026-12-05:
# 10.7, 10.8 and 11.0 MB beside a 51 MB working tree; two pieces of 16 MB no longer fit beside it).
#
# Verbs (run from the repository root on the device machine):
#   stash            keep this call's carried pieces in /tmp/axstash
#   start [SLEEP]    install the wheels into /tmp/site, unpack the binary and the traces, check that
#                    AgentX imports, then start every level's conformance.sh in a process session of
#                    its own (it outlives the call) and wait SLEEP seconds [0]
#   wait [MAX]       wait until every level has finished (at most MAX seconds [560]), then pack
#                    /tmp/cx/out into $OUT/conformance.tar.gz
#
# Levels and cores (LEVELS, default "16:0-3:4-6 4:7-9:10-11 1:12-13:14-15": level:serve CPUs:AgentX
# CPUs[:seed]), seed 42 unless a level names its own (its results then go to cC-sSEED, so that one
# level can run at two seeds side by side), a 600 s window, deployment qwen3.5-9b-2xl40, ports 8000,
# 8001, … in that order.
# The simulated side is left to `SKIP_AGENTX=1 conformance.sh` afterwards, on the machine that keeps
# the results, with serve's front end as measured on this machine's records.
#
# Preparing the carry, here (wheels for the device's Python 3.12, cp312 manylinux):
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 … -d WHEELS -r REQUIREMENTS   (AgentX's environment, `pip list`
#       of a local install, less what the machine's image already has (the device library's KINDS.md)
#       and less the plot-only plotly, dash, dash-bootstrap-components, kaleido, SQLAlchemy, alembic and
#       optuna, which `agentx profile` does not import: 54 wheels, 26 MB)
#   strip -o sb target/release/serverbench && xz -c sb > serverbench.xz
#   split the wheels and serverbench.xz into .carry/ax-1, -2 and -3 (about 11 MB each), and the
#   traces, each xz-compressed, into .carry/ax-2/traces/
# The calls: `stash` carrying .carry/ax-1, `stash` carrying .carry/ax-3, `start 470` carrying
# .carry/ax-2, `wait 470`.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STASH=/tmp/axstash
CX=/tmp/cx
LEVELS=${LEVELS:-"16:0-3:4-6 4:7-9:10-11 1:12-13:14-15"}

unxz() { # FILE.xz OUT, with Python's lzma (the image may lack xz)
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
}

stash() {
    mkdir -p "$STASH/traces"
    local d
    for d in "$ROOT"/.carry/ax-*; do
        [ -d "$d" ] || continue
        find "$d" -maxdepth 1 -type f -exec cp {} "$STASH/" \;
        [ -d "$d/traces" ] && cp "$d"/traces/* "$STASH/traces/"
    done
    echo "stash: $(ls "$STASH" | wc -l) entries, $(du -sh "$STASH" | cut -f1)"
}

install() {
    # SKIP_PIP=1: /tmp/site is already there (a dry run on a machine with AgentX's packages).
    [ "${SKIP_PIP:-0}" = 1 ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target /tmp/site "$STASH"/*.whl || return 1
    mkdir -p "$CX/bin" "$CX/venv/bin" "$CX/traces" "$CX/repo/scripts" "$CX/repo/tests/fixtures"
    unxz "$STASH/serverbench.xz" "$CX/bin/serverbench" && chmod +x "$CX/bin/serverbench" || return 1
    local f
    for f in "$STASH"/traces/*.xz; do unxz "$f" "$CX/traces/$(basename "$f" .xz)" || return 1; done
    # Copies of what the runs read, so that the next call's fresh working tree cannot move under them.
    cp -r "$ROOT/scripts/agentx" "$CX/repo/scripts/"
    cp -r "$ROOT/tests/fixtures/tokenizers" "$CX/repo/tests/fixtures/"
    # conformance.sh wants a virtualenv: the machine's python3 with /tmp/site first on its path.
    local py
    py=$(command -v python3)
    printf '#!/bin/sh\nexport PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}\nexec %s "$@"\n' "$py" > "$CX/venv/bin/python"
    printf '#!/bin/sh\nexec %s -m pip "$@"\n' "$CX/venv/bin/python" > "$CX/venv/bin/pip"
    printf 'import sys\nfrom agentx_cli import main\nif __name__ == "__main__":\n    sys.exit(main())\n' > "$CX/venv/agentx_main.py"
    printf '#!/bin/sh\nexec %s %s "$@"\n' "$CX/venv/bin/python" "$CX/venv/agentx_main.py" > "$CX/venv/bin/agentx"
    chmod +x "$CX/venv/bin/"*
    # A curl for conformance.sh's readiness checks where the image has none.
    if ! command -v curl > /dev/null; then
        printf '#!%s\nimport sys, urllib.request\nurl = [a for a in sys.argv[1:] if not a.startswith("-")][0]\ntry:\n    sys.stdout.write(urllib.request.urlopen(url, timeout=5).read().decode())\nexcept Exception:\n    sys.exit(22)\n' "$py" > "$CX/bin/curl"
        chmod +x "$CX/bin/curl"
    fi
    # And a taskset (`taskset -c CPUS COMMAND…`) where it has none.
    if ! command -v taskset > /dev/null; then
        printf '#!%s\nimport os, sys\ncpus = set()\nfor part in sys.argv[2].split(","):\n    a, _, b = part.partition("-")\n    cpus.update(range(int(a), int(b or a) + 1))\nos.sched_setaffinity(0, cpus)\nos.execvp(sys.argv[3], sys.argv[3:])\n' "$py" > "$CX/bin/taskset"
        chmod +x "$CX/bin/taskset"
    fi
    "$CX/bin/serverbench" --version || return 1
    "$CX/venv/bin/python" -c "import agentx_cli, aiperf.cli; print('agentx imports')" || return 1
    "$CX/venv/bin/agentx" profile --help > /dev/null 2>&1 || { "$CX/venv/bin/agentx" profile --help 2>&1 | tail -20; return 1; }
    echo "agentx profile --help: ok"
}

start() {
    stash > /dev/null
    install || { echo "install failed"; return 1; }
    nproc; lscpu | grep -E "Model name|^CPU\(s\)" || true
    mkdir -p "$CX/out"
    local port=8000 spec c scpu acpu seed t
    for spec in $LEVELS; do
        IFS=: read -r c scpu acpu seed <<< "$spec"
        t=$(tag "$spec")
        setsid nohup env PATH="$CX/bin:$PATH" SERVERBENCH="$CX/bin/serverbench" AGENTX_VENV="$CX/venv" \
            TOKENIZER_JSON="$CX/repo/tests/fixtures/tokenizers/byte-level-bpe-3k.json" PORT=$port \
            SERVE_CPUS=$scpu AGENTX_CPUS=$acpu SEED="${seed:-42}" \
            bash -c "bash '$CX/repo/scripts/agentx/conformance.sh' '$CX/traces' '$CX/out/$t' $c; echo \"exit \$?\" > '$CX/out/$t.done'" \
            > "$CX/out/$t.log" 2>&1 < /dev/null &
        echo "level $c (seed ${seed:-42}, $t): serve on CPUs $scpu, AgentX on $acpu, port $port"
        port=$((port + 1))
    done
    sleep "${1:-0}"
    progress
}

# A level's results folder: cC, or cC-sSEED where the level names its seed.
tag() {
    local c scpu acpu seed
    IFS=: read -r c scpu acpu seed <<< "$1"
    echo "c$c${seed:+-s$seed}"
}

progress() {
    local spec c t
    for spec in $LEVELS; do
        c=${spec%%:*}; t=$(tag "$spec")
        echo "$t: $(cat "$CX/out/$t.done" 2>/dev/null || echo running) $(tail -c 300 "$CX/out/$t/agentx/c$c/agentx.log" 2>/dev/null | tr '\n' ' ' | tail -c 200)"
    done
}

wait_done() {
    local max=${1:-560} t=0 spec c all
    while [ "$t" -lt "$max" ]; do
        all=1
        for spec in $LEVELS; do [ -f "$CX/out/$(tag "$spec").done" ] || all=0; done
        [ "$all" = 1 ] && break
        sleep 5; t=$((t + 5))
    done
    progress
    tar -czf "${OUT:-/tmp}/conformance.tar.gz" -C "$CX" out
    ls -la "${OUT:-/tmp}/conformance.tar.gz"
}

case "${1:-}" in
    stash) stash ;;
    start) start "${2:-0}" ;;
    wait) wait_done "${2:-560}" ;;
    *) echo "usage: device_conformance.sh stash | start [SLEEP] | wait [MAX]" >&2; exit 2 ;;
esac
