"""Heartbeats of the worker processes, so a hung one is seen as well as a dead one.

A dead worker is easy to see (its process has exited); a hung one (stopped, deadlocked, stuck in
a GPU step or a collective) looks alive. Every worker therefore stamps the time into its own slot
of a small shared-memory array once per turn of its loop, and the launcher reads how long each
has been silent. A stamp is one float store into shared memory: no message, no lock, nothing per
token, so the hot path does not feel it. Workers whose loop waits for work wake at least every
few hundred milliseconds (their receive timeout), so an idle worker keeps beating too.

A long step is not a hang: while the loop is inside one step (a burst's prefill on a slow CPU), a
thread of the worker beats for it as long as the loop's thread keeps using CPU time
(`beat_while_busy`). A hung loop uses none (stopped, deadlocked, blocked on a dead peer's socket
or collective), so its silence still trips the watchdog; a GPU kernel that never ends while the
host thread spins in a synchronize looks busy, and --watchdog-timeout covers it only when the
host thread blocks.

`time.monotonic()` is CLOCK_MONOTONIC on Linux: one clock for every process of the machine, so
stamps written by a worker compare with the launcher's clock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from typing import Any

BUSY_CPU_S = 0.001  # CPU seconds the loop's thread must use between two looks to count as busy (a blocked one uses none)


class Heartbeat:
    """One worker's side: `beat()` says "still turning" (a float store, cheap enough for every turn)."""

    __slots__ = ("_stamps", "_slot")

    def __init__(self, stamps: Any, slot: int) -> None:
        self._stamps, self._slot = stamps, slot

    def beat(self) -> None:
        self._stamps[self._slot] = time.monotonic()

    def beat_while_busy(self, every: float = 0.5) -> None:
        """Beat from a daemon thread every `every` seconds in which the calling thread (the worker's
        loop) used CPU time: a long step keeps beating, a stopped or blocked loop falls silent."""
        try:
            clock = time.pthread_getcpuclockid(threading.get_ident())
        except (AttributeError, OSError):  # no per-thread CPU clock here: the loop's own beats only
            return

        def watch() -> None:
            used = time.clock_gettime(clock)
            while True:
                time.sleep(every)
                now = time.clock_gettime(clock)
                if now - used > BUSY_CPU_S:
                    self.beat()
                used = now

        threading.Thread(target=watch, name="heartbeat", daemon=True).start()


class Heartbeats:
    """The launcher's side: one slot per named worker, 0 until the worker's first beat (a worker
    still loading its model is not silent, it has not started beating)."""

    def __init__(self, names: list[str], ctx: Any) -> None:
        self.names = list(names)
        self._stamps = ctx.RawArray("d", len(self.names))  # zeroed; shared with the spawned children

    def of(self, name: str) -> Heartbeat:
        return Heartbeat(self._stamps, self.names.index(name))

    def silent(self) -> dict[str, float]:
        """Seconds since each beating worker's last beat."""
        now = time.monotonic()
        return {name: now - stamp for name, stamp in zip(self.names, self._stamps) if stamp > 0}

    def silent_past(self, timeout: float) -> dict[str, float]:
        """The workers silent for longer than `timeout` seconds, and for how long."""
        return {name: s for name, s in self.silent().items() if s > timeout}


@dataclass(frozen=True)
class WorkerLink:
    """What the launcher hands each worker process: its name, the queue where it reports start-up
    (or the traceback of a failed one), and its heartbeat."""

    name: str
    status: Queue
    heartbeat: Heartbeat | None = None

    def ready(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.beat()  # beating from here on: the watchdog covers it from now
            self.heartbeat.beat_while_busy()  # ready() runs on the worker's loop thread: that is the one watched
        self.status.put(("ready", self.name, ""))

    def failed(self, trace: str) -> None:
        self.status.put(("error", self.name, trace))


__all__ = ["Heartbeat", "Heartbeats", "WorkerLink"]
