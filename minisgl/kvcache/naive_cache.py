from __future__ import annotations

from .base import BasePrefixCache


class NaivePrefixCache(BasePrefixCache):
    """Shares nothing: every request computes its whole prompt and frees its pages at the end."""

    def __init__(self, page_size: int):
        self.page_size = page_size

    def match(self, tokens, namespace=0):
        return None, []

    def insert(self, tokens, pages, namespace=0):
        return len(pages)  # keeps none of them

    def lock(self, handle):
        pass

    def unlock(self, handle):
        pass

    def evict(self, num_pages):
        return []

    @property
    def evictable_pages(self):
        return 0

    @property
    def cached_pages(self):
        return 0
