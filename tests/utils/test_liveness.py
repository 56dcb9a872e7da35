"""Heartbeats in shared memory, across real spawned processes: a worker that turns is seen turning,
one that is stopped (SIGSTOP) is seen silent, one that has not started beating is not silent, and
one inside a long CPU-bound step is not silent while one blocked (a hang) is."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

from minisgl.utils.liveness import Heartbeat, Heartbeats, WorkerLink
from minisgl.utils.process import ParentWatch

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)


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


def _ready_then_spin_then_block(link: WorkerLink, spun) -> None:
    """A worker that reports ready, then runs one long step (CPU-bound, no beat of its own), then
    blocks (a hang: no CPU used)."""
    link.ready()
    end = time.monotonic() + 3
    while time.monotonic() < end:
        pass
    spun.set()
    time.sleep(60)


def test_a_long_step_keeps_beating_and_a_blocked_loop_falls_silent():
    ctx = mp.get_context("spawn")
    beats = Heartbeats(["stepping"], ctx)
    spun = ctx.Event()
    link = WorkerLink("stepping", ctx.Queue(), beats.of("stepping"))
    proc = ctx.Process(target=_ready_then_spin_then_block, args=(link, spun), daemon=True)
    proc.start()
    try:
        _wait(lambda: "stepping" in beats.silent())
        longest = 0.0
        while not spun.is_set():  # the step runs 3 s without the loop beating once
            longest = max(longest, beats.silent().get("stepping", 0.0))
            time.sleep(0.05)
        assert longest < 1.5, f"a busy step was silent for {longest:.1f} s"
        _wait(lambda: "stepping" in beats.silent_past(1.5))  # blocked: silent, as a hang must be
    finally:
        proc.kill()
        proc.join()
