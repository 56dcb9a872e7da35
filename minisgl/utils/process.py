"""What every worker process does the same way: report start-up, notice an orphaned state, beat;
and how a process ties a child's life to its own (`child_of_this_process`, `end_with`)."""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

from .gc_freeze import freeze_startup_objects
from .liveness import Heartbeat, WorkerLink

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Looked up here, not in the forked child, where only the call itself should run.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None


def end_with(parent: int, sig: int = signal.SIGTERM) -> None:
    """For `Popen(preexec_fn=...)`, in the child: receive `sig` when the thread that started it
    ends (Linux; elsewhere nothing). A parent already gone by now ends the child at once."""
    if _prctl is None:
        return
    _prctl(PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent:
        os._exit(1)


def child_of_this_process() -> functools.partial:
    """The `preexec_fn` that ties a child's life to this process (see end_with)."""
    return functools.partial(end_with, os.getpid())


def run_worker(link: WorkerLink, body: Callable[[Callable[[], None]], Any]) -> None:
    """Run `body(ready)` in a child process. `ready()` tells the launcher start-up is done; an
    exception is reported with its traceback instead of dying silently."""
    # Ctrl-C reaches the whole process group; the launcher alone decides how to shut down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm (weight loading) guards its bars with a multiprocessing lock: a named semaphore that a
    # worker stopped by SIGTERM (or killed) never releases, so the resource tracker warns of a
    # "leaked semaphore" when the server exits. A worker's bars are its own: a thread lock will do.
    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    try:
        body(lambda: (freeze_startup_objects(), link.ready()))
    except Exception:
        trace = traceback.format_exc()
        print(f"minisgl worker {link.name} failed:\n{trace}", file=sys.stderr, flush=True)
        link.failed(trace)
        raise SystemExit(1) from None


class ParentWatch:
    """True while the process that started us lives; workers exit when their launcher is gone.
    A worker's loop asks every turn, so the same call beats its heartbeat (minisgl.utils.liveness)."""

    def __init__(self, heartbeat: Heartbeat | None = None) -> None:
        self.parent = os.getppid()
        self.heartbeat = heartbeat

    def alive(self) -> bool:
        if self.heartbeat is not None:
            self.heartbeat.beat()
        return os.getppid() == self.parent
