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


def main():
    sessions = [json.loads(line) for line in sys.stdin if line.strip()]
    logs = [[math.log(max(1, new_tokens(c))) for c in s["calls"] if continues_root(s["calls"], c)] for s in sessions]
    mu = statistics.mean(x for g in logs for x in g)
    for s, g in zip(sessions, logs):
        n = len(g)
        scale = math.exp(-((statistics.mean(g) if g else mu) - mu) * n / (n + 5))
        calls = s["calls"]
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
            prompt[i] = max(1, shared + max(0, round(new_tokens(c) * scale)))
            c["prefix"] = [d, shared]
            if "cached" in c:
                c["cached"] = max(0, min(c["cached"] + shift, prompt[i]))
        for c, p in zip(calls, prompt):
            c["input"] = p
        sys.stdout.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
