#!/usr/bin/env python3
"""Shuffles the prompt growth of the root calls of a `corpus`-format file (serverbench's corpus of
sessions reduced to numbers) and rebuilds the prompts on the shuffled history, keeping everything else:
`across` moves each root call's new tokens (its prompt less what it shares with the root call it
continues) to another such call of any session whose predecessor's prompt lies in the same size band;
`within` shuffles each session's new tokens among its own calls, so that only their order is gone.
`--keep-first F` leaves a session's first F (a fraction) of its root calls in place, `--keep-turn K`
its root call K; `--only-first F` shuffles only the first F of each session's root calls and leaves the
rest in place. Prompts, shared prefixes and cached tokens are rebuilt as
`scripts/scale_session_growth.py` rebuilds them (its `rebuild`). A replay
of the result beside the original tells what the order of a session's growth is worth
(results/workload-fit/gemma-24.md).

    python3 scripts/shuffle_growth.py across|within SEED [--keep-first F | --only-first F] [--keep-turn K] < SESSIONS.jsonl > SHUFFLED.jsonl
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_session_growth import continues_root, new_tokens, read_sessions, rebuild  # noqa: E402

BANDS = [20e3, 40e3, 60e3, 80e3, 100e3, 130e3, 200e3, 400e3]


def band(tokens):
    return next((i for i, b in enumerate(BANDS) if tokens < b), len(BANDS))


def movable(sessions, keep_first, keep_turn, only_first):
    """(session, call) of every root call that continues the root and is not kept in place."""
    out = []
    for si, s in enumerate(sessions):
        calls = s["calls"]
        roots = [i for i, c in enumerate(calls) if c.get("agent", 0) == 0]
        for k, i in enumerate(roots):
            if not continues_root(calls, calls[i]):
                continue
            if k < keep_first * len(roots) or k == keep_turn:
                continue
            if only_first is not None and k >= only_first * len(roots):
                continue
            out.append((si, i))
    return out


def assignment(sessions, spots, mode, rng):
    groups = {}
    for si, i in spots:
        calls = sessions[si]["calls"]
        key = band(calls[calls[i]["prefix"][0]]["input"]) if mode == "across" else si
        groups.setdefault(key, []).append((si, i))
    out = {}
    for group in groups.values():
        values = [new_tokens(sessions[si]["calls"][i]) for si, i in group]
        rng.shuffle(values)
        out.update(zip(group, values))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["across", "within"])
    p.add_argument("seed", type=int)
    p.add_argument("--keep-first", type=float, default=0.0)
    p.add_argument("--keep-turn", type=int, default=-1)
    p.add_argument("--only-first", type=float, default=None)
    a = p.parse_args()
    sessions = read_sessions(sys.stdin)
    spots = movable(sessions, a.keep_first, a.keep_turn, a.only_first)
    assigned = assignment(sessions, spots, a.mode, random.Random(a.seed))
    for si, s in enumerate(sessions):
        rebuild(s, lambda i, c, si=si: assigned.get((si, i), new_tokens(c)))
        sys.stdout.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
