#!/usr/bin/env python3
"""The routed experts' GEMM efficiency (`expert_gemm_efficiency`) of a mixture-of-experts profile, fitted
to the prefill steps of a vLLM step trace on their GPU time: the efficiency that minimises the squared
relative error of the steps with more new tokens than the eager floor covers (the floor and every other
term as the profile has them). Plain Python around `serverbench calibrate --check`.

    python3 scripts/vllm/moe_expert_fit.py BIN PROFILE MODEL STEP_LOG [--min-tokens 4096]

STEP_LOG is `analyse.py --write-steps`'s output; prints each candidate's error and the best, and a table of
the fitted profile's error per prefill size.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import tempfile


def per_step(bin_, profile, model, log, out):
    subprocess.run([bin_, "calibrate", "--from-steps", log, "--check", profile, "--model", model,
                    "--hardware", "h200", "--split-kv", "--graph-max-tokens", "512", "--target", "gpu",
                    "--per-step", out], check=True, capture_output=True)
    return list(csv.DictReader(open(out)))


def prefills(rows, min_tokens):
    return [r for r in rows if int(r["prefill_chunks"]) == 1 and int(r["decode_seqs"]) == 0
            and int(r["prefill_new_tokens"]) >= min_tokens]


def cost(rows):
    return sum((float(r["predicted_ms"]) / float(r["measured_ms"]) - 1) ** 2 for r in rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("profile")
    ap.add_argument("model")
    ap.add_argument("log")
    ap.add_argument("--min-tokens", type=int, default=4096)
    a = ap.parse_args()
    text = open(a.profile).read()
    tmp = tempfile.mkdtemp()

    def at(eff):
        p = os.path.join(tmp, f"p{eff:.4f}.yaml")
        body = re.sub(r"^expert_gemm_efficiency:.*\n", "", text, flags=re.M)
        open(p, "w").write(body + f"expert_gemm_efficiency: {eff:.4f}\n")
        return prefills(per_step(a.bin, p, a.model, a.log, os.path.join(tmp, "s.csv")), a.min_tokens)

    grid = [0.20 + 0.01 * k for k in range(61)]
    costs = {e: cost(at(e)) for e in grid}
    best = min(costs, key=costs.get)
    fine = [best - 0.01 + 0.001 * k for k in range(21)]
    costs.update({e: cost(at(e)) for e in fine})
    best = min(costs, key=costs.get)
    rows = at(best)
    errs = [100 * (float(r["predicted_ms"]) / float(r["measured_ms"]) - 1) for r in rows]
    print(f"expert_gemm_efficiency {best:.3f}: {len(rows)} prefill steps of >= {a.min_tokens} new tokens, "
          f"median error {statistics.median(errs):+.1f} %, median |error| "
          f"{statistics.median(abs(e) for e in errs):.1f} %")
    print("\n| new tokens | cached | steps | measured ms (median) | predicted ms | error |")
    print("|---:|---:|---:|---:|---:|---:|")
    groups = {}
    all_rows = prefills(per_step(a.bin, os.path.join(tmp, f"p{best:.4f}.yaml"), a.model, a.log,
                                 os.path.join(tmp, "s.csv")), 1)
    for r in all_rows:
        groups.setdefault((int(r["prefill_new_tokens"]), int(r["prefill_cached_max"])), []).append(r)
    for (n, c), g in sorted(groups.items()):
        m = statistics.median(float(r["measured_ms"]) for r in g)
        p = float(g[0]["predicted_ms"])
        print(f"| {n} | {c} | {len(g)} | {m:.1f} | {p:.1f} | {100 * (p / m - 1):+.1f} % |")


if __name__ == "__main__":
    main()
