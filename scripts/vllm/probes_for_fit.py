#!/usr/bin/env python3
"""The probe log the shipped `h200-qwen3-8b-vllm` profile is fitted from (`calibrate --from-probes
--fit-frontend`), made from what one device session measured (results/h200-vllm/):

- calibrate/probes.jsonl, the black-box probes of `calibrate --endpoint`, less its TPOT probes of 16 and 64
  streams over 8,192-token prompts: those streams never decoded together. Their prompts were sent at once,
  unwarmed: 16 (64) prefills of 8,192 tokens take about 4 (16) s of 8,192-token steps, longer than the
  streams' 64 output tokens, so the streams that started first had finished before the last began, and
  the median stream's time per chunk is that of a smaller batch (64 streams came out at 18.5 ms, which
  would read 94 GB per step at 5.1 TB/s, past the H200's peak). `calibrate --endpoint` now warms each
  stream's prompt first (2026-12-02), so a new probe log needs no such cut.
- peers/vllm.json, scripts/vllm/peer_probe.py's decode cases: 1, 16 and 64 streams over 4,096-token
  prompts, each prompt cached first, the time per token measured only while every stream decodes
  (the median of each stream's gaps there, then the median stream). Written as step-log lines of decode
  steps whose contexts are the prompt plus half the 128 output tokens.

Usage: probes_for_fit.py RESULTS_DIR > probes_fit.jsonl   (RESULTS_DIR: results/h200-vllm)
"""

import json
import os
import sys

UNWARMED_LONG_STREAMS = ("TPOT, 16 concurrent streams over 8192", "TPOT, 64 concurrent streams over 8192")


def main() -> None:
    root = sys.argv[1]
    with open(os.path.join(root, "calibrate", "probes.jsonl")) as f:
        for line in f:
            if line.strip() and json.loads(line)["probe"] not in UNWARMED_LONG_STREAMS:
                sys.stdout.write(line if line.endswith("\n") else line + "\n")
    with open(os.path.join(root, "peers", "vllm.json")) as f:
        peers = json.load(f)
    for case in peers["cases"]:
        if "batch" not in case or case.get("tpot_ms") is None:
            continue
        context = 4096 + 128 // 2
        ms = case["tpot_ms"]
        print(json.dumps({"probe": f"TPOT, {case['batch']} warmed streams over 4096 (peer_probe.py)",
                          "wall_ms": ms, "gpu_ms": ms, "prefill": [], "decode": [context] * case["batch"]}))


if __name__ == "__main__":
    main()
