#!/usr/bin/env python3
"""Scales each session's prompt growth to the corpus's level in a `corpus`-format file (serverbench's
corpus of sessions reduced to numbers), keeping everything else: every root call's new tokens (its prompt
less what it shares with the root call it continues) times exp(−(m − μ)·n/(n + 5)), `m` the session's
mean log new tokens over its `n` such calls and `μ` the corpus's, and the prompts rebuilt on the scaled
history (each call's shared prefix and cached tokens moved by what its predecessor's prompt moved).
Calls of sub-agents keep their prompts; a prefix they share with a shortened root prompt is cut to it.
A replay of the result beside a replay of the original tells what a session's own rate of growth is
worth to the score (docs/fidelity.md, "Five folds instead of one").

    python3 scripts/scale_session_growth.py < SESSIONS.jsonl > SCALED.jsonl
"""
import json
import math
import statistics
import sys


def new_tokens(call):
    prefix = call.get("prefix")
    return max(0, call["input"] - (prefix[1] if prefix else 0))


def continues_root(calls, call):
    prefix = call.get("prefix")
    return call["agent"] == 0 and prefix is not None and calls[prefix[0]]["agent"] == 0


def read_sessions(stream):
    """The sessions of a corpus-format JSONL stream; a line that is not JSON stops with its number."""
    sessions = []
    for n, line in enumerate(stream, 1):
        if not line.strip():
            continue
        try:
            sessions.append(json.loads(line))
        except json.JSONDecodeError as e:
            sys.exit(f"line {n}: {e}")
    return sessions


def rebuild(session, added):
    """Rebuilds a session's prompts on a changed history: each root call that continues the root gets
    `added(i, call)` new tokens on what it shares with its predecessor's rebuilt prompt (never below its
    application prefix), its shared prefix and cached tokens moved by what the predecessor's prompt
    moved; other calls keep their prompts, a prefix they share with a shortened prompt cut to it."""
    calls = session["calls"]
    prompt = [c["input"] for c in calls]
    for i, c in enumerate(calls):
        prefix = c.get("prefix")
        if not continues_root(calls, c):
            if prefix:
                c["prefix"] = [prefix[0], min(prefix[1], prompt[prefix[0]], c["input"])]
                if "cached" in c:
                    c["cached"] = min(c["cached"], c["input"])
            continue
        d = prefix[0]
        shift = prompt[d] - calls[d]["input"]
        shared = max(0, min(prefix[1] + shift, prompt[d]))
        prompt[i] = max(1, c.get("app", 0), shared + added(i, c))
        c["prefix"] = [d, shared]
        if "cached" in c:
            c["cached"] = max(0, min(c["cached"] + shift, prompt[i]))
    for c, p in zip(calls, prompt):
        c["input"] = p


def main():
    sessions = read_sessions(sys.stdin)
    logs = [[math.log(max(1, new_tokens(c))) for c in s["calls"] if continues_root(s["calls"], c)] for s in sessions]
    mu = statistics.mean(x for g in logs for x in g)
    for s, g in zip(sessions, logs):
        n = len(g)
        scale = math.exp(-((statistics.mean(g) if g else mu) - mu) * n / (n + 5))
        rebuild(s, lambda i, c: max(0, round(new_tokens(c) * scale)))
        sys.stdout.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
