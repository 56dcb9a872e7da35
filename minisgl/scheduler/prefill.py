"""Which waiting requests get their prompt computed next, and how much of it (chunked prefill)."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import torch

from minisgl.core import Req

from .cache import CacheManager
from .table import RequestTable

if TYPE_CHECKING:
    from .scheduler import SchedulerStats


class PrefillManager:
    def __init__(self, cache: CacheManager, table: RequestTable, token_pool: torch.Tensor, max_prefill_length: int,
                 stats: SchedulerStats):
        self.stats = stats
        self.cache = cache
        self.table = table
        self.token_pool = token_pool
        self.max_prefill_length = max_prefill_length
        self.waiting: deque[Req] = deque()
        # Admitted requests whose prompt is only partly computed; they go first next time.
        self.chunked: list[Req] = []

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.chunked)

    def schedule(self) -> list[Req]:
        budget = self.max_prefill_length
        picked: list[Req] = []
        for req in list(self.chunked):
            if budget == 0:
                break
            budget -= self._advance(req, budget)
            picked.append(req)
        while budget > 0 and self.waiting and self.table.num_free > 0:
            req = self.waiting[0]
            req.table_idx = self.table.acquire()
            if not self.cache.try_admit(req):
                self.table.release(req.table_idx)
                break  # first come, first served: nobody overtakes the head of the queue
            self.waiting.popleft()
            self.stats.prompt_tokens += req.prompt_len
            self.stats.prefix_hit_tokens += req.cached_len
            ids = torch.tensor(req.prompt_ids, dtype=torch.int32)
            if self.token_pool.is_cuda:  # asynchronous only from pinned memory
                ids = ids.pin_memory()
            self.token_pool[req.table_idx, : req.prompt_len] = ids.to(self.token_pool.device, non_blocking=True)
            self.chunked.append(req)
            budget -= self._advance(req, budget)
            picked.append(req)
        self.cache.write_table()
        return picked

    def _advance(self, req: Req, budget: int) -> int:
        chunk = min(req.seq_len - req.cached_len, budget)
        req.device_len = req.cached_len + chunk
        self.cache.allocate(req)
        self.stats.computed_prompt_tokens += chunk
        return chunk

    def launched(self) -> None:
        """Called once a prefill batch is launched: finished prompts leave the chunked list."""
        self.chunked = [r for r in self.chunked if r.cached_len < r.prompt_len]
