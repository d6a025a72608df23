#!/usr/bin/env python3
"""Correctness check of serverbench's CUDA engine against Hugging Face transformers (run on the GPU machine).

Builds a small random Qwen3 model (4 layers, head_dim 128, GQA 4:1, random norm weights), saves it as
safetensors, runs `serverbench cuda-check` on four cases (alone; a batch of mixed lengths; chunked
prefill with a 64-token budget; a prefix reused from the cache), then runs the same token sequences
through transformers and compares greedy tokens (32 steps) and logits (relative L2 error).
Weights follow transformers' own initialisation (normal, std 0.02); norm weights are drawn from
U(0.8, 1.2) so that a misplaced norm weight shows. The reference is transformers in float32 (the
higher-precision reference); the bf16 transformers path is reported beside it.
Pass: identical greedy tokens to the float32 reference and relative L2 error <= 2e-2.
Usage: python3 scripts/cuda_check.py --bin target/release/serverbench --out OUTDIR
"""
import argparse, json, os, subprocess, sys, time
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--bin", required=True)
ap.add_argument("--out", required=True)
args = ap.parse_args()
os.makedirs(args.out, exist_ok=True)
mdir = os.path.join(args.out, "tiny-qwen3")

torch.manual_seed(0)
cfg = Qwen3Config(hidden_size=1024, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                  head_dim=128, intermediate_size=2816, vocab_size=8192, rope_theta=1_000_000.0,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=16384)
model = Qwen3ForCausalLM(cfg)
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:
            p.uniform_(0.8, 1.2)
        else:
            p.normal_(0.0, 0.02)
model = model.to(torch.bfloat16).cuda().eval()
model.save_pretrained(mdir, safe_serialization=True)

g = torch.Generator().manual_seed(1)
def prompt(n):
    return torch.randint(100, 8192, (n,), generator=g).tolist()

shared = prompt(256)
cases = [
    {"name": "alone", "max_tokens": 2048, "waves": [[{"prompt": prompt(100), "output": 32}]]},
    {"name": "batch of mixed lengths", "max_tokens": 2048,
     "waves": [[{"prompt": prompt(n), "output": 32} for n in (7, 50, 130, 300)]]},
    {"name": "chunked prefill (64-token budget)", "max_tokens": 64,
     "waves": [[{"prompt": prompt(300), "output": 32}, {"prompt": prompt(200), "output": 32}]]},
    {"name": "prefix reused from the cache", "max_tokens": 2048,
     "waves": [[{"prompt": shared + prompt(40), "output": 32}],
               [{"prompt": shared + prompt(30), "output": 32}, {"prompt": shared[:200] + prompt(9), "output": 32}]]},
]
for c in cases:
    c["logit_steps"] = [0, 15, 31]
cases_path = os.path.join(args.out, "cases.json")
json.dump({"cases": cases}, open(cases_path, "w"))
res_path = os.path.join(args.out, "engine.json")
t0 = time.time()
r = subprocess.run([args.bin, "cuda-check", "--model-dir", mdir, "--cases", cases_path, "--out", res_path],
                   capture_output=True, text=True)
print(r.stderr, end="")
if r.returncode != 0:
    print(r.stdout)
    sys.exit(f"cuda-check failed with exit code {r.returncode}")
print(f"engine ran in {time.time() - t0:.1f} s")
eng = json.load(open(res_path))

model32 = Qwen3ForCausalLM.from_pretrained(mdir, torch_dtype=torch.float32).cuda().eval()
rows, ok = [], True
for c, ec in zip(cases, eng["cases"]):
    reqs = [q for w in c["waves"] for q in w]
    worst16, worst32, same, total, cached = 0.0, 0.0, 0, 0, []
    same16, gaps = 0, []
    for q, e in zip(reqs, ec["requests"]):
        toks = e["tokens"]
        seq = torch.tensor([q["prompt"] + toks[:-1]], device="cuda")
        n = len(q["prompt"])
        with torch.no_grad():
            l16 = model(seq).logits[0, n - 1:].float()
            l32 = model32(seq).logits[0, n - 1:].float()
        ref = l32.argmax(-1).tolist()
        same += sum(int(a == b) for a, b in zip(ref, toks))
        # The same teacher-forced positions decided by transformers' own bf16 path: how often bf16
        # arithmetic alone flips the float32 argmax on this model.
        same16 += sum(int(a == b) for a, b in zip(ref, l16.argmax(-1).tolist()))
        # At every mismatch: by how much (fp32 logits) the reference's token beats the engine's, its rank,
        # and the gap between the reference's top two: near-ties flip under bf16 rounding.
        for i, (a, b) in enumerate(zip(ref, toks)):
            if a != b:
                top2 = torch.topk(l32[i], 2).values
                gaps.append({"step": i, "gap_to_engine_token": (l32[i, a] - l32[i, b]).item(),
                             "engine_token_rank": int((l32[i] > l32[i, b]).sum().item()) + 1,
                             "top2_gap": (top2[0] - top2[1]).item(),
                             "logit_std": l32[i].std().item()})
        total += len(toks)
        for k, row in e["logits"].items():
            x = torch.tensor(row, device="cuda")
            worst16 = max(worst16, ((x - l16[int(k)]).norm() / l16[int(k)].norm()).item())
            worst32 = max(worst32, ((x - l32[int(k)]).norm() / l32[int(k)].norm()).item())
        cached.append(e["cached_tokens"])
    passed = same == total and worst32 <= 2e-2
    ok &= passed
    rows.append({"case": c["name"], "tokens_identical": f"{same}/{total}", "max_rel_err_vs_bf16": worst16,
                 "max_rel_err_vs_fp32": worst32, "cached_tokens": cached, "pass": passed,
                 "transformers_bf16_tokens_identical": f"{same16}/{total}", "mismatches": gaps})
json.dump(rows, open(os.path.join(args.out, "check.json"), "w"), indent=1)
print(f"\n{'case':<36} {'tokens=fp32':>8} {'rel.err bf16':>13} {'rel.err fp32':>13}  cached  pass")
for r in rows:
    print(f"{r['case']:<36} {r['tokens_identical']:>8} {r['max_rel_err_vs_bf16']:>13.2e} {r['max_rel_err_vs_fp32']:>13.2e}  {r['cached_tokens']}  {r['pass']}"
          f"  (transformers bf16: {r['transformers_bf16_tokens_identical']})")
    for g in r["mismatches"]:
        print(f"    step {g['step']:>3}: engine token rank {g['engine_token_rank']}, {g['gap_to_engine_token']:.4f} below the"
              f" reference's (top-2 gap {g['top2_gap']:.4f}, logit std {g['logit_std']:.3f})")
sys.exit(0 if ok else 1)
