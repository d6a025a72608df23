#!/usr/bin/env python3
"""Every stored vLLM comparison re-simulated under variants of the deployments, on copies of the sets
(scripts/vllm/recompare.py's list and its `compare --reuse`); prints one markdown table of the D, TTFT
p50/p90 and TPOT p50/p90 errors against the measured runs, variant by variant, and the median |error| of
each metric over all levels. A variant is `off` or `on` (`engine.async_scheduling`), optionally followed by
`:DENSE_PROFILE` and `:MOE_PROFILE` (profile files for the Qwen3-8B and Qwen3-30B-A3B deployments).
Usage (repository root, a CPU, about a minute per variant):
    python3 scripts/vllm/async_ab.py target/release/serverbench off on > results/h200-vllm/async-scheduling.md
"""
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import recompare as rc  # noqa: E402

MOE = "scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml"
METRICS = ["D", "TTFT p50 s", "TTFT p90 s", "TPOT p50 ms", "TPOT p90 ms"]


def variant_args(tmp: Path, args: str, k: int, spec: str) -> str:
    """`args` with its deployment replaced by a file of variant `spec` (`off` and no profile: as is)."""
    mode, *profiles = spec.split(":")
    dense, moe = (profiles + ["", ""])[:2]
    words = args.split()
    i = words.index("-d")
    name = words[i + 1]
    profile = moe if name == MOE else dense
    if mode == "off" and not profile:
        return args
    if name == MOE:
        text = Path(MOE).read_text().replace("../../tests/", str(Path("tests").resolve()) + "/")
    else:
        text = f"base: {name}\n"
    if profile:
        text = "\n".join(l for l in text.splitlines() if not l.startswith("profile:"))
        text += f"\nprofile: {Path(profile).resolve()}\n"
    if mode == "on":
        text += "engine:\n  async_scheduling: true\n"
    f = tmp / f"{Path(name).stem}-v{k}.yaml"
    f.write_text(text)
    words[i + 1] = str(f)
    return " ".join(words)


def main() -> None:
    binary, variants = sys.argv[1], sys.argv[2:] or ["off", "on"]
    print("# Stored vLLM sets re-simulated under deployment variants\n")
    print(f"`python3 scripts/vllm/async_ab.py target/release/serverbench {' '.join(variants)}` (a CPU, from the "
          "stored runs; docs/simulator.md and docs/fidelity.md read it). Each cell: the simulated value's error "
          "against the measured run, variant by variant in the order " + ", ".join(f"`{v}`" for v in variants)
          + " (`off`/`on`: `engine.async_scheduling`; after a colon, the profile files of the dense and MoE "
          "deployments).\n")
    print("| set | c | seed | " + " | ".join(METRICS) + " |")
    print("|---|---:|---:|" + "---|" * len(METRICS))
    errs = {v: {m: [] for m in METRICS} for v in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in rc.SETS:
            if not (Path(rc.R) / name / "compare.json").is_file():
                continue
            res = [rc.simulate(binary, name, variant_args(Path(tmp), args, k, v), tmp, f"v{k}")
                   for k, v in enumerate(variants)]
            for key in sorted(res[0]):
                cells = []
                for m in METRICS:
                    cells.append(" → ".join(rc.pct(r[key][m]) for r in res))
                    for v, r in zip(variants, res):
                        if r[key][m].get("rel_error") is not None:
                            errs[v][m].append(abs(r[key][m]["rel_error"]))
                print(f"| {name.split('/')[-1]} | {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    print()
    for m in METRICS:
        print(f"- {m}: median |error| " + ", ".join(
            f"{100 * statistics.median(errs[v][m]):.1f} % `{v}`" for v in variants) + f" ({len(errs[variants[0]][m])} levels)")


if __name__ == "__main__":
    main()
