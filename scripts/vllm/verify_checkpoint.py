#!/usr/bin/env python3
"""Fits the random checkpoint of `vllm_run.sh verify` (scripts/verify_model.py) for vLLM, in place:

1. `max_position_embeddings` 262,144 (verify_model.py writes 40,960, the CUDA engine's context): vLLM
   refuses a `--max-model-len` over the config's (ValueError at start-up, unless
   VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), and the frozen deployment is the 200,000-token one. The position
   encoding is plain RoPE, computed for any position, so the weights mean the same; the reference
   (scripts/reference_server.py) takes the same limit from the same config.
2. An end-of-sequence token the model prefers after any prompt. A random checkpoint has none
   (eos_token_id null), so a request without `ignore_eos` runs to its `max_tokens`, and `verify`'s
   natural-stop gate (the server must still end an answer with finish_reason "stop") fails whatever the
   server. A trained model learns when to stop; this one is given a token it always ranks first, so
   that the gate tests only whether the server honours end-of-sequence:
   - one hidden dimension (D0) carries a constant: every token's embedding holds C there, and no
     layer writes it (row D0 of every o_proj and down_proj is zero), so the final norm's input has C in
     D0 at every position and its output a positive value there (the norm's weights are positive);
   - the stop token's output row reads only D0, with a gain K set so that its logit exceeds every other
     token's by at least MARGIN nats at every position of random prompts and their continuations.
   The token is id 1, which no prompt holds (serverbench draws prompt tokens from id 100 on). Every other
   request of `verify` keeps it out: the replays send `ignore_eos` (their outputs' content is not read),
   the fidelity continuations `min_tokens` equal to `max_tokens` (vLLM masks stop tokens until then), and
   the reference masks end-of-sequence tokens in everything it generates and scores (it never stops), so
   the two rank the other tokens as the random model did before this edit, less the constant's effect.
   The 2026-12-03 attempt made the tokens that ended the most greedy continuations of 32 random prompts
   the stop tokens instead: 8 of 32 continuations ended, the probe's did not (a random model's greedy
   continuations loop on a few tokens of their own), and that gate failed.

Usage: verify_checkpoint.py DIR [--prompts 32] [--device cuda]
"""
import argparse
import json
import os

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--prompts", type=int, default=32)
ap.add_argument("--prompt-tokens", type=int, default=256)
ap.add_argument("--new-tokens", type=int, default=64)
ap.add_argument("--device", default="cuda")
ap.add_argument("--context", type=int, default=262144)
args = ap.parse_args()

STOP = 1  # below serverbench's first prompt token (100)
D0 = 0  # the hidden dimension that carries the constant
MARGIN = 10.0  # nats the stop token leads by, at the least


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


def final_states(ids):
    """The final norm's input and output (hooked: hidden_states' last entry is one or the other by
    transformers version) and the logits, for a batch of token ids."""
    seen = {}
    hook = model.model.norm.register_forward_hook(lambda m, i, o: seen.update(pre=i[0], post=o))
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
    finally:
        hook.remove()
    return seen["pre"].float(), seen["post"].float(), logits


def continued(ids, n):
    """The prompts with `n` greedy tokens each, the stop token masked (as the reference decodes)."""
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=ids).logits[:, -1].float()
            logits[:, STOP] = float("-inf")
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], 1)
    return ids


with torch.no_grad():
    pre, _, _ = final_states(prompts)
    rms = pre.pow(2).mean(-1).sqrt().median().item()
    c = 3.0 * rms  # the constant: three times a position's typical size, so D0 stands out after the norm
    model.model.embed_tokens.weight[:, D0] = c
    for layer in model.model.layers:
        layer.self_attn.o_proj.weight[D0, :] = 0
        layer.mlp.down_proj.weight[D0, :] = 0
    seqs = continued(prompts, args.new_tokens)
    _, post, logits = final_states(seqs)
    h = post[..., D0]
    if h.min().item() <= 0:
        raise SystemExit(f"hidden dimension {D0} after the final norm is not positive everywhere ({h.min().item()})")
    others = logits.clone()
    others[..., STOP] = float("-inf")
    gain = ((others.max(-1).values + MARGIN) / h).max().item() * 1.25
    head = model.lm_head.weight
    head[STOP, :] = 0
    head[STOP, D0] = gain
    _, _, logits = final_states(seqs)
    lead = logits[..., STOP] - torch.cat([logits[..., :STOP], logits[..., STOP + 1:]], -1).max(-1).values
print(f"stop token {STOP}: constant {c:.4f} in hidden dimension {D0} (median pre-norm rms {rms:.4f}), "
      f"output gain {gain:.2f}; over {seqs.numel()} positions of {args.prompts} random prompts and their "
      f"{args.new_tokens}-token continuations it leads every other token by {lead.min().item():.1f} to "
      f"{lead.max().item():.1f} nats", flush=True)
if lead.min().item() < MARGIN:
    raise SystemExit(f"the stop token leads by only {lead.min().item():.1f} nats somewhere (wanted {MARGIN})")
model.config.eos_token_id = [STOP]
model.generation_config.eos_token_id = [STOP]
model.save_pretrained(args.dir, safe_serialization=True)
edit("config.json", lambda c: c.update(max_position_embeddings=args.context, eos_token_id=[STOP]))
edit("generation_config.json", lambda c: c.update(eos_token_id=[STOP]))
print(f"{args.dir}: saved with eos_token_id [{STOP}]", flush=True)
