"""KV page bookkeeping: free pages, the prefix cache, and per-request reservations.

Admission reserves a request's pages up front: the rest of its prompt plus a decode headroom
(`decode_reserve_tokens`, at most its max_tokens). A request that outgrows its reservation takes
pages from the unreserved pool as it decodes; when that pool is empty the scheduler preempts a
request (Scheduler._preempt) rather than stall. With `decode_reserve_tokens` None (--admission
reserve) the headroom is the whole max_tokens, so a running request never finds the pool empty
and nothing is ever preempted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from minisgl.core.batch import Req
from minisgl.core.host import to_device
from minisgl.kvcache import BasePrefixCache


@dataclass
class ReqPages:
    pages: list[int] = field(default_factory=list)
    shared: int = 0  # leading pages that belong to the prefix cache (matched, locked)
    reserved: int = 0  # pages promised but not yet allocated (the prompt's rest, the decode headroom)
    handle: Any = None
    promised: int = 0  # pages and reservation together at admission (what trim restores the reservation to)


class CacheManager:
    def __init__(self, num_pages: int, page_size: int, prefix_cache: BasePrefixCache,
                 page_table: torch.Tensor, max_pages_per_req: int, decode_reserve_tokens: int | None = None):
        self.page_size = page_size
        self.decode_reserve_tokens = decode_reserve_tokens  # None: all of max_tokens
        self.num_pages = num_pages
        self.prefix_cache = prefix_cache
        self.page_table = page_table
        self.max_pages_per_req = max_pages_per_req
        self.free_pages = list(range(num_pages - 1, -1, -1))
        # The least pages an eviction frees: a radix eviction walks the whole tree, and once the
        # cache is full a leaf at a time would pay that walk in almost every allocation.
        self.evict_batch = max(1, num_pages // 64)
        self.reserved = 0
        self.owned: dict[int, ReqPages] = {}
        # Page-table rows to write, (row, first page, pages), until write_table(): a batch's writes
        # go to the device together.
        self.unwritten: list[tuple[int, int, list[int]]] = []

    # -- capacity -----------------------------------------------------------------------------

    @property
    def available(self) -> int:
        return len(self.free_pages) + self.prefix_cache.evictable_pages - self.reserved

    @property
    def used_pages(self) -> int:
        """Pages held by running requests (not counting ones only the prefix cache keeps)."""
        return self.num_pages - len(self.free_pages) - self.prefix_cache.evictable_pages

    def pages_for(self, tokens: int) -> int:
        return -(-tokens // self.page_size)

    # -- request life-cycle -------------------------------------------------------------------

    def admission_need(self, req: Req, shared_pages: int) -> int:
        """Pages `req` must have reserved to be admitted, beyond the `shared_pages` it found cached:
        what its prefill computes (the prompt, or on resume every token so far) plus the decode
        headroom."""
        decode = req.sampling_params.max_tokens - len(req.output_ids)
        if self.decode_reserve_tokens is not None:
            decode = min(decode, self.decode_reserve_tokens)
        return min(self.pages_for(req.prefill_len + decode), self.max_pages_per_req) - shared_pages

    def fits(self, req: Req) -> bool:
        """Whether try_admit would admit `req` now (nothing is changed)."""
        _, shared = self.prefix_cache.match(_reusable(req), req.lora_load_id)
        return self.admission_need(req, len(shared)) <= self.available

    def try_admit(self, req: Req) -> bool:
        """Match the cached prefix and reserve the rest; False if memory is short now."""
        handle, shared = self.prefix_cache.match(_reusable(req), req.lora_load_id)
        self.prefix_cache.lock(handle)
        need = self.admission_need(req, len(shared))
        if need > self.available:
            self.prefix_cache.unlock(handle)
            return False
        self.reserved += need
        self.owned[req.uid] = ReqPages(pages=list(shared), shared=len(shared), reserved=need, handle=handle,
                                       promised=len(shared) + need)
        req.cached_len = len(shared) * self.page_size
        if shared:
            self.unwritten.append((req.table_idx, 0, list(shared)))
        return True

    def pages_beyond_reservation(self, req: Req, tokens: int) -> int:
        """Pages `req` must take from the unreserved pool to hold `tokens` tokens."""
        state = self.owned[req.uid]
        return max(0, self.pages_for(tokens) - len(state.pages) - state.reserved)

    def allocate(self, req: Req) -> None:
        """Give `req` pages up to its device_len, from its reservation first, then from the
        unreserved pool (the caller has made sure it has them: pages_beyond_reservation), in the
        page table once write_table runs."""
        state = self.owned[req.uid]
        need = self.pages_for(req.device_len) - len(state.pages)
        if need <= 0:
            return
        from_reservation = min(need, state.reserved)
        if need - from_reservation > self.available:
            raise RuntimeError(f"request {req.uid} needs {need - from_reservation} KV pages the pool does not have")
        if len(self.free_pages) < need:
            self.free_pages += self.prefix_cache.evict(max(need - len(self.free_pages), self.evict_batch))
        new = [self.free_pages.pop() for _ in range(need)]
        self.unwritten.append((req.table_idx, len(state.pages), new))
        state.pages += new
        state.reserved -= from_reservation
        self.reserved -= from_reservation

    def trim(self, req: Req, tokens: int) -> None:
        """Free `req`'s pages past those `tokens` tokens need (speculative decoding's rejected
        drafts); those its reservation had given return to it, so the pool's bookkeeping is as if
        the drafts never were."""
        state = self.owned[req.uid]
        keep = max(self.pages_for(tokens), state.shared)
        extra = state.pages[keep:]
        if not extra:
            return
        del state.pages[keep:]
        self.free_pages += extra
        back = min(len(extra), max(0, state.promised - len(state.pages) - state.reserved))
        state.reserved += back
        self.reserved += back

    def release(self, req: Req) -> None:
        """Hand the request's computed full pages to the prefix cache and free the rest."""
        state = self.owned.pop(req.uid)
        self.reserved -= state.reserved
        full = min(req.cached_len // self.page_size, len(state.pages))
        tokens = req.all_ids[: full * self.page_size]
        already = self.prefix_cache.insert(tokens, state.pages[:full], req.lora_load_id)
        # Pages the cache had before (besides our own shared ones) and the partial tail are ours to free.
        self.free_pages += state.pages[state.shared : already] + state.pages[full:]
        self.prefix_cache.unlock(state.handle)

    def write_table(self) -> None:
        """Put the pages given since the last call into the page table (row r's token t at slot
        page_table[r, t]): one copy of positions and slots and one scatter, where a copy a request
        costs host time on CUDA (a pinned buffer and a launch each; at batch 256 with
        16-token pages ~16 requests a step cross into a new page). The schedulers call it once a
        batch is picked, before it runs."""
        if not self.unwritten:
            return
        p, width = self.page_size, self.page_table.shape[1]
        starts = np.array([row * width + (first + k) * p for row, first, pages in self.unwritten
                           for k in range(len(pages))], dtype=np.int64)  # each page's first position
        pages = np.array([page for _, _, pages in self.unwritten for page in pages], dtype=np.int64)
        self.unwritten = []
        offsets = np.arange(p, dtype=np.int64)
        n = starts.size * p
        both = to_device(np.concatenate([(starts[:, None] + offsets).ravel(), (pages[:, None] * p + offsets).ravel()]),
                         self.page_table.device)
        self.page_table.view(-1)[both[:n]] = both[n:].to(self.page_table.dtype)


def _reusable(req: Req) -> list[int]:
    """The tokens whose cached KV `req` may reuse: all but the last (its logits give the next output
    token), none when it scores its prompt (every position's logits are wanted)."""
    return [] if req.wants_prompt_logprobs else req.all_ids[: req.prefill_len - 1]
