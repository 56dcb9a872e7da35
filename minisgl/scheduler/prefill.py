"""Which waiting requests get their prompt computed next, and how much of it (chunked prefill)."""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from typing import TYPE_CHECKING

import numpy as np
import torch

from minisgl.core.batch import Req
from minisgl.core.host import ragged_arange, to_device

from .cache import CacheManager
from .table import RequestTable

if TYPE_CHECKING:
    from .scheduler import SchedulerStats


class PrefillManager:
    def __init__(self, cache: CacheManager, table: RequestTable, token_pool: torch.Tensor, max_prefill_length: int,
                 stats: SchedulerStats, by_priority: bool = False, max_scored_positions: int = 256,
                 delay_steps: int = 0):
        self.stats = stats
        # Gathering (gathered()): while nearly every row decodes, freed rows wait for one prefill of
        # `gather` of them (a sixteenth of the table), for at most `delay_steps` decode steps.
        self.delay_steps = delay_steps
        self.gather = max(1, table.rows // 16)
        self.deferred = 0
        # Prompt positions a prefill batch scores (Req.wants_prompt_logprobs) at most: each is a row
        # of float32 logits over the vocabulary, and the engine reserves room for as many rows as
        # it runs requests (Engine._runtime_reserve), not for a whole chunk's.
        self.max_scored_positions = max_scored_positions
        self.scoring_left = max_scored_positions
        self.cache = cache
        self.table = table
        self.token_pool = token_pool
        self.max_prefill_length = max_prefill_length
        self.by_priority = by_priority
        # Waiting requests in the order they are admitted: by arrival (fcfs), or by priority then
        # arrival. A preempted request keeps its arrival, so it goes back to the head of its class.
        self.waiting: list[Req] = []
        # Admitted requests whose prompt is only partly computed; they go first next time.
        self.chunked: list[Req] = []
        # uids admitted for the first time, until the stats reporter reads them (bounded: the offline
        # LLM has no reporter, and a reporter reads far more often than this many arrive).
        self.admitted: deque[int] = deque(maxlen=1 << 16)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.chunked)

    def gathered(self) -> bool:
        """Whether a prefill batch is worth a step while requests decode. A prefill step costs the host
        about the same whatever its size (its forward's launches are eager), so when the decode batch
        holds nearly every row, requests queue beyond the free rows, and each decode step frees one or
        two, prefilling every freed row at once spends a prefill step per decode step or two. Then the
        queue waits until a batch's worth of rows is free, for at most `delay_steps` decode steps; it
        waits anyway, for rows. A short queue (under a batch's worth) is prefilled at once: its
        requests' time to first token would only grow."""
        if self.chunked or self.delay_steps == 0:
            return True
        free = self.table.num_free
        if free == 0:
            return False  # no row to prefill into: nothing to wait for yet
        if free >= self.gather or len(self.waiting) < self.gather or self.deferred >= self.delay_steps:
            return True  # (the count restarts once a prefill is launched, not if none is admitted)
        self.deferred += 1
        return False

    def order(self, req: Req) -> tuple[int, int]:
        """The sort key of admission (smallest first) and, reversed, of the choice of a victim."""
        return (req.sampling_params.priority if self.by_priority else 0, req.arrival)

    def enqueue(self, req: Req) -> None:
        bisect.insort(self.waiting, req, key=self.order)

    def schedule(self) -> list[Req]:
        budget = self.max_prefill_length
        self.scoring_left = self.max_scored_positions
        picked: list[Req] = []
        admitted: list[Req] = []
        for req in list(self.chunked):
            if budget == 0:
                break
            chunk = self._chunk(req, budget)
            if chunk == 0:
                continue  # a prompt to score: this batch scores no more, the next one goes on
            budget -= self._advance(req, chunk)
            picked.append(req)
        while budget > 0 and self.waiting and self.table.num_free > 0:
            req = self.waiting[0]
            if req.prompt_len + len(req.output_ids) < req.prefill_len:
                break  # preempted while its last token was in flight: it resumes once that token is read
            if req.wants_prompt_logprobs and self.scoring_left == 0:
                break  # its prompt is scored from the next batch on
            req.table_idx = self.table.acquire()
            if not self.cache.try_admit(req):
                self.table.release(req.table_idx)
                break  # nobody overtakes the head of the queue
            self.waiting.pop(0)
            if req.preemptions == 0:  # a resumed request's prompt was counted at its first admission
                self.stats.prompt_tokens += req.prompt_len
                self.stats.prefix_hit_tokens += req.cached_len
                req.prefix_hit = req.cached_len
                self.admitted.append(req.uid)
            admitted.append(req)
            self.chunked.append(req)
            budget -= self._advance(req, self._chunk(req, budget))
            picked.append(req)
        self._write_token_ids(admitted)
        self.cache.write_table()
        return picked

    def _write_token_ids(self, reqs: list[Req]) -> None:
        """The admitted requests' tokens into their token-pool rows, all in one host-to-device copy:
        a pinned tensor and a copy a request cost the host more than the batch's one (benchmark/NOTES.md)."""
        if not reqs:
            return
        lens = np.fromiter((r.prefill_len for r in reqs), dtype=np.int64, count=len(reqs))
        rows = np.fromiter((r.table_idx for r in reqs), dtype=np.int64, count=len(reqs))
        n = int(lens.sum())
        flat = np.repeat(rows * self.token_pool.shape[1], lens) + ragged_arange(lens)
        ids = np.fromiter(itertools.chain.from_iterable(r.all_ids[: r.prefill_len] for r in reqs), dtype=np.int64,
                          count=n)
        dev = to_device(np.concatenate([flat, ids]), self.token_pool.device)
        self.token_pool.view(-1)[dev[:n]] = dev[n:].to(torch.int32)

    def _chunk(self, req: Req, budget: int) -> int:
        """How many of `req`'s tokens this batch computes: the rest, within the batch's token budget
        and, for a prompt it scores, within the positions left to score."""
        chunk = min(req.seq_len - req.cached_len, budget)
        if req.wants_prompt_logprobs:
            chunk = min(chunk, self.scoring_left)
            self.scoring_left -= chunk
        return chunk

    def _advance(self, req: Req, chunk: int) -> int:
        req.device_len = req.cached_len + chunk
        self.cache.allocate(req)
        self.stats.computed_prompt_tokens += chunk
        return chunk

    def launched(self) -> None:
        """Called once a prefill batch is launched: finished prefills leave the chunked list."""
        self.chunked = [r for r in self.chunked if r.cached_len < r.prefill_len]
        self.deferred = 0
