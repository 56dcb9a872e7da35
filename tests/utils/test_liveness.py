"""Heartbeats in shared memory, across real spawned processes: a worker that turns is seen turning,
one that is stopped (SIGSTOP) is seen silent, and one that has not started beating is not silent."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

from minisgl.utils.liveness import Heartbeat, Heartbeats
from minisgl.utils.process import ParentWatch


def _turn_forever(heartbeat: Heartbeat) -> None:
    watch = ParentWatch(heartbeat)  # a worker's loop: one alive() per turn, which beats
    while watch.alive():
        time.sleep(0.02)


def _wait(condition, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_stopped_worker_falls_silent_and_a_continued_one_beats_again():
    ctx = mp.get_context("spawn")
    beats = Heartbeats(["turning", "never-started"], ctx)
    proc = ctx.Process(target=_turn_forever, args=(beats.of("turning"),), daemon=True)
    proc.start()
    try:
        _wait(lambda: "turning" in beats.silent())
        assert "never-started" not in beats.silent()  # still loading: not hung
        time.sleep(0.5)
        assert beats.silent()["turning"] < 0.3 and beats.silent_past(0.3) == {}
        os.kill(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        _wait(lambda: "turning" in beats.silent_past(0.5))
        assert time.monotonic() - stopped >= 0.4  # silent for the timeout, not before it
        os.kill(proc.pid, signal.SIGCONT)
        _wait(lambda: beats.silent_past(0.5) == {})
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.join()
