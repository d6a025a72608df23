#!/usr/bin/env python3
"""A plain reference implementation for `serverbench verify --reference`: Hugging Face transformers running
a checkpoint one request at a time, in float32 (the higher-precision reference), behind the part of the
OpenAI completions API that the fidelity gates use.

POST /v1/completions takes a token-id prompt (`prompt`: a list of ints; this server has no tokenizer),
`max_tokens`, `temperature` (only 0: greedy), `logprobs` (0-20 alternatives), `echo` and
`return_tokens_as_token_ids` (tokens written as `token_id:N`, as vLLM does). Fields it does not need
(`ignore_eos`, `min_tokens`, `model`, ...) are accepted and ignored: it never stops before `max_tokens`,
and so never chooses an end-of-sequence token (the checkpoint's `eos_token_id`, from its config and
generation config): they are masked in what it generates and in the log-probabilities it scores, as a
server masks them under `min_tokens` (scripts/vllm/verify_checkpoint.py gives its checkpoint one the
model ranks first everywhere, for verify's natural-stop gate).
Streaming is refused. GET /v1/models and /health answer as a server would.

Usage: python3 scripts/reference_server.py --model-dir DIR [--port 8200] [--dtype float32|bfloat16]
"""
import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from transformers import AutoModelForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--model-dir", required=True)
ap.add_argument("--port", type=int, default=8200)
ap.add_argument("--name", default="reference")
ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
ap.add_argument("--device", default="cuda")
args = ap.parse_args()

model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=getattr(torch, args.dtype)).to(args.device).eval()
LOCK = threading.Lock()


def eos_ids():
    ids = set()
    for cfg in (model.config, getattr(model, "generation_config", None)):
        e = getattr(cfg, "eos_token_id", None)
        ids.update([e] if isinstance(e, int) else (e or []))
    return sorted(ids)


EOS = eos_ids()
MAX_LEN = getattr(model.config, "max_position_embeddings", 32768)


class Refused(Exception):
    pass


def key(tok, as_ids):
    return f"token_id:{tok}" if as_ids else str(tok)


def scored(lp_row, tok, k, as_ids):
    """The log-probability of `tok` and the top `k` alternatives (with `tok` itself) of one row."""
    top = {}
    if k > 0:
        vals, ids = torch.topk(lp_row, k)
        top = {key(int(i), as_ids): float(v) for v, i in zip(vals, ids)}
    top[key(tok, as_ids)] = float(lp_row[tok])
    return float(lp_row[tok]), top


def complete(body):
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if not (isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)):
        raise Refused("prompt: this reference takes one non-empty list of token ids (it has no tokenizer)")
    vocab = model.config.vocab_size
    if any(t < 0 or t >= vocab for t in prompt):
        raise Refused(f"prompt: token ids must lie in [0, {vocab})")
    if body.get("stream"):
        raise Refused("stream: this reference answers whole responses only")
    if float(body.get("temperature", 0) or 0) != 0:
        raise Refused("temperature: this reference decodes greedily only (temperature 0)")
    n = int(body.get("max_tokens", 16))
    if n < 0 or len(prompt) + n > MAX_LEN:
        raise Refused(f"max_tokens: the prompt ({len(prompt)}) plus max_tokens ({n}) exceed {MAX_LEN}")
    k = body.get("logprobs")
    if k is not None and not (0 <= int(k) <= 20):
        raise Refused("logprobs: 0 to 20 alternatives")
    echo = bool(body.get("echo"))
    as_ids = bool(body.get("return_tokens_as_token_ids"))
    lp = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    text = []

    def add(tok, row):
        lp["text_offset"].append(sum(len(t) for t in text))
        lp["tokens"].append(key(tok, as_ids))
        if row is None:
            lp["token_logprobs"].append(None)
            lp["top_logprobs"].append(None)
        else:
            v, top = scored(row, tok, int(k), as_ids)
            lp["token_logprobs"].append(v)
            lp["top_logprobs"].append(top)
        text.append(f" {key(tok, as_ids)}")

    with torch.no_grad():
        ids = torch.tensor([prompt], device=args.device)
        out = model(input_ids=ids, use_cache=True)
        logits = out.logits[0].float()
        logits[:, EOS] = float("-inf")
        if echo:
            plp = torch.log_softmax(logits[:-1], dim=-1) if k is not None else None
            for i, tok in enumerate(prompt):
                add(tok, None if (plp is None or i == 0) else plp[i - 1])
        past, last = out.past_key_values, logits[-1]
        generated = []
        for step in range(n):
            row = torch.log_softmax(last, dim=-1)
            tok = int(torch.argmax(row))
            generated.append(tok)
            add(tok, row if k is not None else None)
            if step + 1 < n:
                out = model(input_ids=torch.tensor([[tok]], device=args.device), past_key_values=past, use_cache=True)
                past, last = out.past_key_values, out.logits[0, -1].float()
                last[EOS] = float("-inf")
    choice = {"index": 0, "text": "".join(text), "logprobs": lp if k is not None else None, "finish_reason": "length"}
    return {
        "id": "cmpl-reference",
        "object": "text_completion",
        "created": 0,
        "model": args.name,
        "choices": [choice],
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(generated),
                  "total_tokens": len(prompt) + len(generated)},
    }


class Handler(BaseHTTPRequestHandler):
    def reply(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200, {})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": args.name, "object": "model", "max_model_len": MAX_LEN}]})
        else:
            self.reply(404, {"error": {"message": f"{self.path}: not found"}})

    def do_POST(self):
        if self.path != "/v1/completions":
            self.reply(404, {"error": {"message": f"{self.path}: only /v1/completions"}})
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with LOCK:
                self.reply(200, complete(body))
        except Refused as e:
            self.reply(400, {"error": {"message": str(e), "type": "invalid_request_error"}})
        except (ValueError, TypeError) as e:
            self.reply(400, {"error": {"message": f"bad request: {e}", "type": "invalid_request_error"}})

    def log_message(self, *a):
        pass


print(f"reference: {args.model_dir} ({args.dtype}) on port {args.port}", file=sys.stderr, flush=True)
ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
