#!/usr/bin/env bash
# Real vLLM 0.26.0 on the `nvidia-h200` device as the reference engine (docs/fidelity.md, "vLLM"): the
# Qwen3-8B shape with random weights (`--load-format dummy`), a word-level tokenizer (`wN` is token id N),
# vLLM's own defaults otherwise, and serverbench against it. Parts, in the order given:
#   pack       (the CPU machine, repo root) vLLM's wheel and the packages the device lacks, pruned, the fat
#              binaries an sm_90 GPU never loads zeroed (scripts/vllm/fatbin_blank.py), xz-compressed with
#              the serverbench binary into .carry/vllm/ (~55 MiB; ignored through .git/info/exclude)
#   split      (the CPU machine) cut the packed site.tar.xz into the calls' carries again, with a new
#              binary (SB_BIN, default target/release/serverbench, built with `--features cuda` for the
#              peers part's CUDA engine): seconds, where `pack` takes minutes
#   stash      keep this call's pieces of the carry in /tmp/parts (install does it too)
#   install    the serverbench binary into /tmp/sbv, and the carry's pieces unpacked into /tmp/site (Python
#              packages as `pip install --target` lays them out); needs every piece in /tmp/parts
#   model      the model directory (scripts/vllm/make_model.py: config.json, tokenizer, no weights) and a
#              seconds-long check that vLLM's kernels load and agree with PyTorch (kernel_smoke.py)
#   peers-cuda serverbench's own CUDA engine on the same GPU, through the same client as vLLM
#              (scripts/vllm/peer_probe.py: decode TPOT at batch 1/16/64, prefill 2K and 2K over 32K);
#              needs the GPU to itself, so it runs before `start`
#   start      `vllm serve` (setsid: it outlives the call) with vLLM's defaults for this GPU; waits until up
#   check      requests by hand (check.py: prompt counts, exact lengths, cached tokens), the start-up facts
#              (startup.txt), /metrics, nvidia-smi
#   peers      peer_probe.py against vLLM
#   calibrate  `calibrate --endpoint` probes (black box) -> calibrate/probes.jsonl, written probe by probe:
#              fresh prompts of 64 to 16K tokens, and of 32K to 192K (one prefill of many chunks, sent
#              once each), suffixes of 16-512 tokens over 2K/8K/32K/64K/128K cached prefixes and an
#              8,192-token chunk over the 32K-128K ones, warmed decode streams, steps that prefill while 16 or
#              32 streams decode (--probe-mixed), and 8 or 16 streams over 16K-40K prompts beside 16
#              over 28K each (--probe-ragged: a closed loop's unequal contexts), and 16, 32 or 64
#              streams over one 20K prefix (--probe-shared: synthetic-v1's system prompt); the fit is done on the CPU machine (`calibrate
#              --from-probes … --fit-frontend`, docs/calibration.md)
#   runs       `compare --url` for each set of RUNS (below), one (level, seed) at a time while the call
#              has time for it; `--reuse` skips runs a set's folder already holds, so sets spread over calls
#   verify     `serverbench freeze` and `verify` with vLLM as the candidate and scripts/reference_server.py
#              (float32 transformers) as the reference, on one random checkpoint (scripts/verify_model.py,
#              fitted for vLLM by scripts/vllm/verify_checkpoint.py: its context, and end-of-sequence tokens
#              it emits); stops the benchmark server first, so it goes last; give it a call of its own
#              (296 s on 2026-12-03: the checkpoint, vLLM's start with it, two 60 s held-out replays)
# Every part after `start` starts the server first if it is down. RUNS is a list of SET:LEVELS:SEEDS:WINDOW
# with SET one of (deployment, start, workload):
#   syn-steady  qwen3-8b-1xh200-vllm (40,960 tokens, synthetic-v1), steady start
#   syn-cold    the same, cold start
#   fit-cold    qwen3-8b-200k-1xh200-vllm (200,000 tokens, the fitted agentic-coding), cold start
#   fit-steady  the same, steady start
#   real-cold   qwen3-8b-200k-1xh200-vllm replaying the corpus's Claude Code sessions, cold start
#   moe-syn-steady, moe-syn-cold  scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml (the MOE=1 server: the
#               Qwen3-30B-A3B shape, 40,960 tokens, synthetic-v1), steady or cold start; with MOE=1 only
#   agentx-real the same sessions (corpus/claude-code/logs.jsonl) under the AgentX protocol
#               (`--protocol agentx` with its defaults: lanes start 25-75 % into a session with primed
#               streams, 10 warm-up requests a lane never scored, the recording's gaps, idle caps, 30 s
#               grace), the 4 sessions whose peak context passes 200,000 tokens left out
#               (`--max-context-length 200000`, AgentX's option), sent as AgentX sends them: chat
#               completions of messages (`--api chat`; make_model.py's chat template joins the messages'
#               text and nothing else, so the prompts are the workload's token counts exactly). The
#               warm-up runs before the window (the simulator's: 18, 41, 76 s at c = 2, 4, 8; 786 s at 16)
# and SET-TAG (e.g. syn-cold-seeds, fit-cold-w30) is SET's run into a folder of that name: runs of another
# window or seed list beside a stored set's table.
# e.g. RUNS="syn-steady:1,4,16:0:120 fit-cold:1,4:0:120". A part that would not end within LIMIT (570) s of
# this script's start is skipped and says so. Results: $OUT/<part or set>.tar.gz (packed as they come, so
# a call stopped at its limit still returns them), $OUT/server.log.gz, $OUT/times.txt (each part's time).
# Usage: the device tool runs, from the repo root with .carry/vllm carried,
#   bash scripts/vllm_run.sh install model peers-cuda start check peers calibrate runs
#
# MOE=1: the Qwen3-30B-A3B shape instead (make_model.py --moe: 48 layers, 128 experts of which 8 per token,
# random weights), served as `qwen3-30b-a3b` with vLLM's defaults and --max-model-len 40960 (MAX_LEN), its
# model directory $WORK/model-moe; `model`, `start` and `check` take it, the startup lines add the fused-MoE
# ones (kernel backend, the tuned config file or the default-config warning). Two parts of its own:
#   moe-pack   (the CPU machine, after `pack`: it reads the wheel that `pack` downloaded) vLLM's MoE kernels,
#              _moe_C_stable_libtorch.abi3.so, which `pack` leaves out (routing top-k, moe_align_block_size,
#              moe_sum), blanked for sm_90 as `pack` blanks _C, and the PTX of its Marlin kernels (quantized
#              weights only; 13 MB, for sm_80, the one image an sm_90 GPU would JIT) zeroed and marked
#              compute_120 so that no GPU here loads it: .carry/vllm-moe/moe_C.so.xz (1.5 MB), which
#              `install` unpacks into $SITE when MOE=1
#   fa3-bench  (before `start`: the GPU to itself) scripts/vllm/fa3_decode_bench.py: FlashAttention 3's decode
#              attention alone, one layer of the Qwen3-8B shape, batches of equal and unequal contexts, with
#              vLLM's arguments -> $OUT/fa3-bench.tar.gz; SHARED=1: batches whose sequences share a
#              20,480-token prefix (the same pages), beside the same contexts unshared (SHARED_CASES,
#              SHARED_PREFIX: other cases; FA3_NAME: the output files' name); MIXED=1: one prefill chunk over a
#              cached prefix, alone and after decodes, as a step that prefills while others decode (MIXED_CASES)
#   moe-bench  (before `start`: the GPU to itself; installs the MoE kernels as MOE=1 does, so carry .carry/vllm-moe)
#              scripts/vllm/moe_kernel_bench.py: vLLM's fused-MoE layer alone for the Qwen3-30B-A3B shape at
#              M = 1-16,384 tokens (tuned configs, padded rows, CUDA-graph and eager times) -> $OUT/moe-bench.tar.gz;
#              MOE_SIZES=M,M,… other sizes
#   decode-grid scripts/vllm/decode_grid.py against the server: pure decode steps of B = 1-16 sequences of
#              chosen contexts (with STEP_TRACE=1 their steps come back as $OUT/steps-decode-grid.jsonl.gz)
#   moe-probe  scripts/vllm/moe_probe.py against the server: decode TPOT at batch 1-256 over 2,048-token
#              prompts and 1, 16 over 16,384, TTFT of fresh 512-32,768-token prompts and of 512-8,192 new tokens
#              over cached 8K-32K prefixes -> $OUT/moe-probe.tar.gz; MOE_ONLY=prefill,cached runs those kinds
#              alone, MOE_DEADLINE=S gives it S seconds (default: the call's time less 20 s); its fresh
#              prompts compile the fused-MoE kernel's tuned sizes (moe_probe.py), so it goes before `runs`
#   idle-gap   scripts/vllm/idle_gap_probe.py against the server: lone requests (fresh 512-8,192 tokens, 16 over a
#              cached 32K prefix, 512 over 8K) after 0-8 s with nothing in flight, and the GPU's clocks and power
#              every 100 ms beside them (nvidia-smi) -> $OUT/idle-gap.tar.gz (with STEP_TRACE=1 its steps too)
# The peers, calibrate, runs and verify parts are the dense model's. Two calls (results/h200-vllm-moe/):
#   1. carry .carry/vllm-p1 (then -p2, … each in a call of its own): bash scripts/vllm_run.sh stash
#   2. carry .carry/vllm and .carry/vllm-moe: mkdir -p /tmp/sbv && touch /tmp/sbv/kernels.ok &&
#        MOE=1 bash scripts/vllm_run.sh install model start check moe-probe
#
# STEP_TRACE=1: `start` puts scripts/vllm/step_trace/ on vLLM's PYTHONPATH with SB_STEP_TRACE=$WORK/step_trace.jsonl,
# so its sitecustomize.py records every engine step of the engine-core process (scripts/vllm/step_trace/
# README.md: composition, CUDA-event GPU time, the gap between steps, CPU time of schedule/execute/update); a
# server already up keeps the setting it was started with. `runs` then returns, for each set, the lines
# written while that set ran (from the end of the previous set), as $OUT/steps-<set>.jsonl.gz (kept current
# every 20 s while the set runs); `calibrate` and `moe-probe` return theirs as $OUT/steps-calibrate.jsonl.gz and
# $OUT/steps-moe-probe.jsonl.gz. scripts/vllm/step_trace/analyse.py reads them.
# AGENTX_TRACE: the logs file the agentx-* sets replay (default corpus/claude-code/logs.jsonl; the stored
# agentx-real set replayed results/h200-vllm/claude-code-as-replayed/logs.jsonl).
set -u
START=$(date +%s)
LIMIT=${LIMIT:-570}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CARRY=${CARRY:-$ROOT/.carry/vllm}
OUT=${OUT:-/tmp/vllm-out}
WORK=${WORK:-/tmp/sbv}
SITE=${SITE:-/tmp/site}
MOE=${MOE:-0}
moe() { [ "$MOE" != 0 ]; }
MODEL=$WORK/model
moe && MODEL=$WORK/model-moe
BIN=${BIN:-$WORK/serverbench}
PORT=${PORT:-8000}
URL=http://127.0.0.1:$PORT
NAME=qwen3-8b
moe && NAME=qwen3-30b-a3b
MAX_LEN=${MAX_LEN:-$(moe && echo 40960 || echo 200000)}
RUNS=${RUNS:-syn-steady:1,4,16:0:120}
STEP_TRACE=${STEP_TRACE:-0}
TRACE_FILE=$WORK/step_trace.jsonl
AGENTX_TRACE=${AGENTX_TRACE:-$ROOT/corpus/claude-code/logs.jsonl}
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# vLLM 0.26.0's sampler probes FlashInfer's top-k/top-p sampler by importing vLLM's FlashInfer attention
# backend, which imports flashinfer at its top: flashinfer is not carried, so the engine core would die at
# load_model (ModuleNotFoundError) unless told not to probe. Greedy requests never use it.
export VLLM_USE_FLASHINFER_SAMPLER=0

left() { echo $(( START + LIMIT - $(date +%s) )); }
pack() { tar -C "$WORK" -czf "$OUT/$1.tar.gz.tmp" "$1" 2>/dev/null && mv "$OUT/$1.tar.gz.tmp" "$OUT/$1.tar.gz"; }
keep_packing() { ( while sleep 20; do pack "$1"; pack_steps "$1"; done ) & packer=$!; }
# the step trace's lines since the last finished set (STEP_TRACE=1) -> $OUT/steps-SET.jsonl.gz; `final` moves
# the mark past them
pack_steps() { # SET [final]
  [ -f "$TRACE_FILE" ] || return 0
  local from=$(cat "$WORK/step_trace.mark" 2>/dev/null || echo 0) n
  n=$(wc -l < "$TRACE_FILE")
  tail -n +"$((from + 1))" "$TRACE_FILE" | head -n "$((n - from))" | gzip -c > "$OUT/steps-$1.jsonl.gz.tmp" && \
    mv "$OUT/steps-$1.jsonl.gz.tmp" "$OUT/steps-$1.jsonl.gz"
  [ "${2:-}" = final ] && echo "$n" > "$WORK/step_trace.mark"
  return 0
}
stop_packing() { kill "$packer" 2>/dev/null; wait "$packer" 2>/dev/null; }
up() { curl -s -m 5 "$URL/v1/models" 2>/dev/null | grep -q "\"$NAME\""; }
server_alive() { [ -f "$WORK/server.pid" ] && kill -0 "$(cat "$WORK/server.pid")" 2>/dev/null; }
# xz -dc, or Python's lzma where the image has no xz
dxz() { if command -v xz > /dev/null; then xz -dc -T0 "$@"; else
  python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1] if len(sys.argv) > 1 else sys.stdin.buffer), sys.stdout.buffer, 1 << 22)" "$@"; fi; }
with_site() { PYTHONPATH=$SITE "$@"; }

save_log() {
  [ -f "$WORK/server.log" ] || return 0
  gzip -c "$WORK/server.log" > "$OUT/server.log.gz"
  # the lines that say how vLLM sized and configured itself, then its warnings and errors
  { grep -E "non-default args|max_num_batched_tokens|[Cc]hunked prefill|prefix caching|KV cache|Maximum concurrency|\
[Cc]udagraph|CUDA graph|Graph capturing|torch.compile|[Cc]ompil|attention backend|Model loading took|[Aa]sync|\
profiling|memory|Starting vLLM|startup complete|Available routes|step_trace" "$WORK/server.log" | cut -c1-3000 | head -150
    if moe; then echo "---- the fused-MoE kernels"
      grep -E "MoE|moe|[Ee]xpert" "$WORK/server.log" | grep -v "loggers.py" | cut -c1-600 | head -40; fi
    echo "---- warnings and errors"
    grep -E "WARNING|ERROR|Error|Traceback" "$WORK/server.log" | cut -c1-600 | head -60; } > "$OUT/startup.txt"
}

# ---- on the CPU machine
pack_carry() {
  local w=${PACK_WORK:-${TMPDIR:-/tmp}/vllm-pack} sb=${SB_BIN:-$ROOT/target/release/serverbench}
  [ -x "$sb" ] || { echo "no serverbench binary at $sb (cargo build --release --features cuda, or SB_BIN=…)"; return 1; }
  local tags=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
    --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64
    --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64)
  local dl=(python3 -m pip download -q --no-deps "${tags[@]}")
  mkdir -p "$w/wheels" "$w/contingency" "$ROOT/.git/info"
  grep -qx '/.carry/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.carry/' >> "$ROOT/.git/info/exclude"
  local wheel
  wheel=$(ls "$w"/vllm-0.26.0-*.whl 2>/dev/null | head -1)
  if [ -z "$wheel" ]; then "${dl[@]}" -d "$w" vllm==0.26.0 || return 1; wheel=$(ls "$w"/vllm-0.26.0-*.whl); fi
  grep -v '^#' "$HERE/vllm/deps.txt" | grep . > "$w/deps.pins"
  "${dl[@]}" -d "$w/wheels" -r "$w/deps.pins" || return 1
  awk '!/^#/ && NF {print $1}' "$HERE/vllm/contingency.txt" > "$w/contingency.pins"
  "${dl[@]}" -d "$w/contingency" -r "$w/contingency.pins" || return 1
  local site=$w/site
  rm -rf "$site"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "${tags[@]}" "$w"/wheels/*.whl || return 1
  rm -rf "$site/bin"                       # console scripts with this machine's interpreter in their shebang
  rm -rf "$site/mistral_common/data"       # Mistral tokenizer files (36 MB): read only for Mistral models
  rm -rf "$site/pycountry/locales"         # country-name translations (22 MB)
  unzip -q -o "$wheel" -d "$site"
  local v=$site/vllm
  rm -f "$v/vllm_flash_attn/_vllm_fa2_C.abi3.so"   # FlashAttention 2 (305 MB): Hopper takes FA3; import guarded
  rm -f "$v/vllm-rs"                               # the Rust front end, used only with VLLM_USE_RUST_FRONTEND=1
  rm -f "$v/_moe_C_stable_libtorch.abi3.so"        # MoE kernels: import guarded, a dense model never calls them
  rm -rf "$v/third_party/deep_gemm"                # FP8 GEMM (has_deep_gemm() is then False)
  rm -rf "$v/third_party/fmha_sm100"               # Blackwell attention
  python3 "$HERE/vllm/fatbin_blank.py" "$v/_C_stable_libtorch.abi3.so" "$w/_C.so" && mv "$w/_C.so" "$v/_C_stable_libtorch.abi3.so"
  find "$site" -name __pycache__ -prune -exec rm -rf {} +
  local xzdir=$w/xz
  rm -rf "$xzdir"; mkdir -p "$xzdir"
  tar -C "$site" -cf - . | xz -9 -T0 --block-size=32MiB > "$xzdir/site.tar.xz"   # multi-block: all cores unpack
  split_carry "$w" "$sb"
}

# The working tree (36 MiB in December 2026) and the carry travel together under the device's 64 MiB, and
# vLLM (about 50 MiB compressed) does not fit beside the tree in one call: site.tar.xz is cut into pieces
# of PIECE_MIB (default: what fits beside the tree, 26 MiB less the binary), every piece but the last in
# .carry/vllm-p1/, .carry/vllm-p2/, … (one call each, `stash` keeps it in /tmp/parts), the last in
# .carry/vllm/ with the contingency wheels and the stripped serverbench binary (the call that installs).
split_carry() { # PACK_WORK SERVERBENCH_BINARY
  local w=$1 sb=$2 tree
  tree=$(( $(git -C "$ROOT" ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) >> 20 ))
  rm -rf "$CARRY" "$CARRY"-p?; mkdir -p "$CARRY/contingency"
  rm -f "$w"/xz/site.tar.xz.?
  cp "$sb" "$w/serverbench" && strip "$w/serverbench" 2>/dev/null
  xz -9 -T0 -c "$w/serverbench" > "$CARRY/serverbench.xz"
  local piece=${PIECE_MIB:-$(( 62 - tree - 8 ))}
  split -b "${piece}m" -d -a 1 "$w/xz/site.tar.xz" "$w/xz/site.tar.xz."
  local n=$(ls "$w"/xz/site.tar.xz.? | wc -l) i
  for (( i = 0; i < n - 1; i++ )); do
    mkdir -p "$CARRY-p$((i + 1))"
    mv "$w/xz/site.tar.xz.$i" "$CARRY-p$((i + 1))/"
    echo "$n" > "$CARRY-p$((i + 1))/pieces"
  done
  mv "$w/xz/site.tar.xz.$((n - 1))" "$CARRY/"
  echo "$n" > "$CARRY/pieces"
  cp "$w"/contingency/*.whl "$CARRY/contingency/"
  du -sb "$CARRY"/* "$CARRY"-p?/* | awk '{printf "%8.1f MB  %s\n", $1/1e6, $2}'
  for d in "$CARRY"-p? "$CARRY"; do echo "$d: $(( $(du -sb "$d" | cut -f1) >> 20 )) MiB"; done
  echo "(a call carries at most 64 MiB with the repo's $tree MiB: carry .carry/vllm-p1, -p2, … one call each, then .carry/vllm)"
}

# ---- on the device
stash() { # keep the pieces of site.tar.xz carried by this call in /tmp/parts, for a later call's install
  mkdir -p /tmp/parts
  local f
  for f in "$ROOT"/.carry/vllm*/site.tar.xz.? "$ROOT"/.carry/vllm*/pieces; do [ -f "$f" ] && cp "$f" /tmp/parts/; done
  echo "/tmp/parts holds: $(ls /tmp/parts | tr '\n' ' ')"
}

install() {
  stash > /dev/null
  if [ ! -x "$BIN" ]; then
    local sb=$(ls "$ROOT"/.carry/vllm*/serverbench.xz 2>/dev/null | head -1)
    [ -n "$sb" ] && dxz "$sb" > "$BIN" && chmod +x "$BIN" || { echo "no serverbench.xz carried"; return 1; }
  fi
  [ "${1:-}" = binary ] && return 0
  if [ ! -f "$SITE/vllm/__init__.py" ]; then
    local t=$(date +%s) n=$(cat /tmp/parts/pieces 2>/dev/null) have=$(ls /tmp/parts/site.tar.xz.? 2>/dev/null | wc -l)
    [ -n "$n" ] && [ "$have" = "$n" ] || { echo "vLLM's carry is incomplete: $have of ${n:-?} pieces (carry .carry/vllm-p1, -p2, … in earlier calls of this machine)"; return 1; }
    mkdir -p "$SITE"
    cat $(ls /tmp/parts/site.tar.xz.? | sort) | dxz | tar -C "$SITE" -xf - || return 1
    echo "unpacked $(du -sm "$SITE" | cut -f1) MB into $SITE in $(( $(date +%s) - t )) s"
    # A package of the image that a carried one needs newer gets the carried wheel.
    python3 - "$HERE/vllm/contingency.txt" "$CARRY/contingency" "$SITE" <<'EOF'
import glob, importlib.metadata as md, subprocess, sys
from packaging.specifiers import SpecifierSet
from packaging.version import Version
need = []
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.split():
        continue
    pin, spec = line.split()[:2]
    name = pin.split("==")[0]
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    ok = have is not None and Version(have) in SpecifierSet(spec)
    print(f"  {name}: image has {have}, carried packages need {spec}: {'ok' if ok else 'installing ' + pin}")
    if not ok:
        key = name.replace("-", "_").lower()
        need += [w for w in glob.glob(sys.argv[2] + "/*.whl") if w.split("/")[-1].lower().startswith(key + "-")]
if need:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", sys.argv[3], "--upgrade", *need], check=True)
EOF
  fi
  if moe && [ ! -f "$SITE/vllm/_moe_C_stable_libtorch.abi3.so" ]; then
    [ -f "$ROOT/.carry/vllm-moe/moe_C.so.xz" ] || { echo "MOE=1 needs .carry/vllm-moe carried (moe-pack)"; return 1; }
    dxz "$ROOT/.carry/vllm-moe/moe_C.so.xz" > "$SITE/vllm/_moe_C_stable_libtorch.abi3.so" || return 1
    echo "vLLM's MoE kernels unpacked into $SITE/vllm"
  fi
}

moe_pack() { # vLLM's MoE kernels for MOE=1, from the wheel that `pack` downloaded, into .carry/vllm-moe/
  local w=${PACK_WORK:-${TMPDIR:-/tmp}/vllm-pack} d=$ROOT/.carry/vllm-moe wheel
  wheel=$(ls "$w"/vllm-0.26.0-*.whl 2>/dev/null | head -1)
  [ -n "$wheel" ] || { echo "no vLLM wheel in $w: run the pack part first"; return 1; }
  mkdir -p "$d"
  unzip -p "$wheel" vllm/_moe_C_stable_libtorch.abi3.so > "$w/moe_C.so" || return 1
  python3 "$HERE/vllm/fatbin_blank.py" "$w/moe_C.so" "$w/moe_C_sm90.so" || return 1
  # The fat binaries whose only image an sm_90 GPU could run is the Marlin kernels' sm_80 PTX (zstd inside the
  # fat binary): zeroed, and marked compute_120, so that no driver here JIT-compiles them; the wheel ships
  # other Marlin fat binaries with no image for sm_90 at all (sm_75 or sm_89/120 SASS only), so a module of
  # that kind is known to do no harm until one of its kernels is launched, which bf16 weights never do.
  python3 - "$w/moe_C_sm90.so" "$HERE/vllm" <<'EOF' || return 1
import struct, subprocess, sys
sys.path.insert(0, sys.argv[2])
from fatbin_blank import FATBIN_MAGIC, PTX, section
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
off, size = section(data, ".nv_fatbin")
p, end, dropped = off, off + size, 0
while p + 16 <= end:
    magic, _v, hsz, fsz = struct.unpack_from("<IHHQ", data, p)
    if magic != FATBIN_MAGIC:
        p += 8
        continue
    q, qend = p + hsz, p + hsz + fsz
    while q < qend:
        kind, _v2, ehsz, psz = struct.unpack_from("<HHIQ", data, q)
        o = q + ehsz
        if kind == PTX:
            blob = bytes(data[o:o + psz])
            text = subprocess.run(["zstd", "-dcq"], input=blob, capture_output=True).stdout or blob
            if b"marlin_moe_wna16" in text:
                data[o:o + psz] = bytes(psz)
                struct.pack_into("<I", data, q + 28, 120)
                dropped += psz
        q = o + psz
    p = qend
open(path, "wb").write(data)
print(f"the Marlin kernels' PTX: {dropped / 1e6:.1f} MB zeroed")
EOF
  xz -9 -T0 -c "$w/moe_C_sm90.so" > "$d/moe_C.so.xz" || return 1
  du -b "$d/moe_C.so.xz" | awk '{printf "%.1f MB  %s\n", $1 / 1e6, $2}'
}

model() {
  # shellcheck disable=SC2046
  [ -f "$MODEL/config.json" ] || with_site python3 "$HERE/vllm/make_model.py" "$MODEL" $(moe && echo --moe) || return 1
  [ -f "$WORK/kernels.ok" ] && return 0
  with_site python3 "$HERE/vllm/kernel_smoke.py" 2>&1 | grep -v "^INFO\|^WARNING" | tee "$WORK/kernels.txt" | tail -12
  local rc=${PIPESTATUS[0]}
  cp "$WORK/kernels.txt" "$OUT/"
  [ "$rc" = 2 ] && { echo "kernel smoke test: a library failed to load or run; not starting the server"; return 1; }
  touch "$WORK/kernels.ok"
}

peers_cuda() {
  mkdir -p "$WORK/peers"
  if server_alive; then echo "skipping peers-cuda: vLLM holds the GPU"; return 0; fi
  local port=$((PORT + 1))
  "$BIN" serve --engine cuda --model qwen3-8b --weights random -d qwen3-8b-1xh200 --port "$port" \
    > "$WORK/peers/cuda_serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do curl -s -m 2 "http://127.0.0.1:$port/v1/models" | grep -q '"id"' && break; sleep 1; done
  python3 "$HERE/vllm/peer_probe.py" "http://127.0.0.1:$port" qwen3-8b "$WORK/peers/cuda.json" \
    "serverbench serve --engine cuda" 2>&1 | tee "$WORK/peers/cuda.txt"
  kill -INT "$pid"; wait "$pid"
  tail -5 "$WORK/peers/cuda_serve.log"
  # the same cases as forward passes alone (GPU time, no server): what the engine's steps cost
  "$BIN" cuda-bench --model qwen3-8b --reps 10 --out "$WORK/peers/cuda_bench" \
    --cases decode:1:4096,decode:16:4096,decode:64:4096,prefill:16:0,prefill:2048:0,prefill:2048:32768 2>&1 \
    | tee "$WORK/peers/cuda_bench.txt" | grep -E "decode|prefill|rror"
  pack peers
}

start_server() {
  if up; then echo "server already up"; return 0; fi
  install && model || return 1
  local t=$(date +%s)
  if server_alive && curl -s -m 5 "$URL/v1/models" > /dev/null 2>&1; then
    # a server of an earlier call (another model: a dense call before MOE=1) holds the port: stop it
    echo "a server for another model is up on the port (pid $(cat "$WORK/server.pid")): stopping it"
    kill -- -"$(cat "$WORK/server.pid")" 2>/dev/null || kill "$(cat "$WORK/server.pid")" 2>/dev/null
    local w=0
    while server_alive && [ "$w" -lt 60 ]; do sleep 1; w=$((w + 1)); done
    rm -f "$WORK/server.pid"
  fi
  if ! server_alive; then
    # vLLM's defaults for this GPU: nothing about batching, memory or the cache is set here, so the
    # start-up facts can be read against `--engine-config vllm` (docs/fidelity.md). Only the weights
    # (random), the seed, the context and the per-request cache counts in `usage` are chosen.
    local pp=$SITE tr=""
    if [ "$STEP_TRACE" != 0 ]; then pp=$HERE/vllm/step_trace:$SITE; tr=$TRACE_FILE; echo "step trace on: $tr"; fi
    setsid env PYTHONPATH="$pp" ${tr:+SB_STEP_TRACE="$tr"} python3 -m vllm.entrypoints.cli.main serve "$MODEL" --served-model-name "$NAME" \
      --load-format dummy --dtype bfloat16 --seed 0 --host 127.0.0.1 --port "$PORT" --max-model-len "$MAX_LEN" \
      --enable-prompt-tokens-details ${VLLM_ARGS:-} > "$WORK/server.log" 2>&1 < /dev/null &
    echo $! > "$WORK/server.pid"
  fi
  while [ "$(left)" -gt 5 ]; do
    if up; then
      echo "server up in $(( $(date +%s) - t )) s"
      curl -s -m 60 "$URL/v1/completions" -H 'content-type: application/json' \
        -d "{\"model\":\"$NAME\",\"prompt\":[101,102,103,104],\"max_tokens\":4,\"ignore_eos\":true}" > /dev/null
      return 0
    fi
    if ! server_alive; then echo "the server exited:"; tail -60 "$WORK/server.log"; return 1; fi
    sleep 2
  done
  echo "the server did not come up within the call"; tail -30 "$WORK/server.log"; return 1
}

check() {
  mkdir -p "$WORK/check"
  python3 "$HERE/vllm/check.py" "$URL" "$NAME" 2>&1 | tee "$WORK/check/requests.jsonl"
  curl -s -m 10 "$URL/v1/models" > "$WORK/check/models.json"
  curl -s -m 10 "$URL/metrics" > "$WORK/check/metrics.txt"
  grep -E "^vllm:(cache_config_info|num_gpu_blocks|prefix_cache)" "$WORK/check/metrics.txt" | cut -c1-800
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.max.sm,power.draw \
    --format=csv | tee "$WORK/check/gpu.txt"
  with_site python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
    > "$WORK/check/versions.txt" 2>&1
  save_log; cp "$OUT/startup.txt" "$WORK/check/"
  "$BIN" simulate -d qwen3-8b-1xh200-vllm --print-config > "$WORK/check/preset_vllm.yaml" 2>&1
  pack check
}

peers() {
  mkdir -p "$WORK/peers"
  python3 "$HERE/vllm/peer_probe.py" "$URL" "$NAME" "$WORK/peers/vllm.json" "vllm 0.26.0" 2>&1 \
    | tee "$WORK/peers/vllm.txt"
  curl -s -m 10 "$URL/metrics" > "$WORK/peers/metrics_after.txt"
  pack peers
}

fa3_bench() { # scripts/vllm/fa3_decode_bench.py: FA3's decode attention alone, before the server takes the GPU
  install || return 1
  mkdir -p "$WORK/fa3-bench"
  local name=fa3; [ "${SHARED:-0}" != 0 ] && name=fa3-shared; [ "${MIXED:-0}" != 0 ] && name=fa3-mixed
  name=${FA3_NAME:-$name}
  PYTHONPATH=$SITE python3 "$HERE/vllm/fa3_decode_bench.py" "$WORK/fa3-bench/$name.json" 2>&1 \
    | tee "$WORK/fa3-bench/$name.txt"
  pack fa3-bench
}

moe_bench() { # scripts/vllm/moe_kernel_bench.py: the fused-MoE layer alone (MOE=1 install), before the server
  MOE=1; install || return 1
  mkdir -p "$WORK/moe-bench"
  PYTHONPATH=$SITE python3 "$HERE/vllm/moe_kernel_bench.py" "$WORK/moe-bench/moe-bench.json" ${MOE_SIZES:-} 2>&1 \
    | tee "$WORK/moe-bench/moe-bench.txt"
  pack moe-bench
}

decode_grid() { # scripts/vllm/decode_grid.py against the server; with STEP_TRACE=1 its steps come back too
  mkdir -p "$WORK/decode-grid"
  pack_steps decode-grid final
  keep_packing decode-grid
  python3 "$HERE/vllm/decode_grid.py" "$URL" "$NAME" "$WORK/decode-grid/grid.json" 2>&1 \
    | tee "$WORK/decode-grid/log.txt"
  kill "$packer" 2>/dev/null
  pack decode-grid
  pack_steps decode-grid
}

idle_gap() { # scripts/vllm/idle_gap_probe.py against the server, the GPU's clocks logged beside it
  mkdir -p "$WORK/idle-gap"
  keep_packing idle-gap
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,pstate,utilization.gpu,temperature.gpu \
    --format=csv -lms 100 > "$WORK/idle-gap/smi.csv" 2>&1 &
  local smi=$!
  python3 "$HERE/vllm/idle_gap_probe.py" "$URL" "$NAME" "$WORK/idle-gap/probes.jsonl" \
    --deadline-s "$(( $(left) - 20 ))" 2>&1 | tee "$WORK/idle-gap/log.txt"
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  curl -s -m 10 "$URL/metrics" > "$WORK/idle-gap/metrics_after.txt"
  stop_packing; pack idle-gap
  [ -f "$TRACE_FILE" ] && { sleep 2; pack_steps idle-gap final; }
}
moe_probe() { # scripts/vllm/moe_probe.py against the MoE server, within the call's time
  mkdir -p "$WORK/moe-probe"
  keep_packing moe-probe
  python3 "$HERE/vllm/moe_probe.py" "$URL" "$NAME" "$WORK/moe-probe/moe_probe.json" --label "vllm 0.26.0" \
    --table "$WORK/moe-probe/table.txt" --only "${MOE_ONLY:-prefill,cached,decode}" --deadline-s "${MOE_DEADLINE:-$(( $(left) - 20 ))}" 2>&1 | tee "$WORK/moe-probe/log.txt"
  curl -s -m 10 "$URL/metrics" > "$WORK/moe-probe/metrics_after.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.max.sm,power.draw \
    --format=csv > "$WORK/moe-probe/gpu.txt" 2>&1
  with_site python3 -c "import vllm, torch, triton; print('vllm', vllm.__version__, 'torch', torch.__version__, 'triton', triton.__version__)" \
    > "$WORK/moe-probe/versions.txt" 2>&1
  cp "$MODEL/config.json" "$WORK/moe-probe/model_config.json" 2>/dev/null
  stop_packing; pack moe-probe
  [ -f "$TRACE_FILE" ] && { sleep 2; pack_steps moe-probe final; }
}

calibrate() {
  mkdir -p "$WORK/calibrate"
  keep_packing calibrate
  # probes only: the fit takes minutes of one CPU core, so it is stopped once the probe log is written
  "$BIN" calibrate --endpoint "$URL" --api tokens --server vllm --served-model "$NAME" \
    --model qwen3-8b --hardware h200 --name h200-qwen3-8b-vllm \
    --probe-prompts 64,256,512,1024,2048,4096,8192,16384,32768,65536,131072,196608 \
    --probe-long-streams 1,4,8,16 --probe-long-context 24576 \
    --probe-cached-prefixes 2048,8192,32768,65536,131072 \
    --probe-mixed 16:8192:512:0,16:8192:512:16384,16:8192:2048:0,16:8192:2048:16384,32:8192:4096:0,32:8192:4096:16384 \
    --probe-ragged 8:16384:40960,16:16384:40960,16:28672:28672 \
    --probe-shared 16:20480:8192,32:20480:8192,64:20480:4096 \
    --probe-log "$WORK/calibrate/probes.jsonl" --out "$WORK/calibrate/fit_on_device.yaml" \
    > "$WORK/calibrate/log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null && ! grep -q "wrote .*probes.jsonl" "$WORK/calibrate/log"; do
    [ "$(left)" -gt 0 ] || break; sleep 2; done
  # a first signal stops the probes and lets the fit run on (minutes): the second quits at once
  kill "$pid" 2>/dev/null; sleep 1; kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  cat "$WORK/calibrate/log"
  curl -s -m 10 "$URL/metrics" > "$WORK/calibrate/metrics_after.txt"
  stop_packing; pack calibrate
  [ -f "$TRACE_FILE" ] && { sleep 2; pack_steps calibrate final; }
}

verify() { # `serverbench verify` with vLLM as the candidate and scripts/reference_server.py (float32
  # transformers) as the reference, both serving one random checkpoint (scripts/verify_model.py: a small
  # Qwen3 with the Qwen3 vocabulary, as scripts/verify_h200.sh uses, plus the word-level tokenizer). The
  # benchmark server is stopped first (and waited for: vLLM's memory profiling fails when memory other
  # processes hold comes free while it runs): this vLLM takes half the GPU, the reference a few GB. The
  # frozen deployment is the 200,000-token one (the fitted agentic-coding sessions): on the 40,960-token
  # one, synthetic-v1's held-out seeds overflow the context (1.9 % of requests at c = 8, 30 s, against the
  # emulator), which fails verify's overflow gate whatever the server. So vLLM is started with
  # --max-model-len 200000, which it refuses (ValueError at once) over the checkpoint's own 40,960
  # positions: the attempt of 2026-12-03 waited 312 s for a server that had exited. verify_checkpoint.py
  # sets 262,144, and gives the checkpoint end-of-sequence tokens it emits (the natural-stop gate needs a
  # server that stops without ignore_eos; every other request of verify sends ignore_eos). The held-out
  # runs are 60 s at c = 8: dry-run on a CPU against two fresh `serverbench serve` emulators, 30 s left
  # one lane of eight with nothing completed (the "every session progresses" gate); 60 s passed every gate.
  # The deployment is frozen from a file that names its protocol (cold): a build that reads a file's
  # missing protocol otherwise than the preset's fails verify's check that it resolves as frozen.
  # Measured 2026-12-03 (results/h200-vllm/verify-vllm/): the part took 296 s (checkpoint 70 s, servers up
  # 93 s later, verify 131 s); every gate passed but the natural stop: the eight end-of-sequence tokens
  # ended 8 of 32 random prompts' continuations, and the probe's was not one of them. Since 2026-12-04 the
  # checkpoint has a stop token it ranks first everywhere (verify_checkpoint.py), and the held-out runs
  # count their output text with the checkpoint's tokenizer (--output-tokenizer): vLLM merged several
  # tokens into a chunk in all 124 requests of that day's first try, which the stream gate counts
  # against a candidate unless the text backs the usage.
  if [ "$(left)" -lt 360 ]; then echo "skipping verify: needs ~360 s, $(left) s left"; return 0; fi
  mkdir -p "$WORK/verify"
  if server_alive; then
    local spid
    spid=$(cat "$WORK/server.pid")
    kill -- -"$spid" 2>/dev/null
    for _ in $(seq 1 30); do kill -0 "$spid" 2>/dev/null || break; sleep 1; done
    kill -9 -- -"$spid" 2>/dev/null
  fi
  local used=""
  for _ in $(seq 1 30); do
    used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [ "${used:-0}" -lt 4000 ] && break; sleep 1
  done
  echo "GPU memory in use before verify's servers start: ${used:-?} MiB"
  # the checkpoint outside $WORK/verify, which is packed whole
  local vm=$WORK/verify_model vport=$((PORT + 2)) rport=$((PORT + 3)) t0
  t0=$(date +%s)
  if [ ! -f "$vm/model.safetensors" ]; then
    with_site python3 "$ROOT/scripts/verify_model.py" "$vm" 2>&1 | tail -1
    with_site python3 "$HERE/vllm/make_model.py" "$vm" --tokenizer-only
    with_site python3 "$HERE/vllm/verify_checkpoint.py" "$vm" 2>&1 | grep -v "^WARNING\|Warning" | tee "$WORK/verify/checkpoint.txt"
  fi
  grep -E '"(max_position_embeddings|eos_token_id)"' -A1 "$vm/config.json" | tr -s ' \n' ' '; echo
  echo "checkpoint ready in $(( $(date +%s) - t0 )) s"
  setsid env PYTHONPATH="$SITE" python3 -m vllm.entrypoints.cli.main serve "$vm" --served-model-name "$NAME" \
    --dtype bfloat16 --seed 0 --host 127.0.0.1 --port "$vport" --max-model-len 200000 \
    --gpu-memory-utilization 0.5 --enable-prompt-tokens-details > "$WORK/verify/vllm.log" 2>&1 < /dev/null &
  local vpid=$!
  python3 "$ROOT/scripts/reference_server.py" --model-dir "$vm" --port "$rport" > "$WORK/verify/reference.log" 2>&1 &
  local rpid=$!
  local t=$(date +%s) up="" why="still starting"
  # the replays and the fidelity check take ~180 s once both are up
  while [ "$(left)" -gt 200 ]; do
    curl -s -m 2 "http://127.0.0.1:$vport/v1/models" | grep -q "\"$NAME\"" && \
      curl -s -m 2 "http://127.0.0.1:$rport/health" > /dev/null && { up=1; break; }
    kill -0 "$vpid" 2>/dev/null || { why="vLLM exited"; break; }
    kill -0 "$rpid" 2>/dev/null || { why="the reference exited"; break; }
    sleep 2
  done
  if [ -z "$up" ]; then
    echo "verify: the servers were not up after $(( $(date +%s) - t )) s ($why); giving up with $(left) s left"
    echo "---- vLLM's log, last 40 lines"; tail -n 40 "$WORK/verify/vllm.log" | cut -c1-400
    echo "---- the reference's log, last 10 lines"; tail -n 10 "$WORK/verify/reference.log" | cut -c1-400
    kill -- -"$vpid" 2>/dev/null; kill "$rpid" 2>/dev/null; pack verify; return 1
  fi
  echo "servers up after $(( $(date +%s) - t )) s"
  keep_packing verify
  { "$BIN" simulate -d qwen3-8b-200k-1xh200-vllm --print-config | grep -v '^protocol:'; echo "protocol: cold"; } \
    > "$WORK/verify/deployment.yaml"
  [ -f "$WORK/verify/evaluator.key" ] || "$BIN" keygen --out "$WORK/verify/evaluator" > /dev/null
  "$BIN" freeze -d "$WORK/verify/deployment.yaml" -c 8 --held-out 2 -w 60 --url "http://127.0.0.1:$vport" \
    --server vllm --model "$NAME" --key "$WORK/verify/evaluator.key" -o "$WORK/verify/frozen.json" 2>&1 | tail -n 3
  t=$(date +%s)
  "$BIN" verify "$WORK/verify/frozen.json" --public-key "$WORK/verify/evaluator.pub" --url "http://127.0.0.1:$vport" --reference "http://127.0.0.1:$rport" \
    --output-tokenizer "$vm/tokenizer.json" --out "$WORK/verify/run" > "$WORK/verify/verify.txt" 2>&1
  local rc=$?
  echo "verify: exit $rc after $(( $(date +%s) - t )) s"; tail -n 24 "$WORK/verify/verify.txt"
  if [ "$rc" != 0 ]; then echo "---- vLLM's log, last 15 lines"; tail -n 15 "$WORK/verify/vllm.log" | cut -c1-400; fi
  kill -- -"$vpid" 2>/dev/null; kill "$rpid" 2>/dev/null
  gzip -f "$WORK/verify/run"/*/*.jsonl "$WORK/verify/vllm.log" 2>/dev/null
  stop_packing; pack verify
}

set_flags() { # SET[-TAG] -> the deployment, start and workload flags of compare (a tag names another folder)
  case $1 in
    syn-steady|syn-steady-*) echo "-d qwen3-8b-1xh200-vllm --start steady" ;;
    syn-cold|syn-cold-*) echo "-d qwen3-8b-1xh200-vllm --start cold" ;;
    fit-steady|fit-steady-*) echo "-d qwen3-8b-200k-1xh200-vllm --start steady" ;;
    fit-cold|fit-cold-*) echo "-d qwen3-8b-200k-1xh200-vllm --start cold" ;;
    real-cold|real-cold-*) echo "-d qwen3-8b-200k-1xh200-vllm --start cold --trace $ROOT/corpus/claude-code --trace-format corpus" ;;
    moe-syn-steady|moe-syn-steady-*) echo "-d $ROOT/scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml --start steady" ;;
    moe-syn-cold|moe-syn-cold-*) echo "-d $ROOT/scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml --start cold" ;;
    agentx-real|agentx-real-*) echo "-d qwen3-8b-200k-1xh200-vllm --protocol agentx --trace $AGENTX_TRACE --trace-format corpus --max-context-length 200000" ;;
    *) return 1 ;;
  esac
}

set_api() { # SET[-TAG] -> compare's --api: the AgentX protocols send chat completions, as AgentX does
  case $1 in agentx-*) echo chat ;; *) echo tokens ;; esac
}

compare_set() { # SET LEVELS SEEDS WINDOW [--reuse-only]
  local set=$1 levels=$2 seeds=$3 w=$4 flags
  flags=$(set_flags "$set") || { echo "unknown set $set"; return 1; }
  # shellcheck disable=SC2086
  "$BIN" compare $flags --url "$URL" --api "$(set_api "$set")" --server vllm --model "$NAME" --reuse \
    -c "$levels" -s "$seeds" -w "$w" --out "$WORK/$set" 2>&1
}

runs() {
  local spec set levels seeds w c s done_c done_s
  for spec in $RUNS; do
    IFS=: read -r set levels seeds w <<< "$spec"
    w=${w:-120}; done_c=""; done_s=""
    mkdir -p "$WORK/$set"
    for s in ${seeds//,/ }; do for c in ${levels//,/ }; do
      if [ ! -f "$WORK/$set/real/c${c}_s$s/summary.json" ]; then
        local est=$(( w + 10 + c / 4 ))  # measured: c = 1 took w + 1 s, c = 4 w + 4 s
        if [ "$(set_api "$set")" = chat ]; then
          # the AgentX warm-up comes before the window: the simulator's length of it and half again, and the grace
          local wu
          # shellcheck disable=SC2046
          wu=$("$BIN" simulate $(set_flags "$set") -c "$c" -s "$s" -w "$w" 2>/dev/null \
            | sed -n 's/.*warm-up .* over \([0-9]*\)[.0-9]* s,.*/\1/p' | head -1)
          est=$(( w + 40 + ${wu:-120} * 3 / 2 ))
        fi
        if [ "$(left)" -lt "$est" ]; then echo "skipping $set c=$c s=$s: needs ~$est s, $(left) s left"; continue; fi
        local t=$(date +%s)
        keep_packing "$set"
        compare_set "$set" "$c" "$s" "$w" | tee -a "$WORK/$set/compare.log" | grep -E "^\| $c \||error|warning"
        gzip -f "$WORK/$set/real/c${c}_s$s"/*.jsonl 2>/dev/null
        stop_packing
        echo "$set c=$c s=$s: $(( $(date +%s) - t )) s" | tee -a "$OUT/times.txt"
      fi
      if [ -f "$WORK/$set/real/c${c}_s$s/summary.json" ]; then
        case ",$done_c," in *",$c,"*) ;; *) done_c=${done_c:+$done_c,}$c ;; esac
        case ",$done_s," in *",$s,"*) ;; *) done_s=${done_s:+$done_s,}$s ;; esac
      fi
    done; done
    [ -n "$done_c" ] && compare_set "$set" "$done_c" "$done_s" "$w" > "$WORK/$set/table.txt" 2>&1
    pack "$set"
    [ -f "$TRACE_FILE" ] && { sleep 2; pack_steps "$set" final; echo "$set: step trace lines up to $(cat "$WORK/step_trace.mark")" | tee -a "$OUT/times.txt"; }
  done
}

need_server() { start_server || { save_log; exit 1; }; }
for part in ${*:-install model peers-cuda start check peers calibrate runs}; do
  t=$(date +%s)
  case $part in
    pack) pack_carry || exit 1 ;;
    split) split_carry "${PACK_WORK:-${TMPDIR:-/tmp}/vllm-pack}" "${SB_BIN:-$ROOT/target/release/serverbench}" ;;
    install) install || exit 1 ;;
    model) model || exit 1 ;;
    stash) stash ;;
    moe-pack) moe_pack || exit 1 ;;
    moe-probe) need_server; moe_probe ;;
    idle-gap) need_server; idle_gap ;;
    peers-cuda) install binary && peers_cuda ;;
    start) need_server ;;
    check) need_server; check ;;
    peers) need_server; peers ;;
    fa3-bench) fa3_bench ;;
    moe-bench) moe_bench ;;
    decode-grid) need_server; decode_grid ;;
    calibrate) need_server; calibrate ;;
    runs) need_server; runs ;;
    verify) install && model && verify ;;
    *) echo "unknown part $part" ;;
  esac
  save_log
  echo "part $part took $(( $(date +%s) - t )) s ($(left) s of the call left)" | tee -a "$OUT/times.txt"
done
