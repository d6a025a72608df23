#!/usr/bin/env python3
"""Recommendation regret of every stored vLLM set (results/h200-vllm/*/compare.json): the real D at the
level the simulator recommends, against the best real D measured, for the plain recommendation (best
simulated mean D), for the one under the cost model's error (`sweep`'s level of least worst-case regret
over the profile's nominal figures and both ends of its band, `under_model_error.least_regret` in
sweep.json) and, beside it, for planning for the slow end alone (the level whose least D over the three
is best, `best_worst_case`), each chosen among the set's measured levels.
Also the measured error each profile's band states (p90 of |TPOT| and |TTFT p50| errors up to each of
its sets' real best: the dense sets' for h200-qwen3-8b-vllm, the MoE sets' for h200-qwen3-30b-a3b-vllm, the
H100 set's for the H200 profile moved to it). Prints markdown. Usage: scripts/regret.py [BIN] > results/h200-vllm/regret.md
"""
import json, subprocess, sys, tempfile, os

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/serverbench"
SETS = ["syn-steady", "syn-cold", "fit-cold", "fit-cold-w30", "real-cold-w30", "real-cold-w120", "agentx-real",
        # the synthetic-v1 replays again on a second start of the server (2026-12-05, step trace on)
        "syn-steady-rep", "syn-cold-rep",
        # vLLM serving the Qwen3-30B-A3B shape (results/h200-vllm-moe/replays/, then warm/: a second server start)
        "../h200-vllm-moe/replays/moe-syn-cold", "../h200-vllm-moe/replays/moe-syn-steady",
        "../h200-vllm-moe/warm/moe-syn-cold-warm", "../h200-vllm-moe/warm/moe-syn-steady-warm",
        # vLLM on an H100, simulated with the dense H200 profile moved to it (`calibrate --derive-from`,
        # no H100 measurement in it; results/h100-vllm/): its errors are not the H200 profile's
        "../h100-vllm/agentx-real-knee"]
MOE_DEPLOYMENT = "scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml"
# The fitted spec as the fit-* sets replayed it (results/h200-vllm/README.md).
PINNED = ["--workload", "results/h200-vllm/agentic-coding-as-replayed.yaml"]
DROP = {"--url", "--api", "--server", "--model", "--out"}


def stored_args(cmd):
    """`compare`'s arguments from a stored compare's command, without the device's (server, output,
    `--reuse`), and with the device checkout's paths made this checkout's"""
    args, i = [], cmd.index("compare") + 1
    while i < len(cmd):
        a = cmd[i]
        if a in DROP:
            i += 2
            continue
        if a == "--reuse":
            i += 1
            continue
        # The MoE deployment file by the device's path to it; files by the device checkout's root.
        if a.endswith("/" + MOE_DEPLOYMENT):
            a = MOE_DEPLOYMENT
        for root in ("/work/main/", "/tmp/sbv/"):
            if a.startswith(root):
                a = a[len(root):]
        args.append(a)
        i += 1
    # The stored runs replayed their traces as recorded (before traces were compacted at the context,
    # 2026-12-06): the simulated side does too. AgentX's protocols never compact.
    if "--trace" in args and "agentx" not in " ".join(args) and "--trace-as-recorded" not in args:
        args.append("--trace-as-recorded")
    return args


def sweep_args(cmd):
    """`sweep`'s arguments for a stored compare's levels, its one seed as a range; `--kernels-warm`, since
    the measured levels ran back to back on one server start (each of `sweep`'s levels is a fresh server
    otherwise, whose first steps of each fused-MoE kernel variant wait for its compile)"""
    args, it = [], iter(stored_args(cmd))
    for a in it:
        args += ["--seeds", f"{(s := next(it))}..{int(s) + 1}"] if a == "-s" else [a]
    return args + ["--kernels-warm"]


def set_name(s):
    """a stored set's name in the tables: its folder, with the GPU where it is not the H200"""
    return s.split("/")[-1] + (" (H100)" if "h100" in s else "")


def metric(row, name):
    return next(m for m in row["metrics"] if m["metric"] == name)


def pct(x):
    return f"{100 * x:.0f} %"


def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]


def main():
    print("| set | levels | real best (D) | plain pick (real D) | regret | under-error pick (real D) | regret | slow-end pick (real D) | regret |")
    print("|---|---|---|---|---:|---|---:|---|---:|")
    errors = {"dense": ([], []), "moe": ([], []), "h100": ([], [])}
    for s in SETS:
        d = json.load(open(f"results/h200-vllm/{s}/compare.json"))
        rows = sorted((r for r in d["rows"] if r.get("seed", 0) == 0), key=lambda r: r["concurrency"])
        real = {r["concurrency"]: metric(r, "D")["real"] for r in rows}
        sim = {r["concurrency"]: metric(r, "D")["sim"] for r in rows}
        best = max(real, key=real.get)
        tpot_err, ttft_err = errors["moe" if "moe" in s else "h100" if "h100" in s else "dense"]
        for r in rows:
            if r["concurrency"] <= best:
                tpot_err += [abs(metric(r, "TPOT p50 ms")["rel_error"]), abs(metric(r, "TPOT p90 ms")["rel_error"])]
                ttft_err.append(abs(metric(r, "TTFT p50 s")["rel_error"]))
        plain = max(sim, key=sim.get)
        args = sweep_args(d["meta"]["command"])
        if s.startswith("fit") and "--workload" not in args:
            args += PINNED
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([BIN, "sweep", *args, "--out", tmp], check=True, capture_output=True)
            u = json.load(open(os.path.join(tmp, "sweep.json")))["under_model_error"]
        robust, slow = u["least_regret"], u["best_worst_case"]
        assert u["best_nominal"] == plain, (s, u["best_nominal"], plain)
        regret = lambda c: 1 - real[c] / real[best] if real[best] > 0 else 0.0
        levels = ",".join(str(c) for c in real)
        print(f"| {set_name(s)} | {levels} | {best} ({real[best]:.2f}) | {plain} ({real[plain]:.2f}) | {pct(regret(plain))} | {robust} ({real[robust]:.2f}) | {pct(regret(robust))} | {slow} ({real[slow]:.2f}) | {pct(regret(slow))} |")
    print()
    for name, profile in [("dense", "h200-qwen3-8b-vllm"), ("moe", "h200-qwen3-30b-a3b-vllm"),
                          ("h100", "h100-sxm-qwen3-8b-vllm-derived (the H200 profile moved to an H100)")]:
        tpot_err, ttft_err = errors[name]
        print(f"Measured error of {profile} up to each of its sets' real best: p90 |TPOT error| {pct(p90(tpot_err))} "
              f"({len(tpot_err)} values), p90 |TTFT p50 error| {pct(p90(ttft_err))} ({len(ttft_err)} values).")


if __name__ == "__main__":
    main()
