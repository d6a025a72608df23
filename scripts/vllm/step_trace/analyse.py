#!/usr/bin/env python3
"""First look at a vLLM step trace (sitecustomize.py beside this file; README.md says what a line holds).

    python3 scripts/vllm/step_trace/analyse.py STEPS.jsonl[.gz] [...] [--label NAME ...] > steps.md

With a profile's prediction of each step (results/h200-vllm/step-trace/steps.md has the commands):
    analyse.py STEPS.jsonl.gz --write-steps LOG.jsonl         # the steps as a step log, nothing else
    serverbench calibrate --from-steps LOG.jsonl --check PROFILE --model M --hardware H --per-step P.csv
    analyse.py STEPS.jsonl.gz --predicted P.csv > steps.md    # each bin also gets the profile's median

For each file: the steps binned by kind, the median GPU span of each bin (CUDA events: execute_model's
entry to sample_tokens' exit on the main stream), the gap between one step's end and the next one's start
on the GPU, the step period (one step's end to the next one's end: what a decoding request waits per token
when it is in both), and the engine core's CPU time per step. Pure decode steps are binned by batch size
and by the sum of their contexts; steps with a prefill chunk (mixed: with decodes; prefill: without) by
the chunk's tokens and the context before it (the largest chunk's, where there are several). Plain Python.
"""
import argparse
import gzip
import json
import sys

IDLE_GAP_US = 50_000  # a gap this long is the engine waiting for work, not a step-loop cost


def read_jsonl(path):
    """every JSON line of the file (`.gz` read as gzip), a line cut short at the end of a copy left out"""
    op = gzip.open if path.endswith(".gz") else open
    out = []
    with op(path, "rt") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def read(path):
    # a step the scheduler made and whose output it took back (vLLM's own warm-up steps at start-up,
    # which bypass the scheduler, and empty steps are left out)
    return [r for r in read_jsonl(path)
            if "i" in r and "gpu_us" in r and "upd_us" in r and r.get("tok", 0) > 0]


def write_steps(steps, path):
    """the steps as a step log `serverbench calibrate --from-steps … --check PROFILE --per-step CSV` reads"""
    with open(path, "w") as o:
        for r in steps:
            o.write(json.dumps({"at_s": r["i"], "decode": r["dctx"], "prefill": [[p[0], p[1]] for p in r["pf"]],
                                "wall_ms": r["gpu_us"] / 1000, "gpu_ms": r["gpu_us"] / 1000}) + "\n")


def read_predicted(steps, path):
    """the profile's time of each step (`--per-step` CSV, rows in the order of write_steps) -> r["pred_us"]"""
    import csv
    rows = list(csv.DictReader(open(path)))
    if len(rows) != len(steps):
        sys.exit(f"{path}: {len(rows)} rows for {len(steps)} steps")
    for r, row in zip(steps, rows):
        r["pred_us"] = float(row["predicted_ms"]) * 1000


def q(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def med(xs):
    return q(xs, 0.5)


def ms(x, nd=2):
    return "–" if x is None else f"{x / 1000:.{nd}f}"


def band(x, edges, fmt):
    """the label of the band [edges[i], edges[i+1]) holding x"""
    for lo, hi in zip(edges, edges[1:]):
        if lo <= x < hi:
            return fmt(lo, hi)
    return fmt(edges[-1], None)


def k_fmt(lo, hi):
    f = lambda v: f"{v // 1024}K" if v >= 1024 else str(v)
    return f"≥ {f(lo)}" if hi is None else f"{f(lo)}–{f(hi)}" if lo else f"< {f(hi)}"


def n_fmt(lo, hi):
    if hi is None:
        return f"≥ {lo}"
    return str(lo) if hi == lo + 1 else f"{lo}–{hi - 1}"


BATCH = [1, 2, 3, 5, 9, 17, 33, 65, 129]
CTX_SUM = [0, 32768, 65536, 131072, 262144, 524288, 1048576, 2097152]
CHUNK = [1, 513, 2049, 4097, 8192, 8193]
PREFIX = [0, 1, 8192, 32768, 65536, 131072]


def chunk_fmt(lo, hi):
    if hi is None:
        return f"> {lo - 1}"
    if hi == lo + 1:
        return str(lo)
    return f"{lo}–{hi - 1}"


def prefix_fmt(lo, hi):
    if lo == 0 and hi == 1:
        return "0"
    return k_fmt(lo, hi)


def pred(sel):
    """the profile's median for these steps and the median of (predicted - measured) / measured"""
    p = [r["pred_us"] for r in sel if "pred_us" in r]
    if not p:
        return "–", "–"
    e = [100 * (r["pred_us"] - r["gpu_us"]) / r["gpu_us"] for r in sel if "pred_us" in r]
    return ms(med(p)), f"{med(e):+.1f} %"


def table(rows, head):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def analyse(steps, label):
    steps = sorted(steps, key=lambda r: r["i"])
    for a, b in zip(steps, steps[1:]):  # the period: one step's end to the next one's end
        if b["i"] == a["i"] + 1 and b.get("gap_us") is not None and b["gap_us"] < IDLE_GAP_US:
            b["period_us"] = b["gap_us"] + b["gpu_us"]
    out = [f"## {label}", ""]
    n = len(steps)
    if not n:
        return f"## {label}\n\nno steps\n"
    dur_s = (steps[-1]["t0_ns"] - steps[0]["t0_ns"]) / 1e9
    cg = {}
    for r in steps:
        k = r.get("cg", "?")
        cg[k] = cg.get(k, 0) + 1
    pure_d = [r for r in steps if not r["pf"] and r["nd"] > 0]
    mixed = [r for r in steps if r["pf"] and r["nd"] > 0]
    pref = [r for r in steps if r["pf"] and r["nd"] == 0]
    out.append(f"{n} steps over {dur_s:.0f} s: {len(pure_d)} pure decode, {len(mixed)} mixed (a prefill chunk "
               f"beside decodes), {len(pref)} prefill only, {n - len(pure_d) - len(mixed) - len(pref)} other; "
               f"CUDA-graph mode: " + ", ".join(f"{k} {v}" for k, v in sorted(cg.items())) + ".")
    out.append("")
    # ---- the gap and the CPU side
    gaps = [r["gap_us"] for r in steps if r.get("gap_us") is not None]
    busy = [g for g in gaps if g < IDLE_GAP_US]
    out.append("### Between steps (GPU main stream) and the engine core's CPU time per step")
    out.append("")
    rows = []
    for name, sel in (("all steps", steps), ("pure decode", pure_d), ("mixed", mixed), ("prefill only", pref)):
        g = [r["gap_us"] for r in sel if r.get("gap_us") is not None and r["gap_us"] < IDLE_GAP_US]
        rows.append([name, len(g), ms(med(g), 3), ms(q(g, 0.9), 3),
                     f"{100 * sum(1 for x in g if x > 100) / len(g):.0f} %" if g else "–",
                     f"{100 * sum(1 for x in g if x > 1000) / len(g):.0f} %" if g else "–",
                     ms(med([r["gpu_us"] for r in sel])), ms(med([r["period_us"] for r in sel if "period_us" in r])),
                     ms(med([r.get("sched_us", 0) for r in sel]), 3),
                     ms(med([r.get("cpu_exec_us", 0) for r in sel]), 3),
                     ms(med([r.get("cpu_samp_us", 0) for r in sel]), 3),
                     ms(med([r["upd_us"] for r in sel if "upd_us" in r]), 3),
                     ms(med([r.get("hook_us", 0) for r in sel]), 3)])
    out.append(table(rows, ["steps", "n (gap < 50 ms)", "gap p50 ms", "gap p90 ms", "gap > 0.1 ms",
                            "gap > 1 ms", "GPU span p50 ms", "period p50 ms", "schedule() p50 ms",
                            "execute_model() CPU p50 ms", "sample_tokens() CPU p50 ms",
                            "update_from_output() p50 ms", "the hook's own CPU p50 ms"]))
    out.append("")
    out.append(f"Gaps of {IDLE_GAP_US / 1000:.0f} ms or more (the engine idle, waiting for requests) left out: "
               f"{len(gaps) - len(busy)} of {len(gaps)}. Sum of the gaps under that: "
               f"{sum(busy) / 1e6:.2f} s, of the GPU spans: {sum(r['gpu_us'] for r in steps) / 1e6:.2f} s.")
    out.append("")
    # what a decoding request waits per token: the period of each step it decodes in, weighted by decodes
    wd = [(r["period_us"], r["nd"]) for r in steps if r["nd"] and "period_us" in r]
    wm = [(r["period_us"], r["nd"]) for r in mixed if "period_us" in r]
    def wq(pairs, p):
        if not pairs:
            return None
        s = sorted(pairs)
        tot = sum(w for _, w in s)
        acc = 0
        for v, w in s:
            acc += w
            if acc >= p * tot:
                return v
        return s[-1][0]
    if wd:
        tot = sum(w for _, w in wd)
        out.append(f"Per decoded token (each step's period counted once per decode in it): p50 "
                   f"{ms(wq(wd, 0.5))} ms, p90 {ms(wq(wd, 0.9))} ms; {100 * sum(w for _, w in wm) / tot:.0f} % "
                   f"of decoded tokens came from mixed steps (their period p50 {ms(wq(wm, 0.5))} ms).")
        wp = [(r["pred_us"], r["nd"]) for r in steps if r["nd"] and "pred_us" in r]
        if wp:
            out.append(f"The profile's time of the same steps, counted the same way (no gaps): p50 "
                       f"{ms(wq(wp, 0.5))} ms, p90 {ms(wq(wp, 0.9))} ms.")
        out.append("")
    # ---- pure decode
    out.append("### Pure decode steps: median GPU span (ms) by batch size and context sum")
    out.append("")
    bands = [band(r["nd"], BATCH, n_fmt) for r in pure_d]
    cols = [k_fmt(lo, hi) for lo, hi in zip(CTX_SUM, CTX_SUM[1:])] + [k_fmt(CTX_SUM[-1], None)]
    cell = {}
    for r, b in zip(pure_d, bands):
        cell.setdefault((b, band(r["dsum"], CTX_SUM, k_fmt)), []).append(r)
    rows = []
    for b in [n_fmt(lo, hi) for lo, hi in zip(BATCH, BATCH[1:])] + [n_fmt(BATCH[-1], None)]:
        row = [b]
        any_ = False
        for c in cols:
            v = cell.get((b, c))
            if v:
                p, e = pred(v)
                row.append(f"{ms(med([r['gpu_us'] for r in v]))} ({len(v)})" + (f" / {p} ({e})" if p != "–" else ""))
            else:
                row.append("")
            any_ = any_ or bool(v)
        if any_:
            rows.append(row)
    out.append(table(rows, ["decodes \\ context sum"] + cols))
    out.append("")
    out.append("Each cell: measured median (steps) / the profile's median (median error of the profile's "
               "step time against the measured one, step by step) where predictions were given. Per batch size, "
               "all contexts together:")
    out.append("")
    rows = []
    for b in [n_fmt(lo, hi) for lo, hi in zip(BATCH, BATCH[1:])] + [n_fmt(BATCH[-1], None)]:
        sel = [r for r, bb in zip(pure_d, bands) if bb == b]
        if sel:
            pads = [r.get("pad_tok") for r in sel if r.get("pad_tok") is not None]
            rows.append([b, len(sel), ms(med([r["gpu_us"] for r in sel])), ms(q([r["gpu_us"] for r in sel], 0.9)),
                         ms(med([r["fwd_us"] for r in sel])), ms(med([r["smp_us"] for r in sel])),
                         ms(med([r["period_us"] for r in sel if "period_us" in r])),
                         ms(med([r.get("gap_us") for r in sel if r.get("gap_us") is not None and r["gap_us"] < IDLE_GAP_US]), 3),
                         f"{med([r['dsum'] for r in sel]) / 1024:.0f}K",
                         f"{med(pads):.0f}" if pads else "–",
                         ",".join(sorted({str(r.get('cg')) for r in sel}))] + list(pred(sel)))
    out.append(table(rows, ["decodes", "steps", "GPU span p50 ms", "p90 ms", "to execute_model's exit p50 ms",
                            "sampling p50 ms", "period p50 ms", "gap p50 ms", "context sum p50",
                            "padded batch p50", "graph", "profile p50 ms", "profile error p50"]))
    out.append("")
    # each decode count on its own: the step's time against its context sum, measured and the profile's
    rows = []
    for nd in sorted({r["nd"] for r in pure_d}):
        sel = [r for r in pure_d if r["nd"] == nd]
        if len(sel) < 20:
            continue
        m = line([r["dsum"] / 1024 for r in sel], [r["gpu_us"] for r in sel])
        p = line([r["dsum"] / 1024 for r in sel], [r["pred_us"] for r in sel]) if all("pred_us" in r for r in sel) else None
        rows.append([nd, len(sel), f"{med([r['dsum'] for r in sel]) / 1024:.0f}K", ms(med([r["gpu_us"] for r in sel])),
                     pred(sel)[0], f"{m[1]:.1f}" if m else "–", f"{p[1]:.1f}" if p else "–",
                     ms(m[0]) if m else "–", ms(p[0]) if p else "–"])
    if rows:
        out.append("Pure decode steps by their exact number of decodes (20 steps or more): a straight line of "
                   "the GPU span in the context sum, measured and the profile's:")
        out.append("")
        out.append(table(rows, ["decodes", "steps", "context sum p50", "measured p50 ms", "profile p50 ms",
                                "measured µs per 1K context", "profile µs per 1K context",
                                "measured intercept ms", "profile intercept ms"]))
        out.append("")
    fit = decode_fit(pure_d)
    if fit:
        out.append(f"Least squares over the pure decode steps: GPU span ≈ {fit[0] / 1000:.3f} ms + "
                   f"{fit[1] / 1000:.4f} ms × decodes + {fit[2] * 1024 / 1000:.4f} ms per 1K tokens of context "
                   f"sum (rms residual {fit[3] / 1000:.3f} ms, {len(pure_d)} steps).")
        out.append("")
    # ---- steps with prefill
    for name, sel in (("Mixed steps (a prefill chunk beside decodes)", mixed), ("Prefill-only steps", pref)):
        out.append(f"### {name}: median GPU span (ms) by chunk tokens and the context before the chunk")
        out.append("")
        if not sel:
            out.append("none")
            out.append("")
            continue
        pcols = [prefix_fmt(lo, hi) for lo, hi in zip(PREFIX, PREFIX[1:])] + [prefix_fmt(PREFIX[-1], None)]
        crows = [chunk_fmt(lo, hi) for lo, hi in zip(CHUNK, CHUNK[1:])] + [chunk_fmt(CHUNK[-1], None)]
        cell = {}
        for r in sel:
            big = max(r["pf"], key=lambda x: x[0])
            ptok = sum(x[0] for x in r["pf"])
            cell.setdefault((band(ptok, CHUNK, chunk_fmt), band(big[1], PREFIX, prefix_fmt)), []).append(r)
        rows = []
        for c in crows:
            row = [c]
            any_ = False
            for p in pcols:
                v = cell.get((c, p))
                if v:
                    p, e = pred(v)
                    row.append(f"{ms(med([r['gpu_us'] for r in v]))} ({len(v)}; {med([r['nd'] for r in v]):.0f} dec)"
                               + (f" / {p} ({e})" if p != "–" else ""))
                    any_ = True
                else:
                    row.append("")
            if any_:
                rows.append(row)
        out.append(table(rows, ["prefill tokens \\ context before"] + pcols))
        out.append("")
        out.append("Each cell: median GPU span (steps; median decodes beside the chunk) / the profile's median "
                   "(its median error) where predictions were given.")
        out.append("")
    return "\n".join(out) + "\n"


def line(xs, ys):
    """least-squares intercept and slope of ys against xs; None when xs do not vary"""
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return None
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def decode_fit(sel):
    """gpu_us ≈ a + b·nd + c·dsum by least squares (3×3 normal equations, plain Python)"""
    if len(sel) < 10:
        return None
    X = [(1.0, float(r["nd"]), float(r["dsum"])) for r in sel]
    y = [float(r["gpu_us"]) for r in sel]
    A = [[sum(x[i] * x[j] for x in X) for j in range(3)] for i in range(3)]
    b = [sum(x[i] * v for x, v in zip(X, y)) for i in range(3)]
    M = [row[:] + [bi] for row, bi in zip(A, b)]
    for i in range(3):
        p = max(range(i, 3), key=lambda k: abs(M[k][i]))
        if abs(M[p][i]) < 1e-12:
            return None
        M[i], M[p] = M[p], M[i]
        for k in range(3):
            if k != i:
                f = M[k][i] / M[i][i]
                M[k] = [a - f * c for a, c in zip(M[k], M[i])]
    coef = [M[i][3] / M[i][i] for i in range(3)]
    res = [v - (coef[0] + coef[1] * x[1] + coef[2] * x[2]) for x, v in zip(X, y)]
    return coef[0], coef[1], coef[2], (sum(e * e for e in res) / len(res)) ** 0.5


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--label", action="append", help="a heading for each file, in order")
    ap.add_argument("--skip-s", type=float, default=0.0, help="leave out each file's first seconds")
    ap.add_argument("--write-steps", action="append",
                    help="write each file's steps (in order) as a step log for `serverbench calibrate --from-steps "
                         "LOG --check PROFILE --per-step CSV`, and stop")
    ap.add_argument("--predicted", action="append", help="each file's --per-step CSV, in order")
    a = ap.parse_args()
    if a.write_steps and len(a.write_steps) != len(a.files):
        ap.error(f"--write-steps names {len(a.write_steps)} logs for {len(a.files)} traces: one per trace")
    for k, path in enumerate(a.files):
        steps = read(path)
        if a.write_steps:
            write_steps(steps, a.write_steps[k])
            continue
        if a.predicted and k < len(a.predicted):
            read_predicted(steps, a.predicted[k])
        if a.skip_s and steps:
            t0 = min(r["t0_ns"] for r in steps) + a.skip_s * 1e9
            steps = [r for r in steps if r["t0_ns"] >= t0]
        label = a.label[k] if a.label and k < len(a.label) else path
        sys.stdout.write(analyse(steps, label) + "\n")


if __name__ == "__main__":
    main()
