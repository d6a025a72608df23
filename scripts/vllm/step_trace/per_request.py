#!/usr/bin/env python3
"""Where a replay request's time to first token goes, from vLLM's step trace beside the replay's records.

    python3 scripts/vllm/step_trace/per_request.py > results/h200-vllm/step-trace/requests.md

Each completed request of a stored replay is matched to the step trace's first prefill chunk of its
prompt (a `pf` entry `[tokens, context before, prompt length]` whose prompt length is the request's input
tokens and whose context before is its cached tokens; the run's clock offset is the one most requests
agree on) and followed to its last chunk. The time it spends outside its own steps is its time to first
token less the chunks' span on the GPU (the first chunk's start to the last one's end): the server's
front end, the wait for the scheduler and the path of the first token back. Requests whose next step
took over 5 ms of host time to prepare (a compile, a long input's preparation) are left out: under
asynchronous scheduling a step's output is only handled after the next step is launched.

Two groups per run: requests whose first chunk followed a GPU gap of over 2 ms (the engine was idle when
they arrived: their time outside their steps is the lone front end and the way back), fitted as
`a + b × prompt tokens` (Theil–Sen); and requests whose first chunk came right after a decode step (the
engine was busy decoding when they arrived), with their time outside their steps less the lone front end
(`--lone-ms`, `--lone-us-per-token`: 5 ms + 1.1 µs a token, the MoE server's lone probes), the period of
the decode step before their first chunk, and the ratio. Plain Python, no dependencies.
"""
import argparse
import gzip
import json
import statistics

R = "results"
RUNS = [
    # (label, step trace, replay folder, API)
    ("MoE, synthetic-v1 cold, c = 1", "h200-vllm-moe/warm/steps-moe-syn-cold-warm.jsonl.gz",
     "h200-vllm-moe/warm/moe-syn-cold-warm/real/c1_s0", "tokens"),
    ("MoE, synthetic-v1 cold, c = 4", "h200-vllm-moe/warm/steps-moe-syn-cold-warm.jsonl.gz",
     "h200-vllm-moe/warm/moe-syn-cold-warm/real/c4_s0", "tokens"),
    ("MoE, synthetic-v1 cold, c = 8", "h200-vllm-moe/warm/steps-moe-syn-cold-warm.jsonl.gz",
     "h200-vllm-moe/warm/moe-syn-cold-warm/real/c8_s0", "tokens"),
    ("MoE, synthetic-v1 cold, c = 16", "h200-vllm-moe/warm/steps-moe-syn-cold-warm.jsonl.gz",
     "h200-vllm-moe/warm/moe-syn-cold-warm/real/c16_s0", "tokens"),
    ("MoE, synthetic-v1 steady, c = 8", "h200-vllm-moe/warm/steps-moe-syn-steady-warm.jsonl.gz",
     "h200-vllm-moe/warm/moe-syn-steady-warm/real/c8_s0", "tokens"),
    ("Qwen3-8B, synthetic-v1 steady, c = 16", "h200-vllm/step-trace/steps-syn-steady-trace.jsonl.gz",
     "h200-vllm/step-trace/syn-steady-trace/real/c16_s0", "tokens"),
    ("Qwen3-8B, synthetic-v1 cold, c = 1 (second start)", "h200-vllm/step-trace/steps-syn-cold-rep.jsonl.gz",
     "h200-vllm/syn-cold-rep/real/c1_s0", "tokens"),
    ("Qwen3-8B, synthetic-v1 cold, c = 8 (second start)", "h200-vllm/step-trace/steps-syn-cold-rep.jsonl.gz",
     "h200-vllm/syn-cold-rep/real/c8_s0", "tokens"),
    ("Qwen3-8B, synthetic-v1 steady, c = 1 (second start)", "h200-vllm/step-trace/steps-syn-steady-rep.jsonl.gz",
     "h200-vllm/syn-steady-rep/real/c1_s0", "tokens"),
    ("Qwen3-8B, synthetic-v1 steady, c = 4 (second start)", "h200-vllm/step-trace/steps-syn-steady-rep.jsonl.gz",
     "h200-vllm/syn-steady-rep/real/c4_s0", "tokens"),
    ("Qwen3-8B, Claude Code sessions under AgentX, c = 8", "h200-vllm/step-trace/steps-agentx-real-trace.jsonl.gz",
     "h200-vllm/step-trace/agentx-real-trace/real/c8_s0", "chat"),
]
IDLE_GAP_NS = 2_000_000
SLOW_PREP_US = 5_000
OFFSET_SPAN_NS = 3_000_000_000


def lines(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(l) for l in f if not l.startswith('{"hdr"')]


def first_chunks(steps):
    index = {}
    for k, s in enumerate(steps):
        for _, before, prompt in s["pf"]:
            index.setdefault((prompt, before), []).append(k)
    return index


def clock_offset(steps, recs, index):
    """The offset from a record's send time to the step clock that the most requests agree on."""
    cands = [[steps[k]["t0_ns"] - r["send_ns"] for k in index.get((r["input_tokens"], r["cached_tokens"]), [])]
             for r in recs]
    best = None
    for o in sorted(x for c in cands for x in c):
        n = sum(1 for c in cands if any(o <= x < o + OFFSET_SPAN_NS for x in c))
        if best is None or n > best[0]:
            best = (n, o)
    return best[1], cands


def last_chunk(steps, k, prompt, before):
    done, last = before, k
    for j in range(k, min(len(steps), k + 200)):
        hit = [e for e in steps[j]["pf"] if e[2] == prompt and e[1] == done]
        if hit:
            done += hit[0][0]
            last = j
            if done >= prompt:
                break
    return last


def requests(steps, recs):
    recs = [r for r in recs if r["outcome"] == "completed" and r.get("first_token_ns")]
    index = first_chunks(steps)
    offset, cands = clock_offset(steps, recs, index)
    rows = []
    for r, c in zip(recs, cands):
        ks = [k for k in index.get((r["input_tokens"], r["cached_tokens"]), [])
              if offset <= steps[k]["t0_ns"] - r["send_ns"] < offset + OFFSET_SPAN_NS]
        if not ks:
            continue
        k = ks[0]
        last = last_chunk(steps, k, r["input_tokens"], r["cached_tokens"])
        if last + 1 >= len(steps) or steps[last + 1]["cpu_exec_us"] > SLOW_PREP_US:
            continue
        before = steps[k - 1]
        outside = (r["first_token_ns"] - r["send_ns"] - (steps[last]["g1_ns"] - steps[k]["g0_ns"])) / 1e6
        rows.append({
            "prompt": r["input_tokens"],
            "outside_ms": outside,
            "idle": steps[k]["g0_ns"] - before["g1_ns"] > IDLE_GAP_NS,
            "after_decode_ms": before["gpu_us"] / 1e3 if not before["pf"] and before["nd"] > 0 else None,
        })
    return rows


def theil_sen(xs, ys):
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if abs(xs[j] - xs[i]) > 1000]
    if not slopes:
        return None
    b = statistics.median(slopes)
    return statistics.median(y - b * x for x, y in zip(xs, ys)), b


def fmt(x, spec=".1f"):
    return "–" if x is None else format(x, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lone-ms", type=float, default=5.0)
    ap.add_argument("--lone-us-per-token", type=float, default=1.1)
    a = ap.parse_args()
    lone = lambda p: a.lone_ms + a.lone_us_per_token * p / 1e3
    print("# vLLM's replay requests: time to first token outside their own steps\n")
    print("`python3 scripts/vllm/step_trace/per_request.py > results/h200-vllm/step-trace/requests.md` (a CPU, "
          "from the stored step traces and replay records; the script's docstring says how requests are "
          f"matched). Lone front end subtracted from the busy group: {a.lone_ms:g} ms + "
          f"{a.lone_us_per_token:g} µs a prompt token.\n")
    print("| run | API | matched | idle: n | idle: outside ms, median | idle: fit (Theil–Sen) | busy after a decode: n "
          "| outside less lone front end, median ms | decode step before, median ms | ratio, median |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|")
    cache = {}
    for label, trace, folder, api in RUNS:
        if trace not in cache:
            cache[trace] = lines(f"{R}/{trace}")
        with gzip.open(f"{R}/{folder}/records.jsonl.gz", "rt") as f:
            recs = [json.loads(l) for l in f]
        rows = requests(cache[trace], recs)
        idle = [r for r in rows if r["idle"]]
        busy = [r for r in rows if not r["idle"] and r["after_decode_ms"]]
        fit = theil_sen([r["prompt"] for r in idle], [r["outside_ms"] for r in idle]) if len(idle) >= 5 else None
        fit_text = "–" if fit is None else f"{fit[0]:.1f} ms + {fit[1] * 1e3:.2f} µs/token"
        wait = [r["outside_ms"] - lone(r["prompt"]) for r in busy]
        period = [r["after_decode_ms"] for r in busy]
        ratio = [w / t for w, t in zip(wait, period)]
        med = lambda xs: statistics.median(xs) if xs else None
        print(f"| {label} | {api} | {len(rows)} | {len(idle)} | {fmt(med([r['outside_ms'] for r in idle]))} | "
              f"{fit_text} | {len(busy)} | {fmt(med(wait))} | {fmt(med(period))} | {fmt(med(ratio), '.2f')} |")


if __name__ == "__main__":
    main()
