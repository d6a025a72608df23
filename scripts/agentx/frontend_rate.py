#!/usr/bin/env python3
"""serve's front end per prompt token, read from AgentX's per-request records.

For every record of AgentX's export (`art/profile_export.jsonl`, plain or gzipped) that has serve's
200 acknowledgement, the time from the request's start to that acknowledgement (the body's upload,
JSON, tokenizing the messages: what serve does before its engine sees the prompt) divided by the
prompt's tokens (the server's usage count). Prints the p10, p50 and p90 in microseconds per token,
over the warm-up and profiling records of each folder given, and the value to pass as
`SERVE_FRONTEND_S_PER_TOKEN` to conformance.sh (the p50, as the conformance runs charge it).

Usage: frontend_rate.py AGENTX_LEVEL_DIR [...]     (e.g. OUT/agentx/c1)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_runs import metric, quantile, read_text_maybe_gz  # noqa: E402

import json  # noqa: E402


def rates(d: Path) -> list[float]:
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
        out.append((ack - md["request_start_ns"]) / 1e9 / tokens)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    args = ap.parse_args()
    for d in args.dirs:
        xs = rates(d)
        if not xs:
            print(f"{d}: no record with serve's acknowledgement", file=sys.stderr)
            return 1
        q = [quantile(xs, p) * 1e6 for p in (0.1, 0.5, 0.9)]
        print(f"{d}: {len(xs)} requests, µs per prompt token p10 {q[0]:.3f} p50 {q[1]:.3f} p90 {q[2]:.3f}; "
              f"SERVE_FRONTEND_S_PER_TOKEN={quantile(xs, 0.5):.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
