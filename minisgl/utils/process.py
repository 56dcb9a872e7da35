"""What every worker process does the same way: report start-up, notice an orphaned state."""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing.queues import Queue
from typing import Any

from .gc_freeze import freeze_startup_objects


def run_worker(name: str, status: Queue, body: Callable[[Callable[[], None]], Any]) -> None:
    """Run `body(ready)` in a child process. `ready()` tells the launcher start-up is done; an
    exception is reported with its traceback instead of dying silently."""
    # Ctrl-C reaches the whole process group; the launcher alone decides how to shut down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        body(lambda: (freeze_startup_objects(), status.put(("ready", name, ""))))
    except Exception:
        trace = traceback.format_exc()
        print(f"minisgl worker {name} failed:\n{trace}", file=sys.stderr, flush=True)
        status.put(("error", name, trace))
        raise SystemExit(1) from None


class ParentWatch:
    """True while the process that started us lives; workers exit when their launcher is gone."""

    def __init__(self) -> None:
        self.parent = os.getppid()

    def alive(self) -> bool:
        return os.getppid() == self.parent
