"""Heartbeats of the worker processes, so a hung one is seen as well as a dead one.

A dead worker is easy to see (its process has exited); a hung one (stopped, deadlocked, stuck in
a GPU step or a collective) looks alive. Every worker therefore stamps the time into its own slot
of a small shared-memory array once per turn of its loop, and the launcher reads how long each
has been silent. A stamp is one float store into shared memory: no message, no lock, nothing per
token, so the hot path does not feel it. Workers whose loop waits for work wake at least every
few hundred milliseconds (their receive timeout), so an idle worker keeps beating too.

`time.monotonic()` is CLOCK_MONOTONIC on Linux: one clock for every process of the machine, so
stamps written by a worker compare with the launcher's clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from typing import Any


class Heartbeat:
    """One worker's side: `beat()` says "still turning" (a float store, cheap enough for every turn)."""

    __slots__ = ("_stamps", "_slot")

    def __init__(self, stamps: Any, slot: int) -> None:
        self._stamps, self._slot = stamps, slot

    def beat(self) -> None:
        self._stamps[self._slot] = time.monotonic()


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
        self.status.put(("ready", self.name, ""))

    def failed(self, trace: str) -> None:
        self.status.put(("error", self.name, trace))


__all__ = ["Heartbeat", "Heartbeats", "WorkerLink"]
