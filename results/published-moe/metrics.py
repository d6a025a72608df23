#!/usr/bin/env python3
"""Reads a `simulate --out DIR` folder's records.jsonl and prints the published benchmarks' metrics,
computed as `vllm bench serve` computes them: duration (first send to last finish), total token
throughput ((input + output tokens) / duration), mean and median TTFT, mean and median TPOT (per request
(end - first token) / (output tokens - 1), requests of one output token left out), mean end-to-end
latency. Prints one JSON object."""
import json, statistics, sys

def main(d):
    recs = [json.loads(l) for l in open(d + "/records.jsonl")]
    done = [r for r in recs if r.get("outcome") == "completed"]
    start = min(r["send_ns"] for r in recs)
    end = max((r.get("finish_ns") or r["last_token_ns"]) for r in done)
    dur = (end - start) / 1e9
    tin = sum(r["input_tokens"] for r in done)
    tout = sum(r["output_tokens"] for r in done)
    ttft = [(r["first_token_ns"] - r["send_ns"]) / 1e6 for r in done]
    tpot = [(r["last_token_ns"] - r["first_token_ns"]) / 1e6 / (r["output_tokens"] - 1)
            for r in done if r["output_tokens"] > 1]
    e2e = [((r.get("finish_ns") or r["last_token_ns"]) - r["send_ns"]) / 1e9 for r in done]
    out = {
        "requests": len(recs), "completed": len(done), "duration_s": round(dur, 3),
        "input_tokens": tin, "output_tokens": tout,
        "total_tok_s": round((tin + tout) / dur, 2),
        "ttft_mean_ms": round(statistics.mean(ttft), 2), "ttft_median_ms": round(statistics.median(ttft), 2),
        "tpot_mean_ms": round(statistics.mean(tpot), 2) if tpot else None,
        "tpot_median_ms": round(statistics.median(tpot), 2) if tpot else None,
        "latency_mean_s": round(statistics.mean(e2e), 3),
        "preemptions": sum(r.get("preemptions", 0) for r in recs),
    }
    print(json.dumps(out))

if __name__ == "__main__":
    main(sys.argv[1])
