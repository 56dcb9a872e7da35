"""KV storage (the paged pool) and the prefix caches that share its pages between requests."""

from .mha_pool import MHAKVCache

__all__ = ["MHAKVCache"]
