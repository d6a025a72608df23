#!/usr/bin/env python3
"""Writes the `requests` traces (docs/workload.md, "Trace formats") that stand for the published
benchmarks' request streams: fixed prompt lengths (the published total input tokens / requests, which
includes the chat template's tokens), outputs whose sum is the published total generated tokens (spread
as evenly as integers allow: the published runs did not ignore EOS, and their per-request lengths are
not published), and arrival times from the benchmark's request rate. No hash ids: every prompt is
unique, as random-token prompts are."""
import json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))

def write(name, n, total_in, total_out, rate):
    path = os.path.join(HERE, "traces", name + ".jsonl")
    base_in, extra_in = divmod(total_in, n)
    base_out, extra_out = divmod(total_out, n)
    with open(path, "w") as f:
        for i in range(n):
            # the remainders go to evenly spaced requests, not the first ones
            inp = base_in + (1 if (i * extra_in) // n != ((i + 1) * extra_in) // n else 0)
            out = base_out + (1 if (i * extra_out) // n != ((i + 1) * extra_out) // n else 0)
            at = 0.0 if rate is None else i / rate
            f.write(json.dumps({"arrival_s": at, "input_tokens": inp, "output_tokens": out}) + "\n")
    print(path)

# A: GPUStack performance lab, Qwen3.5-35B-A3B on one H200, vLLM v0.17.1 (baseline, bf16), guidellm
# constant rate 1000/s (its default cap of 512 concurrent requests: --max-open 512).
write("a-throughput-1k-128", 1000, 1033932, 128000, 1000.0)
write("a-long-32k-100", 100, 3200993, 10000, 1000.0)
write("a-genheavy-1k-2k", 200, 201982, 400000, 1000.0)

# B: GPUStack performance lab, gpt-oss-120b on H100, vLLM v0.10.2, `vllm bench serve --dataset-name
# random --request-rate inf` (every request at t = 0, no concurrency cap). Totals of the baseline (1 GPU)
# run; the optimized (tp 2, --async-scheduling) run's totals differ slightly and get their own files.
write("b1-32k-100", 100, 3200000, 9877, None)
write("b1-4k-200", 500, 1999249, 67205, None)
write("b1-2k-100", 500, 999120, 49197, None)
write("b1-128-4", 1000, 127755, 4000, None)
write("b2-32k-100", 100, 3200000, 9955, None)
write("b2-4k-200", 500, 1999249, 68046, None)
write("b2-2k-100", 500, 999120, 49059, None)
write("b2-128-4", 1000, 127755, 4000, None)

# C: GPUStack performance lab, Qwen3-235B-A22B-Instruct-2507 on H100s, vLLM v0.11.0, the same `vllm bench
# serve` random cases. Baseline: bf16, -tp 8; optimized: the FP8 checkpoint, -tp 4,
# --max-num-batched-tokens 16384. 984 of the short case's requests succeeded; they are the ones traced.
write("c1-32k-100", 100, 3200000, 8191, None)
write("c1-4k-200", 500, 1997942, 92185, None)
write("c1-2k-100", 500, 998175, 49500, None)
write("c1-128-4", 984, 125650, 3936, None)
write("c2-32k-100", 100, 3200000, 8281, None)
write("c2-4k-200", 500, 1997942, 90966, None)
write("c2-2k-100", 500, 998175, 49471, None)
write("c2-128-4", 984, 125650, 3936, None)

# D: tenstorrent/tt-inference-server issue #340, Qwen3-30B-A3B on an A100, vLLM's benchmark at
# concurrency 1 (`--max-open 1`): N requests of ISL input and OSL output tokens, all due at t = 0.
for isl, osl, n in ((128, 128, 8), (128, 1024, 4), (1024, 128, 4), (2048, 128, 4), (3072, 128, 4),
                    (4096, 128, 2), (8192, 128, 2)):
    write(f"d-{isl}-{osl}", n, isl * n, osl * n, None)
