#!/usr/bin/env python3
"""Print, as one JSON document, what AgentX (agentx-harness 1.0.12) plans for a trace directory.

Reference oracle for serverbench's Rust re-implementation of AgentX's trace replay. Everything
in the output is computed by AgentX's own code (the ``aiperf`` package shipped in the
``agentx-harness`` wheel); this script only builds the objects the way ``agentx profile`` does
and reads their state back. It does not re-implement any AgentX logic.

Usage (with the AgentX virtualenv's Python)::

    python scripts/agentx/reference_plan.py TRACE_DIR --seed 42 --concurrency 4 \
        [--scenario agentx|mvp] [--max-context-length N] [--tokenizer DIR]

``TRACE_DIR`` holds WEKA traces, one JSON trace per ``*.json`` file (AgentX sorts them by name).

How the objects are built (the same calls, in the same order, as a real run):

1. Config: the ``agentx profile`` command line is parsed by AgentX's own CLI
   (``aiperf.cli.app``, cyclopts) into a ``CLIConfig``::

       profile --scenario <agentx|inferencex-agentx-mvp> --unsafe-override
               --model replay-model --url http://127.0.0.1:9/
               --input-file TRACE_DIR --custom-dataset-type weka_trace
               --concurrency C --random-seed SEED --tokenizer DIR [--max-context-length N]

   then ``resolve_config`` -> ``build_benchmark_plan`` -> ``resolve_run_seed`` ->
   ``cli_runner._make_benchmark_run`` (the single-run path), then the pre-bootstrap resolvers
   that touch the plan (``DatasetResolver``, ``ScenarioResolver`` = ``apply_scenario``, i.e. the
   scenario locks, ``TimingResolver``). ``--unsafe-override`` is needed only because both
   scenarios refuse a local ``weka_trace`` directory (it stamps ``submission_valid=false`` and
   changes nothing else). The artifact-dir, tokenizer-validation, GPU and ZMQ resolvers are
   skipped: they do not touch the dataset or the timing plan.
2. ``rng.reset(); rng.init(run.random_seed)`` as ``bootstrap_and_run_service`` does.
3. Dataset: ``Tokenizer.from_pretrained`` (as ``DatasetManager._configure_tokenizer``), then the
   ``CustomDatasetComposer`` (as ``DatasetManager._load_custom_dataset``), which builds the real
   prompt generator and ``WekaTraceLoader`` and calls ``load_dataset`` +
   ``convert_to_conversations`` + turn finalisation; then ``DatasetMetadata`` exactly as
   ``DatasetManager._configure_dataset`` builds it.
4. Lanes: ``TimingConfig.from_run(run)`` and a real ``PhaseOrchestrator`` (its constructor builds
   the SEQUENTIAL sampler over root conversations and the ``TrajectorySource``); the phase
   publisher and credit router are inert mocks (nothing is started).
5. Primers: a real WARMUP ``AgenticReplayStrategy`` runs ``_execute_warmup()`` against a
   recording scheduler / credit issuer (mocks that only record ``schedule_later(offset_s, ...)``
   and immediate ``issue_credit`` calls; nothing is sent). This is AgentX's default "spread" rule.
6. ``profiling_t0_offset_ms``: a real PROFILING ``AgenticReplayStrategy``'s
   ``_profiling_phase_t0_offset_ms()`` over the same snapshots, i.e. the value AgentX would use
   if profiling started straight from the t* snapshots (no pressure-warmup handoff; that is
   exactly the M scenario; for A the real profiling start comes from the warmup handoff instead).

Mocks and hooks (none of them changes what AgentX computes):

* the PhaseOrchestrator's phase publisher / credit router and the strategies' scheduler,
  stop checker, credit issuer and lifecycle are mocks (the issuer and scheduler record calls);
* the composer's ``loader.load_dataset`` is wrapped only to keep a reference to the parsed
  traces it returns (passed through unchanged), so each turn's recorded ``in``/``out`` can be
  looked up by ``(source_outer_idx, source_inner_idx)``;
* the WARMUP strategy's ``_start_accelerated_warmup`` (A's cache-pressure stage) is an inert
  stub: ``_execute_warmup`` calls it directly only when there is nothing to prime, and it is
  not part of the primer schedule (``warmup_went_straight_to_pressure_stage`` says if it was).

Tokenizer / text synthesis: not monkeypatched. The loader needs a tokenizer to synthesise prompt
text (block decoding). Hugging Face downloads are not available offline, so by default the
script points AgentX at the repository's small byte-level BPE test tokenizer
(``tests/fixtures/tokenizers/byte-level-bpe-3k.json``, copied into a temporary directory with a
``tokenizer_config.json``). The prompt TEXT therefore differs from a real run (which uses the
served model's tokenizer), but nothing printed here depends on it: timing, structure, t*,
snapshots and primers are independent of token content. ``--tokenizer DIR`` overrides.

Output keys: ``conversations`` (every Conversation the loader produced, in order), ``lanes``
(one per TrajectorySource lane), ``warmup_credit_count``, ``primer_schedule``,
``profiling_t0_offset_ms``, plus the effective settings. Floats are printed as Python holds
them (``json`` uses ``repr``, i.e. shortest round-trip form). Random correlation uuids are
omitted (they are ``uuid4`` per run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

# NOTE: do not set HF_HUB_OFFLINE: in that mode aiperf's Tokenizer treats every name as a
# Hugging Face cache entry and rejects a local directory. A local directory never reaches the
# network anyway (aiperf's alias resolution treats absolute paths as local).

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TOKENIZER_JSON = REPO_ROOT / "tests/fixtures/tokenizers/byte-level-bpe-3k.json"
SCENARIOS = {
    "agentx": "agentx",
    "mvp": "inferencex-agentx-mvp",
    "inferencex-agentx-mvp": "inferencex-agentx-mvp",
}


def _enum(v: Any) -> Any:
    return getattr(v, "value", v)


def _build_run(args: argparse.Namespace, tokenizer_dir: str):
    """Build the BenchmarkRun the way ``agentx profile`` does (CLI -> plan -> run -> resolvers)."""
    from aiperf.cli import app
    from aiperf.cli_runner import _make_benchmark_run
    from aiperf.config.dataset.resolver import DatasetResolver
    from aiperf.config.flags.resolver import resolve_config
    from aiperf.config.loader import build_benchmark_plan
    from aiperf.config.resolution.resolvers import ScenarioResolver, TimingResolver
    from aiperf.orchestrator.orchestrator import resolve_run_seed

    argv = [
        "profile",
        "--scenario", SCENARIOS[args.scenario],
        "--unsafe-override",
        "--model", "replay-model",
        "--url", "http://127.0.0.1:9/",
        "--input-file", str(Path(args.trace_dir).resolve()),
        "--custom-dataset-type", "weka_trace",
        "--concurrency", str(args.concurrency),
        "--random-seed", str(args.seed),
        "--tokenizer", tokenizer_dir,
        "--ui", "none",
    ]  # fmt: skip
    if args.max_context_length is not None:
        argv += ["--max-context-length", str(args.max_context_length)]
    _command, bound, _ignored = app.parse_args(argv, exit_on_error=False, print_error=True)
    cli_config = bound.arguments["cli_config"]
    config = resolve_config(cli_config, None)
    plan = build_benchmark_plan(config)
    seed = resolve_run_seed(plan, plan.variations[0])
    run = _make_benchmark_run(plan.configs[0], random_seed=seed, variables=plan.variables)
    for resolver in (DatasetResolver(), ScenarioResolver(), TimingResolver()):
        resolver.resolve(run)
    return run, argv


def _trace_request_index(data: dict[str, list[Any]]) -> dict[tuple[str, int, int | None], Any]:
    """(trace_id, outer_idx, inner_idx) -> the raw trace request, to report its ``in``/``out``."""
    index: dict[tuple[str, int, int | None], Any] = {}
    for trace_id, traces in data.items():
        for outer, req in enumerate(traces[0].requests):
            index[(trace_id, outer, None)] = req
            for inner, sub in enumerate(getattr(req, "requests", None) or []):
                index[(trace_id, outer, inner)] = sub
    return index


def _conversation_json(conv, req_index) -> dict[str, Any]:
    turns = []
    for k, turn in enumerate(conv.turns):
        t: dict[str, Any] = {
            "index": k,
            "timestamp_ms": turn.timestamp,
            "delay_ms": turn.delay,
            "api_time_ms": turn.api_time_ms,
            "max_tokens": turn.max_tokens,
            "branch_ids": list(turn.branch_ids),
            "prerequisites": [
                {"kind": _enum(p.kind), "branch_id": p.branch_id} for p in turn.prerequisites
            ],
            "replay_predecessors": [
                {"conversation_id": r.conversation_id, "turn_index": r.turn_index}
                for r in turn.replay_predecessors
            ],
            "source_kind": turn.source_kind,
        }
        if turn.source_outer_idx is not None:
            t["source_outer_idx"] = turn.source_outer_idx
        if turn.source_inner_idx is not None:
            t["source_inner_idx"] = turn.source_inner_idx
        req = req_index.get((turn.source_trace_id, turn.source_outer_idx, turn.source_inner_idx))
        if req is not None:
            t["in"] = req.input_length
            t["out"] = req.output_length
            t["hash_ids_len"] = len(req.hash_ids)
        t["raw_messages_count"] = None if turn.raw_messages is None else len(turn.raw_messages)
        t["reset_context"] = turn.reset_context
        turns.append(t)
    out: dict[str, Any] = {
        "session_id": conv.session_id,
        "is_root": conv.is_root,
        "agent_depth": conv.agent_depth,
        "parent_conversation_id": conv.parent_conversation_id,
        "replay_scope_id": conv.replay_scope_id,
        "num_turns": len(conv.turns),
        "turns": turns,
    }
    out["branches"] = [
        {
            "branch_id": b.branch_id,
            "child_conversation_ids": list(b.child_conversation_ids),
            "mode": _enum(b.mode),
            "is_background": b.is_background,
            "start_timestamp_ms": b.start_timestamp_ms,
        }
        for b in conv.branches
    ]
    return out


def _lanes_json(source) -> list[dict[str, Any]]:
    lanes = []
    for lane, traj in enumerate(source.trajectories):
        snap = traj.snapshot
        entry: dict[str, Any] = {
            "lane": lane,
            "conversation_id": traj.conversation_id,
            "start_turn_index": traj.start_turn_index,
        }
        if snap is None:
            entry["t_star_ms"] = None
            entry["states"] = []
            entry["replay_resume_boundaries"] = []
        else:
            entry["t_star_ms"] = snap.t_star_ms
            entry["sample_pct"] = source._trajectory_snapshot_pct(traj)
            entry["states"] = [
                {
                    "conversation_id": s.conversation_id,
                    "next_turn_index": s.next_turn_index,
                    "next_dispatch_offset_ms": s.next_dispatch_offset_ms,
                    "agent_depth": s.agent_depth,
                    "is_lane_root": s.parent_correlation_id is None,
                    "waiting_on_children": s.waiting_on_children,
                    "join_target_turn_index": s.join_target_turn_index,
                    "branch_id": s.branch_id,
                    "join_gate_memberships": [list(m) for m in s.join_gate_memberships],
                    "branch_mode": _enum(s.branch_mode),
                    "warmup_turn_index": s.warmup_turn_index,
                }
                for s in snap.states
            ]
            entry["replay_resume_boundaries"] = [
                {"conversation_id": b.conversation_id, "next_turn_index": b.next_turn_index}
                for b in snap.replay_resume_boundaries
            ]
        entry["warmup_credit_count"] = source.warmup_credit_counts_by_lane[lane]
        lanes.append(entry)
    return lanes


class _Issue:
    """Awaitable stand-in for ``credit_issuer.issue_credit(turn)``: records the turn when awaited."""

    def __init__(self, log: list, turn) -> None:
        self.log, self.turn = log, turn

    def __await__(self):
        self.log.append((0.0, self.turn, "immediate"))
        return True
        yield  # pragma: no cover  (makes this a generator)


def _primer_schedule(run, timing_config, source) -> tuple[list[dict[str, Any]], bool, float]:
    """Run AgentX's WARMUP ``_execute_warmup`` and PROFILING t0 rule against recording mocks."""
    from aiperf.common.enums import CreditPhase
    from aiperf.timing.strategies.agentic_replay import AgenticReplayStrategy

    by_phase = {pc.phase: pc for pc in timing_config.phase_configs}
    log: list[tuple[float, Any, str]] = []

    credit_issuer = mock.MagicMock()
    credit_issuer.issue_credit = lambda turn: _Issue(log, turn)
    scheduler = mock.MagicMock()

    def schedule_later(offset_s, awaitable):
        log.append((offset_s, awaitable.turn, "scheduled"))

    scheduler.schedule_later = schedule_later
    warmup = AgenticReplayStrategy(
        config=by_phase[CreditPhase.WARMUP],
        conversation_source=source,
        scheduler=scheduler,
        stop_checker=mock.MagicMock(),
        credit_issuer=credit_issuer,
        lifecycle=mock.MagicMock(),
        run=run,
    )
    # Primers only: when no stream has a turn before t* (nothing to prime), A's
    # ``_execute_warmup`` jumps straight into the cache-pressure stage; that stage is not
    # part of the primer schedule, so it is stubbed out here (primers are unaffected).
    pressure_stage = mock.AsyncMock()
    warmup._start_accelerated_warmup = pressure_stage
    asyncio.run(warmup._execute_warmup())
    primers = []
    for offset_s, turn, how in log:
        primers.append(
            {
                "lane": warmup._correlation_to_lane.get(turn.x_correlation_id),
                "conversation_id": turn.conversation_id,
                "turn_index": turn.turn_index,
                "agent_depth": turn.agent_depth,
                "offset_s": offset_s,
                "dispatch": how,
                "max_tokens_override": getattr(turn, "max_tokens_override", None),
            }
        )

    profiling = AgenticReplayStrategy(
        config=by_phase[CreditPhase.PROFILING],
        conversation_source=source,
        scheduler=mock.MagicMock(),
        stop_checker=mock.MagicMock(),
        credit_issuer=mock.MagicMock(),
        lifecycle=mock.MagicMock(),
        run=run,
    )
    return primers, pressure_stage.await_count > 0, profiling._profiling_phase_t0_offset_ms()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace_dir")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="agentx")
    p.add_argument("--max-context-length", type=int, default=None)
    p.add_argument(
        "--tokenizer",
        default=None,
        help="local tokenizer directory (default: the repo's byte-level BPE test tokenizer)",
    )
    args = p.parse_args()

    real_stdout = sys.stdout
    tmp = None
    try:
        if args.tokenizer is None:
            tmp = tempfile.mkdtemp(prefix="agentx-ref-tok-")
            shutil.copy(DEFAULT_TOKENIZER_JSON, Path(tmp, "tokenizer.json"))
            Path(tmp, "tokenizer_config.json").write_text(
                json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"})
            )
            tokenizer_dir = tmp
        else:
            tokenizer_dir = args.tokenizer

        # AgentX logs go to stderr; stdout carries only the JSON document.
        with contextlib.redirect_stdout(sys.stderr):
            doc = _plan(args, tokenizer_dir)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    json.dump(doc, real_stdout, indent=1)
    real_stdout.write("\n")
    return 0


def _plan(args: argparse.Namespace, tokenizer_dir: str) -> dict[str, Any]:
    from importlib.metadata import version

    from aiperf.common import random_generator as rng
    from aiperf.common.environment import Environment
    from aiperf.common.models import DatasetMetadata
    from aiperf.common.scenario import get_scenario
    from aiperf.common.tokenizer import Tokenizer
    from aiperf.dataset.composer.custom import CustomDatasetComposer
    from aiperf.timing.config import TimingConfig
    from aiperf.timing.phase_orchestrator import PhaseOrchestrator

    run, argv = _build_run(args, tokenizer_dir)
    trace_dir = str(Path(args.trace_dir).resolve())
    scenario = run.cfg.scenario
    env_defaults = get_scenario(scenario).environment_defaults if scenario else {}
    with Environment.defaults(env_defaults):
        rng.reset()
        rng.init(run.random_seed)

        model_name = run.cfg.get_model_names()[0]
        tok_cfg = run.cfg.tokenizer
        tokenizer = Tokenizer.from_pretrained(
            tok_cfg.get_tokenizer_name_for_model(model_name),
            trust_remote_code=tok_cfg.trust_remote_code,
            revision=tok_cfg.revision,
            resolve_alias=tok_cfg.should_resolve_alias,
        )

        composer = CustomDatasetComposer(run=run, tokenizer=tokenizer)
        # Keep a handle on the parsed traces (to report each turn's recorded ``in``/``out``).
        loaded: dict[str, Any] = {}
        real_create = composer._create_loader_instance

        def create_loader_instance(dataset_type):
            real_create(dataset_type)
            real_load = composer.loader.load_dataset

            def load_dataset():
                data = real_load()
                loaded.update(data)
                return data

            composer.loader.load_dataset = load_dataset

        composer._create_loader_instance = create_loader_instance
        conversations = composer.create_dataset()

        default_dataset = run.cfg.get_default_dataset()
        dataset_metadata = DatasetMetadata(
            conversations=[c.metadata() for c in conversations],
            sampling_strategy=getattr(default_dataset, "sampling", None),
            default_context_mode=composer.get_default_context_mode(),
        )

        timing_config = TimingConfig.from_run(run)
        orchestrator = PhaseOrchestrator(
            config=timing_config,
            phase_publisher=mock.MagicMock(),
            credit_router=mock.MagicMock(),
            dataset_metadata=dataset_metadata,
            run=run,
        )
        source = orchestrator.conversation_source
        primers, no_primer_pressure, t0 = _primer_schedule(run, timing_config, source)

    profiling_phase = run.cfg.get_profiling_phases()[0]
    req_index = _trace_request_index(loaded)
    trace_files = sorted(p.name for p in Path(args.trace_dir).glob("*.json"))
    outcome = run.resolved.scenario_outcome
    return {
        "generator": "serverbench scripts/agentx/reference_plan.py",
        "agentx_harness_version": version("agentx-harness"),
        "agentx_argv": [
            {tokenizer_dir: "<tokenizer-dir>", trace_dir: "<trace-dir>"}.get(a, a) for a in argv
        ],
        "trace_files": trace_files,
        "scenario": scenario,
        "submission_valid": getattr(outcome, "submission_valid", None),
        "random_seed": run.random_seed,
        "concurrency": timing_config.concurrency,
        "trajectory_start_min_ratio": timing_config.trajectory_start_min_ratio,
        "trajectory_start_max_ratio": timing_config.trajectory_start_max_ratio,
        "sampling_strategy": _enum(dataset_metadata.sampling_strategy),
        "system_idle_gap_cap_seconds": profiling_phase.system_idle_gap_cap_seconds,
        "trace_idle_gap_cap_seconds": getattr(default_dataset, "trace_idle_gap_cap_seconds", None),
        "burst_phase_starts": profiling_phase.burst_phase_starts,
        "warmup_requests_per_lane": profiling_phase.warmup_requests_per_lane,
        "max_context_length": getattr(default_dataset, "max_context_length", None),
        "dataset_entries": getattr(default_dataset, "entries", None),
        "conversations": [_conversation_json(c, req_index) for c in conversations],
        "lanes": _lanes_json(source),
        "warmup_credit_count": source.warmup_credit_count,
        "primer_schedule": primers,
        # True only when there was nothing to prime and (A) AgentX went straight to its
        # cache-pressure warmup stage (not simulated here).
        "warmup_went_straight_to_pressure_stage": no_primer_pressure,
        "profiling_t0_offset_ms": t0,
    }


if __name__ == "__main__":
    sys.exit(main())
