from __future__ import annotations

from collections.abc import Callable

from minisgl.core.batch import Req

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

    def schedule(self, preempt: Callable[[Req], None], victim: Callable[[list[Req]], Req],
                 drafts: dict[int, list[int]] | None = None) -> tuple[list[Req], dict[int, list[int]]]:
        """The step's batch: every running request, less those preempted (`victim` picks, `preempt`
        frees) until the pages the batch needs beyond its reservations are in the pool; and the
        `drafts` (uid -> speculative tokens) it computes too: none when their pages do not fit
        (a draft never costs a preemption)."""
        reqs = list(self.running.values())
        drafts = drafts or {}
        if drafts and self._pages_needed(reqs, drafts) > self.cache.available:
            drafts = {}
        # A step adds one token a request, so at most one page each: with that many free, no need to count.
        while len(reqs) > self.cache.available and self._pages_needed(reqs, {}) > self.cache.available:
            loser = victim(reqs)
            preempt(loser)
            reqs.remove(loser)
        for r in reqs:
            r.device_len = r.seq_len + len(drafts.get(r.uid, ()))
            self.cache.allocate(r)
        self.cache.write_table()
        return reqs, drafts

    def _pages_needed(self, reqs: list[Req], drafts: dict[int, list[int]]) -> int:
        return sum(self.cache.pages_beyond_reservation(r, r.seq_len + len(drafts.get(r.uid, ()))) for r in reqs)
