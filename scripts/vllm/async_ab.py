#!/usr/bin/env python3
"""Every stored vLLM comparison re-simulated with `engine.async_scheduling` off (the presets) and on, on
copies of the sets (scripts/vllm/recompare.py's list and its `compare --reuse`); prints one markdown table
of the D, TTFT p50/p90 and TPOT p50/p90 errors against the measured runs, off → on, and the median |error|
of each metric over all levels. Usage (repository root, a CPU, about a minute):
    python3 scripts/vllm/async_ab.py target/release/serverbench > results/h200-vllm/async-scheduling.md
"""
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import recompare as rc  # noqa: E402

MOE = "scripts/vllm/qwen3-30b-a3b-1xh200-vllm.yaml"
METRICS = ["D", "TTFT p50 s", "TTFT p90 s", "TPOT p50 ms", "TPOT p90 ms"]


def variant(tmp: Path, args: str) -> str:
    """`args` with its deployment replaced by a file that turns asynchronous scheduling on."""
    words = args.split()
    i = words.index("-d")
    name = words[i + 1]
    if name == MOE:
        text = Path(MOE).read_text().replace("../../tests/", str(Path("tests").resolve()) + "/")
        text += "engine:\n  async_scheduling: true\n"
    else:
        text = f"base: {name}\nengine:\n  async_scheduling: true\n"
    f = tmp / (Path(name).stem + "-async.yaml")
    f.write_text(text)
    words[i + 1] = str(f)
    return " ".join(words)


def main() -> None:
    binary = sys.argv[1]
    print("# Asynchronous scheduling off (the presets) and on, every stored vLLM set\n")
    print("`python3 scripts/vllm/async_ab.py target/release/serverbench > results/h200-vllm/async-scheduling.md` "
          "(a CPU, from the stored runs; docs/simulator.md reads it). Each cell: the simulated value's error "
          "against the measured run, `engine.async_scheduling` off → on.\n")
    print("| set | c | seed | " + " | ".join(f"{m.split()[0]} {' '.join(m.split()[1:2])} off → on".replace("D  ", "D ") for m in METRICS) + " |")
    print("|---|---:|---:|" + "---|" * len(METRICS))
    errs = {m: ([], []) for m in METRICS}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in rc.SETS:
            if not (Path(rc.R) / name / "compare.json").is_file():
                continue
            off = rc.simulate(binary, name, args, tmp, "off")
            on = rc.simulate(binary, name, variant(Path(tmp), args), tmp, "on")
            for key in sorted(off):
                cells = []
                for m in METRICS:
                    a, b = off[key][m], on[key][m]
                    cells.append(f"{rc.pct(a)} → {rc.pct(b)}")
                    if a.get("rel_error") is not None and b.get("rel_error") is not None:
                        errs[m][0].append(abs(a["rel_error"]))
                        errs[m][1].append(abs(b["rel_error"]))
                print(f"| {name.split('/')[-1]} | {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    print()
    for m in METRICS:
        a, b = errs[m]
        print(f"- {m}: median |error| {100 * statistics.median(a):.1f} % off, {100 * statistics.median(b):.1f} % on ({len(a)} levels)")


if __name__ == "__main__":
    main()
