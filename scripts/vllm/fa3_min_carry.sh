#!/usr/bin/env bash
# The smallest carry that runs vLLM 0.26.0's FlashAttention 3 on the device without the rest of vLLM:
# the wheel's `vllm/vllm_flash_attn/` interface and its `_vllm_fa3_C` extension (10.9 MB compressed), under
# a `vllm` package whose `__init__` is empty and whose `platforms` answers only the compute-capability
# questions the interface asks (so that no other part of vLLM, and none of its dependencies, is imported).
# The whole vLLM carry (`vllm_run.sh pack`) no longer fits beside the repository in one or two calls; a
# kernel bench (fa3_scatter_bench.py, fa3_decode_bench.py) needs only this.
# Usage (CPU machine, repo root): bash scripts/vllm/fa3_min_carry.sh  -> .carry/fa3min/site.tar.xz
# On the device:  mkdir -p /tmp/fsite && xz -dc .carry/fa3min/site.tar.xz | tar -C /tmp/fsite -xf - &&
#                 PYTHONPATH=/tmp/fsite python3 scripts/vllm/fa3_scatter_bench.py $OUT/scatter.json
set -euo pipefail
cd "$(dirname "$0")/../.."
w=${PACK_WORK:-${TMPDIR:-/tmp}/vllm-pack}
wheel=$(ls "$w"/vllm-0.26.0-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  mkdir -p "$w"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 -d "$w" vllm==0.26.0
  wheel=$(ls "$w"/vllm-0.26.0-*.whl | head -1)
fi
site=$(mktemp -d); trap 'rm -rf "$site"' EXIT
unzip -q "$wheel" 'vllm/vllm_flash_attn/__init__.py' 'vllm/vllm_flash_attn/flash_attn_interface.py' \
  'vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so' -d "$site"
: > "$site/vllm/__init__.py"
mkdir -p "$site/vllm/platforms"
cat > "$site/vllm/platforms/__init__.py" <<'PY'
"""Stand-in for vLLM's platforms: the GPU's compute capability, all the FlashAttention interface asks."""
import torch


class _Cuda:
    def _cap(self) -> int:
        major, minor = torch.cuda.get_device_capability()
        return 10 * major + minor

    def has_device_capability(self, cap: int) -> bool:
        return self._cap() >= cap

    def is_device_capability_family(self, cap: int) -> bool:
        return self._cap() // 10 == cap // 10


current_platform = _Cuda()
PY
mkdir -p .carry/fa3min .git/info
grep -qx '/.carry/' .git/info/exclude 2>/dev/null || echo '/.carry/' >> .git/info/exclude
tar -C "$site" -cf - vllm | xz -6 -T0 > .carry/fa3min/site.tar.xz
du -b .carry/fa3min/site.tar.xz | awk '{printf "%.1f MB  %s\n", $1 / 1e6, $2}'
