#!/usr/bin/env python3
"""Shuffles one per-call quantity of the root agents' calls across the sessions of a `corpus`-format
file (serverbench's corpus of sessions reduced to numbers), keeping everything else: whatever the
quantity owed to the session it came from is gone, its distribution over calls is not. A replay of the
result beside a replay of the original tells how much a session's own level of that quantity moves
the score (docs/fidelity.md, "Not the held-out fifth's sampling").

    python3 scripts/shuffle_sessions.py output|think_s SEED < SESSIONS.jsonl > SHUFFLED.jsonl

`output`: every root call's answer length; `think_s`: every root call's gap after its predecessor (the
first call of a session, which has none, keeps its 0). Plain Python.
"""
import json
import random
import sys


def movable(call, field):
    if call.get("agent", 0) != 0 or field not in call:
        return False
    return field == "output" or bool(call.get("deps"))


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("output", "think_s"):
        sys.exit("usage: shuffle_sessions.py output|think_s SEED < SESSIONS.jsonl > SHUFFLED.jsonl")
    field, seed = sys.argv[1], int(sys.argv[2])
    sessions = []
    for n, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            sessions.append(json.loads(line))
        except json.JSONDecodeError as e:
            sys.exit(f"line {n}: {e}")
    values = [c[field] for s in sessions for c in s["calls"] if movable(c, field)]
    random.Random(seed).shuffle(values)
    it = iter(values)
    for s in sessions:
        for c in s["calls"]:
            if movable(c, field):
                c[field] = next(it)
        sys.stdout.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
