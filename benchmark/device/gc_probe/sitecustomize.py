"""Garbage-collector pauses of every Python process started with this folder on PYTHONPATH.

A diagnostic for latency tails (benchmark/device/sampling_cost.sh uses it): each collection over
5 ms, and every full (generation 2) one, is written to stderr as a `GCPAUSE` line with the
process's pid and command; at exit a `GCSTATS` line gives count, total and worst ms per generation.
"""

import atexit
import gc
import os
import sys
import time

_started = [0.0]
_stats: dict[int, list[float]] = {}


def _on_gc(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
        return
    ms = (time.perf_counter() - _started[0]) * 1000
    gen = info["generation"]
    count, total, worst = _stats.get(gen, (0, 0.0, 0.0))
    _stats[gen] = [count + 1, total + ms, max(worst, ms)]
    if ms > 5 or gen == 2:
        sys.stderr.write(f"GCPAUSE pid={os.getpid()} cmd={' '.join(sys.argv)[:60]!r} gen={gen} {ms:.1f} ms "
                         f"collected={info['collected']}\n")


gc.callbacks.append(_on_gc)
atexit.register(lambda: sys.stderr.write(f"GCSTATS pid={os.getpid()} {sys.argv[:2]} "
                                         f"{ {g: [round(x, 1) for x in v] for g, v in _stats.items()} }\n"))
