#!/usr/bin/env python3
"""serve's front end per prompt token, read from AgentX's per-request records.

For every record of AgentX's export (`art/profile_export.jsonl`, plain or gzipped) that has serve's
200 acknowledgement, the time from the request's start to that acknowledgement (the body's upload,
JSON, tokenizing the messages: what serve does before its engine sees the prompt) divided by the
prompt's tokens (the server's usage count). Prints the p10, p50 and p90 in microseconds per token,
over the warm-up and profiling records of each folder given, and the value to pass as
`SERVE_FRONTEND_S_PER_TOKEN` to conformance.sh (the p50, as the conformance runs charge it).

`--alone`: only the requests whose start-to-acknowledgement span overlaps no other request's, so that
serve's front end (which takes one request at a time) was free when they came: the front end's own rate
at any concurrency, without the time a request waits behind another's parse.

Usage: frontend_rate.py [--alone] AGENTX_LEVEL_DIR [...]     (e.g. OUT/agentx/c1)

With several folders a last row pools their requests (the rate a set of runs on one machine shares).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_runs import metric, quantile, read_text_maybe_gz  # noqa: E402

import json  # noqa: E402


def spans(d: Path) -> list[tuple[int, int, int]]:
    """(start ns, acknowledgement ns, prompt tokens) of every record with serve's acknowledgement."""
    text = read_text_maybe_gz(d / "art" / "profile_export.jsonl")
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        md = r["metadata"]
        ack = md.get("request_ack_ns")
        tokens = metric(r, "usage_prompt_tokens") or metric(r, "input_sequence_length")
        if ack is None or not tokens:
            continue
        out.append((md["request_start_ns"], ack, tokens))
    return out


def alone(sp: list) -> list:
    """The spans that overlap no other span."""
    sp = sorted(sp)
    keep, reach = [], None  # reach: the latest end of the spans before this one
    for i, (a, b, t) in enumerate(sp):
        before = reach is not None and reach > a
        after = i + 1 < len(sp) and sp[i + 1][0] < b
        if not before and not after:
            keep.append((a, b, t))
        reach = b if reach is None else max(reach, b)
    return keep


def rates(d: Path, only_alone: bool = False) -> list[float]:
    sp = spans(d)
    if only_alone:
        sp = alone(sp)
    return [(b - a) / 1e9 / t for a, b, t in sp]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--alone", action="store_true", help="only requests that found the front end free")
    args = ap.parse_args()
    pooled = []
    for d in args.dirs:
        xs = rates(d, args.alone)
        if not xs:
            what = "that found the front end free" if args.alone else "with serve's acknowledgement"
            print(f"{d}: no record {what}", file=sys.stderr)
            return 1
        print(line(str(d), xs))
        pooled += xs
    if len(args.dirs) > 1:
        print(line(f"all {len(args.dirs)} folders{' --alone' if args.alone else ''}", pooled))
    return 0


def line(name: str, xs: list[float]) -> str:
    """one row: the count, p10 / p50 / p90 in µs a token, and the p50 as conformance.sh takes it"""
    q = [quantile(xs, p) * 1e6 for p in (0.1, 0.5, 0.9)]
    return (f"{name}: {len(xs)} requests, µs per prompt token p10 {q[0]:.3f} p50 {q[1]:.3f} p90 {q[2]:.3f}; "
            f"SERVE_FRONTEND_S_PER_TOKEN={quantile(xs, 0.5):.3g}")


if __name__ == "__main__":
    sys.exit(main())
