from __future__ import annotations

from minisgl.core import Req

from .cache import CacheManager


class DecodeManager:
    """Requests whose prompt is done: each step computes one more token for all of them."""

    def __init__(self, cache: CacheManager):
        self.cache = cache
        self.running: dict[int, Req] = {}

    @property
    def has_work(self) -> bool:
        return bool(self.running)

    def add(self, req: Req) -> None:
        self.running[req.uid] = req

    def remove(self, req: Req) -> None:
        self.running.pop(req.uid, None)

    def schedule(self) -> list[Req]:
        reqs = list(self.running.values())
        for r in reqs:
            r.device_len = r.seq_len
            self.cache.allocate(r)
        self.cache.write_table()
        return reqs
