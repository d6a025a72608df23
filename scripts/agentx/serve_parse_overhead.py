#!/usr/bin/env python3
"""How long `serverbench serve` takes to read and tokenize a chat prompt before its engine sees it.

serve stamps a request's arrival (the engine's clock, `RequestClock::start` in
backends/src/server/mod.rs:generate) only after it has read the body and turned the messages'
text into token ids (`params::chat` -> `text_ids`, with `--tokenizer` the tokenizers crate). A
client's TTFT includes that time; the simulator's does not. This script measures it: it sends
chat requests whose `max_completion_tokens` is 0, which serve refuses only after tokenizing the
prompt (params.rs: the ids are computed before `params()` checks the body), so the round trip is
body transfer + JSON parse + tokenization + the refusal.

The prompt text is AgentX's own: the tokenizer decodes runs of token ids the way AgentX's
synthetic coding corpus does (tests use the repository's byte-level BPE test tokenizer); a
second series uses English-like text. Sizes are in tokens of that tokenizer.

Usage: serve_parse_overhead.py URL TOKENIZER_JSON [--sizes 1000,10000,...] [--reps 5]
Needs the `tokenizers` Python package (AgentX's virtualenv has it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.error
import urllib.request


def post(url: str, body: dict) -> float:
    data = json.dumps(body).encode()
    req = urllib.request.Request(
        url + "/v1/chat/completions", data=data, headers={"content-type": "application/json"}
    )
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req) as r:
            r.read()
    except urllib.error.HTTPError as e:
        e.read()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("tokenizer_json")
    ap.add_argument("--sizes", default="1000,10000,50000,100000,150000")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(a.tokenizer_json)
    # Text like AgentX's: its coding corpus, tokenized and decoded in 64-token blocks. Stand-in:
    # the tokenizer's own vocabulary cycled (ids 256.. are merges, i.e. common substrings).
    vocab = tok.get_vocab_size()
    rows = []
    for n in (int(s) for s in a.sizes.split(",")):
        ids = [256 + (i * 7919) % (vocab - 256) for i in range(n)]
        text = tok.decode(ids)
        t = time.perf_counter()
        got = len(tok.encode(text, add_special_tokens=False).ids)
        enc_s = time.perf_counter() - t
        body = {
            "model": "m",
            "messages": [{"role": "user", "content": text}],
            "max_completion_tokens": 0,
            "stream": True,
        }
        times = [post(a.url, body) for _ in range(a.reps)]
        rows.append(
            {
                "tokens_asked": n,
                "tokens_counted": got,
                "bytes": len(text.encode()),
                "python_encode_s": enc_s,
                "serve_refusal_round_trip_s_median": statistics.median(times),
                "serve_refusal_round_trip_s_min": min(times),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    small = post(a.url, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})
    print(json.dumps({"tiny_prompt_round_trip_s": small}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
