#!/usr/bin/env python3
"""Why FlashAttention 3 (vLLM 0.26.0's vllm-flash-attn, Hopper, `flash_attn_varlen_func` with
`num_splits`) runs a mixed varlen batch -- decodes (1 query each) then one prefill chunk of L queries over
P cached keys -- slower than the chunk alone plus the decodes alone, and a time model that reproduces
results/h200-vllm/prefill-chunks/fa3-bench/fa3-mixed.json without per-case factors.

Mechanism (FA3 source, github:vllm-project/flash-attention hopper/):
 1. ONE tile shape for the whole call, from max_seqlen_q (flash_api.cpp mha_fwd -> tile_size_fwd_sm90 with
    use_one_mma_wg(params) = max_seqlen_q * qhead_per_khead <= 64): with a chunk of L > 16 tokens in the
    batch every tile, the decodes' included, is kBlockM 128 (two MMA warpgroups), so a decode tile (4 real
    rows: 1 token x 4 packed q-heads) does the full 128 x 128 x 128 QK and PV MMAs per 128-key block:
    MMA-bound at the chunk's per-block cost instead of reading its KV at one SM's memory rate.
 2. ONE split rule for the whole call (flash_prepare_scheduler.cu prepare_varlen_num_blocks_kernel):
    blocks_per_sm = ceil(1.1 * sum_b(m_blocks_b * n_blocks_b) * h_k / SMs); each sequence gets
    min(ceil(n_blocks_b / blocks_per_sm), num_splits) pieces. The chunk's m-blocks inflate the sum, so the
    decodes get fewer, longer pieces (2 x 60,000 alone: 8 each; beside 64 over 147,456: 3), sized for the
    chunk's tiles, and the tile count overshoots the 132 SMs.
    With num_splits 0 (vLLM above 512 tokens) get_num_splits/num_splits_heuristic sees max_seqlen_q's
    m-blocks (>= 0.8 * SMs from L ~ 512) and returns 1: no split at all, each decode one tile per KV head.
 3. ONE persistent tile walk (tile_scheduler.hpp VarlenDynamicPersistentTileScheduler, grid = SMs):
    tiles in batch order -- the decodes' first, the chunk's last -- head-major, then split, then m-block
    (LPT: last m-block first); CTA i starts tile i, later tiles go to whichever CTA frees first. The
    chunk's tiles beyond the first wave wait for the long, MMA-bound decode tiles: a second wave of
    chunk tiles, the tail.
The combine kernel (flash_fwd_combine) skips rows of 1-split sequences; its cost is small.

Time model: a fluid list schedule of those tiles on 132 SMs. A tile costs o us plus, per 128-key block,
max(c_M, m) + beta * min(c_M, m), with c_M the MMA time of a kBlockM = M tile (c128; c64 = c128 / 2) and m the time
to read the block's K and V (64 KiB; shared by the chunk's m-blocks of one head and split through L2)
at one SM's read rate R_sm; the running tiles' reads share the bandwidth BW (water-filled). Plus a
per-call floor F (launch and host time inside the CUDA events). Six parameters, fitted on the
chunk-alone and decode-alone cases only (fa3-mixed.json and split-kv/fa3-bench/fa3.json); the mixed
cases are predictions.

    python3 scripts/vllm/fa3_varlen_model.py                 # the mixed table, summaries, the candidate mechanisms
    python3 scripts/vllm/fa3_varlen_model.py --all           # every case
    python3 scripts/vllm/fa3_varlen_model.py --fit           # refit the parameters (about 40 s)
    python3 scripts/vllm/fa3_varlen_model.py --check-metadata  # the schedule rule against the metadata FA3 returned (178 cases)
Plain python3, no packages.
"""
import json
import math
import os
import struct
import sys

SMS, HQ, HK, D = 132, 32, 8, 128  # H200; Qwen3-8B attention: 32 q heads, 8 KV heads, head dim 128
QPK = HQ // HK
KVB = 128 * D * 2 * 2  # bytes of one 128-key block of one KV head (K and V, bf16)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'results', 'h200-vllm')
MIXED = ROOT + '/prefill-chunks/fa3-bench/fa3-mixed.json'
DECODE = ROOT + '/split-kv/fa3-bench/fa3.json'

# Fitted on the 146 chunk-alone and decode-alone cases (python3 model.py --fit).
PARAMS = dict(F=50.3, c128=1.818, rsm=114.2, bw=4.426, o=1.95, beta=0.045)
UNITS = dict(F='us per call', c128='us MMA per 128-key block of a kBlockM 128 tile (kBlockM 64: half)',
             rsm='GB/s one SM reads', bw='TB/s HBM', o='us per tile', beta='MMA/read non-overlap')


# ---------------------------------------------------------------- FA3's schedule (from its source)

def f32(x):
    return struct.unpack('f', struct.pack('f', x))[0]


def tile_shape(max_seqlen_q):
    """tile_size_fwd_sm90(hdim 128, bf16): (kBlockM, kBlockN). use_one_mma_wg when max_seqlen_q * 4 <= 64.
    mha_fwd keeps is_causal for paged hdim 128 even at seqlen_q 1, so kBlockN is 128 in both."""
    return (64 if max_seqlen_q * QPK <= 64 else 128), 128


def num_splits_heuristic(total_mblocks, num_sms, num_n_blocks, num_m_blocks, size_one_kv_head, causal, max_splits):
    """heuristics.h num_splits_heuristic"""
    if total_mblocks >= 0.8 * num_sms:
        size_l2 = 50 * 1024 * 1024
        if size_one_kv_head > size_l2 and num_m_blocks >= num_sms * 2 and not causal:
            return min((size_one_kv_head + size_l2 - 1) // size_l2, max_splits)
        return 1
    if num_n_blocks <= 4:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)
    eff = []
    for s in range(1, max_splits + 1):
        w = total_mblocks * s / num_sms
        eff.append(w / math.ceil(w))
    for s in range(1, max_splits + 1):
        if eff[s - 1] >= 0.85 * max(eff):
            return s
    return 1


def schedule(qlens, keys, ns_arg):
    """Per-sequence m-blocks, n-blocks and pieces, and the static num_splits, as FA3 sets them ONCE for the
    whole varlen call (flash_api.cpp get_num_splits with batch taken as 1; prepare_varlen_num_blocks)."""
    mq, mk = max(qlens), max(keys)
    bm, bn = tile_shape(mq)
    if ns_arg <= 0:
        nmb = -(-mq * QPK // bm)
        ns_static = num_splits_heuristic(HK * nmb, SMS, -(-mk // bn), nmb, mk * 2 * D * 2, True, 128)
    else:
        ns_static = ns_arg
    m_blocks = [-(-q * QPK // bm) for q in qlens]  # PackGQA: q-heads of a KV head packed into rows
    n_blocks = [-(-k // bn) for k in keys]
    if ns_static > 1:  # dynamic split (batch <= 992)
        total = sum(m * n for m, n in zip(m_blocks, n_blocks))
        bps = int(math.ceil(f32(f32(f32(f32(total) * f32(1.1)) * f32(HK)) / f32(SMS))))
        splits = [max(min(-(-n // bps), ns_static), 1) for n in n_blocks]
    else:
        splits = [1] * len(qlens)
    return dict(bm=bm, bn=bn, ns_static=ns_static, m_blocks=m_blocks, n_blocks=n_blocks, splits=splits,
                qlens=list(qlens), keys=list(keys))


def nheads_in_l2(n_blocks_per_tile, bn=128):
    """flash_prepare_scheduler.cu get_nheads_in_l2 (PackGQA)"""
    max_kv = (32 * 1024 * 1024 // QPK) // (bn * (D + D) * 2)
    n = n_blocks_per_tile
    h = 16 if n * 16 <= max_kv else 8 if n * 8 <= max_kv else 4 if n * 4 <= max_kv else 2 if n * 2 <= max_kv else 1
    return min(h, HK)


def tiles(s, batch_order=None):
    """The call's tiles in the order VarlenDynamicPersistentTileScheduler::tile_idx_to_work_tile hands
    them out: batch by batch; within a batch of > 1 piece head-major, then piece, then m-block; of 1
    piece the L2 swizzle (sections of nheads_in_l2 heads, m-block-major inside); LPT (causal): the last
    m-block first. Each tile's key blocks from block.h get_n_block_min_max (causal edge, even pieces).
    Returns (batch, head, piece, m_block, n_blocks)."""
    out = []
    bm, bn = s['bm'], s['bn']
    for b in (batch_order or range(len(s['qlens']))):
        q, k, mb, ns = s['qlens'][b], s['keys'][b], s['m_blocks'][b], s['splits'][b]
        nmax_all = -(-k // bn)

        def nrange(m, sp):
            m_idx_max = ((m + 1) * bm - 1) // QPK + 1  # PackGQA rows -> query tokens
            nmax = min(nmax_all, -(-(m_idx_max + k - q) // bn))
            per = -(-nmax // ns) if nmax > 0 else 0
            lo = sp * per
            return max(min(lo + per, nmax) - lo, 0)

        if ns > 1:
            order = [(h, sp, mb - 1 - i) for h in range(HK) for sp in range(ns) for i in range(mb)]
        else:
            nh = nheads_in_l2(max(nmax_all, 1), bn)
            order = []
            for sec in range(0, HK, nh):
                hs = min(nh, HK - sec)
                order += [(sec + j, 0, mb - 1 - i) for i in range(mb) for j in range(hs)]
        for h, sp, m in order:
            out.append((b, h, sp, m, nrange(m, sp)))
    return out


# ---------------------------------------------------------------- time model

def makespan(tl, p):
    """Fluid list schedule: SMS slots take tiles (n_blocks, c_us_per_block, bytes_per_block) in order as
    they free up. A tile's fixed cost o is folded into its stream as extra MMA-bound blocks; per block
    alone on its SM it takes max(c, m) + beta * min(c, m), m = bytes / R_sm; the running tiles' reads
    share BW (water-filling). Identical tiles started together are one group."""
    bw, rsm, o, beta = p['bw'] * 1e6, p['rsm'] * 1e3, p['o'], p['beta']  # bytes/us
    todo = []
    for nb, c, b in tl:
        u = nb + o / c
        key = (u, c, b * nb / u)
        if todo and todo[-1][0] == key:
            todo[-1][1] += 1
        else:
            todo.append([key, 1])
    todo.reverse()
    run, busy, t = [], 0, 0.0  # run: [units_left, count, c, bytes_per_unit]
    while True:
        while busy < SMS and todo:
            key, n = todo[-1]
            take = min(n, SMS - busy)
            run.append([key[0], take, key[1], key[2]])
            busy += take
            if take == n:
                todo.pop()
            else:
                todo[-1][1] -= take
        if not run:
            return t
        rates = []  # units/us each tile of a group runs at, alone on its SM
        for g in run:
            m, c = g[3] / rsm, g[2]
            rates.append(1.0 / (max(c, m) + beta * min(c, m)))
        if sum(r * g[3] * g[1] for r, g in zip(rates, run)) > bw:  # water-fill the bandwidth
            dem = [r * g[3] for r, g in zip(rates, run)]
            idx = sorted(range(len(run)), key=lambda i: dem[i])
            left, n, lvl = bw, busy, dem[idx[-1]]
            for i in idx:
                if dem[i] * n >= left:
                    lvl = left / n
                    break
                left -= dem[i] * run[i][1]
                n -= run[i][1]
            rates = [r if d <= lvl else lvl / g[3] for r, d, g in zip(rates, dem, run)]
        dt = min(g[0] / r for g, r in zip(run, rates))
        t += dt
        nxt = []
        for g, r in zip(run, rates):
            g[0] -= r * dt
            if g[0] > 1e-9 * max(1.0, r):
                nxt.append(g)
            else:
                busy -= g[1]
        run = nxt


def combine_us(s, p):
    """flash_fwd_combine (static num_splits > 1): reads the fp32 partials of rows with > 1 piece."""
    if s['ns_static'] <= 1:
        return 0.0
    byts = sum(q * HQ * (sp * (D * 4 + 4) + D * 2) for q, sp in zip(s['qlens'], s['splits']) if sp > 1)
    return byts / (p['bw'] * 1e6)


_CACHE = {}


def predict(qlens, keys, ns_arg, p=PARAMS, variant='full'):
    """us per layer for one varlen call. variant: 'full' (FA3 as read), 'schedule-only' (decode tiles
    priced at kBlockM 64: no wasted MMA rows), 'packed' (full's tiles perfectly packed: no order, no
    tail), 'chunk-first' (what-if: the chunk's tiles walked before the decodes')."""
    key = (tuple(qlens), tuple(keys), ns_arg, variant == 'chunk-first')
    if key not in _CACHE:
        s = schedule(qlens, keys, ns_arg)
        order = None
        if variant == 'chunk-first':
            order = [len(qlens) - 1] + list(range(len(qlens) - 1))
        _CACHE[key] = (s, tiles(s, order))
    s, tl_ = _CACHE[key]
    tl = []
    for b, h, sp, m, nb in tl_:
        bm = s['bm']
        if variant == 'schedule-only' and s['qlens'][b] == 1:
            bm = 64
        c = p['c128'] if bm == 128 else p['c128'] / 2  # one MMA warpgroup: half the rows
        tl.append((nb, c, KVB / s['m_blocks'][b]))  # m-blocks of one (head, piece) share the KV via L2
    if variant == 'packed':
        longest = max(p['o'] + nb * c for nb, c, b in tl)
        work = sum(p['o'] + nb * c for nb, c, b in tl) / SMS
        ms = max(longest, work, sum(nb * b for nb, c, b in tl) / (p['bw'] * 1e6))
    else:
        ms = makespan(tl, p)
    return p['F'] + ms + combine_us(s, p), s


# ---------------------------------------------------------------- data, fit, report

def load():
    out = []
    for c in json.load(open(MIXED))['cases']:
        q = [1] * len(c['decodes']) + [c['chunk']]
        k = c['decodes'] + [c['prefix'] + c['chunk']]
        name = f"{c['chunk']} over {c['prefix']}" + (f" + {len(c['decodes'])}x{c['decodes'][0]}" if c['decodes'] else '')
        out.append(dict(kind='mixed' if c['decodes'] else 'chunk', name=name, q=q, k=k, ns=c['num_splits'],
                        us=c['us'], vllm=c['vllm'], chunk=c['chunk'], prefix=c['prefix'], decodes=c['decodes'],
                        meta=c['metadata']))
    for c in json.load(open(DECODE))['cases']:
        ctx = c['ctxs']
        name = f"{len(ctx)}x{ctx[0]}" if len(set(ctx)) == 1 else ",".join(str(x) for x in ctx)
        out.append(dict(kind='decode', name=name, q=[1] * len(ctx), k=ctx, ns=c['num_splits'], us=c['us'],
                        vllm=c['num_splits'] == 32, meta=c['metadata']))
    return out


def pred(c, p=PARAMS, variant='full'):
    if variant == 'additive':
        if c['kind'] != 'mixed':
            return predict(c['q'], c['k'], c['ns'], p)[0]
        a = predict([c['chunk']], [c['prefix'] + c['chunk']], c['ns'], p)[0]
        d = predict([1] * len(c['decodes']), c['decodes'], c['ns'], p)[0]
        return a + d - p['F']
    return predict(c['q'], c['k'], c['ns'], p, variant)[0]


def rms(e):
    return math.sqrt(sum(x * x for x in e) / max(len(e), 1))


def nelder_mead(f, x0, step, iters=250):
    n = len(x0)
    pts = [list(x0)] + [[x0[j] + (step[j] if j == i else 0) for j in range(n)] for i in range(n)]
    vals = [f(x) for x in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        cen = [sum(pts[i][j] for i in range(n)) / n for j in range(n)]
        xr = [2 * cen[j] - pts[-1][j] for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [3 * cen[j] - 2 * pts[-1][j] for j in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [(cen[j] + pts[-1][j]) / 2 for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = [(pts[0][j] + pts[i][j]) / 2 for j in range(n)]
                    vals[i] = f(pts[i])
    i = min(range(n + 1), key=lambda i: vals[i])
    return pts[i], vals[i]


def fit(train):
    names = list(PARAMS)

    def f(x):
        if min(x) <= 0:
            return 1e9
        p = dict(zip(names, x))
        return rms([pred(c, p) / c['us'] - 1 for c in train])
    x, v = nelder_mead(f, [PARAMS[k] for k in names], [0.1 * PARAMS[k] for k in names])
    return dict(zip(names, x)), v


def check_metadata(cases):
    bad = 0
    for c in cases:
        s = schedule(c['q'], c['k'], c['ns'])
        m, b = c['meta'], len(c['q'])
        br = -(-b // 4) * 4
        dyn = s['ns_static'] > 1
        ok = m[:b] == [q * QPK for q in c['q']] and len(m) == 1 + br * (3 if dyn else 2)
        if dyn:
            ok = ok and m[br:br + b] == s['splits']
        bad += not ok
    print(f"schedule rule vs FA3's returned metadata: {len(cases) - bad}/{len(cases)} cases agree "
          "(per-sequence pieces, and whether the dynamic split is on)")


def summary(cases, p, variant, label):
    e = [pred(c, p, variant) / c['us'] - 1 for c in cases]
    if not e:
        return ''
    w = max(range(len(e)), key=lambda i: abs(e[i]))
    return (f"{label:34s} n={len(e):3d}  rms {100 * rms(e):5.1f} %  worst {100 * e[w]:+6.1f} % "
            f"({cases[w]['name']}, num_splits {cases[w]['ns']})")


def main():
    cases = load()
    train = [c for c in cases if c['kind'] != 'mixed']
    mixed = [c for c in cases if c['kind'] == 'mixed']
    p = dict(PARAMS)
    if '--check-metadata' in sys.argv:
        check_metadata(cases)
        return
    if '--fit' in sys.argv:
        p, v = fit(train)
        print('fitted on chunk-alone + decode-alone:', {k: round(x, 4) for k, x in p.items()}, f'rms {100 * v:.2f} %')
    check_metadata(cases)
    print('parameters: ' + ', '.join(f"{k} {v:g} {UNITS[k]}" for k, v in p.items()))
    print(f"  (c128: {4 * 128 ** 3 / p['c128'] / 1e6 * SMS:.0f} TFLOP/s over {SMS} SMs; "
          f"R_sm: {p['bw'] * 1e3 / p['rsm']:.0f} reading tiles saturate HBM)\n")

    print('## Mixed cases: measured against the model (fitted without them)\n')
    print('| case | num_splits | vLLM | pieces (decodes, chunk) | tiles | measured µs | predicted µs | error % '
          '| chunk-first what-if µs |')
    print('|---|---:|---|---|---:|---:|---:|---:|---:|')
    for c in mixed:
        r, s = predict(c['q'], c['k'], c['ns'], p)
        nt = len(_CACHE[(tuple(c['q']), tuple(c['k']), c['ns'], False)][1])
        cf = predict(c['q'], c['k'], c['ns'], p, 'chunk-first')[0]
        print(f"| {c['name']} | {c['ns']} | {'yes' if c['vllm'] else ''} | {s['splits'][0]}, {s['splits'][-1]} | {nt} "
              f"| {c['us']:.1f} | {r:.1f} | {100 * (r / c['us'] - 1):+.1f} | {cf:.0f} |")

    print('\n## Excess over the parts (vLLM\'s num_splits): measured mixed − (measured chunk alone + modelled '
          'decodes alone − F), against the model\'s\n')
    print('| case | measured excess µs | model excess µs |\n|---|---:|---:|')
    alone = {(c['chunk'], c['prefix'], c['ns']): c['us'] for c in cases if c['kind'] == 'chunk'}
    for c in mixed:
        if not c['vllm']:
            continue
        dec = predict([1] * len(c['decodes']), c['decodes'], c['ns'], p)[0] - p['F']
        ch = alone[(c['chunk'], c['prefix'], c['ns'])]
        mc = predict([c['chunk']], [c['prefix'] + c['chunk']], c['ns'], p)[0]
        print(f"| {c['name']} | {c['us'] - ch - dec:+.0f} | {pred(c, p) - mc - dec:+.0f} |")

    print('\n## Candidate mechanisms (same parameters; relative errors)\n')
    text = {'full': 'A: one tile shape + one split rule + batch-order walk (FA3 as read)',
            'schedule-only': 'B: same pieces and walk, decode tiles at kBlockM 64 price',
            'packed': "C: A's tiles perfectly packed (no walk order, no tail)",
            'additive': 'D: chunk alone + decodes alone'}
    for v, t in text.items():
        print(f'{t}')
        print('   ' + summary(mixed, p, v, 'mixed, all'))
        print('   ' + summary([c for c in mixed if c['vllm']], p, v, "mixed, vLLM's num_splits"))
    print('\n## The cases the parameters were fitted on (model A)\n')
    for kind in ('chunk', 'decode'):
        sel = [c for c in cases if c['kind'] == kind]
        print(summary(sel, p, 'full', f'{kind} alone, all'))
        print(summary([c for c in sel if c['us'] > 100], p, 'full', f'{kind} alone, > 100 µs'))
        print(summary([c for c in sel if c['vllm']], p, 'full', f"{kind} alone, vLLM's num_splits"))
    if '--all' in sys.argv:
        print('\n| kind | case | num_splits | measured µs | predicted µs | error % |\n|---|---|---:|---:|---:|---:|')
        for c in train:
            r = pred(c, p)
            print(f"| {c['kind']} | {c['name']} | {c['ns']} | {c['us']:.1f} | {r:.1f} | {100 * (r / c['us'] - 1):+.1f} |")


if __name__ == '__main__':
    main()
