#!/usr/bin/env python3
"""Gives the sessions of one `corpus`-format file (serverbench's corpus of sessions reduced to numbers,
e.g. a generator's sessions from `workload export --format corpus`) the early root-turn growth of
another's (the real corpus), keeping everything else, and writes the result: a replay of it beside a
replay of the original tells what the early turns' growth is worth to the score
(results/workload-fit/gemma-24.md, "The first turns").

    python3 scripts/inject_early_growth.py MODE SOURCE SEED < SESSIONS.jsonl > OUT.jsonl

MODE:
  second        each session's second root call gets the new tokens (its prompt less what it shares with
                the call before) of a SOURCE session's second root call, drawn at random (random.Random(SEED))
                among those whose first prompt falls in the same band (edges 20K, 30K, 50K, 100K tokens),
                and its later root calls' new tokens are scaled so that the session's total is unchanged;
  second-extra  the same, the later calls left as they were (the session grows by the difference);
  second-late   the difference from its own second call's new tokens added to one of its later root calls
                instead, drawn at random (a check that the position, not the amount, matters);
  turns:LO:HI   each root call LO..HI-1 (0 is the first prompt) gets the new tokens of a SOURCE root call at
                the same position, drawn among all sessions, the later calls scaled as in `second`.
New tokens come in as growth on the whole previous prompt (no changed history); the prompts are rebuilt by
`scripts/scale_session_growth.py`'s `rebuild`.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale_session_growth import continues_root, new_tokens, read_sessions, rebuild  # noqa: E402

EDGES = [20_000, 30_000, 50_000, 100_000]


def band(tokens):
    return sum(tokens >= e for e in EDGES)


def roots(session):
    return [i for i, c in enumerate(session["calls"]) if c["agent"] == 0]


def growing(session):
    """Root call positions (index among root calls) and call indices of the calls that continue the root."""
    calls = session["calls"]
    return [(k, i) for k, i in enumerate(roots(session)) if continues_root(calls, calls[i])]


def pools(source, lo, hi, by_band):
    """New tokens of the source's root calls at positions lo..hi-1, keyed by (position, band or 0)."""
    out = {}
    for s in source:
        first = band(s["calls"][0]["input"]) if by_band else 0
        for k, i in growing(s):
            if lo <= k < hi:
                out.setdefault((k, first), []).append(new_tokens(s["calls"][i]))
    return out


def inject(session, pool, lo, hi, by_band, mode, rng):
    calls = session["calls"]
    first = band(calls[0]["input"]) if by_band else 0
    new = {i: new_tokens(calls[i]) for _, i in growing(session)}
    positions = dict(growing(session))
    delta = 0
    for k in range(lo, hi):
        i = positions.get(k)
        drawn = pool.get((k, first))
        if i is None or not drawn:
            continue
        v = rng.choice(drawn)
        delta += v - new[i]
        if mode != "second-late":
            new[i] = v
    later = [i for k, i in positions.items() if k >= hi]
    if mode == "second-late":
        if later:
            j = rng.choice(later)
            new[j] = max(0, new[j] + delta)
    elif mode != "second-extra":
        total = sum(new[j] for j in later)
        if total > 0:
            f = max(0.0, (total - delta) / total)
            for j in later:
                new[j] = round(new[j] * f)
    rebuild(session, lambda i, c: new.get(i, new_tokens(c)))


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    mode, source_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode.startswith("turns:"):
        try:
            lo, hi = (int(x) for x in mode.split(":")[1:])
        except ValueError:
            sys.exit(f"{mode}: expected turns:LO:HI")
        by_band = False
    elif mode in ("second", "second-extra", "second-late"):
        lo, hi, by_band = 1, 2, True
    else:
        sys.exit(f"{mode}: unknown mode\n{__doc__}")
    with open(source_path) as f:
        pool = pools(read_sessions(f), lo, hi, by_band)
    rng = random.Random(seed)
    for s in read_sessions(sys.stdin):
        inject(s, pool, lo, hi, by_band, mode, rng)
        sys.stdout.write(json.dumps(s) + "\n")


if __name__ == "__main__":
    main()
