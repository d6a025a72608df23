#!/usr/bin/env python3
"""Compare AgentX's own runs against `serverbench serve` with `serverbench simulate --protocol agentx`.

Reads what ``scripts/agentx/conformance.sh`` leaves in OUT (``agentx/cC/`` and ``sim/cC/``) and
prints a Markdown report: lane by lane (row, t*, live streams and their offsets, primer offsets,
first-dispatch offsets planned and as sent, requests and trees per lane) and run by run (requests,
D, G, f by serverbench's rules on both sides' records, p50/p90 TTFT and TPOT, tokens, warm-up).

Both sides' records are scored by the same function here, with serverbench's rules
(docs/definitions.md): ``v = (p_in x + p_out y) / 1e6``; ``q = 1`` iff the request completed with
exactly the requested output length and TTFT <= tau_first and TPOT <= tau_token (TPOT = (last -
first) / (y - 1), 0 when y <= 1); ``D = sum q v / (GPUs * $/GPU-h * W / 3600)``, ``G`` the same
without ``q``, ``f = D / G``; quantiles by linear interpolation (numpy's default) over completed
requests. On the AgentX side: x and y are the server-reported usage counts (AgentX's
``use_server_token_count``, on in scenario ``agentx``), TTFT its ``time_to_first_token``, TPOT its
per-request ``inter_token_latency`` ((latency - TTFT) / (OSL - 1)), the requested length the
trace's ``max(out, 1)`` (AgentX's ``max_completion_tokens``), looked up by the record's
``source_trace_id`` / ``source_outer_idx`` / ``source_inner_idx``.

Usage: compare_runs.py OUT --deployment NAME --sb BINARY --duration W --trace-dir DIR [--json F]
       compare_runs.py --pool OUT [OUT ...] --deployment … --trace-dir DIR   (runs of other seeds)

``--pool``: each level that every OUT holds, scored over all of their records together on both sides:
the window counts once per run, so D, G and f are the runs' means, and the quantiles are taken over the
pooled requests (the tail of one run of a few dozen requests turns on which of two simultaneous
arrivals the server took first; pooling runs of other seeds gives the p90 more requests to rest on).
Only the standard library is used.
"""

from __future__ import annotations

def read_text_maybe_gz(p):
    """The text of `p`, or of `p` + ".gz" when only the gzipped copy is kept."""
    import gzip
    from pathlib import Path
    p = Path(p)
    if p.exists():
        return p.read_text()
    return gzip.open(str(p) + ".gz", "rt").read()


import argparse
import gzip
import json
import math
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path


def quantile(xs, q):
    """numpy.percentile's default (linear between closest ranks)."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def deployment_numbers(sb: str, deployment: str) -> dict:
    text = subprocess.run(
        [sb, "simulate", "-d", deployment, "--print-config"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout

    def num(key):
        m = re.search(rf"^\s*{key}:\s*([0-9.eE+-]+)\s*$", text, re.M)
        if not m:
            raise SystemExit(f"--print-config of {deployment}: no {key}")
        return float(m.group(1))

    return {
        "p_in": num("input_per_m"),
        "p_out": num("output_per_m"),
        "gpu_hour": num("gpu_hour_dollars"),
        "gpus": num("tp") * num("dp"),
        "ttft": num("ttft_s"),
        "tpot": num("tpot_s"),
    }


def trace_outs(trace_dir: Path) -> tuple[dict, dict, list]:
    """(trace_id, outer, inner) -> (in, out); trace_id -> row; the sorted file names."""
    outs, rows = {}, {}
    files = sorted(p for p in trace_dir.glob("*.json"))
    for row, p in enumerate(files):
        d = json.loads(p.read_text())
        tid = str(d.get("id", p.stem))
        rows[tid] = row
        rows.setdefault(p.stem, row)
        for i, r in enumerate(d["requests"]):
            if r.get("type") == "subagent":
                for j, s in enumerate(r.get("requests") or []):
                    outs[(tid, i, j)] = (s["in"], s["out"])
                    outs[(p.stem, i, j)] = (s["in"], s["out"])
            else:
                outs[(tid, i, None)] = (r["in"], r["out"])
                outs[(p.stem, i, None)] = (r["in"], r["out"])
    return outs, rows, [p.name for p in files]


def score(reqs, dep, window_s):
    """reqs: dicts with x, y, requested, ttft, tpot, completed. serverbench's D, G, f."""
    cost = dep["gpus"] * dep["gpu_hour"] * window_s / 3600.0
    gross = qual = 0.0
    nq = 0
    for r in reqs:
        v = (dep["p_in"] * r["x"] + dep["p_out"] * r["y"]) / 1e6
        gross += v
        q = (
            r["completed"]
            and r["y"] == r["requested"]
            and r["ttft"] is not None
            and r["ttft"] <= dep["ttft"]
            and r["tpot"] is not None
            and r["tpot"] <= dep["tpot"]
        )
        if q:
            qual += v
            nq += 1
    comp = [r for r in reqs if r["completed"]]
    return {
        "requests": len(reqs),
        "completed": len(comp),
        "qualified": nq,
        "D": qual / cost,
        "G": gross / cost,
        "f": qual / gross if gross else float("nan"),
        "ttft_p50": quantile([r["ttft"] for r in comp if r["ttft"] is not None], 0.5),
        "ttft_p90": quantile([r["ttft"] for r in comp if r["ttft"] is not None], 0.9),
        "tpot_p50": quantile([r["tpot"] for r in comp if r["tpot"] is not None], 0.5),
        "tpot_p90": quantile([r["tpot"] for r in comp if r["tpot"] is not None], 0.9),
        "input_tokens": sum(r["x"] for r in reqs),
        "output_tokens": sum(r["y"] for r in reqs),
        "short_output": sum(1 for r in reqs if r["completed"] and r["y"] != r["requested"]),
        "ttft_miss": sum(1 for r in comp if r["ttft"] is not None and r["ttft"] > dep["ttft"]),
        "tpot_miss": sum(1 for r in comp if r["tpot"] is not None and r["tpot"] > dep["tpot"]),
    }


# ---------------------------------------------------------------- AgentX side


def load_probe(d: Path) -> dict:
    out = defaultdict(list)
    p = d / "probe.jsonl"
    if p.exists() or Path(str(p) + ".gz").exists():
        for line in read_text_maybe_gz(p).splitlines():
            if not line.strip():
                continue
            doc = json.loads(line)
            out[doc["kind"]].append(doc)
    return out


def phase_starts(log_text: str) -> dict:
    """Phase start_ns from AgentX's CREDIT_PHASE_COMPLETE log lines."""
    starts = {}
    for m in re.finditer(r"PhaseRecordsStats\(phase=CreditPhase\.(\w+),.*?start_ns=(\d+)", log_text):
        starts[m.group(1).lower()] = int(m.group(2))
    return starts


def metric(rec, name):
    m = rec["metrics"].get(name)
    return None if m is None else m["value"]


def agentx_side(d: Path, outs: dict, dep: dict, window_s: float) -> dict:
    recs = [json.loads(l) for l in read_text_maybe_gz(d / "art" / "profile_export.jsonl").splitlines() if l.strip()]
    log_text = (d / "agentx.log").read_text(errors="replace")
    starts = phase_starts(log_text)
    probe = load_probe(d)
    prof_start = starts.get("profiling")
    if prof_start is None and probe.get("profiling_start"):
        prof_start = probe["profiling_start"][0]["wall_ns"]
    warm = [r for r in recs if r["metadata"]["benchmark_phase"] == "warmup"]
    prof = [r for r in recs if r["metadata"]["benchmark_phase"] == "profiling"]

    # root correlation id -> lane
    corr_lane = {}
    for doc in probe.get("profiling_dispatched", []):
        corr_lane.update(doc["correlation_to_lane"])
    for doc in probe.get("recycle", []):
        for c, lane in doc["new_correlations"].items():
            corr_lane[c] = lane
    n_lanes = len(probe["trajectory_source"][0]["lanes"]) if probe.get("trajectory_source") else 1

    reqs = []
    missing_requested = 0
    isl_minus_in = []
    for r in prof:
        md = r["metadata"]
        key = (md.get("source_trace_id"), md.get("source_outer_idx"), md.get("source_inner_idx"))
        io = outs.get(key)
        if io is None:
            missing_requested += 1
            requested = None
        else:
            requested = max(io[1], 1)
        err = r.get("error")
        completed = err is None and not md.get("was_cancelled")
        y = metric(r, "usage_completion_tokens")
        if y is None:
            y = metric(r, "output_sequence_length") or 0
        x = metric(r, "usage_prompt_tokens")
        if x is None:
            x = metric(r, "input_sequence_length") or 0
        if io is not None:
            isl_minus_in.append(x - io[0])
        ttft = metric(r, "time_to_first_token")
        ttft = None if ttft is None else ttft / 1e3
        itl = metric(r, "inter_token_latency")
        if y is not None and y <= 1:
            tpot = 0.0 if ttft is not None else None
        else:
            tpot = None if itl is None else itl / 1e3
        ack = md.get("request_ack_ns")
        # serve answers 200 (the ack) when it hands the parsed, tokenized prompt to its engine:
        # TTFT after the ack is the engine's part, the rest is transfer, JSON and tokenization.
        pre_engine = None if ack is None else (ack - md["request_start_ns"]) / 1e9
        root = md.get("root_correlation_id") or md.get("x_correlation_id")
        lane = corr_lane.get(root, 0 if n_lanes == 1 else None)
        reqs.append(
            {
                "x": int(x),
                "y": int(y),
                "requested": requested,
                "ttft": ttft,
                "tpot": tpot,
                "completed": completed,
                "lane": lane,
                "root": root,
                "trace": md.get("source_trace_id"),
                "conversation": md.get("conversation_id"),
                "turn": md.get("turn_index"),
                "issued_s": (md["credit_issued_ns"] - prof_start) / 1e9 if prof_start and md.get("credit_issued_ns") else None,
                "sent_s": (md["request_start_ns"] - prof_start) / 1e9 if prof_start else None,
                "depth": md.get("agent_depth", 0),
                "pre_engine": pre_engine,
            }
        )
    m = re.search(
        r"Phase profiling \(profiling\) complete \| completed=(\d+), cancelled=(\d+), errors=(\d+)", log_text
    )
    wm = re.search(r"Phase warmup \(warmup\) complete \|.*?elapsed=([0-9.]+)s", log_text)
    gl = re.findall(r"Global system-idle cap summary: limit=\S+ jumps=(\d+), skipped=([0-9.]+)s", log_text)
    t_prof = probe["profiling_start"][0]["wall_ns"] if probe.get("profiling_start") else 0
    shifts = [d for d in probe.get("timer_shift", []) if d["wall_ns"] >= t_prof]
    glob = [d for d in shifts if d["method"] == "cap_pending_delay"]
    tree = [d for d in shifts if d["method"] == "cap_pending_delay_for_group"]
    # A global shift made by the idle watchdog at its deadline (max delay 0) moves the next timer
    # to "now" although the timer the previous shift released is already firing: the race.
    race = [d for d in glob if float(d["args"][0]) == 0.0 and d["shift_s"] > 0.01]
    return {
        "timer_shifts": {
            "global_jumps": len(glob),
            "global_s": sum(d["shift_s"] for d in glob),
            "tree_jumps": len(tree),
            "tree_s": sum(d["shift_s"] for d in tree),
            "watchdog_race_jumps": [(round((d["wall_ns"] - t_prof) / 1e9, 2), round(d["shift_s"], 3)) for d in race],
        }
        if probe.get("timer_shift") is not None or "timer_shift" in probe
        else None,
        "records": reqs,
        "warmup_records": len(warm),
        "warmup_elapsed_s": float(wm.group(1)) if wm else None,
        "profiling_complete": tuple(map(int, m.groups())) if m else None,
        "global_idle": gl,
        "probe": probe,
        "prof_start_ns": prof_start,
        "missing_requested": missing_requested,
        "isl_minus_in": isl_minus_in,
        "n_lanes": n_lanes,
        "unmapped": sum(1 for r in reqs if r["lane"] is None),
        "own_summary": own_summary(d),
    }


def own_summary(d: Path) -> dict:
    """AgentX's own p50/p90 TTFT and ITL (profile_export_aiperf.json), ms."""
    p = d / "art" / "profile_export_aiperf.json"
    if not p.exists():
        return {}
    doc = json.loads(p.read_text())
    out = {}

    def find(obj, tag):
        if isinstance(obj, dict):
            if obj.get("tag") == tag:
                return obj
            if tag in obj and isinstance(obj[tag], dict):
                return obj[tag]
            for v in obj.values():
                got = find(v, tag)
                if got is not None:
                    return got
        elif isinstance(obj, list):
            for v in obj:
                got = find(v, tag)
                if got is not None:
                    return got
        return None

    for tag in ("time_to_first_token", "inter_token_latency", "request_count"):
        m = find(doc, tag)
        if m:
            out[tag] = {k: m.get(k) for k in ("avg", "p50", "p90", "p99") if k in m}
    return out


# ---------------------------------------------------------------- simulator side


def sim_side(s: Path) -> dict:
    recs = [json.loads(l) for l in read_text_maybe_gz(s / "records.jsonl").splitlines() if l.strip()]
    summ = json.loads((s / "summary.json").read_text())["summary"]
    lanes = json.loads((s / "agentx_lanes.json").read_text())["lanes"]
    reqs = []
    for r in recs:
        done = r["outcome"] == "completed"
        f, l = r.get("first_token_ns"), r.get("last_token_ns")
        ttft = None if f is None else (f - r["send_ns"]) / 1e9
        if f is None or l is None:
            tpot = None
        elif r["output_tokens"] <= 1:
            tpot = 0.0
        else:
            tpot = (l - f) / 1e9 / (r["output_tokens"] - 1)
        reqs.append(
            {
                "x": r["input_tokens"],
                "y": r["output_tokens"],
                "requested": r["output_requested"],
                "ttft": ttft,
                "tpot": tpot,
                "completed": done,
                "lane": r["lane"],
                "root": r["tree"],
                "sent_s": r["send_ns"] / 1e9,
                "depth": 0 if r["kind"] == "root_turn" else 1,
            }
        )
    return {"records": reqs, "summary": summ, "lanes": lanes}


# ---------------------------------------------------------------- report


def fmt(v, nd=3):
    if v is None:
        return "—"
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        return f"{v:.{nd}f}"
    return str(v)


def pct(a, b):
    if a is None or b is None or not a or (isinstance(a, float) and math.isnan(a)):
        return "—"
    return f"{(b - a) / a * 100:+.1f} %"


def compare_level(c: int, out: Path, outs, rows, dep, window_s) -> tuple[list[str], dict]:
    ad, sd = out / "agentx" / f"c{c}", out / "sim" / f"c{c}"
    ax = agentx_side(ad, outs, dep, window_s)
    sm = sim_side(sd)
    lines = [f"## c = {c}", ""]
    probe = ax["probe"]
    ax_lanes = probe["trajectory_source"][0]["lanes"] if probe.get("trajectory_source") else []
    pstart = probe["profiling_start"][0] if probe.get("profiling_start") else None
    plan = None
    if (ad / "plan.json").exists():
        plan = json.loads((ad / "plan.json").read_text())
    elif (ad / "plan.json.gz").exists():
        plan = json.loads(gzip.decompress((ad / "plan.json.gz").read_bytes()))
    primers_by_lane = defaultdict(list)
    if plan:
        for p in plan["primer_schedule"]:
            primers_by_lane[p["lane"]].append(p["offset_s"])

    # first dispatch planned by AgentX at profiling start: min over ready states of offset - t0
    ax_first = {}
    if pstart:
        t0 = pstart["t0_offset_ms"]
        for lane in pstart["lanes"]:
            ready = [s["next_dispatch_offset_ms"] for s in lane["states"] if not s["waiting_on_children"]]
            ax_first[lane["lane"]] = (min(ready) - t0) / 1e3 if ready else None
    # as sent (first profiling request per lane)
    def first_sent(reqs, key):
        best = {}
        for r in reqs:
            if r["lane"] is None or r.get(key) is None:
                continue
            best[r["lane"]] = min(best.get(r["lane"], float("inf")), r[key])
        return best

    ax_sent = first_sent(ax["records"], "sent_s")
    ax_issued = first_sent(ax["records"], "issued_s")
    sm_sent = first_sent(sm["records"], "sent_s")
    ax_count = Counter(r["lane"] for r in ax["records"])
    sm_count = Counter(r["lane"] for r in sm["records"])
    ax_trees = defaultdict(set)
    for r in ax["records"]:
        ax_trees[r["lane"]].add(r["root"])
    sm_trees = defaultdict(set)
    for r in sm["records"]:
        sm_trees[r["lane"]].add(r["root"])

    lines += [
        "### Lanes",
        "",
        "| lane | trace (row) AgentX | trace (row) sim | t* AgentX (ms) | t* sim (ms) | Δt* (ms) | live streams equal | primer offsets (s) AgentX plan / sim | first dispatch planned (s) AgentX / sim | first request sent (s) AgentX / sim | requests AgentX / sim | trees AgentX / sim |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lane_rows = []
    sim_lanes = {l["lane"]: l for l in sm["lanes"]}
    n = max(len(ax_lanes), len(sim_lanes))
    for i in range(n):
        a = ax_lanes[i] if i < len(ax_lanes) else None
        s = sim_lanes.get(i)
        a_trace = a["conversation_id"] if a else None
        a_row = rows.get(a_trace) if a_trace else None
        dt = None
        if a and s and a["t_star_ms"] is not None and s["t_star_ms"] is not None:
            dt = s["t_star_ms"] - a["t_star_ms"]
        # live streams: (stream, next turn, offset rounded to 1 us), primer turn
        eq = None
        if a and s:
            sa = sorted(
                (st["conversation_id"], st["next_turn_index"], round(st["next_dispatch_offset_ms"], 3), st["waiting_on_children"], st.get("warmup_turn_index"))
                for st in a["states"]
            )
            ss = sorted(
                (st["stream"], st["next_turn"], round(st["offset_ms"], 3), st["waiting"], st["primer_turn"])
                for st in s["states"]
            )
            eq = sa == ss
        ap = sorted(primers_by_lane.get(i, []))
        sp = sorted(s["primer_offsets_s"]) if s else []
        row = {
            "lane": i,
            "agentx_trace": a_trace,
            "agentx_row": a_row,
            "sim_trace": s["trace"] if s else None,
            "sim_row": s["row"] if s else None,
            "agentx_t_star_ms": a["t_star_ms"] if a else None,
            "sim_t_star_ms": s["t_star_ms"] if s else None,
            "dt_star_ms": dt,
            "streams_equal": eq,
            "agentx_primers_s": ap,
            "sim_primers_s": sp,
            "agentx_first_dispatch_s": ax_first.get(i),
            "sim_first_dispatch_s": s.get("first_dispatch_s") if s else None,
            "agentx_first_sent_s": ax_sent.get(i),
            "agentx_first_issued_s": ax_issued.get(i),
            "sim_first_sent_s": sm_sent.get(i),
            "agentx_requests": ax_count.get(i, 0),
            "sim_requests": sm_count.get(i, 0),
            "agentx_trees": len(ax_trees.get(i, ())),
            "sim_trees": len(sm_trees.get(i, ())),
        }
        lane_rows.append(row)
        lines.append(
            f"| {i} | {a_trace} ({a_row}) | {row['sim_trace']} ({row['sim_row']}) | {fmt(row['agentx_t_star_ms'])} | {fmt(row['sim_t_star_ms'])} | {fmt(dt, 6)} | {'yes' if eq else ('NO' if eq is False else '—')} | "
            f"{','.join(f'{x:.3f}' for x in ap)} / {','.join(f'{x:.3f}' for x in sp)} | {fmt(row['agentx_first_dispatch_s'])} / {fmt(row['sim_first_dispatch_s'])} | "
            f"{fmt(row['agentx_first_sent_s'])} / {fmt(row['sim_first_sent_s'])} | {row['agentx_requests']} / {row['sim_requests']} | {row['agentx_trees']} / {row['sim_trees']} |"
        )
    if ax["unmapped"]:
        lines.append(f"\n{ax['unmapped']} AgentX records could not be mapped to a lane.")

    # handoff states (after A's pressure warm-up): AgentX's vs what the sim planned is only
    # visible through first_dispatch; print AgentX's t0.
    if pstart:
        lines.append(
            f"\nAgentX profiling t0 (min handoff offset over ready states): {pstart['t0_offset_ms']:.3f} ms."
        )

    a_s = score(ax["records"], dep, window_s)
    s_s = score(sm["records"], dep, window_s)
    # AgentX's records with TTFT less serve's pre-engine time (diagnostic, see README)
    eng = [
        dict(r, ttft=r["ttft"] - r["pre_engine"]) if r["ttft"] is not None and r["pre_engine"] is not None else r
        for r in ax["records"]
    ]
    a_e = score(eng, dep, window_s)
    pre = [r["pre_engine"] for r in ax["records"] if r["pre_engine"] is not None]
    ss = sm["summary"]
    lines += [
        "",
        "### Run",
        "",
        "| | AgentX vs serve | simulate | sim − AgentX | AgentX, TTFT after serve's ack | sim − that |",
        "|---|---|---|---|---|---|",
    ]
    for key, nd in [
        ("requests", 0),
        ("completed", 0),
        ("qualified", 0),
        ("D", 3),
        ("G", 3),
        ("f", 3),
        ("ttft_p50", 3),
        ("ttft_p90", 3),
        ("tpot_p50", 4),
        ("tpot_p90", 4),
        ("input_tokens", 0),
        ("output_tokens", 0),
        ("short_output", 0),
        ("ttft_miss", 0),
        ("tpot_miss", 0),
    ]:
        a, b, e = a_s[key], s_s[key], a_e[key]
        lines.append(
            f"| {key} | {fmt(a, nd) if nd else a} | {fmt(b, nd) if nd else b} | {pct(a, b)} | {fmt(e, nd) if nd else e} | {pct(e, b)} |"
        )
    sc = ss.get("score", {})
    lines += [
        "",
        f"simulate's own summary: D {fmt(sc.get('d'))} G {fmt(sc.get('g'))} f {fmt(sc.get('f'))}, "
        f"requests {ss['requests']}, valid {ss['valid']}; AgentX: {ax['warmup_records']} warm-up records over "
        f"{fmt(ax['warmup_elapsed_s'], 1)} s, sim: {ss['agentx']['warmup_requests']} warm-up requests over "
        f"{ss['agentx']['warmup_s']:.1f} s; AgentX profiling completed/cancelled/errors "
        f"{ax['profiling_complete']}, sim dropped at the grace's end {ss['agentx']['dropped_unfinished']}; "
        f"global idle cap AgentX (warm-up, profiling) {ax['global_idle']}, sim {ss['agentx']['global_idle_jumps']} jumps / "
        f"{ss['agentx']['global_idle_skipped_s']:.1f} s, per-tree {ss['agentx']['tree_idle_jumps']} / {ss['agentx']['tree_idle_skipped_s']:.1f} s.",
    ]
    if pre:
        lines.append(
            f"serve's pre-engine time (AgentX request start → serve's 200 ack: upload, JSON, tokenization): "
            f"p50 {quantile(pre, 0.5) * 1e3:.0f} ms, p90 {quantile(pre, 0.9) * 1e3:.0f} ms, max {max(pre) * 1e3:.0f} ms."
        )
    if ax["timer_shifts"]:
        t = ax["timer_shifts"]
        lines.append(
            f"AgentX idle-cap shifts in profiling (probe): global {t['global_jumps']} / {t['global_s']:.1f} s, "
            f"per-tree {t['tree_jumps']} / {t['tree_s']:.1f} s; watchdog-race jumps (t, s): {t['watchdog_race_jumps']}."
        )
    if ax["isl_minus_in"]:
        d = ax["isl_minus_in"]
        lines.append(
            f"AgentX ISL (server usage) − trace `in`: mean {sum(d) / len(d):+.1f}, min {min(d)}, max {max(d)} tokens over {len(d)} requests."
        )
    if ax["missing_requested"]:
        lines.append(f"{ax['missing_requested']} AgentX records had no trace request to look up.")
    if ax["own_summary"]:
        o = ax["own_summary"]
        lines.append(f"AgentX's own summary: {json.dumps(o)}")
    lines.append("")
    doc = {
        "concurrency": c,
        "lanes": lane_rows,
        "agentx": a_s,
        "sim": s_s,
        "agentx_ttft_after_ack": a_e,
        "agentx_timer_shifts": ax["timer_shifts"],
        "serve_pre_engine_s": {"p50": quantile(pre, 0.5), "p90": quantile(pre, 0.9)} if pre else None,
        "sim_summary_score": sc,
        "agentx_warmup_records": ax["warmup_records"],
        "agentx_warmup_elapsed_s": ax["warmup_elapsed_s"],
        "sim_warmup_requests": ss["agentx"]["warmup_requests"],
        "sim_warmup_s": ss["agentx"]["warmup_s"],
    }
    return lines, doc


def levels_in(out: Path) -> set:
    """The levels whose AgentX and simulated records OUT holds."""
    def has(p: Path) -> bool:
        return p.exists() or Path(str(p) + ".gz").exists()

    return {
        int(p.name[1:])
        for p in (out / "agentx").glob("c*")
        if has(out / "sim" / p.name / "records.jsonl") and has(p / "art" / "profile_export.jsonl")
    }


RUN_ROWS = [("requests", 0), ("qualified", 0), ("D", 3), ("G", 3), ("f", 3), ("ttft_p50", 3), ("ttft_p90", 3),
            ("tpot_p50", 4), ("tpot_p90", 4)]


def pooled_table(runs: list, dep, window_s) -> tuple[list, dict]:
    """runs: (AgentX records, simulated records) per run. The side-by-side table of their pooled scores."""
    ax = [r for a, _ in runs for r in a]
    sm = [r for _, s in runs for r in s]
    a_s, s_s = score(ax, dep, window_s * len(runs)), score(sm, dep, window_s * len(runs))
    lines = ["| | AgentX vs serve | simulate | sim − AgentX |", "|---|---|---|---|"]
    for key, nd in RUN_ROWS:
        a, b = a_s[key], s_s[key]
        lines.append(f"| {key} | {fmt(a, nd) if nd else a} | {fmt(b, nd) if nd else b} | {pct(a, b)} |")
    return lines, {"agentx": a_s, "sim": s_s}


def pooled(outs_dirs: list, outs, dep, window_s) -> tuple[list, list]:
    """Markdown lines and a JSON list: every common level scored over all runs' records at once, and again
    without the runs in which AgentX's global idle cap made its spurious second jump (the watchdog race,
    results/agentx-conformance/README.md): such a run did not replay what the documented rule replays."""
    common = sorted(set.intersection(*(levels_in(o) for o in outs_dirs)))
    lines, docs = [], []
    for c in common:
        runs, raced = [], []
        for o in outs_dirs:
            a = agentx_side(o / "agentx" / f"c{c}", outs, dep, window_s)
            runs.append((a["records"], sim_side(o / "sim" / f"c{c}")["records"]))
            shifts = a["timer_shifts"] or {}
            raced.append(bool(shifts.get("watchdog_race_jumps")))
        table, doc = pooled_table(runs, dep, window_s)
        lines += [f"## c = {c}, {len(runs)} runs pooled", ""] + table + [""]
        doc.update(concurrency=c, runs=[str(o) for o in outs_dirs], raced=[str(o) for o, r in zip(outs_dirs, raced) if r])
        clean = [run for run, r in zip(runs, raced) if not r]
        if any(raced):
            names = ", ".join(f"`{o}`" for o, r in zip(outs_dirs, raced) if r)
            lines.append(f"AgentX's idle-cap race fired in {names}.")
            if clean:
                table, without = pooled_table(clean, dep, window_s)
                n = len(clean)
                lines += ["", f"Without {'it' if sum(raced) == 1 else 'them'} ({n} run{'s' if n > 1 else ''}):", ""] + table
                doc["without_raced"] = without
            lines.append("")
        docs.append(doc)
    return lines, docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?")
    ap.add_argument("--pool", nargs="+", default=None, help="score these runs' levels together")
    ap.add_argument("--deployment", default="qwen3.5-9b-2xl40")
    ap.add_argument("--sb", default="target/release/serverbench")
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--trace-dir", required=True)
    ap.add_argument("--json", default=None, help="also write the numbers here (default OUT/comparison.json)")
    a = ap.parse_args()
    if (a.out is None) == (a.pool is None):
        ap.error("give OUT or --pool OUT [OUT ...]")
    dep = deployment_numbers(a.sb, a.deployment)
    outs, rows, files = trace_outs(Path(a.trace_dir))
    if a.pool:
        dirs = [Path(p) for p in a.pool]
        print(f"# AgentX vs simulate, runs pooled: {a.deployment}, window {a.duration:g} s each, {len(files)} traces\n")
        print("Runs: " + ", ".join(f"`{p}`" for p in a.pool) + "\n")
        lines, docs = pooled(dirs, outs, dep, a.duration)
        print("\n".join(lines))
        if a.json:
            Path(a.json).write_text(json.dumps({"deployment": dep, "pooled": docs}, indent=1))
        return 0
    out = Path(a.out)
    levels = sorted(levels_in(out))
    print(f"# AgentX vs simulate: {a.deployment}, window {a.duration:g} s, {len(files)} traces\n")
    print(
        f"Prices ${dep['p_in']}/M in, ${dep['p_out']}/M out; {dep['gpus']:g} GPUs × ${dep['gpu_hour']}/h; "
        f"targets TTFT ≤ {dep['ttft']} s, TPOT ≤ {dep['tpot']} s.\n"
    )
    docs = []
    for c in levels:
        lines, doc = compare_level(c, out, outs, rows, dep, a.duration)
        print("\n".join(lines))
        docs.append(doc)
    Path(a.json or out / "comparison.json").write_text(json.dumps({"deployment": dep, "levels": docs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
