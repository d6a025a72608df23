# vLLM step trace (scripts/vllm/step_trace/README.md): one JSON line per engine step, written by vLLM's
# engine-core process, when SB_STEP_TRACE names the output file. Loaded by Python at start-up because this
# folder is on PYTHONPATH (vllm_run.sh STEP_TRACE=1); vLLM's files are not touched: the hook wraps, after
# their modules are imported, Worker.execute_model / Worker.sample_tokens (vllm.v1.worker.gpu_worker),
# Scheduler.schedule / Scheduler.update_from_output (vllm.v1.core.sched.scheduler) and the V2 model
# runner's dispatch_cg_and_sync_dp (the CUDA-graph mode and padded batch of each step).
#
# GPU time comes from CUDA events recorded on the worker's current stream (the runner's main stream) at
# execute_model's entry (a), its exit (b: inputs prepared, the forward launched) and sample_tokens' exit
# (c: sampling and its post-processing launched). They are read back with Event.query() once complete, so
# nothing here waits on the GPU. Without SB_STEP_TRACE nothing is patched.
import os

_PATH = os.environ.get("SB_STEP_TRACE")


def _chain_other_sitecustomize():
    # another sitecustomize further down sys.path (the image's, if any) still runs
    import importlib.machinery
    import importlib.util
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if p and os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.origin and os.path.abspath(spec.origin) != os.path.abspath(__file__):
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
        except Exception as e:  # noqa: BLE001
            sys.stderr.write(f"step_trace: the other sitecustomize ({spec.origin}) failed: {e!r}\n")


if _PATH:
    import importlib.abc
    import importlib.util
    import sys
    import threading
    import time

    _TARGETS = {
        "vllm.v1.worker.gpu_worker",
        "vllm.v1.core.sched.scheduler",
        "vllm.v1.worker.gpu.model_runner",
    }

    class _Tracer:
        def __init__(self):
            self.pid = None
            self.f = None
            self.pending = []          # records waiting for their events / update_from_output
            self.by_so = {}            # id(scheduler_output) -> record
            self.sched_ns = {}         # id(scheduler_output) -> schedule() duration
            self.prompt_len = {}       # req_id -> prompt length
            self.cur = None            # the record between execute_model and sample_tokens
            self.prev_c = None         # the previous step's end event
            self.anchor_ev = None      # an event recorded while the stream was idle ...
            self.anchor_ns = 0         # ... and time.time_ns() just before it was recorded
            self.step = 0
            self.batch_desc = None
            self.torch = None
            self.errors = 0

        def _open(self):
            if self.pid == os.getpid():
                return
            self.pid = os.getpid()
            self.f = open(_PATH, "a", buffering=1 << 20)
            import json
            self.f.write(json.dumps({"hdr": 1, "pid": self.pid, "t_ns": time.time_ns(),
                                     "argv": sys.argv[:3]}) + "\n")
            self.f.flush()
            # lines reach the file within a second even while the engine idles
            def flusher(f=self.f):
                while True:
                    time.sleep(1.0)
                    try:
                        f.flush()
                    except Exception:  # noqa: BLE001
                        return
            threading.Thread(target=flusher, name="sb-step-trace-flush", daemon=True).start()

        def _ev(self):
            return self.torch.cuda.Event(enable_timing=True)

        # ---- scheduler side
        def after_schedule(self, so, dt_ns):
            self.sched_ns[id(so)] = dt_ns
            if len(self.sched_ns) > 64:
                self.sched_ns.pop(next(iter(self.sched_ns)))

        def after_update(self, so, dt_ns):
            rec = self.by_so.pop(id(so), None)
            if rec is not None:
                rec["upd_us"] = dt_ns // 1000
                rec["_upd"] = True
            self._drain(False)

        # ---- worker side
        def before_execute(self, so):
            h0 = time.perf_counter_ns()
            if self.torch is None:
                import torch
                self.torch = torch
            self._open()
            torch = self.torch
            stream = torch.cuda.current_stream()
            idle = self.prev_c is None or self.prev_c.query()
            t_ns = time.time_ns()
            ev_a = self._ev()
            ev_a.record(stream)
            anchor = False
            if idle:
                # the stream had nothing left: ev_a runs at once, so its GPU time is t_ns (+ a few us)
                self.anchor_ev, self.anchor_ns, anchor = ev_a, t_ns, True
            # composition
            nst = so.num_scheduled_tokens
            pl = self.prompt_len
            for rid in so.finished_req_ids:
                pl.pop(rid, None)
            pf = []
            dctx = []
            for nr in so.scheduled_new_reqs:
                ids = nr.prompt_token_ids if nr.prompt_token_ids is not None else nr.prefill_token_ids
                p = len(ids) if ids is not None else -1
                pl[nr.req_id] = p
                n = nst.get(nr.req_id, 0)
                c = nr.num_computed_tokens
                if n > 1 or c < p:
                    pf.append([n, c, p])
                else:
                    dctx.append(c)
            cr = so.scheduled_cached_reqs
            for rid, c in zip(cr.req_ids, cr.num_computed_tokens):
                n = nst.get(rid, 0)
                if n == 0:
                    continue
                p = pl.get(rid, -1)
                if n > 1 or c < p:
                    pf.append([n, c, p])
                else:
                    dctx.append(c)
            self.step += 1
            rec = {
                "i": self.step,
                "t0_ns": t_ns,
                "tok": so.total_num_scheduled_tokens,
                "nreq": len(nst),
                "nd": len(dctx),
                "dsum": sum(dctx),
                "dmax": max(dctx) if dctx else 0,
                "dctx": dctx,
                "pf": pf,
                "sched_us": self.sched_ns.pop(id(so), 0) // 1000,
                "anchor": anchor,
                "_a": ev_a,
                "_prev_c": self.prev_c,
                "_so": id(so),
                "_upd": False,
                "_hook": 0,
            }
            self.batch_desc = None
            rec["_hook"] += time.perf_counter_ns() - h0
            rec["_c0"] = time.perf_counter_ns()
            self.cur = rec
            return rec

        def after_execute(self, rec, out):
            h0 = time.perf_counter_ns()
            rec["cpu_exec_us"] = (h0 - rec["_c0"]) // 1000
            bd = self.batch_desc
            if bd is not None:
                cg = getattr(bd, "cg_mode", None)
                rec["cg"] = getattr(cg, "name", str(cg))
                rec["pad_tok"] = getattr(bd, "num_tokens", None)
                rec["pad_req"] = getattr(bd, "num_reqs", None)
            ev_b = self._ev()
            ev_b.record(self.torch.cuda.current_stream())
            rec["_b"] = ev_b
            if out is not None:
                # no sample_tokens call follows (nothing scheduled, or an output returned at once)
                rec["_c"] = ev_b
                rec["cpu_samp_us"] = 0
                self._finish_launch(rec)
            rec["_hook"] += time.perf_counter_ns() - h0

        def before_sample(self):
            rec = self.cur
            if rec is not None:
                rec["_s0"] = time.perf_counter_ns()
            return rec

        def after_sample(self, rec):
            h0 = time.perf_counter_ns()
            rec["cpu_samp_us"] = (h0 - rec["_s0"]) // 1000
            ev_c = self._ev()
            ev_c.record(self.torch.cuda.current_stream())
            rec["_c"] = ev_c
            self._finish_launch(rec)
            rec["_hook"] += time.perf_counter_ns() - h0

        def _finish_launch(self, rec):
            self.cur = None
            self.prev_c = rec["_c"]
            rec["_anchor_ev"] = self.anchor_ev
            rec["_anchor_ns"] = self.anchor_ns
            self.by_so[rec["_so"]] = rec
            self.pending.append(rec)
            self._drain(False)

        def _drain(self, force):
            import json
            while self.pending:
                rec = self.pending[0]
                if "_c" not in rec:
                    break
                if not force:
                    if not rec["_upd"] and len(self.pending) < 8:
                        break
                    if not rec["_c"].query():
                        break
                else:
                    rec["_c"].synchronize()
                self.pending.pop(0)
                h0 = time.perf_counter_ns()
                a, b, c = rec.pop("_a"), rec.pop("_b"), rec.pop("_c")
                pc = rec.pop("_prev_c")
                aev, ans = rec.pop("_anchor_ev"), rec.pop("_anchor_ns")
                try:
                    rec["gpu_us"] = round(a.elapsed_time(c) * 1000, 1)
                    rec["fwd_us"] = round(a.elapsed_time(b) * 1000, 1)
                    rec["smp_us"] = round(b.elapsed_time(c) * 1000, 1) if c is not b else 0.0
                    rec["gap_us"] = round(pc.elapsed_time(a) * 1000, 1) if pc is not None else None
                    if aev is not None:
                        g0 = ans + int(aev.elapsed_time(a) * 1e6)
                        rec["g0_ns"] = g0
                        rec["g1_ns"] = g0 + int(rec["gpu_us"] * 1000)
                except Exception as e:  # noqa: BLE001
                    rec["err"] = repr(e)[:200]
                for k in ("_so", "_upd", "_c0", "_s0"):
                    rec.pop(k, None)
                rec["hook_us"] = (rec.pop("_hook") + time.perf_counter_ns() - h0) // 1000
                self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
            if len(self.by_so) > 256:
                self.by_so.clear()

        def close(self):
            try:
                if self.f is not None and self.pid == os.getpid():
                    self._drain(True)
                    self.f.flush()
            except Exception:  # noqa: BLE001
                pass

    _T = _Tracer()

    def _warn(where, e):
        _T.errors += 1
        if _T.errors <= 5:
            sys.stderr.write(f"step_trace: {where}: {e!r}\n")

    def _patch_worker(mod):
        W = getattr(mod, "Worker", None)
        if W is None or getattr(W, "_sb_traced", False):
            return
        orig_exec, orig_samp = W.execute_model, W.sample_tokens

        def execute_model(self, scheduler_output, *a, **k):
            rec = None
            try:
                rec = _T.before_execute(scheduler_output)
            except Exception as e:  # noqa: BLE001
                _warn("before execute_model", e)
            out = orig_exec(self, scheduler_output, *a, **k)
            if rec is not None:
                try:
                    _T.after_execute(rec, out)
                except Exception as e:  # noqa: BLE001
                    _warn("after execute_model", e)
            return out

        def sample_tokens(self, *a, **k):
            rec = None
            try:
                rec = _T.before_sample()
            except Exception as e:  # noqa: BLE001
                _warn("before sample_tokens", e)
            out = orig_samp(self, *a, **k)
            if rec is not None:
                try:
                    _T.after_sample(rec)
                except Exception as e:  # noqa: BLE001
                    _warn("after sample_tokens", e)
            return out

        W.execute_model, W.sample_tokens, W._sb_traced = execute_model, sample_tokens, True
        sys.stderr.write(f"step_trace: Worker patched in pid {os.getpid()}, writing {_PATH}\n")

    def _patch_scheduler(mod):
        S = getattr(mod, "Scheduler", None)
        if S is None or getattr(S, "_sb_traced", False):
            return
        orig_sched, orig_upd = S.schedule, S.update_from_output

        def schedule(self, *a, **k):
            t = time.perf_counter_ns()
            so = orig_sched(self, *a, **k)
            try:
                _T.after_schedule(so, time.perf_counter_ns() - t)
            except Exception as e:  # noqa: BLE001
                _warn("schedule", e)
            return so

        def update_from_output(self, scheduler_output, *a, **k):
            t = time.perf_counter_ns()
            out = orig_upd(self, scheduler_output, *a, **k)
            try:
                _T.after_update(scheduler_output, time.perf_counter_ns() - t)
            except Exception as e:  # noqa: BLE001
                _warn("update_from_output", e)
            return out

        S.schedule, S.update_from_output, S._sb_traced = schedule, update_from_output, True

    def _patch_runner(mod):
        f = getattr(mod, "dispatch_cg_and_sync_dp", None)
        if f is None or getattr(f, "_sb_traced", False):
            return

        def dispatch_cg_and_sync_dp(*a, **k):
            r = f(*a, **k)
            try:
                _T.batch_desc = r[0]
            except Exception:  # noqa: BLE001
                pass
            return r

        dispatch_cg_and_sync_dp._sb_traced = True
        mod.dispatch_cg_and_sync_dp = dispatch_cg_and_sync_dp

    _PATCH = {
        "vllm.v1.worker.gpu_worker": _patch_worker,
        "vllm.v1.core.sched.scheduler": _patch_scheduler,
        "vllm.v1.worker.gpu.model_runner": _patch_runner,
    }

    class _Loader(importlib.abc.Loader):
        def __init__(self, inner, name):
            self.inner, self.name = inner, name

        def create_module(self, spec):
            return self.inner.create_module(spec)

        def exec_module(self, module):
            self.inner.exec_module(module)
            try:
                _PATCH[self.name](module)
            except Exception as e:  # noqa: BLE001
                _warn("patching " + self.name, e)

        def __getattr__(self, item):
            return getattr(self.inner, item)

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in _TARGETS:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _Loader(spec.loader, name)
                    return spec
            return None

    sys.meta_path.insert(0, _Finder())
    for _name in _TARGETS:   # already imported (not expected at start-up)
        if _name in sys.modules:
            _PATCH[_name](sys.modules[_name])

    import atexit
    atexit.register(_T.close)

_chain_other_sitecustomize()
