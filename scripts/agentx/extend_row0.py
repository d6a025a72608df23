#!/usr/bin/env python3
"""A sensitivity test, not data: the benchmark corpus's row 0 as the 256K release has it
(corpus/agentx-062126-256k/rows-0-3.jsonl.gz) lacks the full corpus's main-agent requests past 256,000
tokens, which the 1M-context deployments replay (198 requests and 130 root turns in the full corpus,
peak input 396,224: sskim-ai/InferenceX_analysis's per-session tables). This writes the four rows with
row 0's main agent continued by that many requests after its last one: each prompt the previous prompt
and answer plus an even share of the growth to the full row's peak input (whole 64-token blocks, new
block ids), the answers, api times and end-to-start gaps those of row 0's own main-agent turns after
t = 86,000 s in turn (the part a lane replays), and the row's last sub-agent group kept at its time.
Rows 1-3 are written as they are.
Usage: python3 scripts/agentx/extend_row0.py [ROWS.jsonl.gz] > /tmp/rows-extended.jsonl
"""
import gzip
import json
import sys

FULL_ROOT_TURNS = 130
FULL_PEAK_INPUT = 396_224
BLOCK = 64


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "corpus/agentx-062126-256k/rows-0-3.jsonl.gz"
    rows = [json.loads(line) for line in gzip.open(path, "rt")]
    row = rows[0]
    # The main agent's turns, less its few one-block-scale side calls (title generation: 448-640
    # tokens, sharing nothing), which neither grow the context nor set its pace.
    main_reqs = [r for r in row["requests"] if r.get("type") != "subagent" and r["in"] > BLOCK * 100]
    late = [r for r in main_reqs if r["t"] > 86_000]
    gaps = [max(0.0, b["t"] - a["t"] - a["api_time"]) for a, b in zip(late, late[1:])]
    roots = sum(1 for r in row["requests"] if r.get("type") != "subagent")
    missing = FULL_ROOT_TURNS - roots
    last = main_reqs[-1]
    step = (FULL_PEAK_INPUT - last["in"]) / missing
    next_id = 1 + max(h for r in walk(row["requests"]) for h in r["hash_ids"])
    added, prev, t = [], last, last["t"]
    for k in range(missing):
        src = late[k % len(late)]
        blocks = round((last["in"] + step * (k + 1)) / BLOCK)
        ids = list(prev["hash_ids"])
        while len(ids) < blocks:
            ids.append(next_id)
            next_id += 1
        t = t + prev["api_time"] + gaps[k % len(gaps)]
        req = {"t": round(t, 3), "model": src["model"], "in": len(ids) * BLOCK, "out": src["out"],
               "hash_ids": ids, "api_time": src["api_time"], "think_time": 0.0, "type": "s"}
        added.append(req)
        prev = req
    row["requests"] = sorted(row["requests"] + added, key=lambda r: r["t"])
    for r in rows:
        sys.stdout.write(json.dumps(r, separators=(",", ":")) + "\n")


def walk(reqs):
    for r in reqs:
        if r.get("type") == "subagent":
            yield from walk(r["requests"])
        else:
            yield r


main()
