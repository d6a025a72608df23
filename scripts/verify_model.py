#!/usr/bin/env python3
"""The random checkpoint of the H200 verification demo (scripts/verify_h200.sh): a small Qwen3 with the
Qwen3 vocabulary (151,936 tokens, so the qwen3-8b deployments' prompts are valid token ids), saved as
bf16 safetensors for both serverbench's CUDA engine and the transformers reference.

Weights follow transformers' initialisation (normal, std 0.02) except: norm weights U(0.8, 1.2) (a
misplaced norm weight shows), and the output projection std LM_HEAD_STD (0.15), so that the next-token
distribution is peaked (logit spread of a few nats) and a wrong context or wrong weights pick tokens the
reference finds unlikely; attention value/output projections std ATTN_STD (0.05), so that what the
context holds, not only the last token, moves the next token.
Usage: python3 scripts/verify_model.py OUTDIR [--device cuda|cpu] [--layers 8]
"""
import argparse

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

LM_HEAD_STD = 0.15
ATTN_STD = 0.05

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--device", default="cuda")
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()

torch.manual_seed(args.seed)
cfg = Qwen3Config(hidden_size=1024, num_hidden_layers=args.layers, num_attention_heads=8, num_key_value_heads=2,
                  head_dim=128, intermediate_size=3072, vocab_size=151936, rope_theta=1_000_000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=40960)
model = Qwen3ForCausalLM(cfg)
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.uniform_(0.8, 1.2)
        elif name.startswith("lm_head"):
            p.normal_(0.0, LM_HEAD_STD)
        elif "v_proj" in name or "o_proj" in name:
            p.normal_(0.0, ATTN_STD)
        else:
            p.normal_(0.0, 0.02)
model = model.to(torch.bfloat16).to(args.device).eval()
model.save_pretrained(args.out, safe_serialization=True)
print(f"{args.out}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters, {args.layers} layers")
