"""The KV page bookkeeping (minisgl/scheduler/cache.py): the pages a request is given reach the page
table, where the attention reads them, when the scheduler calls write_table once the batch is picked
(one copy for the whole batch): row r's token t at slot page * page_size + t % page_size."""

from __future__ import annotations

import torch

from minisgl.core.batch import Req
from minisgl.core.params import SamplingParams
from minisgl.kvcache import create_prefix_cache
from minisgl.scheduler.cache import CacheManager

PAGE = 4


def manager(pages: int = 64, rows: int = 4, width: int = 64) -> CacheManager:
    return CacheManager(pages, PAGE, create_prefix_cache("radix", PAGE), torch.full((rows, width), -1, dtype=torch.int32),
                        width // PAGE)


def admitted(cache: CacheManager, uid: int, row: int, prompt: list[int], max_tokens: int = 8) -> Req:
    req = Req(uid=uid, prompt_ids=prompt, sampling_params=SamplingParams(max_tokens=max_tokens))
    req.table_idx = row
    assert cache.try_admit(req)
    return req


def slots_of(cache: CacheManager, req: Req) -> list[int]:
    """Where the request's tokens go, by its pages (what the table must say)."""
    pages = cache.owned[req.uid].pages
    return [pages[t // PAGE] * PAGE + t % PAGE for t in range(len(pages) * PAGE)]


def test_pages_reach_the_table_at_write_table_for_every_request_at_once():
    cache = manager()
    a, b = admitted(cache, 1, 0, list(range(10))), admitted(cache, 2, 2, list(range(5)))
    for req in (a, b):
        req.device_len = req.prompt_len
        cache.allocate(req)
    assert torch.all(cache.page_table == -1), "nothing is written before write_table"
    cache.write_table()
    for req in (a, b):
        want = slots_of(cache, req)
        assert cache.page_table[req.table_idx, : len(want)].tolist() == want
    assert torch.all(cache.page_table[1] == -1) and torch.all(cache.page_table[3] == -1)
    assert cache.unwritten == []


def test_a_decode_step_adds_only_the_new_page_after_the_old_ones():
    cache = manager()
    req = admitted(cache, 1, 1, list(range(PAGE)))  # the prompt fills one page exactly
    req.device_len = PAGE
    cache.allocate(req)
    cache.write_table()
    first = cache.page_table[1, :PAGE].tolist()
    req.device_len = PAGE + 1  # the next token starts a second page
    cache.allocate(req)
    cache.write_table()
    assert cache.page_table[1, :PAGE].tolist() == first
    assert cache.page_table[1, : 2 * PAGE].tolist() == slots_of(cache, req)


def test_prefix_pages_shared_at_admission_are_written_too():
    cache = manager()
    prompt = list(range(3 * PAGE + 1))
    first = admitted(cache, 1, 0, prompt)
    first.device_len = first.prompt_len
    cache.allocate(first)
    cache.write_table()
    first.cached_len = first.prompt_len
    cache.release(first)  # its full pages go to the prefix cache
    again = admitted(cache, 2, 3, prompt)
    assert again.cached_len == 3 * PAGE
    cache.write_table()
    assert cache.page_table[3, : 3 * PAGE].tolist() == slots_of(cache, again)[: 3 * PAGE]


def test_trimming_rejected_drafts_gives_their_pages_back_as_they_were_taken():
    """Speculative decoding's trim: pages past what the kept tokens need go back, to the request's
    reservation as far as they came from it and to the pool beyond, so the bookkeeping is as if
    the drafts never were."""
    cache = manager(pages=64)
    cache.decode_reserve_tokens = 4  # a reservation of prompt + 4 tokens: 3 pages for a 6-token prompt
    req = admitted(cache, 1, 0, list(range(6)), max_tokens=40)
    before = (len(cache.free_pages), cache.reserved, cache.available)
    assert cache.owned[1].reserved == 3
    req.device_len = 6 + 14  # the prompt's token, then drafts: 5 pages, 2 beyond the reservation
    cache.allocate(req)
    assert cache.owned[1].reserved == 0 and len(cache.owned[1].pages) == 5
    cache.trim(req, 7)  # two drafts kept: 7 tokens, 2 pages
    state = cache.owned[1]
    assert len(state.pages) == 2 and state.reserved == 1  # the reservation's third page is promised again
    assert (len(cache.free_pages), cache.reserved, cache.available) == (before[0] - 2, before[1] - 2, before[2])
    cache.trim(req, 7)  # nothing past them any more: nothing changes
    assert len(cache.owned[1].pages) == 2 and cache.owned[1].reserved == 1


def test_a_full_prefix_cache_gives_back_a_batch_of_pages_not_one_per_allocation():
    """Once finished prompts hold every page, an allocation evicts at least 1/64 of the pool: an
    eviction walks the whole radix tree, and a page at a time would walk it in almost every
    allocation (at batch 256 on an H200, ~900 walks of 1-2 ms a run)."""
    pages = 256
    cache = manager(pages=pages, rows=1, width=64)
    for uid in range(pages):  # one-page prompts, finished and cached: a leaf is one page
        req = admitted(cache, uid, 0, [uid * 100 + t for t in range(PAGE)], max_tokens=1)
        req.device_len = req.cached_len = req.prompt_len
        cache.allocate(req)
        cache.release(req)
    assert cache.free_pages == [] and cache.prefix_cache.cached_pages == pages

    new = admitted(cache, 999, 0, [7] * PAGE, max_tokens=1)
    new.device_len = PAGE
    cache.allocate(new)
    assert len(cache.free_pages) >= pages // 64 - 1, "one eviction freed a batch, the rest stay free"
    assert cache.prefix_cache.cached_pages == pages - 1 - len(cache.free_pages)
