#!/usr/bin/env python3
"""Drops every sub-agent call of a `corpus`-format file (serverbench's corpus of sessions reduced to
numbers), keeping each session's root calls as they are: a root call that waited for a sub-agent waits
for the root call before it instead (so the sub-agents' running time becomes part of its gap), and a
prefix a root call shared with a sub-agent's call is dropped. A replay of the result beside a replay of
the generator with `subagents.session_probability: 0` compares the root chains alone
(results/workload-fit/gemma-24.md).

    python3 scripts/root_only.py < SESSIONS.jsonl > ROOTS.jsonl
"""
import json
import sys


def root_only(session):
    calls = session["calls"]
    keep = [i for i, c in enumerate(calls) if c.get("agent", 0) == 0]
    new = {old: k for k, old in enumerate(keep)}
    out, previous = [], None
    for old in keep:
        c = dict(calls[old])
        deps = c.get("deps") or []
        kept = sorted({new[d] for d in deps if d in new})
        if any(d not in new for d in deps) and previous is not None:
            kept = [new[previous]]
        c["deps"] = kept
        prefix = c.get("prefix")
        if prefix and prefix[0] in new:
            c["prefix"] = [new[prefix[0]], prefix[1]]
        elif prefix:
            c.pop("prefix")
        out.append(c)
        previous = old
    session["calls"] = out
    return session


def main():
    for n, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            session = json.loads(line)
        except json.JSONDecodeError as e:
            sys.exit(f"line {n}: {e}")
        sys.stdout.write(json.dumps(root_only(session)) + "\n")


if __name__ == "__main__":
    main()
