#!/usr/bin/env bash
# What the black-box probes cannot see: the attention efficiency of steps that mix a prefill chunk with
# long decodes (transformers' packed attention). Re-scores the stored transformers runs
# (results/h200-transformers/) with the shipped profile's attention_efficiency replaced by each value
# of EFFICIENCIES; CPU only. Usage: BIN=target/release/serverbench bash scripts/transformers_scan.sh
set -eu
BIN=${BIN:-target/release/serverbench}
RES=results/h200-transformers
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "# attention_efficiency of h200-qwen3-8b-transformers against the stored runs"
echo
echo "Each cell: simulated / measured (error). Made by scripts/transformers_scan.sh."
for e in ${EFFICIENCIES:-1.0 0.6 0.5 0.4 0.25}; do
  sed "s/^attention_efficiency: .*/attention_efficiency: $e/; s/^name: .*/name: scan/" \
    presets/profiles/h200-qwen3-8b-transformers.yaml > "$TMP/profile.yaml"
  for part in levels seeds; do
    rm -rf "$TMP/$part"; mkdir -p "$TMP/$part"; cp -r "$RES/$part/real" "$TMP/$part/"
  done
  echo; echo "## attention_efficiency $e"; echo
  "$BIN" compare -d qwen3-8b-1xh200-transformers --start steady --profile "$TMP/profile.yaml" -c 1,4,8,16 -s 0 -w 120 \
    --reuse --out "$TMP/levels" 2>/dev/null | grep '^|'
  echo
  "$BIN" compare -d qwen3-8b-1xh200-transformers --start steady --profile "$TMP/profile.yaml" -c 4 -s 1,2,3,4,5,6,7,8 -w 60 \
    --reuse --out "$TMP/seeds" 2>/dev/null | grep '^|\|^Seed ranking'
done
