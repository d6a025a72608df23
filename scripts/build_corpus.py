#!/usr/bin/env python3
"""Builds corpus/ from public session logs: reduces each source with `serverbench workload export
--format corpus` (numbers only: no text, paths or names of the logs are kept), and writes
corpus/manifest.jsonl (per session: its id, agent, the repository, paths and commit it was read from,
and the licence) and corpus/licences/.

The raw logs are not in this repository. RAW names a folder holding what was collected from public
GitHub repositories, one sub-folder per collection, each with a manifest.jsonl whose lines name
`local` (the copy), `repo`, `path`, `commit`, `licence` and `licence_file`:
    RAW/claude-code/      Claude Code session logs (~/.claude/projects/...)
    RAW/other-agents/     Weka agent traces (callanjfox/kv-cache-tester) and other agents' logs
    RAW/trajectories/     SWE-agent and mini-swe-agent trajectories
    RAW/codex/            Codex CLI rollouts (~/.codex/sessions/.../rollout-*.jsonl); its
                          manifest_details.jsonl (the same lines with `licence_files_at_commit` and
                          `notes`) says where a licence file existed at the commit read
Only sources whose licence allows redistribution (MIT, Apache-2.0) are written; the others are
reduced into HELD_OUT (outside the repository) for the held-out check docs/workload.md quotes. A Codex
rollout ships only where its repository had a licence file at the commit it was read from (a licence
added later, or one declared only in package metadata, is not enough).

Usage: RAW=/work/raw HELD_OUT=/tmp/held-out scripts/build_corpus.py [BIN]
       ONLY=codex RAW=/work/raw scripts/build_corpus.py [BIN]   (rebuilds corpus/codex/ and its
       manifest lines and licences alone, leaving the other collections as they are)
"""
import json, os, shutil, subprocess, sys, tempfile

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/serverbench"
RAW = os.environ.get("RAW", "/work/raw")
HELD_OUT = os.environ.get("HELD_OUT", "/tmp/held-out")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "corpus")
SHIPPABLE = {"MIT", "Apache-2.0"}


def manifest(groups=("claude-code", "other-agents", "trajectories", "codex")):
    entries = {}
    for group in groups:
        path = os.path.join(RAW, group, "manifest.jsonl")
        for line in open(path):
            x = json.loads(line)
            x["group"] = group
            entries[os.path.realpath(x["local"])] = x
    details = os.path.join(RAW, "codex", "manifest_details.jsonl")
    if "codex" in groups and os.path.exists(details):
        for line in open(details):
            x = json.loads(line)
            licensed = x.get("licence_files_at_commit") != [] and not any(
                "no LICENSE file" in n for n in x.get("notes", []))
            entries[os.path.realpath(x["local"])]["licensed_at_commit"] = licensed
    return entries


def codex_shippable(x):
    return x["group"] == "codex" and x["licence"] in SHIPPABLE and x.get("licensed_at_commit", False)


def write_manifest(man):
    with open(os.path.join(OUT, "manifest.jsonl"), "w") as f:
        for m in man:
            f.write(json.dumps(m, sort_keys=True) + "\n")


def copy_licences(man, entries):
    for repo in sorted({m["repo"] for m in man}):
        src = next(x["licence_file"] for x in entries.values() if x["repo"] == repo)
        shutil.copy(src, os.path.join(OUT, "licences", repo.replace("/", "__") + ".txt"))


def codex_only():
    """Rebuilds corpus/codex/ alone: its sessions, its manifest lines, its repositories' licences."""
    entries = manifest(("codex",))
    shipped = sorted(f for f, x in entries.items() if codex_shippable(x))
    shutil.rmtree(os.path.join(OUT, "codex"), ignore_errors=True)
    os.makedirs(os.path.join(OUT, "codex"))
    man = []
    reduce(shipped, "codex", f"{OUT}/codex/rollouts.jsonl", entries, "codex", man)
    kept = [json.loads(l) for l in open(os.path.join(OUT, "manifest.jsonl"))]
    kept = [m for m in kept if m["agent"] != "codex"]
    write_manifest(kept + man)
    copy_licences(man, entries)


def stage(files):
    """A temporary folder of links to `files` (names kept, so that ids do not depend on where)."""
    d = tempfile.mkdtemp(prefix="corpus-")
    for f in files:
        name = os.path.basename(f)
        dst = os.path.join(d, name)
        n = 1
        while os.path.lexists(dst):
            dst = os.path.join(d, f"{n}-{name}")
            n += 1
        os.symlink(f, dst)
    return d


def reduce(files, fmt, out, entries, agent, man):
    d = stage(files)
    origins = out + ".origins"
    subprocess.run([BIN, "workload", "export", "--trace", d, "--trace-format", fmt, "--format",
                    "corpus", "--keep-going", "-o", out, "--origins", origins], check=True)
    for line in open(origins):
        o = json.loads(line)
        srcs = [entries[os.path.realpath(f)] for f in o["files"]]
        man.append({"id": o["id"], "agent": agent, "corpus_file": os.path.relpath(out, ROOT),
                    "repo": srcs[0]["repo"], "commit": srcs[0]["commit"],
                    "paths": [s["path"] for s in srcs], "licence": srcs[0]["licence"]})
    os.remove(origins)
    shutil.rmtree(d)


def main():
    entries = manifest()
    # The Weka sample this repository already ships as a test fixture (MIT).
    fixture = os.path.realpath(os.path.join(ROOT, "tests/fixtures/weka/sample_trace_with_subagent.json"))
    entries[fixture] = {"repo": "callanjfox/agentic-coding-analysis",
                        "path": "examples/sample_trace_with_subagent.json",
                        "commit": "15e88f72f902c7852c330caf2cc11722e5dbc1aa", "licence": "MIT",
                        "licence_file": os.path.join(ROOT, "tests/fixtures/weka/LICENSE")}
    by = lambda pred: sorted(f for f, x in entries.items() if pred(x))
    lic = lambda x: x["licence"] in SHIPPABLE
    weka = lambda x: x["repo"] == "callanjfox/kv-cache-tester" and x["commit"].startswith("94f6046")
    claude_logs = lambda x: "is_subagent_file" in x
    mini = lambda x: x.get("agent") == "mini-swe-agent"
    swe = lambda x: x.get("agent") == "swe-agent"
    shutil.rmtree(OUT, ignore_errors=True)
    for sub in ("claude-code", "mini-swe-agent", "swe-agent", "codex", "licences"):
        os.makedirs(os.path.join(OUT, sub))
    os.makedirs(HELD_OUT, exist_ok=True)
    man = []
    reduce(by(weka), "weka", f"{OUT}/claude-code/weka-kv-cache-tester.jsonl", entries, "claude-code", man)
    reduce([fixture], "weka", f"{OUT}/claude-code/weka-agentic-coding-analysis.jsonl", entries,
           "claude-code", man)
    reduce(by(lambda x: claude_logs(x) and lic(x)), "claude-code", f"{OUT}/claude-code/logs.jsonl",
           entries, "claude-code", man)
    reduce(by(lambda x: mini(x) and lic(x)), "trajectory", f"{OUT}/mini-swe-agent/swebench-verified.jsonl",
           entries, "mini-swe-agent", man)
    reduce(by(lambda x: swe(x) and lic(x)), "trajectory", f"{OUT}/swe-agent/test-data.jsonl",
           entries, "swe-agent", man)
    reduce(by(codex_shippable), "codex", f"{OUT}/codex/rollouts.jsonl", entries, "codex", man)
    # Held out, never shipped: sources without a licence that allows it.
    held = []
    reduce(by(lambda x: claude_logs(x) and not lic(x)), "claude-code", f"{HELD_OUT}/claude-code-logs.jsonl",
           entries, "claude-code", held)
    reduce(by(lambda x: swe(x) and not lic(x)), "trajectory", f"{HELD_OUT}/swe-agent.jsonl",
           entries, "swe-agent", held)
    with open(os.path.join(HELD_OUT, "manifest.jsonl"), "w") as f:
        for m in held:
            f.write(json.dumps(m) + "\n")
    write_manifest(man)
    copy_licences(man, entries)


if os.environ.get("ONLY") == "codex":
    codex_only()
else:
    main()
