"""FlashInfer's kernel compiles at run time, made visible.

FlashInfer compiles a kernel module the first time a machine uses it, unless `python -m
minisgl.prebuild` built it ahead of time (the image does): a minute or more each on a fresh GPU
machine (benchmark/NOTES.md), and nothing prints meanwhile, so a first start looks hung.
`report_builds` logs each such compile as it starts, a line a minute while it runs, and its time.
Under tensor parallelism every rank asks for the same module: the first to take FlashInfer's file
lock builds it and logs; the others wait on the lock, then find it built and pass quietly.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Iterator

from minisgl.utils import env
from minisgl.utils.logger import get_logger

logger = get_logger(__name__)

HEARTBEAT_S = 60.0


@contextlib.contextmanager
def heartbeat(what: str, every: float = HEARTBEAT_S) -> Iterator[None]:
    """Log `what` now, how long it has run every `every` seconds while the block runs, and at the
    end how long it took (or that it failed)."""
    start = time.perf_counter()
    finished = threading.Event()

    def beat() -> None:
        while not finished.wait(every):
            logger.info("... still %s (%.0f s)", what, time.perf_counter() - start)

    logger.info("%s", what)
    beater = threading.Thread(target=beat, name="heartbeat", daemon=True)
    beater.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        finished.set()
        beater.join()
        logger.info("%s: %s after %.1f s", what, "done" if ok else "failed", time.perf_counter() - start)


def report_builds() -> bool:
    """Report FlashInfer's compiles (`wrap_build` on its `JitSpec`), once a process; False where
    FlashInfer is not installed."""
    try:
        from flashinfer.jit.core import JitSpec
    except ImportError:
        return False
    wrap_build(JitSpec)
    return True


def wrap_build(spec_class: type) -> None:
    """Wrap `spec_class.build` (its instances have a `name`, an `is_compiled` and a
    `build(verbose, need_lock)`, as FlashInfer's JitSpec) so that a module not yet compiled is built
    inside `heartbeat`. FlashInfer calls `build` before every load of a module that is not
    prebuilt; where the library exists already that only asks ninja whether it is up to date, and
    passes through quietly. Wrapping twice changes nothing."""
    build = spec_class.build
    if getattr(build, "reports_builds", False):
        return

    @functools.wraps(build)
    def reported_build(spec, *args, **kwargs):
        # Built already, or no compiling allowed (the image sets FLASHINFER_DISABLE_JIT: there a
        # missing module is FlashInfer's error naming it, not a compile to wait for).
        if spec.is_compiled or env.FLASHINFER_DISABLE_JIT.get():
            return build(spec, *args, **kwargs)
        with heartbeat(f"compiling FlashInfer's {spec.name} kernels: first use on this machine, a minute or "
                       "more; cached for the next start (`python -m minisgl.prebuild` builds them ahead of time)"):
            return build(spec, *args, **kwargs)

    reported_build.reports_builds = True
    spec_class.build = reported_build
