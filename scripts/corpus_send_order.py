#!/usr/bin/env python3
"""Rewrites a corpus file reduced before 2026-12-04 so that no call waits for a call sent after it (the
corpus reader refuses such a file since then, docs/workload.md "No call waits for one sent after it"),
as the reductions now keep to it, for stored files whose raw logs are not at hand:

- a run of one agent's calls that goes back in time (a call sent before the call it follows: sub-agents
  an older Claude Code log wrote inline, merged into one agent) becomes an agent of its own, from that
  call on, spawned as the agent it was split from;
- a sub-agent's first call that waits for a call sent after it waits instead for the latest call of
  that call's agent sent by then, or, with none, for nothing (it starts with the session and, if its
  agent's last call gated nothing else, gates nothing: `background`);
agents are numbered again in order of their first call. Every other field is kept as it was.

Usage: corpus_send_order.py IN.jsonl OUT.jsonl   (prints what it changed)
"""
import json
import sys


def sent(c):
    return c.get("sent_s")


def later(calls, i, d):
    """Whether call d (a dependency of call i) was sent after call i."""
    a, b = sent(calls[i]), sent(calls[d])
    return a is not None and b is not None and b > a


def split_back_in_time(calls):
    """A call of an agent that waits for its agent's previous call, sent after it, starts a new agent."""
    n = 0
    next_agent = max(c["agent"] for c in calls) + 1
    for i, c in enumerate(calls):
        same = [d for d in c["deps"] if calls[d]["agent"] == c["agent"] and later(calls, i, d)]
        if not same:
            continue
        old = c["agent"]
        first = next(k for k, x in enumerate(calls) if x["agent"] == old)
        spawner = [d for d in calls[first]["deps"] if calls[d]["agent"] != old]
        c["deps"] = [d for d in c["deps"] if d not in same] + spawner
        chain = {i}
        for k in range(i + 1, len(calls)):
            if calls[k]["agent"] == old and any(d in chain for d in calls[k]["deps"]):
                chain.add(k)
        for k in chain:
            calls[k]["agent"] = next_agent
        next_agent += 1
        n += 1
    return n


def repoint(calls):
    """A call that waits for one sent after it waits for that one's agent's latest call sent by then."""
    n = 0
    for i, c in enumerate(calls):
        deps = []
        for d in c["deps"]:
            if not later(calls, i, d):
                deps.append(d)
                continue
            n += 1
            agent = calls[d]["agent"]
            by = [k for k in range(d) if calls[k]["agent"] == agent and not later(calls, i, k)]
            if by:
                deps.append(by[-1])
        c["deps"] = sorted(set(deps))
    return n


def renumber_and_background(calls):
    ids = {}
    for c in calls:
        c["agent"] = ids.setdefault(c["agent"], len(ids))
    waited = {d for i, c in enumerate(calls) for d in c["deps"] if calls[d]["agent"] != c["agent"]}
    for a in set(ids.values()) - {0}:
        mine = [i for i, c in enumerate(calls) if c["agent"] == a]
        if not calls[mine[0]]["deps"] and not (set(mine) & waited):
            for i in mine:
                calls[i]["background"] = True


def main():
    src, dst = sys.argv[1], sys.argv[2]
    out = []
    for line in open(src):
        s = json.loads(line)
        calls = s["calls"]
        split = split_back_in_time(calls)
        moved = repoint(calls)
        renumber_and_background(calls)
        for c in calls:
            if not c.get("background"):
                c.pop("background", None)
        if split or moved:
            print(f"{s['id']}: {split} agent(s) split, {moved} dependency(ies) moved")
        out.append(json.dumps(s, separators=(",", ":")) + "\n")
    with open(dst, "w") as f:
        f.writelines(out)


main()
