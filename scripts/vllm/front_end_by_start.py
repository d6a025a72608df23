#!/usr/bin/env python3
"""What vLLM's front end costs a prompt token on each server start, from the stored replays alone.

    python3 scripts/vllm/front_end_by_start.py target/release/serverbench > results/h200-vllm/front-end-by-start.md

For every stored vLLM set of the dense Qwen3-8B shape at its low levels, the set is simulated again with
SERVERBENCH (its stored compare's arguments at that level, `simulate --out`) and every measured
request is matched to the simulated one of the same (tree, request). Requests whose prompt was cached but
for at most 2,048 tokens in both, of 20,000 tokens or more (a turn after the first, whose time to first token is mostly the front
end) give

    implied front end per prompt token = (measured TTFT − (simulated TTFT − the profile's front end)) / prompt tokens

the profile's front end being `request_latency_s + frontend_s_per_token × prompt` (and `tokenize_s_per_token
× prompt` for chat completions). It is what the server's front end took per prompt token if the simulator's
price of everything else (the steps, the queue) is right; what the simulator misprices in those steps is in
it too, alike for every start. Per set: the server start it ran on (the date and hour of its first run), the
API, the number of requests and the median with its quartiles. Needs the stored sets of results/h200-vllm/.
"""
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from regret import stored_args  # noqa: E402

R = Path("results/h200-vllm")
PROFILE = Path("presets/profiles/h200-qwen3-8b-vllm.yaml")
# (set, levels): the dense sets' levels below the knee, where a request rarely queues.
SETS = [("syn-steady", [1, 4, 8]), ("fit-cold", [1, 4]), ("real-cold", [4]), ("syn-cold", [1, 2, 4, 8]),
        ("real-cold-w30", [2, 8]), ("fit-cold-w30", [2, 8]), ("agentx-real", [2, 4, 8]),
        ("step-trace/agentx-real-trace", [8]), ("step-trace/syn-steady-trace", [16]),
        ("real-cold-w120", [2, 4, 8])]


def profile_terms() -> dict:
    terms = {}
    for line in PROFILE.read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("request_latency_s", "frontend_s_per_token", "tokenize_s_per_token"):
            terms[key] = float(value)
    return terms


def load(path: Path) -> list:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def ttft(r: dict):
    return (r["first_token_ns"] - r["send_ns"]) / 1e9 if r.get("first_token_ns") else None


def implied(binary: str, folder: Path, c: int, terms: dict, tmp: str):
    run = folder / "real" / f"c{c}_s0"
    meta = json.loads((run / "summary.json").read_text())["meta"]
    api = meta["command"][meta["command"].index("--api") + 1]
    args = stored_args(json.loads((folder / "compare.json").read_text())["meta"]["command"])
    args[args.index("-c") + 1] = str(c)
    out = Path(tmp) / f"{folder.name}-{c}"
    subprocess.run([binary, "simulate", *args, "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sim = {(r["tree"], r["request"]): r for r in load(out / "records.jsonl")}
    per_token = terms["frontend_s_per_token"] + (terms["tokenize_s_per_token"] if api != "tokens" else 0.0)
    values = []
    for r in load(run / "records.jsonl.gz"):
        s = sim.get((r["tree"], r["request"]))
        if not s or ttft(r) is None or ttft(s) is None:
            continue
        new = r["input_tokens"] - (r.get("cached_tokens") or 0)
        if new > 2048 or s["input_tokens"] - (s.get("cached_tokens") or 0) != new or r["input_tokens"] < 20000:
            continue
        front = terms["request_latency_s"] + per_token * r["input_tokens"]
        values.append((ttft(r) - (ttft(s) - front)) / r["input_tokens"] * 1e6)
    return meta["created_utc"], api, values


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    terms = profile_terms()
    print("| set | c | server start (first run, UTC) | API | requests | implied front end, µs a prompt token: median (quartiles) |")
    print("|---|---|---|---|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, levels in SETS:
            pooled, start, api = [], None, None
            for c in levels:
                created, api, values = implied(sys.argv[1], R / name, c, terms, tmp)
                start = min(start or created, created)
                pooled += values
            if len(pooled) < 3:
                continue
            q = statistics.quantiles(pooled, n=4)
            print(f"| {name} | {','.join(map(str, levels))} | {start[:13].replace('T', ' ')}h | {api} | {len(pooled)} | "
                  f"{statistics.median(pooled):.2f} ({q[0]:.2f}–{q[2]:.2f}) |")
    print()
    print(f"Profile terms subtracted: request_latency_s {terms['request_latency_s']:.4g}, frontend_s_per_token "
          f"{terms['frontend_s_per_token']:.4g}, tokenize_s_per_token {terms['tokenize_s_per_token']:.4g} (chat only).")


if __name__ == "__main__":
    main()
