"""Adapter loads off the scheduler's loop, so that loading one never stalls the requests decoding.

A load reserves its slot at once (LoraPool.reserve: refused there when the name is taken or no slot
is free); its slow part, reading the PEFT directory, checking it against the base model and
--max-lora-rank, converting and sharding it (LoraPool.read), runs in a thread of its own; the loop
then installs it into the slot between two steps (LoraPool.install: a few device copies).

Under tensor parallelism every rank reads its own shards, at its own pace. A load is installed, or
refused, once every rank has finished reading it: while any load is in flight the ranks exchange
which they have finished, once per step, so every rank puts the same adapter in the same slot in the
same step, and a reason found by any rank refuses it on all.

A read still under way after `read_timeout_s` (a hung network filesystem) refuses the load and gives
its slot back; the thread cannot be stopped, and what it reads if it ever ends is dropped.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass

import torch

from minisgl.distributed import all_gather_objects

from .pool import LoraPool, ReadAdapter

# Reading an adapter from a local disk takes well under a second for ranks up to 64; a read not done
# in this long is stuck (a hung filesystem), not slow, and would hold its slot for good.
READ_TIMEOUT_S = 300.0


@dataclass
class _Load:
    name: str
    path: str
    read: Future  # of a ReadAdapter
    started: float  # time.monotonic() at the start


class AdapterLoads:
    def __init__(self, pool: LoraPool, read_timeout_s: float = READ_TIMEOUT_S):
        self.pool = pool
        self.read_timeout_s = read_timeout_s
        self.pending: dict[int, _Load] = {}  # by the id of the request that asked for the load

    def start(self, uid: int, name: str, path: str) -> None:
        """Begin loading `path` as `name`: a ValueError now when no slot can take it."""
        self.pool.reserve(name)
        read: Future = Future()
        # A daemon thread: a read that never ends (a hung network filesystem) must not keep the
        # process from exiting.
        threading.Thread(target=self._read, args=(read, name, path), name=f"lora-load-{name}", daemon=True).start()
        self.pending[uid] = _Load(name, path, read, time.monotonic())

    def _read(self, read: Future, name: str, path: str) -> None:
        if self.pool.device.type == "cuda":
            # A new thread's current CUDA device is the first GPU: pinning the shards there would open
            # a CUDA context (and take memory) on a GPU that another rank owns.
            torch.cuda.set_device(self.pool.device)
        try:
            read.set_result(self.pool.read(name, path))
        except ValueError as e:  # the adapter cannot be served here: the reason, as load_adapter words it
            read.set_exception(e)
        except Exception as e:  # noqa: BLE001 - e.g. a corrupt safetensors file: the load fails, not the loop
            read.set_exception(ValueError(f"LoRA adapter {name!r} ({path}): cannot be read: {e}"))

    def loading(self, name: str) -> bool:
        return any(load.name == name for load in self.pending.values())

    def wait(self, timeout: float) -> None:
        """Until a read finishes or `timeout` seconds pass (an idle loop waits here, not spinning)."""
        wait([load.read for load in self.pending.values()], timeout=timeout, return_when=FIRST_COMPLETED)

    def finish(self) -> list[tuple[int, str, str, str | None]]:
        """Install the loads that every rank has read (or give their slots back, for one that any rank
        refused): (uid, name, path, None or the reason) of each, in the same order on every rank."""
        mine = {uid: outcome for uid, load in self.pending.items() if (outcome := self._outcome(load)) is not _READING}
        ranks = all_gather_objects(mine)
        # Done: read by every rank, or refused by any (the others' reads are then dropped).
        done = set.intersection(*(set(r) for r in ranks)) | {uid for r in ranks for uid, why in r.items() if why}
        results = []
        for uid in sorted(done):
            load = self.pending.pop(uid)
            reason = next((r[uid] for r in ranks if r.get(uid)), None)
            if reason is None:
                read: ReadAdapter = load.read.result()
                self.pool.install(load.name, read)
            else:
                self.pool.unreserve(load.name)
            results.append((uid, load.name, load.path, reason))
        return results

    def _outcome(self, load: _Load) -> str | None | object:
        """None once read, the reason once refused (a timeout is one), else _READING."""
        if load.read.done():
            return _reason(load.read)
        if time.monotonic() - load.started > self.read_timeout_s:
            return (f"LoRA adapter {load.name!r} ({load.path}): not read within {self.read_timeout_s:g} s "
                    "(a hung filesystem?); the load is abandoned")
        return _READING


_READING = object()  # a read still under way


def _reason(read: Future) -> str | None:
    error = read.exception()
    return None if error is None else str(error)
