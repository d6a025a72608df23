"""Read-only probe of a live `agentx profile` run (loaded as `sitecustomize` via PYTHONPATH).

Active only when AGENTX_PROBE_DIR is set. When AgentX's own modules are imported (in whichever of
its processes imports them), it wraps three methods so that, after (or before) AgentX runs them
unchanged, it writes what they computed as JSON lines into $AGENTX_PROBE_DIR/probe.jsonl:

* ``TrajectorySource.__init__`` (timing/trajectory_source.py): every lane's trace, t* (ms, as
  AgentX holds it), start turn, and snapshot states with their ``next_dispatch_offset_ms``;
* ``AgenticReplayStrategy.finalize_phase`` (timing/strategies/agentic_replay.py): the warm-up's
  handoff trajectories (A's pressure stage), with each state's dispatch offset;
* ``AgenticReplayStrategy._execute_profiling``: at profiling start, the wall clock
  (``time.time_ns``), ``_profiling_phase_t0_offset_ms()`` and every lane's states, i.e. the
  first-dispatch offsets ``offset - t0`` AgentX schedules; after it, ``_correlation_to_lane``
  (which stream's correlation id belongs to which lane);
* ``AgenticReplayStrategy._dispatch_recycled_on_lane``: each recycle, with the lane and the new
  root's correlation id (so every record's ``root_correlation_id`` maps to a lane).

With AGENTX_PROBE_TIMERS=1 it also wraps ``LoopScheduler.cap_pending_delay`` and
``cap_pending_delay_for_group`` (common/loop_scheduler.py) and logs each shift of the idle caps
with the pending timers before it (seconds from now, and the tree's group id).

Nothing AgentX computes is changed: each wrapper calls the original with the same arguments and
returns its result; the probe only reads attributes.
"""

import os

_DIR = os.environ.get("AGENTX_PROBE_DIR")

if _DIR:
    import importlib.abc
    import importlib.machinery
    import json
    import sys
    import time

    def _emit(kind, doc):
        doc = {"kind": kind, "pid": os.getpid(), "wall_ns": time.time_ns(), **doc}
        with open(os.path.join(_DIR, "probe.jsonl"), "a") as f:
            f.write(json.dumps(doc, default=str) + "\n")

    def _enum(v):
        return getattr(v, "value", v)

    def _lanes(trajectories):
        out = []
        for lane, t in enumerate(trajectories):
            snap = t.snapshot
            e = {
                "lane": lane,
                "conversation_id": t.conversation_id,
                "start_turn_index": t.start_turn_index,
                "t_star_ms": None if snap is None else snap.t_star_ms,
                "x_correlation_id": getattr(t, "x_correlation_id", None),
                "states": [],
            }
            if snap is not None:
                e["states"] = [
                    {
                        "conversation_id": s.conversation_id,
                        "next_turn_index": s.next_turn_index,
                        "next_dispatch_offset_ms": s.next_dispatch_offset_ms,
                        "agent_depth": s.agent_depth,
                        "waiting_on_children": s.waiting_on_children,
                        "warmup_turn_index": getattr(s, "warmup_turn_index", None),
                        "branch_mode": _enum(getattr(s, "branch_mode", None)),
                        "x_correlation_id": getattr(s, "x_correlation_id", None),
                        "root_correlation_id": getattr(s, "root_correlation_id", None),
                    }
                    for s in snap.states
                ]
            out.append(e)
        return out

    def _patch_trajectory_source(mod):
        cls = mod.TrajectorySource
        orig = cls.__init__

        def __init__(self, *a, **k):
            orig(self, *a, **k)
            try:
                _emit(
                    "trajectory_source",
                    {
                        "lanes": _lanes(self.trajectories),
                        "warmup_credit_counts_by_lane": list(self.warmup_credit_counts_by_lane),
                    },
                )
            except Exception as e:  # the probe never breaks the run
                _emit("probe_error", {"where": "TrajectorySource.__init__", "error": repr(e)})

        cls.__init__ = __init__

    def _patch_agentic_replay(mod):
        cls = mod.AgenticReplayStrategy
        orig_fin = cls.finalize_phase
        orig_prof = cls._execute_profiling

        async def finalize_phase(self, *a, **k):
            r = await orig_fin(self, *a, **k)
            try:
                _emit(
                    "finalize_phase",
                    {
                        "phase": str(_enum(self.config.phase)),
                        "lanes": _lanes(self.conversation_source.trajectories),
                    },
                )
            except Exception as e:
                _emit("probe_error", {"where": "finalize_phase", "error": repr(e)})
            return r

        async def _execute_profiling(self, *a, **k):
            try:
                _emit(
                    "profiling_start",
                    {
                        "t0_offset_ms": self._profiling_phase_t0_offset_ms(),
                        "burst_phase_starts": self._burst_phase_starts,
                        "lanes": _lanes(self.conversation_source.trajectories),
                    },
                )
            except Exception as e:
                _emit("probe_error", {"where": "_execute_profiling", "error": repr(e)})
            r = await orig_prof(self, *a, **k)
            try:
                _emit(
                    "profiling_dispatched",
                    {"correlation_to_lane": dict(self._correlation_to_lane)},
                )
            except Exception as e:
                _emit("probe_error", {"where": "_execute_profiling after", "error": repr(e)})
            return r

        orig_recycle = cls._dispatch_recycled_on_lane

        async def _dispatch_recycled_on_lane(self, lane, *a, **k):
            before = set(self._correlation_to_lane)
            r = await orig_recycle(self, lane, *a, **k)
            try:
                new = {c: l for c, l in self._correlation_to_lane.items() if c not in before}
                _emit(
                    "recycle",
                    {
                        "phase": str(_enum(self.config.phase)),
                        "lane": lane,
                        "new_correlations": new,
                    },
                )
            except Exception as e:
                _emit("probe_error", {"where": "_dispatch_recycled_on_lane", "error": repr(e)})
            return r

        cls.finalize_phase = finalize_phase
        cls._execute_profiling = _execute_profiling
        cls._dispatch_recycled_on_lane = _dispatch_recycled_on_lane

    def _patch_loop_scheduler(mod):
        """Log every idle-cap shift: the pending timers (seconds from now, group) and the shift."""
        if not os.environ.get("AGENTX_PROBE_TIMERS"):
            return
        cls = mod.LoopScheduler

        def pending(self):
            now = self._loop.time()
            out = []
            for hid, (handle, _coro) in self._handles.items():
                when = getattr(handle, "when", None)
                out.append(
                    [
                        None if not callable(when) else round(when() - now, 4),
                        self._handle_groups.get(hid),
                    ]
                )
            return sorted(out, key=lambda x: (x[0] is None, x[0] or 0.0))

        for name in ("cap_pending_delay", "cap_pending_delay_for_group"):
            orig = getattr(cls, name)

            def wrapped(self, *a, __orig=orig, __name=name, **k):
                before = pending(self)
                shift = __orig(self, *a, **k)
                if shift:
                    _emit(
                        "timer_shift",
                        {"method": __name, "args": [str(x) for x in a], "shift_s": shift,
                         "pending_before_s": before},
                    )
                return shift

            setattr(cls, name, wrapped)

    _PATCHES = {
        "aiperf.common.loop_scheduler": _patch_loop_scheduler,
        "aiperf.timing.trajectory_source": _patch_trajectory_source,
        "aiperf.timing.strategies.agentic_replay": _patch_agentic_replay,
    }

    class _Loader(importlib.abc.Loader):
        def __init__(self, inner, patch):
            self.inner, self.patch = inner, patch

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            self.inner.exec_module(module)
            self.patch(module)

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            patch = _PATCHES.get(name)
            if patch is None:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, patch)
            return spec

    sys.meta_path.insert(0, _Finder())
