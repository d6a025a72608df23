#!/usr/bin/env python3
"""Where an AgentX run's lanes drift from the simulated run's (results/agentx-conformance/): every AgentX request
of the profiling phase matched to the simulated request of the same trace and prompt (AgentX's prompt counts the
chat template's ~85 tokens more), and for each request whose predecessor in the same chain (the answer its gap
starts from) matched too: how much longer AgentX's gap was than the simulated one (its timer-to-credit latency,
and any idle-cap shift the two sides made differently) and how much longer the predecessor request took on
AgentX's side (serve's engine on the wall clock against the simulated one). Prints a few lines; from the
repository root:

    python3 scripts/agentx/drift.py results/agentx-conformance/run-2026-12-05 4
"""
import gzip
import json
import statistics as st
import sys
from pathlib import Path

R = Path(sys.argv[1]); c = sys.argv[2]
d = R / "agentx" / f"c{c}"
recs = [json.loads(l) for l in gzip.open(d / "art" / "profile_export.jsonl.gz")]
prof = [r for r in recs if r["metadata"]["benchmark_phase"] == "profiling"]
ax = []
for r in prof:
    md = r["metadata"]
    lane = md["conversation_id"].split("::")[0]
    isl = r["metrics"]["input_sequence_length"]["value"]
    ax.append(dict(lane=lane, x=isl, chain=md["x_correlation_id"], credit=md["credit_issued_ns"] / 1e9,
                   start=md["request_start_ns"] / 1e9, end=md["request_end_ns"] / 1e9))
sim = [json.loads(l) for l in open(R / "sim" / f"c{c}" / "records.jsonl")]
names = sorted({r["metadata"]["conversation_id"].split("::")[0] for r in recs})
sm = [dict(lane=names[r["tree"]] if r["tree"] < len(names) else r["tree"], x=r["input_tokens"], chain=(r["tree"], r["agent"]), send=r["send_ns"] / 1e9,
           fin=(r.get("finish_ns") or 0) / 1e9) for r in sim]
def match(r):
    best = [s for s in sm if s["lane"] == r["lane"] and 0 <= r["x"] - s["x"] <= 150]
    return min(best, key=lambda s: abs(r["x"] - s["x"] - 85)) if best else None
t0a = min(r["credit"] for r in ax); t0s = 0.0
# predecessor in the same chain
def prev_map(rs, t, chain):
    out = {}; last = {}
    for r in sorted(rs, key=lambda r: r[t]):
        if r[chain] in last: out[id(r)] = last[r[chain]]
        last[r[chain]] = r
    return out
pa = prev_map(ax, "credit", "chain"); ps = prev_map(sm, "send", "chain")
hops = []
for r in ax:
    s = match(r)
    if not s or id(r) not in pa or id(s) not in ps: continue
    p, q = pa[id(r)], ps[id(s)]
    if match(p) is not q: continue
    gap_a = r["credit"] - p["end"]; gap_s = s["send"] - q["fin"]
    hops.append((r["lane"], r["credit"] - t0a, gap_a - gap_s, (p["end"] - p["start"]) - (q["fin"] - q["send"])))
print(f"c={c}: {len(hops)} matched hops of {len(ax)} AgentX requests")
ex = [h[2] * 1e3 for h in hops]; lat = [h[3] * 1e3 for h in hops]
q = lambda v: [round(x, 1) for x in st.quantiles(v, n=10)[::4]] if len(v) > 2 else v
print("  AgentX gap − planned gap, ms (p10/p50/p90):", q(ex), " sum", round(sum(ex)), "ms")
print("  AgentX request time − simulated, ms (p10/p50/p90):", q(lat), " sum", round(sum(lat)), "ms")
for lane in sorted({h[0] for h in hops}):
    hs = [h for h in hops if h[0] == lane]
    print(f"  lane {lane}: {len(hs)} hops, gap excess sum {sum(h[2] for h in hs):+.3f} s, request-time excess sum {sum(h[3] for h in hs):+.3f} s")
