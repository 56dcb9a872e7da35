"""LoRA adapters loaded and unloaded while serving (LoraUpdateMsg), each answering the request that
asked with one output: finish_reason stop, or error with the reason (nothing changes then).

A load is read off the loop (minisgl.lora.loader) and answered in the step that installs it, so the
load route returns once requests may name the adapter; until then it is unknown to them. An unload
is applied at once, and refused while requests use the adapter or while it is still loading (the
load would otherwise install an adapter that was asked away).
"""

from __future__ import annotations

from minisgl.lora import AdapterLoads, LoraPool
from minisgl.message import StepOutput
from minisgl.utils.logger import get_logger

from .cache import CacheManager

logger = get_logger(__name__)


class AdapterUpdates:
    def __init__(self, pool: LoraPool | None, cache: CacheManager):
        self.pool, self.cache = pool, cache
        self.loads = AdapterLoads(pool) if pool is not None else None

    @property
    def pending(self) -> bool:
        return bool(self.loads and self.loads.pending)

    def update(self, uid: int, name: str, path: str | None) -> StepOutput | None:
        """Load `path` as `name` (None: unload it). The answer now, or None for a load under way
        (`finished` answers it)."""
        pool = self.pool
        try:
            if pool is None:
                raise ValueError("LoRA is off on this server (start it with --max-loras or --lora-modules)")
            if path is not None:
                self.loads.start(uid, name, path)
                return None
            if self.loads.loading(name):
                raise ValueError(f"LoRA adapter {name!r} is still loading; unload it once its load has finished")
            if name not in pool.names:
                raise ValueError(f"unknown LoRA adapter {name!r}")
            load_id = pool.load_ids[pool.slot(name)]
            pool.unload(name)
            # Its cached KV can never match again (a reload is a new namespace): free it now.
            self.cache.free_pages += self.cache.prefix_cache.drop_namespace(load_id)
        except ValueError as e:
            return StepOutput(uid, None, "error", str(e))
        logger.info("LoRA adapter %r unloaded", name)
        return StepOutput(uid, None, "stop")

    def finished(self, idle: bool) -> list[StepOutput]:
        """The answers of the loads installed (or refused) now, between two steps. `idle`: nothing else
        to do, so wait a little for a read to finish rather than spin."""
        if not self.pending:
            return []
        if idle:
            self.loads.wait(0.01)
        outputs = []
        for uid, name, path, reason in self.loads.finish():
            if reason is None:
                logger.info("LoRA adapter %r loaded from %s", name, path)
                outputs.append(StepOutput(uid, None, "stop"))
            else:
                outputs.append(StepOutput(uid, None, "error", reason))
        return outputs
