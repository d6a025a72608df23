#!/usr/bin/env bash
# The hostile-input battery of docs/reliability.md: every reproduction of the hardening issue, run
# against a release binary, each classified by how it ended. Exit codes 0, 2 (refused with an error),
# 3 (an invalid run) and 130 (interrupted) are clean; 101 is a panic, 134 an abort, 124 a hang (the
# 60 s timeout). Prints one line per case and a tally. Usage: BIN=target/release/serverbench bash
# scripts/hostile.sh
set -u
BIN=${BIN:-target/release/serverbench}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
printf '{"timestamp":0,"input_length":2000000,"output_length":10,"hash_ids":[]}\n' > "$T/o.jsonl"
printf 'base: qwen3-8b-1xh200\ncontext_limit: 100\n' > "$T/ctx100.yaml"
printf 'dp: 4294967295\n' > "$T/dp.yaml"
printf 'tp: 65536\ndp: 65536\n' > "$T/tpdp.yaml"
printf 'root_turns: {dist: constant, value: 1000000000}\n' > "$T/turns.yaml"
printf 'subagents: {fanout: {dist: geometric, p: 0.5, offset: .nan}}\n' > "$T/nan.yaml"
printf 'system_prefix_tokens: 4294967295\n' > "$T/prefix.yaml"
printf 'engine: {speculative: {method: draft, k: 4, acceptance: 0.8, draft_params: 1.0e30}}\n' > "$T/draft.yaml"
printf 'engine: {speculative: {method: draft, k: 4, acceptance: 0.8, draft_params: -1.0e9}}\n' > "$T/negdraft.yaml"
printf 'prices: {input_per_m: .inf}\n' > "$T/price.yaml"
printf 'gpu_hour_dollars: .inf\n' > "$T/gpu.yaml"
printf 'slo: {ttft_s: .inf}\n' > "$T/slo.yaml"
printf 'engine:\n  gpu_memory_utilization: 0.2\n' > "$T/mem.yaml"
L='{"timestamp":0,"input_length":600,"output_length":5,"hash_ids":[1,2]}'
printf '%s %s\n' "$L" "$L" > "$T/two.jsonl"
M=tests/fixtures/mooncake/sample_200.jsonl
# The second round (#32): deep YAML nesting, a byte-order mark, tp against the heads, a tiny window,
# an empty prompt, a level given twice.
{ printf 'root_turns: '; head -c 100000 /dev/zero | tr '\0' '['; } > "$T/deep.yaml"
printf '\xef\xbb\xbfbase: qwen3.5-9b-2xl40\n' > "$T/bom.yaml"
printf 'base: qwen3.5-9b-2xl40\ntp: 3\n' > "$T/tp3.yaml"
printf '{"session_id": 0, "block_size": 64, "requests": [{"id": 0, "agent": 0, "kind": "root_turn", "deps": [], "think_ns": 0, "input_tokens": 0, "output_tokens": 5, "background": false, "turn": 0, "blocks": []}]}\n' > "$T/empty.jsonl"
# The third round (#41): an error inside a spec's list, a tiny geometric p, linked folders …
printf 'new_tokens: {bands: [{dist: {dist: constant, value: -1}}]}\n' > "$T/bands.yaml"
printf 'subagents: {fanout: {dist: geometric, p: 1.0e-17, offset: 1}}\n' > "$T/tinyp.yaml"
printf '{"format":"serverbench-corpus","version":1,"id":"x","source":"t","calls":[{"agent":0,"deps":[],"input":4294967295,"app":0,"output":5}]}\n' > "$T/hugecorpus.jsonl"
printf '{"format":"serverbench-corpus","version":1,"id":"x","source":"t","calls":[{"agent":0,"deps":[],"sent_s":10.0,"done_s":4.0,"input":100,"app":0,"output":5}]}\n' > "$T/earlydone.jsonl"
printf '{"format":"serverbench-corpus","version":1,"id":"x","source":"t","calls":[{"agent":0,"deps":[],"sent_s":10.0,"done_s":12.0,"input":100,"output":5},{"agent":1,"deps":[0],"sent_s":3.0,"done_s":4.0,"input":100,"output":5}]}\n' > "$T/sentbefore.jsonl"
mkdir -p "$T/links" && cp tests/fixtures/weka/sample_trace.json "$T/links/" && ln -s . "$T/links/a" && ln -s . "$T/links/b"
# … a corpus with one session the generator cannot draw, ten copies of one session, a URL no replay
# takes, and a signed frozen file edited after `freeze`.
{ printf '{"format":"serverbench-corpus","version":1,"id":"outlier","source":"claude-code","calls":[{"agent":0,"deps":[],"input":2000000,"app":0,"output":5}]}\n'
  head -n 24 corpus/claude-code/logs.jsonl; } > "$T/outlier.jsonl"
for _ in $(seq 10); do head -n 1 corpus/claude-code/logs.jsonl; done > "$T/copies.jsonl"
$BIN keygen --out "$T/evaluator" > /dev/null
$BIN freeze -c 2 -w 60 --url http://127.0.0.1:1 --key "$T/evaluator.key" -o "$T/frozen.json" > /dev/null
sed 's/"concurrency": 2/"concurrency": 3/' "$T/frozen.json" > "$T/edited-frozen.json"
cases=(
  "workload fit $T/outlier.jsonl --trees 50"
  "workload stats --trace $T/copies.jsonl"
  "freeze -c 2 --url not-a-url -o $T/bad-url.json"
  "verify $T/edited-frozen.json --public-key $T/evaluator.pub --out $T/v"
  "verify $T/frozen.json --out $T/v"
  "calibrate --endpoint http://127.0.0.1:1"
  "calibrate --endpoint http://127.0.0.1:1 --probe-prompts 4000000000"
  "calibrate --endpoint http://127.0.0.1:1 --probe-ragged 1024:16:16000000"
  "simulate --workload $T/bands.yaml -w 60"
  "simulate --workload $T/tinyp.yaml -w 60"
  "workload stats --trace $T/links"
  "workload stats --trace $T/hugecorpus.jsonl"
  "replay --url http://127.0.0.1:1 --trace $T/hugecorpus.jsonl -w 60"
  "workload stats --trace $T/earlydone.jsonl"
  "workload stats --trace $T/sentbefore.jsonl"
  "what-if -c 0 -w 60"
  "simulate --workload $T/deep.yaml"
  "simulate -d $T/deep.yaml"
  "simulate -d $T/bom.yaml -w 60"
  "simulate -d $T/tp3.yaml"
  "simulate -w 1e-300"
  "simulate --trace $T/empty.jsonl"
  "sweep -c 4,4 --seeds 1 -w 60"
  "simulate --trace $T/o.jsonl -c 1 -w 60"
  "sweep --trace $T/o.jsonl -c 1 --seeds 2 -w 60"
  "simulate -d $T/ctx100.yaml --trace $M -w 60"
  "simulate -c 1000000"
  "simulate -d $T/dp.yaml"
  "simulate -d $T/tpdp.yaml"
  "sweep --seeds 1000000000"
  "sweep -w 120 --seeds 0..18446744073709551615 -c 1"
  "workload stats --trees 1000000000000"
  "simulate --workload $T/turns.yaml"
  "simulate --workload $T/nan.yaml"
  "simulate --workload $T/prefix.yaml"
  "simulate --trace /dev/zero"
  "replay --url http://127.0.0.1:1 --timeout inf"
  "replay --url http://127.0.0.1:1 --timeout 1e30"
  "replay --url http://127.0.0.1:1"
  "replay --url https://127.0.0.1:1"
  "replay --url 127.0.0.1:8000"
  "replay --url http://127.0.0.1:1 --header bad"
  "workload stats --trace $T/two.jsonl"
  "workload scan -c 0"
  "workload scan -w 0"
  "workload scan -w NaN"
  "workload scan --window=-5"
  "simulate -d $T/draft.yaml"
  "simulate -d $T/negdraft.yaml"
  "simulate -d $T/price.yaml"
  "simulate -d $T/gpu.yaml"
  "simulate -d $T/slo.yaml"
  "simulate -w 1e12"
  "sweep --threads 10000"
  "simulate -d $T/mem.yaml"
  "serve --time-scale 1e300"
  "what-if --profile presets/profiles/l40-derived.yaml -c 4 --seeds 1 -w 60"
)
# #32 config: a context limit too small for the workload, an alias bomb, sub-agents nested past 61
# levels, --vocab past the model's, a profile named by file (beside the deployment, run from here),
# --profile over a file that moves to another GPU, an edited deployment, a what-if row that cannot run.
printf 'base: qwen3.5-9b-2xl40\ncontext_limit: 1\n' > "$T/ctx1.yaml"
{ printf 'a: &a [1,2,3,4,5,6,7,8,9,10]\n'; p=a; for n in b c d e f g h; do
    printf '%s: &%s [*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s,*%s]\n' $n $n $p $p $p $p $p $p $p $p $p $p; p=$n
  done; } > "$T/bomb.yaml"
W='{"in": 100, "out": 5, "hash_ids": [1]}'; A="[$W]"
for _ in $(seq 62); do A="[$W, {\"type\": \"subagent\", \"requests\": $A}]"; done
printf '{"requests": %s}\n' "$A" > "$T/weka62.json"
mkdir -p "$T/fits"
sed 's/^name: .*/name: my-l40/' presets/profiles/l40-datasheet.yaml > "$T/fits/my-l40.yaml"
printf 'base: qwen3.5-9b-2xl40\nprofile: fits/my-l40.yaml\n' > "$T/byfile.yaml"
printf 'base: qwen3-8b-1xh200\nhardware: l40\n' > "$T/onl40.yaml"
printf 'base: qwen3.5-9b-2xl40\nengine: {max_num_seqs: 8}\n' > "$T/edited.yaml"
cases+=(
  "simulate -d $T/ctx1.yaml -w 60"
  "sweep -d $T/ctx1.yaml -c 1 --seeds 1 -w 60"
  "simulate -d $T/bomb.yaml"
  "workload stats --trace $T/weka62.json"
  "replay --url http://127.0.0.1:1 --vocab 4294967295"
  "simulate -d $T/byfile.yaml -w 60"
  "simulate -d $T/onl40.yaml -w 60"
  "simulate -d $T/onl40.yaml --profile $T/fits/my-l40.yaml -w 60"
  "simulate -d $T/edited.yaml -w 60"
  "what-if -c 4,8 --seeds 1 -w 60"
)
declare -A tally
# #32 runtime: a server's failures, full disks and output folders (against a `serve` of this binary in
# the background), then signals in the block after the broken pipes.
PORT=$(( 20000 + RANDOM % 20000 ))
$BIN serve -d qwen3.5-9b-2xl40 --port $PORT --time-scale 10 2> /dev/null &
SERVE=$!
trap 'kill $SERVE 2> /dev/null; rm -rf "$T"' EXIT
sleep 1
mkdir -p "$T/full" && ln -s /dev/full "$T/full/records.jsonl"
U=http://127.0.0.1:$PORT
cases+=(
  "replay --url $U -d qwen3.5-9b-2xl40 --timeout 1e-9 -w 20"
  "replay --url $U -d qwen3.5-9b-2xl40 -c 2 -w 60 --time-scale 10 --no-probe --out $T/full"
  "sweep --seeds 0..4000 --out /dev/null/out"
)
# #41 runtime: servers that misbehave one way each (scripts/hostile_server.py): usage beyond the
# chunks streamed, an endless or 200,000-long model list, "\n\r\n" framing, a gzip stream, a server that
# never answers (calibrate --timeout); and what the importers and serve refuse by name.
H=$(( PORT + 2 )); HOSTILE=""
for mode in inflate inflate-ask endless-models many-models crlf gzip stall; do
  python3 scripts/hostile_server.py $H $mode & HOSTILE+=" $!"
  cases+=("replay --url http://127.0.0.1:$H --model m -d qwen3.5-9b-2xl40 -c 2 -w 5 --no-probe")
  H=$(( H + 1 ))
done
unset 'cases[${#cases[@]}-1]'
cases+=("calibrate --endpoint http://127.0.0.1:$(( H - 1 )) --model qwen3.5-9b --served-model m --hardware l40 --timeout 2 --probe-prompts 64 --probe-log $T/stall.jsonl")
trap 'kill $SERVE $HOSTILE 2> /dev/null; rm -rf "$T"' EXIT
printf '{"trajectory": [{"action": "ls", "execution_time": 1e300, "query": [{"role": "system", "content": "s"}]}], "info": {}}\n' > "$T/traj.traj"
mkdir -p "$T/emptydir"
cases+=(
  "workload stats --trace $T/traj.traj --trace-format trajectory"
  "workload stats --trace $T/emptydir"
)
sleep 1
for c in "${cases[@]}"; do
  timeout 60 $BIN $c > "$T/out" 2> "$T/err"
  rc=$?
  kind=clean
  case $rc in 0|2|3|130) ;; 101) kind=PANIC ;; 134) kind=ABORT ;; 124) kind=HANG ;; *) kind="exit-$rc" ;; esac
  grep -q panicked "$T/err" && kind=PANIC
  tally[$kind]=$(( ${tally[$kind]:-0} + 1 ))
  printf '%-7s rc=%-3s %s\n        %s\n' "$kind" "$rc" "$c" "$(head -c 160 "$T/err" | head -n 1)"
done
# Broken pipes: the reader goes away after one byte.
for c in "workload stats --trees 3000" "screen -c 4 --seeds 16 -w 60"; do
  $BIN $c 2> "$T/err" | head -c 1 > /dev/null
  rc=${PIPESTATUS[0]}
  kind=clean; [ "$rc" = 0 ] || kind="exit-$rc"; grep -q panicked "$T/err" && kind=PANIC
  tally[$kind]=$(( ${tally[$kind]:-0} + 1 ))
  printf '%-7s rc=%-3s %s | head -c 1\n' "$kind" "$rc" "$c"
done
# #32 runtime: SIGTERM and Ctrl-C (`timeout -s`) during long commands: each must end within 5 s of
# the signal (kill -9 after 10 s counts as a hang), with exit 130 (0 for serve) and its files marked
# (`file: needle`); and a 17 MB body (8.5 M token ids, under the body limit of a 1M-token context,
# over its prompt limit) to serve, refused within 5 s.
signalled=(
  "TERM|replay --url $U -d qwen3.5-9b-2xl40 -c 4 -w 600 --time-scale 10 --no-probe --out $T/r|$T/r/summary.json: interrupted by SIGTERM"
  "TERM|sweep -c 1,4,16,64 --seeds 0..2000 --out $T/s|$T/s/sweep.json: \"partial\": true"
  "INT|screen -c 16 --seeds 0..20000 --out $T/c|$T/c/screen.json: \"partial\": true"
  "TERM|serve -d qwen3-8b-1xh200 --port $(( PORT + 1 )) --drain-timeout 2|"
  "TERM|calibrate --endpoint $U --model qwen3.5-9b --served-model qwen3.5-9b --probe-long-streams 64 --probe-log $T/p.jsonl|"
  "TERM|workload export --trees 20000 -o $T/export.jsonl|$T/err: export stopped"
)
for s in "${signalled[@]}"; do
  IFS='|' read -r sig c check <<< "$s"
  timeout --preserve-status -k 8 -s "$sig" 2 $BIN $c > "$T/out" 2> "$T/err"
  rc=$?
  kind=clean
  case $rc in 0|130) ;; 101) kind=PANIC ;; 134) kind=ABORT ;; 124|137) kind=HANG ;; *) kind="exit-$rc" ;; esac
  grep -q panicked "$T/err" && kind=PANIC
  if [ -n "$check" ] && ! grep -q "${check#*: }" "${check%%: *}" 2> /dev/null; then kind=UNMARKED; fi
  tally[$kind]=$(( ${tally[$kind]:-0} + 1 ))
  printf '%-7s rc=%-3s SIG%s after 2 s: %s\n        %s\n' "$kind" "$rc" "$sig" "$c" "$(tail -n 1 "$T/err" | head -c 160)"
done
{ printf '{"prompt": ['; head -c 8500000 /dev/zero | tr '\0' '1' | sed 's/1/1,/g'; printf '1], "max_tokens": 1}'; } > "$T/big.json"
started=$(date +%s)
code=$(curl -s -o "$T/err" -w '%{http_code}' --max-time 10 -H 'Content-Type: application/json' --data-binary @"$T/big.json" "$U/v1/completions")
kind=clean; [ "$code" = 400 ] || kind="http-$code"; [ $(( $(date +%s) - started )) -le 5 ] || kind=SLOW
tally[$kind]=$(( ${tally[$kind]:-0} + 1 ))
printf '%-7s %s  serve: a 17 MB body of 8.5 M token ids\n        %s\n' "$kind" "$code" "$(head -c 160 "$T/err")"
code=$(curl -s -o "$T/err" -w '%{http_code}' --max-time 10 -H 'Content-Type: application/json' -d '{"model": "qwen3.5-9b", "messages": []}' "$U/v1/chat/completions")
kind=clean; [ "$code" = 400 ] && grep -q "messages" "$T/err" || kind="http-$code"
tally[$kind]=$(( ${tally[$kind]:-0} + 1 ))
printf '%-7s %s  serve: a chat request of no messages\n        %s\n' "$kind" "$code" "$(head -c 160 "$T/err")"
echo
for k in "${!tally[@]}"; do echo "$k: ${tally[$k]}"; done
