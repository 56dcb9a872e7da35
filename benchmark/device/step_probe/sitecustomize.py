"""Per-step records of the scheduler and GC pauses of every Python process started with this folder
first on PYTHONPATH: a diagnostic, not part of the package (benchmark/NOTES.md, "The server against
its engine, step by step", used it on the offline engine and the server alike).

Writes under $PROBE_DIR (default /tmp/probe):
  role-<pid>.txt        the process's role (worker name, or argv)
  gc-<pid>.txt          'mono_t gen ms' for every collection over 1 ms and every gen-2 one
  steps-<pid>.csv       one line per scheduler loop turn that ran a step
  idle-<pid>.csv        idle periods of the scheduler loop (mono start, seconds)
"""

import gc
import importlib.abc
import importlib.machinery
import os
import sys
import time

_DIR = os.environ.get("PROBE_DIR", "/tmp/probe")
try:
    os.makedirs(_DIR, exist_ok=True)
except OSError:
    pass
_PID = os.getpid()
_mono = time.monotonic
_perf = time.perf_counter


def _write(name, text, mode="a"):
    try:
        with open(os.path.join(_DIR, f"{name}-{os.getpid()}.{'csv' if name in ('steps', 'idle') else 'txt'}"), mode) as f:
            f.write(text)
    except OSError:
        pass


_write("role", f"main ppid={os.getppid()} " + " ".join(sys.argv)[:200] + "\n", "w")

# -- GC --------------------------------------------------------------------------------------
_gc = {"start": 0.0, "in_step": 0.0}


def _on_gc(phase, info):
    if phase == "start":
        _gc["start"] = _perf()
        return
    ms = (_perf() - _gc["start"]) * 1000
    _gc["in_step"] += ms
    gen = info["generation"]
    if ms > 1 or gen == 2:
        _write("gc", f"{_mono():.4f} {gen} {ms:.2f} {info.get('collected', 0)}\n")


gc.callbacks.append(_on_gc)

# -- scheduler ---------------------------------------------------------------------------------
_acc = {"evict_ms": 0.0, "evict_n": 0, "evict_pages": 0, "sync_ms": 0.0, "proc_ms": 0.0, "fwd_ms": 0.0,
        "send_ms": 0.0, "msgs": 0, "sched_ms": 0.0, "recv_ms": 0.0}
_rows = []
_idle = {"since": None}
HEADER = ("t,turn_ms,step_ms,phase,bs,ptok,waiting,running,free,evictable,cached,evict_ms,evict_n,evict_pages,"
          "sync_ms,proc_ms,fwd_ms,sched_ms,send_ms,msgs,gc_ms,preempt,recv_ms\n")


def _flush():
    global _rows
    if _rows:
        _write("steps", "".join(_rows))
        _rows = []


def _patch_radix(mod):
    cls = mod.RadixPrefixCache
    orig = cls.evict

    def evict(self, num_pages):
        t0 = _perf()
        out = orig(self, num_pages)
        _acc["evict_ms"] += (_perf() - t0) * 1000
        _acc["evict_n"] += 1
        _acc["evict_pages"] += len(out)
        return out

    cls.evict = evict


def _patch_scheduler(mod):
    cls = mod.Scheduler
    orig_process, orig_step, orig_schedule = cls._process, cls.step, cls._schedule

    def _process(self, done):
        t0 = _perf()
        if done.batch.phase != "verify":
            done.out.copy_done_event.synchronize()
        t1 = _perf()
        out = orig_process(self, done)
        _acc["sync_ms"] += (t1 - t0) * 1000
        _acc["proc_ms"] += (_perf() - t1) * 1000
        return out

    def _schedule(self):
        t0 = _perf()
        batch = orig_schedule(self)
        _acc["sched_ms"] += (_perf() - t0) * 1000
        self._probe_batch = batch
        return batch

    def step(self):
        self._probe_batch = None
        t0 = _perf()
        computed = self.stats.computed_prompt_tokens
        out = orig_step(self)
        self._probe_step_ms = (_perf() - t0) * 1000
        self._probe_ptok = self.stats.computed_prompt_tokens - computed
        return out

    cls._process, cls.step, cls._schedule = _process, step, _schedule
    if os.environ.get("PROBE_FORCE_NAIVE") == "1":
        orig_create = mod.create_prefix_cache
        mod.create_prefix_cache = lambda kind, page_size: orig_create("naive", page_size)

    eng = sys.modules.get("minisgl.engine.engine")
    if eng is not None:
        orig_fwd = eng.Engine.forward_batch

        def forward_batch(self, batch, args):
            t0 = _perf()
            out = orig_fwd(self, batch, args)
            _acc["fwd_ms"] += (_perf() - t0) * 1000
            return out

        eng.Engine.forward_batch = forward_batch


def _patch_process(mod):
    cls = mod.SchedulerServer
    orig_run, orig_send, orig_handle, orig_recv = cls.run_once, cls.send, cls.handle, cls.receive
    _write("steps", HEADER, "w")

    def send(self, outputs):
        t0 = _perf()
        orig_send(self, outputs)
        _acc["send_ms"] += (_perf() - t0) * 1000

    def receive(self, timeout_ms):
        t0 = _perf()
        out = orig_recv(self, timeout_ms)
        _acc["recv_ms"] += (_perf() - t0) * 1000
        return out

    def handle(self, msg):
        _acc["msgs"] += 1
        return orig_handle(self, msg)

    def run_once(self):
        s = self.scheduler
        t = _mono()
        t0 = _perf()
        s._probe_step_ms = None
        _gc["in_step"] = 0.0
        preempt = s.stats.preemptions
        ok = orig_run(self)
        turn = (_perf() - t0) * 1000
        if s._probe_step_ms is None:  # no step: idle turn
            if _idle["since"] is None:
                _idle["since"] = t
                _flush()
            for k in _acc:
                _acc[k] = 0
            return ok
        if _idle["since"] is not None:
            _write("idle", f"{_idle['since']:.4f},{t - _idle['since']:.4f}\n")
            _idle["since"] = None
        b = getattr(s, "_probe_batch", None)
        phase = "-" if b is None else b.phase[0]
        pc = s.prefix_cache
        a = _acc
        _rows.append(f"{t:.4f},{turn:.3f},{s._probe_step_ms:.3f},{phase},{0 if b is None else b.size},{s._probe_ptok},"
                     f"{len(s.prefill.waiting)},{len(s.decode.running)},{len(s.cache.free_pages)},"
                     f"{pc.evictable_pages},{pc.cached_pages},{a['evict_ms']:.3f},{a['evict_n']},{a['evict_pages']},"
                     f"{a['sync_ms']:.3f},{a['proc_ms']:.3f},{a['fwd_ms']:.3f},{a['sched_ms']:.3f},{a['send_ms']:.3f},"
                     f"{a['msgs']},{_gc['in_step']:.3f},{s.stats.preemptions - preempt},{a['recv_ms']:.3f}\n")
        for k in a:
            a[k] = 0
        if len(_rows) >= 2000:
            _flush()
        return ok

    cls.run_once, cls.send, cls.handle, cls.receive = run_once, send, handle, receive


def _patch_worker(mod):
    orig = mod.run_worker

    def run_worker(link, body):
        _write("role", f"worker {link.name}\n", "w")
        return orig(link, body)

    mod.run_worker = run_worker


_TARGETS = {"minisgl.kvcache.radix_cache": _patch_radix, "minisgl.scheduler.scheduler": _patch_scheduler,
            "minisgl.scheduler.process": _patch_process, "minisgl.utils.process": _patch_worker}


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        orig_exec = loader.exec_module

        def exec_module(module):
            orig_exec(module)
            try:
                _TARGETS[name](module)
            except Exception as e:  # noqa: BLE001
                sys.stderr.write(f"probe59: patching {name} failed: {e!r}\n")

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Hook())

import atexit  # noqa: E402

atexit.register(_flush)
