from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class BasePrefixCache(ABC):
    """Keeps the KV pages of finished requests so later requests with the same prompt prefix can
    reuse them. Works in whole pages: token sequences given to it are page-aligned.

    A match returns a handle; while a handle is locked its pages cannot be evicted.

    `namespace` separates KV computed under different weights (a LoRA adapter's load number; 0:
    the base model): a prefix matches only what was inserted under the same namespace.
    """

    page_size: int

    @abstractmethod
    def match(self, tokens: list[int], namespace: int = 0) -> tuple[Any, list[int]]:
        """Longest cached page-aligned prefix of `tokens`: (handle, its pages in order)."""

    @abstractmethod
    def insert(self, tokens: list[int], pages: list[int], namespace: int = 0) -> int:
        """Offer `pages` holding the KV of `tokens` (len(tokens) == len(pages) * page_size).

        Returns how many leading pages the cache already had: those offered pages stay the
        caller's (to free, unless they are the cache's own from a match); the rest now belong
        to the cache.
        """

    def drop_namespace(self, namespace: int) -> list[int]:
        """Forget every page cached under `namespace` (its weights are gone: an unloaded adapter);
        returns them, free. None of them may be locked."""
        return []

    @abstractmethod
    def lock(self, handle: Any) -> None: ...

    @abstractmethod
    def unlock(self, handle: Any) -> None: ...

    @abstractmethod
    def evict(self, num_pages: int) -> list[int]:
        """Drop least-recently-used unlocked pages, at least `num_pages` if there are; return them."""

    @property
    @abstractmethod
    def evictable_pages(self) -> int: ...

    @property
    @abstractmethod
    def cached_pages(self) -> int: ...
