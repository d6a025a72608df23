#!/usr/bin/env python3
"""Re-makes the simulated side of every stored vLLM `compare` in place (results/h[0-9]*-vllm*/**/compare.json):
each set's own command as its compare.json records it (`meta.command`), run with SERVERBENCH and
`--reuse` on the stored measured runs, `--out` the set's folder; a command the device ran (`--url`,
`--api`, `--server`, `--model`) is run without those, the binary and folder paths replaced by this
checkout's. The measured runs are left as they are. Run it after a change to the simulator, then
`scripts/regret.py` and `scripts/vllm/recompare.py` for the tables.

    python3 scripts/vllm/remake_compares.py target/release/serverbench   (from the repository root; a CPU, a minute or two)
"""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path.cwd()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from regret import stored_args  # noqa: E402


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    sets = sorted(p.parent for p in REPO.glob("results/h[0-9]*-vllm*/**/compare.json"))
    for folder in sets:
        command = json.loads((folder / "compare.json").read_text())["meta"]["command"]
        args = ["compare", *stored_args(command), "--reuse", "--out", str(folder.relative_to(REPO))]
        print(" ".join(["serverbench", *args]), flush=True)
        subprocess.run([binary, *args], check=True, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
