#!/usr/bin/env python3
"""Shuffles one per-call quantity of the root agents' calls of a `corpus`-format file (serverbench's
corpus of sessions reduced to numbers), keeping everything else: across the sessions, whatever the
quantity owed to the session it came from is gone, its distribution over calls is not; with `--within`,
each session's own values are shuffled among its own calls, so that only their order is gone. A replay
of the result beside a replay of the original tells how much a session's own level (or order) of that
quantity moves the score (docs/fidelity.md, "Not the held-out fifth's sampling").

    python3 scripts/shuffle_sessions.py output|think_s SEED [--within] < SESSIONS.jsonl > SHUFFLED.jsonl

`output`: every root call's answer length; `think_s`: every root call's gap after what it waited for
(the first call of a session, which has none, keeps its 0). A replay derives a call's gap from its
recorded send time less the latest recorded end of the calls it waited for, where both are recorded,
and reads `think_s` only otherwise; so for `think_s` every call of a session first gets its gap as
the replay derives it written as `think_s`, and the recorded times (`sent_s`, `done_s`) are dropped
(only the AgentX protocols read them, as the recording's clock: replay the result with `--protocol
cold`). Plain Python.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_session_growth import read_sessions  # noqa: E402


def movable(call, field):
    if call.get("agent", 0) != 0 or field not in call:
        return False
    return field == "output" or bool(call.get("deps"))


def gaps_as_think_times(session):
    """Writes each call's gap, as serverbench's replay derives it, into `think_s`; drops the times."""
    calls = session["calls"]
    gaps = []
    for c in calls:
        deps = c.get("deps") or []
        done = [calls[d].get("done_s") for d in deps]
        if deps and c.get("sent_s") is not None and all(d is not None for d in done):
            gaps.append(max(0.0, c["sent_s"] - max(done)))
        elif deps:
            gaps.append(c.get("think_s") or 0.0)
        else:
            gaps.append(0.0)
    for c, g in zip(calls, gaps):
        c["think_s"] = g
        c.pop("sent_s", None)
        c.pop("done_s", None)


def shuffled(values, rng):
    values = list(values)
    rng.shuffle(values)
    return values


def main():
    args = sys.argv[1:]
    within = "--within" in args
    args = [a for a in args if a != "--within"]
    if len(args) != 2 or args[0] not in ("output", "think_s"):
        sys.exit("usage: shuffle_sessions.py output|think_s SEED [--within] < SESSIONS.jsonl > SHUFFLED.jsonl")
    field, rng = args[0], random.Random(int(args[1]))
    sessions = read_sessions(sys.stdin)
    if field == "think_s":
        for s in sessions:
            gaps_as_think_times(s)
    def spots(s):
        return [c for c in s["calls"] if movable(c, field)]
    if within:
        for s in sessions:
            calls = spots(s)
            for c, v in zip(calls, shuffled((c[field] for c in calls), rng)):
                c[field] = v
    else:
        calls = [c for s in sessions for c in spots(s)]
        for c, v in zip(calls, shuffled((c[field] for c in calls), rng)):
            c[field] = v
    for s in sessions:
        sys.stdout.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
