#!/usr/bin/env python3
"""How long the host takes to launch one decoder layer of a decode step run eagerly (no CUDA graph), for
the Hugging Face implementations of the three L40 deployments' architectures: dense Qwen3, the hybrid
Qwen3.5 family (Gated DeltaNet + gated full attention) and Gemma 3n/4 (sliding window, AltUp, per-layer
embeddings). Random bf16 weights on one GPU.

Each model is built with two layer counts (4 and 12; Gemma 6 and 12, whole groups of its 5 sliding + 1
full pattern); the per-layer cost is the difference divided by the layers added, so embeddings, the head
and sampling drop out. For every batch it reports, per decode step:
- `host`: the time until `forward` returns (what the CPU spends issuing the step's kernels, when the
  forward does not wait on the GPU),
- `wall`: until the GPU has finished it,
- `gpu`: the sum of the step's kernel times (torch.profiler), the device's busy time, and `kernels`,
  how many kernels the step launches.
An eager step is host-bound when `host` exceeds `gpu`: then it takes about `host`, where a CUDA graph
replay of the same kernels takes about `gpu`.

Usage: eager_host.py [--out FILE.json] [--batches 1,32,64] [--context 512] [--steps 20] [--device cpu]
"""

import argparse
import json
import statistics
import sys
import time

import torch


def qwen3(layers):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    c = Qwen3Config(vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                    num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                    head_dim=128, max_position_embeddings=40960, tie_word_embeddings=False)
    return Qwen3ForCausalLM(c)


def hybrid_pattern(layers):
    return [("full_attention" if (i + 1) % 4 == 0 else "linear_attention") for i in range(layers)]


def qwen35(layers):
    """Qwen3.5 9B's shape, with the newest hybrid class transformers has (Qwen3.5, else Qwen3-Next
    with dense MLPs)."""
    shape = dict(vocab_size=248320, hidden_size=4096, intermediate_size=12288,
                 num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=4,
                 head_dim=256, linear_num_key_heads=16, linear_num_value_heads=32,
                 linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
                 layer_types=hybrid_pattern(layers), tie_word_embeddings=False)
    try:
        from transformers import Qwen3_5TextConfig, Qwen3_5ForCausalLM
        return Qwen3_5ForCausalLM(Qwen3_5TextConfig(**shape)), "Qwen3_5ForCausalLM"
    except ImportError:
        from transformers import Qwen3NextConfig, Qwen3NextForCausalLM
        c = Qwen3NextConfig(**shape, mlp_only_layers=list(range(layers)))
        return Qwen3NextForCausalLM(c), "Qwen3NextForCausalLM"


def gemma(layers):
    """Gemma 4 E4B's shape (Gemma 4's text model, else Gemma 3n's: per-layer embeddings and sliding
    layers, 5 sliding to 1 full); KV sharing off at these few layers."""
    types = [("full_attention" if (i + 1) % 6 == 0 else "sliding_attention") for i in range(layers)]
    shape = dict(vocab_size=262144, hidden_size=2560, intermediate_size=10240,
                 num_hidden_layers=layers, num_attention_heads=8, num_key_value_heads=2,
                 head_dim=256, sliding_window=512, layer_types=types, num_kv_shared_layers=0)
    try:
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig
        return Gemma4ForCausalLM(Gemma4TextConfig(**shape)), "Gemma4ForCausalLM"
    except ImportError:
        from transformers import Gemma3nForCausalLM, Gemma3nTextConfig
        c = Gemma3nTextConfig(**shape, activation_sparsity_pattern=[0.0] * layers)
        return Gemma3nForCausalLM(c), "Gemma3nForCausalLM"


DEVICE = "cuda"

# The two layer counts each model is built with.
LAYERS = {"qwen3": (4, 12), "qwen3.5": (4, 12), "gemma": (6, 12)}


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def build(name, layers):
    torch.manual_seed(0)
    with torch.device(DEVICE):
        if name == "qwen3":
            m, cls = qwen3(layers), "Qwen3ForCausalLM"
        elif name == "qwen3.5":
            m, cls = qwen35(layers)
        else:
            m, cls = gemma(layers)
    return m.to(torch.bfloat16).eval(), cls


def gpu_busy_ms(model, tok, past, steps=5):
    from torch.profiler import ProfilerActivity, profile
    if DEVICE != "cuda":
        return 0.0, 0.0, past
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            out = model(tok, past_key_values=past, use_cache=True)
            past = out.past_key_values
        sync()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total_us = sum(e.device_time for e in kernels)
    return total_us / steps / 1e3, len(kernels) / steps, past


@torch.no_grad()
def measure(model, batch, context, steps):
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, context), device=DEVICE)
    out = model(ids, use_cache=True)
    past = out.past_key_values
    tok = torch.randint(0, vocab, (batch, 1), device=DEVICE)
    host, wall = [], []
    for i in range(steps + 10):
        sync()
        t0 = time.perf_counter()
        out = model(tok, past_key_values=past, use_cache=True)
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        past = out.past_key_values
        if i >= 10:
            host.append((t1 - t0) * 1e3)
            wall.append((t2 - t0) * 1e3)
    gpu, kernels, _ = gpu_busy_ms(model, tok, past)
    return statistics.median(host), statistics.median(wall), gpu, kernels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="eager_host.json")
    ap.add_argument("--batches", default="1,32,64")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--models", default="qwen3,qwen3.5,gemma")
    ap.add_argument("--device", default="cuda", help="cpu: only to try the script")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    import transformers
    rows = []
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu", "context": a.context, "steps": a.steps}
    print(json.dumps(info), flush=True)
    for name in a.models.split(","):
        # The first model of an architecture pays for its shapes' first launches (cuBLAS heuristics,
        # Triton compiles) in spite of the warm-up steps: it is measured again after the second.
        lo, hi = LAYERS[name]
        for layers in (lo, hi, lo):
            try:
                model, cls = build(name, layers)
            except Exception as e:  # a class or argument this transformers lacks: say so, go on
                print(f"{name} L={layers}: cannot build: {type(e).__name__}: {e}", flush=True)
                break
            for b in map(int, a.batches.split(",")):
                try:
                    host, wall, gpu, kernels = measure(model, b, a.context, a.steps)
                except Exception as e:
                    print(f"{name} L={layers} B={b}: failed: {type(e).__name__}: {e}", flush=True)
                    continue
                row = dict(model=name, cls=cls, layers=layers, batch=b, host_ms=host, wall_ms=wall,
                           gpu_ms=gpu, kernels=kernels)
                rows = [x for x in rows if (x["model"], x["layers"], x["batch"]) != (name, layers, b)]
                rows.append(row)
                print(json.dumps(row), flush=True)
            del model
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    per_layer = []
    for name in a.models.split(","):
        for b in map(int, a.batches.split(",")):
            r = {l: x for x in rows if x["model"] == name and x["batch"] == b for l in [x["layers"]]}
            lo, hi = LAYERS[name]
            if lo in r and hi in r:
                d = {k: (r[hi][k] - r[lo][k]) / (hi - lo)
                     for k in ("host_ms", "wall_ms", "gpu_ms", "kernels")}
                per_layer.append(dict(model=name, batch=b, **{k + "_per_layer": v for k, v in d.items()}))
                print(json.dumps(per_layer[-1]), flush=True)
    json.dump(dict(info=info, rows=rows, per_layer=per_layer), open(a.out, "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
