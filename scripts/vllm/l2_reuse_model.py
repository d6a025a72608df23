#!/usr/bin/env python3
"""Tries a mechanism for FlashAttention 3's decode over a shared prefix against the bench's 22 cases
(results/h200-vllm/split-kv/fa3-bench/fa3-shared*.json: each batch with its first 20,480 keys shared, and the
same contexts on pages of their own): a re-read of a shared page is served from the L2 — costing ALPHA of a
read from memory — only when another sequence's thread block read the same page of the same KV head less
than W block-times earlier. Thread blocks follow FlashAttention 3's split-KV rule (calibration/src/splitkv.rs:
⌈1.1 · blocks · heads / SMs⌉ blocks per SM, at most 32 pieces a sequence); every block reads one 128-key block
per block-time — from the piece's first block to its last, or (`--reverse`) from its last to its first, the
order FlashAttention's kernels walk a piece's KV blocks (`for n_block = n_block_max - 1; n_block >=
n_block_min; --n_block`: the causal edge first); blocks start as the 132 SMs free up, in each of six launch
orders (sequence, piece, head nested either way) or all at once (ORDER "once"). For each order, (W, ALPHA) is fitted by least squares on the
saving (1 − shared time / unshared time), and the best order's cases are listed. W = inf is a constant ALPHA
(every re-read from the L2), the model the split-KV README set aside.

    python3 scripts/vllm/l2_reuse_model.py > results/h200-vllm/split-kv/l2-reuse.md
    python3 scripts/vllm/l2_reuse_model.py --reverse > results/h200-vllm/split-kv/l2-reuse-reverse.md
    python3 scripts/vllm/l2_reuse_model.py --check fa3-shared-delta   (another bench file beside both models)
    python3 scripts/vllm/l2_reuse_model.py --fit-soft   (the soft window exp(−gap / tau) from the end, per launch order)
    python3 scripts/vllm/l2_reuse_model.py --order-check   (the split-KV time model, longest first or in batch order)

Plain Python, a CPU, a second or so.
"""
import heapq
import json
import math
import sys

SMS, HEADS, BLOCK = 132, 8, 128
BENCH = "results/h200-vllm/split-kv/fa3-bench/{}.json"
ORDERS = ["once", "s,j,h", "s,h,j", "j,s,h", "j,h,s", "h,s,j", "h,j,s"]


def pieces(ctxs):
    """(blocks, blocks per piece) of each sequence under FA3's split rule"""
    total = sum(-(-c // BLOCK) for c in ctxs)
    per_sm = max(1, math.ceil(total * 1.1 * HEADS / SMS))
    out = []
    for c in ctxs:
        n = -(-c // BLOCK)
        k = min(max(1, -(-n // per_sm)), 32)
        out.append((n, -(-n // k)))
    return out


def starts(st, order):
    """start time (block-times) of each (sequence, piece, head) thread block"""
    tbs = [(min(pp, n - j * pp), s, j, h) for s, (n, pp) in enumerate(st) for j in range(-(-n // pp))
           for h in range(HEADS)]
    if order == "once":
        return {(s, j, h): 0.0 for _, s, j, h in tbs}
    pos = {"s": 1, "j": 2, "h": 3}
    tbs.sort(key=lambda t: tuple(t[pos[k]] for k in order.split(",")))
    free = [0.0] * SMS
    out = {}
    for length, s, j, h in tbs:
        t = heapq.heappop(free)
        out[(s, j, h)] = t
        heapq.heappush(free, t + length)
    return out


def read_offset(b, n, pp, reverse):
    """block-times after its piece's start at which a sequence of `n` blocks cut into pieces of `pp`
    reads its block `b`"""
    j = b // pp
    return min((j + 1) * pp, n) - 1 - b if reverse else b - j * pp


def hit_share(ctxs, shared, order, w=None, reverse=False, tau=None):
    """re-reads served from the L2 as a share of all the batch's block reads (`once_hits` over the
    batch's `shared` tokens: within `w` block-times, or with the soft window `tau`)"""
    hits = once_hits(ctxs, shared // BLOCK, reverse, w, tau, order)
    return hits / sum(n for n, _ in pieces(ctxs))


# The split-KV time model of calibration/src/splitkv.rs, for the order its thread blocks start in: each
# running block reads at the bandwidth's share, never more than one SM's rate (75 blocks saturate an
# H200's memory, README "What FlashAttention 3 does with a decode batch").
BANDWIDTH, SATURATING, KV_BYTES_PER_TOKEN = 4.8e12, 75, 128 * 2 * 2  # bytes/s; one head's K and V


def span_s(ctxs, longest_first=True):
    """Seconds one layer's decode attention takes under the split-KV schedule: thread blocks started as
    the SMs free up, longest first (the shipped model) or in the batch's own order (sequence, piece,
    head: the order the kernel's grid enumerates them)."""
    work = [min(pp, n - j * pp) * BLOCK * KV_BYTES_PER_TOKEN
            for n, pp in pieces(ctxs) for j in range(-(-n // pp)) for _ in range(HEADS)]
    if longest_first:
        work.sort(reverse=True)
    pending, running, t = work[::-1], [], 0.0
    while pending or running:
        while pending and len(running) < SMS:
            running.append(pending.pop())
        rate = min(BANDWIDTH / len(running), BANDWIDTH / SATURATING)
        dt = min(running) / rate
        t += dt
        running = [w - rate * dt for w in running if w - rate * dt > 1e-3]
    return t


def order_check(names=("fa3", "fa3-shared", "fa3-shared-steady")):
    """The H200 bench's cases without a shared prefix: measured µs a layer beside the time model with its
    thread blocks longest first and in the batch's order, one intercept (the median gap) for both."""
    rows = []
    for name in names:
        for c in json.load(open(BENCH.format(name)))["cases"]:
            if c.get("shared", 0) == 0 and c.get("num_splits", 32) == 32:
                rows.append((c["ctxs"], c["us"], span_s(c["ctxs"]) * 1e6, span_s(c["ctxs"], False) * 1e6))
    a = sorted(us - lf for _, us, lf, _ in rows)[len(rows) // 2]
    print(f"# The split-KV time model's launch order against the H200 bench (cases without a shared prefix)\n")
    print(f"`python3 scripts/vllm/l2_reuse_model.py --order-check`; µs a layer, the model plus {a:.1f} µs (the "
          "median gap to the longest-first model).\n")
    print("| sequences | contexts (first four) | measured | longest first | batch order |\n|---:|---|---:|---:|---:|")
    errs = {True: [], False: []}
    for ctxs, us, lf, bo in sorted(rows, key=lambda r: (len(r[0]), sum(r[0]))):
        text = ", ".join(str(x) for x in ctxs[:4]) + (", …" if len(ctxs) > 4 else "")
        errs[True].append((lf + a) / us - 1)
        errs[False].append((bo + a) / us - 1)
        print(f"| {len(ctxs)} | {text} | {us:.1f} | {lf + a:.1f} ({100 * ((lf + a) / us - 1):+.1f} %) | "
              f"{bo + a:.1f} ({100 * ((bo + a) / us - 1):+.1f} %) |")
    for lf, e in errs.items():
        rms = math.sqrt(sum(x * x for x in e) / len(e))
        print(f"\n{'Longest first' if lf else 'Batch order'}: relative rms {100 * rms:.1f} %.")


def cases(names=("fa3-shared", "fa3-shared-steady")):
    out = []
    for name in names:
        cs = json.load(open(BENCH.format(name)))["cases"]
        for a, b in zip(cs[0::2], cs[1::2]):
            assert a["shared"] > 0 and b["shared"] == 0 and a["ctxs"] == b["ctxs"]
            out.append((a["ctxs"], a["shared"], 1 - a["us"] / b["us"]))
    return out


def best_alpha(share, cs, alphas):
    """(rms, ALPHA) of the ALPHA in `alphas` whose savings `share · (1 − ALPHA)` fit cases `cs` best"""
    def rms(a):
        return math.sqrt(sum((h * (1 - a) - m) ** 2 for h, (_, _, m) in zip(share, cs)) / len(cs))
    return min((rms(a), a) for a in alphas)


def fit(cs, order, reverse=False):
    """(rms, W, ALPHA, shares) of the hard window fitted to cases `cs` by least squares"""
    best = None
    for w in [0.5, 1, 2, 4, 8, 16, math.inf]:
        share = [hit_share(c, s, order, w, reverse) for c, s, _ in cs]
        rms, a = best_alpha(share, cs, [x / 100 for x in range(0, 100, 5)])
        if best is None or rms < best[0]:
            best = (rms, w, a, share)
    return best


def once_hits(ctxs, shared_blocks, reverse, w=None, tau=None, order=None):
    """Re-reads of one KV head's shared blocks served from the L2: those within `w` block-times of the
    block's previous read, or with `tau` each with probability exp(−gap / tau), gap the block-times since
    the nearest earlier read of that block. Every thread block starts at once, or (`order`, one of
    ORDERS but "once") as the SMs free up in that launch order, the hits then averaged over the heads."""
    geometry = pieces(ctxs)
    if order in (None, "once"):
        begin, heads = (lambda s, j, h: 0.0), [0]
    else:
        at = starts(geometry, order)
        begin, heads = (lambda s, j, h: at[(s, j, h)]), range(HEADS)
    hits = 0.0
    for b in range(shared_blocks):
        for h in heads:
            ts = sorted(begin(s, b // pp, h) + read_offset(b, n, pp, reverse)
                        for s, (n, pp) in enumerate(geometry) if n > b)
            gaps = [y - x for x, y in zip(ts, ts[1:])]
            hits += sum(math.exp(-g / tau) for g in gaps) if tau else sum(1 for g in gaps if g < w)
    return hits / len(heads)


def fit_soft(cs, reverse=True, order=None):
    """(rms, tau, ALPHA, shares) of the soft window fitted to cases `cs` by least squares"""
    best = None
    for tau in (2, 4, 6, 8, 10, 12, 16, 24, 32, 64):
        share = [hit_share(c, s, order, reverse=reverse, tau=tau) for c, s, _ in cs]
        rms, a = best_alpha(share, cs, [x / 100 for x in range(0, 100, 2)])
        if best is None or rms < best[0]:
            best = (rms, tau, a, share)
    return best


def check(name):
    """Each case of another bench file (BENCH's folder, `name` without .json) beside both orders' models as
    fitted to the stored 22 cases, all blocks started at once."""
    stored = cases()
    fitted = {rev: fit(stored, "once", rev) for rev in (False, True)}
    print(f"# {name}: measured saving against the page-coincidence model, blocks started at once\n")
    print("Fitted to the 22 stored cases: " + "; ".join(
        f"{'from the end' if rev else 'forward'} W {w:g}, ALPHA {a:.2f} (rms {100 * rms:.1f})"
        for rev, (rms, w, a, _) in fitted.items()) + ".\n")
    print("| sequences | own keys (first four) | split counts | measured | forward | from the end |")
    print("|---:|---|---|---:|---:|---:|")
    errs = {False: [], True: []}
    for c, shared, measured in cases([name]):
        model = {}
        for rev, (_, w, a, _) in fitted.items():
            model[rev] = hit_share(c, shared, "once", w, rev) * (1 - a)
            errs[rev].append(model[rev] - measured)
        splits = sorted({-(-n // pp) for n, pp in pieces(c)})
        own = ", ".join(str(x - shared) for x in c[:4]) + (", …" if len(c) > 4 else "")
        print(f"| {len(c)} | {own} | {splits} | {100 * measured:.1f} % | {100 * model[False]:.1f} % | "
              f"{100 * model[True]:.1f} % |")
    for rev, e in errs.items():
        print(f"\n{'From the end' if rev else 'Forward'}: rms {100 * math.sqrt(sum(x * x for x in e) / len(e)):.1f} points.")
    here = cases([name])
    print("\nA soft window (a re-read hits with probability exp(−gap / tau)) fitted to this file's own cases:\n")
    print("| sequences | own keys (first four) | measured | forward | from the end |\n|---:|---|---:|---:|---:|")
    soft = {rev: fit_soft(here, rev) for rev in (False, True)}
    for i, (c, shared, measured) in enumerate(here):
        own = ", ".join(str(x - shared) for x in c[:4]) + (", …" if len(c) > 4 else "")
        cells = " | ".join(f"{100 * soft[rev][3][i] * (1 - soft[rev][2]):.1f} %" for rev in (False, True))
        print(f"| {len(c)} | {own} | {100 * measured:.1f} % | {cells} |")
    for rev, (rms, tau, a, _) in soft.items():
        print(f"\n{'From the end' if rev else 'Forward'}: tau {tau:g} block-times, ALPHA {a:.2f}, rms {100 * rms:.1f} points.")


def fit_soft_orders():
    """The soft window (pieces read from their end) fitted to the 22 stored cases for each launch order."""
    print("| launch order | tau (block-times) | ALPHA | rms error of the saving |\n|---|---:|---:|---:|")
    cs = cases()
    for order in ORDERS:
        rms, tau, a, _ = fit_soft(cs, True, order)
        print(f"| {order} | {tau:g} | {a:.2f} | {100 * rms:.1f} |")


def main():
    if "--check" in sys.argv[1:]:
        check(sys.argv[sys.argv.index("--check") + 1])
        return
    if "--fit-soft" in sys.argv[1:]:
        fit_soft_orders()
        return
    if "--order-check" in sys.argv[1:]:
        order_check()
        return
    reverse = "--reverse" in sys.argv[1:]
    cs = cases()
    walk = "each piece read from its last block to its first" if reverse else "each piece read from its first block"
    print(f"# A page-coincidence L2 model of FA3's decode over a shared prefix ({walk})\n")
    print(f"`python3 scripts/vllm/l2_reuse_model.py{' --reverse' if reverse else ''}` (docstring: the model). "
          "Saving = 1 − shared time / unshared time, in points.\n")
    print("| launch order | W (block-times) | ALPHA | rms error of the saving |\n|---|---:|---:|---:|")
    fits = {o: fit(cs, o, reverse) for o in ORDERS}
    for o, (rms, w, a, _) in fits.items():
        print(f"| {o} | {w:g} | {a:.2f} | {100 * rms:.1f} |")
    order = min(fits, key=lambda o: fits[o][0])
    rms, w, a, share = fits[order]
    print(f"\nThe best order, {order}, case by case:\n")
    print("| sequences | contexts | measured saving | model |\n|---:|---|---:|---:|")
    for (c, _, m), h in zip(cs, share):
        text = ", ".join(str(x) for x in c[:4]) + (", …" if len(c) > 4 else "")
        print(f"| {len(c)} | {text} | {100 * m:.1f} % | {100 * h * (1 - a):.1f} % |")


if __name__ == "__main__":
    main()
