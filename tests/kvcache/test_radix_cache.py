"""RadixPrefixCache: page-granular match/insert, splits, locks, LRU eviction, and a randomized
comparison against a plain reference model of what a prefix cache must return."""

from __future__ import annotations

import random

import pytest

from minisgl.kvcache import NaivePrefixCache, RadixPrefixCache


def test_match_is_page_granular():
    cache = RadixPrefixCache(page_size=2)
    assert cache.insert([1, 2, 3, 4, 5, 6], [10, 11, 12]) == 0
    assert cache.match([1, 2, 3, 4, 5, 6, 7])[1] == [10, 11, 12]
    assert cache.match([1, 2, 3, 9])[1] == [10]  # diverges inside page 2: only page 1 matches
    assert cache.match([1, 2, 3])[1] == [10]  # a partial page never matches
    assert cache.match([7, 7])[1] == []


def test_insert_reports_pages_already_cached_and_splits():
    cache = RadixPrefixCache(page_size=1)
    assert cache.insert([1, 2, 3, 4], [10, 11, 12, 13]) == 0
    assert cache.insert([1, 2, 7, 8], [20, 21, 22, 23]) == 2  # [1, 2] was there: pages 20, 21 stay the caller's
    assert cache.cached_pages == 6
    assert cache.match([1, 2, 7, 8])[1] == [10, 11, 22, 23]
    assert cache.match([1, 2, 3, 4])[1] == [10, 11, 12, 13]


def test_locked_pages_are_not_evicted_and_lru_goes_first():
    cache = RadixPrefixCache(page_size=1)
    cache.insert([1, 2], [10, 11])
    cache.insert([5, 6], [50, 51])
    cache.insert([8, 9], [80, 81])
    handle, pages = cache.match([1, 2])
    cache.lock(handle)
    assert cache.evictable_pages == 4
    cache.match([5, 6])  # touch: now [8, 9] is the least recently used
    assert cache.evict(1) == [80, 81]  # a whole leaf goes at once
    assert cache.evict(10) == [50, 51]  # [1, 2] is locked
    assert cache.evictable_pages == 0
    cache.unlock(handle)
    assert cache.evictable_pages == 2
    assert sorted(cache.evict(10)) == [10, 11]
    assert cache.cached_pages == 0


def test_split_keeps_lock_counts():
    cache = RadixPrefixCache(page_size=1)
    cache.insert([1, 2, 3, 4], [10, 11, 12, 13])
    handle, _ = cache.match([1, 2, 3, 4])
    cache.lock(handle)
    cache.insert([1, 2, 9], [20, 21, 22])  # splits the locked edge after [1, 2]
    assert cache.evictable_pages == 1  # only the new leaf [9]
    assert cache.evict(10) == [22]
    cache.unlock(handle)
    assert cache.evictable_pages == 4


def test_naive_cache_keeps_nothing():
    cache = NaivePrefixCache(page_size=4)
    assert cache.insert([1] * 8, [3, 4]) == 2
    assert cache.match([1] * 8)[1] == []
    assert cache.evict(5) == [] and cache.cached_pages == 0


class ReferenceCache:
    """The obvious model: a dict from each cached page-aligned prefix to its page."""

    def __init__(self, page_size):
        self.p = page_size
        self.page_of: dict[tuple, int] = {}

    def match(self, tokens):
        pages = []
        for end in range(self.p, len(tokens) + 1, self.p):
            key = tuple(tokens[:end])
            if key not in self.page_of:
                break
            pages.append(self.page_of[key])
        return pages

    def insert(self, tokens, pages):
        already = len(self.match(tokens))
        for i in range(already, len(pages)):
            self.page_of[tuple(tokens[: (i + 1) * self.p])] = pages[i]
        return already

    def drop(self, pages):
        self.page_of = {k: v for k, v in self.page_of.items() if v not in set(pages)}


@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_randomized_against_reference(page_size):
    rng = random.Random(page_size)
    cache, ref = RadixPrefixCache(page_size), ReferenceCache(page_size)
    next_page = 0
    locked = []
    for _ in range(600):
        tokens = [rng.randint(0, 3) for _ in range(rng.randint(0, 6) * page_size)]
        op = rng.random()
        if op < 0.45:
            pages = list(range(next_page, next_page + len(tokens) // page_size))
            next_page += len(pages)
            assert cache.insert(tokens, pages) == ref.insert(tokens, pages)
        elif op < 0.75:
            handle, pages = cache.match(tokens)
            assert pages == ref.match(tokens)
            if rng.random() < 0.3:
                cache.lock(handle)
                locked.append((handle, pages))
        elif op < 0.85 and locked:
            cache.unlock(locked.pop(rng.randrange(len(locked)))[0])
        else:
            freed = cache.evict(rng.randint(1, 4))
            protected = {p for _, pages in locked for p in pages}
            assert not protected & set(freed), "evicted a locked page"
            ref.drop(freed)
        # Bookkeeping stays consistent with the reference's content.
        assert cache.cached_pages == len(ref.page_of)
    for handle, _ in locked:
        cache.unlock(handle)
    assert cache.evictable_pages == cache.cached_pages
    assert len(cache.evict(10**9)) == len(ref.page_of)


@pytest.mark.slow
def test_host_memory_per_cached_token_is_small_and_freed_by_eviction():
    """The tree lives as long as its KV pages, so its host memory is the scheduler's growth per
    unique request until the pool fills (benchmark/NOTES.md has the figure). Tokens and pages are C
    int32 arrays: under 16 bytes per cached token, node overhead included (tuples of Python ints
    cost about 50), and eviction gives it all back."""
    import gc
    import random
    import tracemalloc

    rng = random.Random(0)
    cache = RadixPrefixCache(16)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for r in range(2000):
        tokens = [rng.randrange(1000, 150_000) for _ in range(64)]
        cache.insert(tokens, list(range(4 * r, 4 * r + 4)))
        del tokens
    gc.collect()
    cached = tracemalloc.get_traced_memory()[0] - before
    assert len(cache.evict(cache.evictable_pages)) == 8000 and cache.cached_pages == 0
    gc.collect()
    after_eviction = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert cached / (2000 * 64) < 16, f"{cached / (2000 * 64):.1f} bytes per cached token"
    assert after_eviction < cached / 10


def test_namespaces_never_share_pages_and_each_keeps_its_own():
    """KV computed under one LoRA adapter (a namespace) is never matched for another or the base."""
    cache = RadixPrefixCache(page_size=2)
    assert cache.insert([1, 2, 3, 4], [10, 11]) == 0  # the base model's
    assert cache.insert([1, 2, 3, 4], [20, 21], namespace=7) == 0  # the same tokens under an adapter
    assert cache.match([1, 2, 3, 4, 5])[1] == [10, 11]
    assert cache.match([1, 2, 3, 4, 5], namespace=7)[1] == [20, 21]
    assert cache.match([1, 2, 3, 4, 5], namespace=8)[1] == []
    handle, _ = cache.match([1, 2, 3, 4], namespace=7)
    cache.lock(handle)
    assert cache.evictable_pages == 2 and cache.cached_pages == 4
    assert sorted(cache.evict(4)) == [10, 11]  # the locked namespace's pages stay
    cache.unlock(handle)
    assert sorted(cache.evict(4)) == [20, 21] and cache.cached_pages == 0


def test_a_dropped_namespace_frees_its_pages_and_leaves_the_others():
    cache = RadixPrefixCache(page_size=2)
    cache.insert([1, 2, 3, 4], [10, 11])
    cache.insert([1, 2, 3, 4], [20, 21], namespace=7)
    cache.insert([1, 2, 5, 6], [20, 22], namespace=7)
    assert sorted(cache.drop_namespace(7)) == [20, 21, 22]
    assert cache.cached_pages == cache.evictable_pages == 2
    assert cache.match([1, 2, 3, 4, 5], namespace=7)[1] == [] and cache.match([1, 2, 3, 4, 5])[1] == [10, 11]
    assert cache.drop_namespace(0) == [] and cache.drop_namespace(9) == []  # the base model's stays
