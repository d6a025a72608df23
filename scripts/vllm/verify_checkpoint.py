#!/usr/bin/env python3
"""Fits the random checkpoint of `vllm_run.sh verify` (scripts/verify_model.py) for vLLM, in place:

1. `max_position_embeddings` 262,144 (verify_model.py writes 40,960, the CUDA engine's context): vLLM
   refuses a `--max-model-len` over the config's (ValueError at start-up, unless
   VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), and the frozen deployment is the 200,000-token one. The position
   encoding is plain RoPE, computed for any position, so the weights mean the same; the reference
   (scripts/reference_server.py) takes the same limit from the same config.
2. End-of-sequence tokens it actually emits. A random checkpoint has none (eos_token_id null), so a
   request without `ignore_eos` always runs to its `max_tokens`, and `verify`'s natural-stop gate (the
   server must still end an answer with finish_reason "stop") fails whatever the server. Trained models
   learn to emit theirs; here the greedy continuations (bf16, as vLLM serves it) of random prompts of
   token ids, like the natural-stop probe's (256 tokens, 256 new), are read and the few tokens that end
   most of them are made `eos_token_id` (config.json and generation_config.json: vLLM stops on them
   unless `ignore_eos`). Every other request of `verify` sends `ignore_eos` (the replays, and the
   fidelity continuations, which also set `min_tokens`), and the reference never stops early, so the
   choice touches nothing else, except that vLLM keeps stop tokens from being sampled until
   `min_tokens` (which the fidelity continuations set) where the reference may pick one.
   Measured 2026-12-03: the eight tokens ended 8 of 32 random prompts' continuations (greedy
   continuations of a random checkpoint fall into loops of a few tokens of their own), and the
   natural-stop probe's continuation was not among them: that gate failed, every other passed.

Usage: verify_checkpoint.py DIR [--eos-tokens 8] [--prompts 32] [--device cuda]
"""
import argparse
import json
import os

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--eos-tokens", type=int, default=8)
ap.add_argument("--prompts", type=int, default=32)
ap.add_argument("--prompt-tokens", type=int, default=256)
ap.add_argument("--new-tokens", type=int, default=256)
ap.add_argument("--device", default="cuda")
ap.add_argument("--context", type=int, default=262144)
args = ap.parse_args()


def edit(name, fn):
    path = os.path.join(args.dir, name)
    cfg = json.load(open(path)) if os.path.exists(path) else {}
    fn(cfg)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)


edit("config.json", lambda c: c.update(max_position_embeddings=args.context))
print(f"{args.dir}: max_position_embeddings {args.context}", flush=True)

import torch  # noqa: E402 (the context edit above needs no torch)
from transformers import AutoModelForCausalLM  # noqa: E402

torch.manual_seed(1234)
model = AutoModelForCausalLM.from_pretrained(args.dir, dtype=torch.bfloat16).to(args.device).eval()
vocab = model.config.vocab_size
prompts = torch.randint(100, vocab, (args.prompts, args.prompt_tokens), device=args.device)
with torch.no_grad():  # one batch: the prompts are of one length, so no padding (the probe's shape each)
    ids, past, steps = prompts, None, []
    for _ in range(args.new_tokens):
        r = model(input_ids=ids, past_key_values=past, use_cache=True)
        past = r.past_key_values
        ids = r.logits[:, -1].float().argmax(-1, keepdim=True)
        steps.append(ids)
conts = torch.cat(steps, 1).tolist()

# Greedy cover: each pick is the token found in the most continuations not yet ended by an earlier pick.
eos, left = [], list(range(len(conts)))
for _ in range(args.eos_tokens):
    counts = {}
    for i in left:
        for t in set(conts[i]):
            counts[t] = counts.get(t, 0) + 1
    if not counts:
        break
    t = max(counts, key=lambda k: (counts[k], -k))
    eos.append(t)
    left = [i for i in left if t not in conts[i]]
ends = [min((c.index(t) for t in eos if t in c), default=None) for c in conts]
ended = [e + 1 for e in ends if e is not None]
print(f"eos_token_id {eos}: {len(ended)} of {len(conts)} greedy continuations end within {args.new_tokens} "
      f"tokens (after {sorted(ended)} tokens); distinct tokens per continuation "
      f"{[len(set(c)) for c in conts]}", flush=True)
edit("config.json", lambda c: c.update(eos_token_id=eos))
edit("generation_config.json", lambda c: c.update(eos_token_id=eos))
