#!/usr/bin/env python3
"""Prints the simulated-against-published tables of README.md from sim_metrics.txt and
sim_metrics_derived.txt (each line: a run's name and metrics.py's JSON). The published figures are
quoted from the sources (README.md gives each URL)."""
import json, os

HERE = os.path.dirname(os.path.abspath(__file__))
# name: (duration s, mean TTFT ms, mean TPOT ms, mean latency s or None)
# A: guidellm's printed mean TPOT contradicts its own latency and TTFT (2.48 ms for 2,000 outputs in
# 57.4 s), so A's TPOT is the mean decode time per token its means imply: (latency - TTFT) / (outputs - 1).
PUB = {
    "a-throughput-1k-128": (40.37, 5809.82, (19.96 - 5.80982) / 127 * 1000, 19.96),
    "a-long-32k-100": (73.72, 31979.13, (47.26 - 31.97913) / 99 * 1000, 47.26),
    "a-genheavy-1k-2k": (57.74, 1915.55, (57.43 - 1.91555) / 1999 * 1000, 57.43),
    "b1-32k-100": (198.92, 99444.04, 23.99, None),
    "b1-4k-200": (145.04, 72954.68, 31.70, None),
    "b1-2k-100": (72.87, 36234.76, 41.35, None),
    "b1-128-4": (7.72, 4850.46, 304.80, None),
    "b2-32k-100": (98.86, 48826.05, 220.32, None),
    "b2-4k-200": (59.94, 29487.34, 164.73, None),
    "b2-2k-100": (30.75, 15291.77, 139.32, None),
    "b2-128-4": (4.18, 2800.15, 183.05, None),
    "c1-32k-100": (141.60, 70409.55, 132.10, None),
    "c1-4k-200": (98.99, 47811.58, 68.94, None),
    "c1-2k-100": (43.91, 21313.79, 101.08, None),
    "c1-128-4": (8.83, 7042.17, 212.98, None),
    "c2-32k-100": (208.79, 103754.50, 194.60, None),
    "c2-4k-200": (126.76, 60513.14, 89.52, None),
    "c2-2k-100": (55.28, 26860.95, 125.93, None),
    "c2-128-4": (6.11, 5621.51, 125.18, None),
}

# D: (mean TTFT ms, mean TPOT ms) of the table at concurrency 1
PUB_D = {"d-128-128": (35.7, 9.6), "d-128-1024": (27.0, 9.7), "d-1024-128": (70.3, 9.8),
         "d-2048-128": (81.0, 9.9), "d-3072-128": (90.2, 10.1), "d-4096-128": (75.2, 10.3),
         "d-8192-128": (227.0, 10.6)}

def load(f):
    out = {}
    for l in open(os.path.join(HERE, f)):
        name, js = l.split(" ", 1)
        out[name.replace("-derived", "")] = json.loads(js)
    return out

def err(s, p):
    return f"{(s - p) / p * 100:+.0f} %"

def table(sims, keys, title):
    print(f"\n**{title}**\n")
    print("| run | duration s (sim / pub, error) | mean TTFT s | mean TPOT ms | preemptions (sim) |")
    print("|---|---|---|---|---|")
    errs = []
    for k in keys:
        s = sims[k]; d, t, p, _ = PUB[k]
        e = (s["duration_s"] - d) / d
        errs.append(abs(e))
        print(f"| {k} | {s['duration_s']:.1f} / {d:.1f} ({err(s['duration_s'], d)}) | "
              f"{s['ttft_mean_ms']/1000:.2f} / {t/1000:.2f} ({err(s['ttft_mean_ms'], t)}) | "
              f"{s['tpot_mean_ms']:.1f} / {p:.1f} ({err(s['tpot_mean_ms'], p)}) | {s['preemptions']} |")
    return errs

nom = load("sim_metrics.txt")
der = load("sim_metrics_derived.txt")
table(nom, [k for k in PUB if k.startswith("a")], "A: Qwen3.5-35B-A3B, 1 x H200, vLLM v0.17.1 (profile h200-qwen3-30b-a3b-vllm)")
for src, title in (("b1", "B1: gpt-oss-120b, 1 x H100, vLLM v0.10.2"), ("b2", "B2: gpt-oss-120b, 2 x H100 (tp 2, --async-scheduling), vLLM v0.10.2"),
                   ("c1", "C1: Qwen3-235B-A22B bf16, 8 x H100 (tp 8), vLLM v0.11.0"), ("c2", "C2: Qwen3-235B-A22B fp8, 4 x H100 (tp 4, 16,384-token budget), vLLM v0.11.0")):
    keys = [k for k in PUB if k.startswith(src)]
    table(nom, keys, title + " — profile h100-sxm-datasheet")
    table(der, keys, title + " — profile derived from h200-qwen3-30b-a3b-vllm")

print("\n**D: Qwen3-30B-A3B, 1 x A100 80 GB (assumed), vLLM (version not given), concurrency 1**\n")
print("| ISL-OSL | TTFT ms datasheet / derived / pub (errors) | TPOT ms datasheet / derived / pub (errors) |")
print("|---|---|---|")
for k, (t, p) in PUB_D.items():
    a, b = nom[k], der[k]
    print(f"| {k[2:]} | {a['ttft_mean_ms']:.1f} / {b['ttft_mean_ms']:.1f} / {t} ({err(a['ttft_mean_ms'], t)}, {err(b['ttft_mean_ms'], t)}) | "
          f"{a['tpot_mean_ms']:.2f} / {b['tpot_mean_ms']:.2f} / {p} ({err(a['tpot_mean_ms'], p)}, {err(b['tpot_mean_ms'], p)}) |")
