#!/usr/bin/env python3
"""Times SGLang 0.5.19's Triton decode-attention kernel on Gemma 4 E4B's full-attention shape (8 query
heads, 2 KV heads of 512) at the contexts and batches of the Gemma reference's freeze, against the bytes
it must read and the GPU's own copy bandwidth (docs/fidelity.md, "Gemma's TPOT and eager decoding").

The kernel is not copied here: it is read at run time from the `sglang-0.5.19` wheel (PyPI, Apache-2.0),
whose three kernel files are unpacked into a temporary package beside stand-ins for the four helpers they
import from the rest of SGLang. Needs a GPU, PyTorch and Triton (the device image has both); kept out of CI.

Usage: python3 scripts/sglang_triton_decode.py WHEEL OUT.json (WHEEL: `pip download sglang==0.5.19 --no-deps`,
or a zip of its three kernel files under the same paths, which is all that needs to travel);
       python3 scripts/sglang_triton_decode.py WHEEL OUT.json --sm 89 (compile for an L40's compute
       capability only, and report each kernel's shared memory, registers and spills)
"""

import json
import os
import sys
import tempfile
import types
import zipfile

import torch
import triton
import triton.testing

KERNELS = "sglang/kernels/ops/attention/"
FILES = ("decode_attention.py", "score_mod.py", "metadata.py")


def load_kernels(wheel):
    """SGLang's decode kernels from `wheel`, with stand-ins for the helpers they import."""
    root = tempfile.mkdtemp(prefix="sgl-")
    with zipfile.ZipFile(wheel) as z:
        for f in FILES:
            z.extract(KERNELS + f, root)
    for pkg in ("sglang", "sglang/kernels", "sglang/kernels/ops", "sglang/kernels/ops/attention"):
        open(os.path.join(root, pkg, "__init__.py"), "a").close()
    sys.path.insert(0, root)

    class Flag:
        def get(self):
            return False

    class Envs:
        def __getattr__(self, name):
            return Flag()

    srt = types.ModuleType("sglang.srt")
    environ = types.ModuleType("sglang.srt.environ")
    environ.envs = Envs()
    utils = types.ModuleType("sglang.srt.utils")
    utils.get_device_core_count = lambda i=0: torch.cuda.get_device_properties(i).multi_processor_count
    utils.is_hip = lambda: False
    utils.is_gfx95_supported = lambda: False
    utils.is_gfx1250_supported = lambda: False
    sys.modules.update({"sglang.srt": srt, "sglang.srt.environ": environ, "sglang.srt.utils": utils})
    from sglang.kernels.ops.attention import decode_attention, metadata

    return decode_attention.decode_attention_fwd, metadata.get_num_kv_splits_triton


def copy_bandwidth():
    """Device-to-device copy of 2 GiB: bytes read and written over the time, GB/s."""
    n = 1 << 30
    a = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    b = torch.empty_like(a)
    ms = triton.testing.do_bench(lambda: b.copy_(a), warmup=50, rep=500)
    return 2 * a.numel() * a.element_size() / (ms * 1e-3) / 1e9


def make_step(fwd, splits_kernel, batch, context, heads=8, kv_heads=2, dim=512, max_splits=8):
    """One decode step's attention for `batch` sequences of `context` tokens (a token-level pool, page
    size 1, each sequence's KV contiguous as a fresh pool allocates it): the call, the splits, the bytes."""
    dev = "cuda"
    tokens = batch * context
    k = torch.randn(tokens, kv_heads, dim, dtype=torch.bfloat16, device=dev)
    v = torch.randn(tokens, kv_heads, dim, dtype=torch.bfloat16, device=dev)
    q = torch.randn(batch, heads, dim, dtype=torch.bfloat16, device=dev)
    o = torch.empty_like(q)
    lens = torch.full((batch,), context, dtype=torch.int32, device=dev)
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device=dev)
    indptr[1:] = torch.cumsum(lens, 0)
    indices = torch.arange(tokens, dtype=torch.int64, device=dev)
    logits = torch.empty(batch, heads, max_splits, dim, dtype=torch.float32, device=dev)
    lse = torch.empty(batch, heads, max_splits, dtype=torch.float32, device=dev)
    splits = torch.empty(batch, dtype=torch.int32, device=dev)
    cores = torch.cuda.get_device_properties(0).multi_processor_count
    # As SGLang's Triton backend sizes the splits (`TritonAttnBackend.get_num_kv_splits`).
    splits_kernel[(1,)](splits, lens, batch, 1, heads, kv_heads, max_splits, cores, MAX_NUM_SEQ=256)
    scale = dim**-0.5

    def step():
        fwd(q, k, v, o, indptr, indices, logits, lse, splits, max_splits, scale, 1.0, 1.0)

    return step, splits.tolist(), 2 * tokens * kv_heads * dim * k.element_size()


def case(fwd, splits_kernel, batch, context):
    """`make_step`'s call timed by triton's do_bench."""
    step, splits, kv_bytes = make_step(fwd, splits_kernel, batch, context)
    step()
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(step, warmup=25, rep=200)
    return {
        "batch": batch,
        "context": context,
        "kv_splits": splits,
        "ms": ms,
        "kv_bytes": kv_bytes,
        "gb_s": kv_bytes / (ms * 1e-3) / 1e9,
    }


def resource_usage(cubin):
    """`cuobjdump -res-usage` of a compiled kernel's cubin: registers, shared memory, stack, spills."""
    if not cubin:
        return None
    import subprocess

    path = tempfile.mktemp(suffix=".cubin")
    open(path, "wb").write(cubin)
    done = subprocess.run(["cuobjdump", "-res-usage", path], capture_output=True, text=True)
    return [l.strip() for l in (done.stdout + done.stderr).splitlines() if "REG" in l or "error" in l.lower()]


def compiled_for(fwd, splits_kernel, arch):
    """The decode kernels compiled for compute capability `arch` (e.g. 89, an L40's) on this GPU: the
    compiler's target is set to it, one small case is run (its launch fails: the code is not this GPU's),
    and each compiled kernel's shared memory, registers and spills are read from Triton's cache."""
    from sglang.kernels.ops.attention import decode_attention

    driver = triton.runtime.driver.active
    own = driver.get_current_target
    target = triton.backends.compiler.GPUTarget("cuda", arch, 32)
    kernels = {
        "stage1": decode_attention._fwd_grouped_kernel_stage1,
        "stage2": decode_attention._fwd_kernel_stage2,
    }
    step, _, _ = make_step(fwd, splits_kernel, 2, 8192)  # the splits computed for this GPU
    driver.get_current_target = lambda: target
    try:
        step()
        torch.cuda.synchronize()
        launched = "launched (unexpected)"
    except Exception as e:  # the cubin is another GPU's: loading it here fails
        launched = f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        driver.get_current_target = own
    out = {"arch": arch, "launch": launched, "kernels": {}}
    for name, fn in kernels.items():
        found = []
        for cache in getattr(fn, "device_caches", {}).values():
            for k in cache[0].values():
                md = k.metadata
                if getattr(md, "target", None) is not None and md.target.arch != arch:
                    continue
                found.append({
                    "shared_bytes": md.shared,
                    "num_warps": md.num_warps,
                    "num_stages": md.num_stages,
                    "resource_usage": resource_usage(k.asm.get("cubin")),
                })
        out["kernels"][name] = found
    return out


def main():
    wheel, out = sys.argv[1], sys.argv[2]
    fwd, splits_kernel = load_kernels(wheel)
    if len(sys.argv) > 3:
        # `--sm N`: only compile for compute capability N and report the kernels' resources.
        result = compiled_for(fwd, splits_kernel, int(sys.argv[4]))
        json.dump(result, open(out, "w"), indent=1)
        print(json.dumps(result, indent=1))
        return
    copy = copy_bandwidth()
    rows = []
    for batch in (1, 2, 4):
        for context in (8192, 32768, 65536, 131072):
            r = case(fwd, splits_kernel, batch, context)
            r["of_copy_bandwidth"] = r["gb_s"] / copy
            rows.append(r)
            print(json.dumps(r), flush=True)
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "copy_gb_s": copy,
        "shape": "Gemma 4 E4B full attention: 8 query heads, 2 KV heads of 512, bf16",
        "max_kv_splits": 8,
        "cases": rows,
    }
    json.dump(result, open(out, "w"), indent=1)
    print(f"copy {copy:.0f} GB/s on {result['gpu']}")


if __name__ == "__main__":
    main()
