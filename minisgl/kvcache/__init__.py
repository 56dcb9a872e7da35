"""KV storage (the paged pool) and the prefix caches that share its pages between requests."""

from .base import BasePrefixCache
from .mha_pool import FP8_DTYPES, KV_CACHE_DTYPES, MHAKVCache, kv_storage_dtype
from .naive_cache import NaivePrefixCache
from .radix_cache import RadixPrefixCache

# --cache's names are minisgl.utils.choices.PREFIX_CACHES (the flags import no torch); the same here.
PREFIX_CACHES = {"radix": RadixPrefixCache, "naive": NaivePrefixCache}


def create_prefix_cache(kind: str, page_size: int) -> BasePrefixCache:
    if kind not in PREFIX_CACHES:
        raise ValueError(f"unknown cache type {kind!r}; choose from {', '.join(PREFIX_CACHES)}")
    return PREFIX_CACHES[kind](page_size)


__all__ = ["BasePrefixCache", "FP8_DTYPES", "KV_CACHE_DTYPES", "MHAKVCache", "kv_storage_dtype", "NaivePrefixCache",
           "RadixPrefixCache", "PREFIX_CACHES", "create_prefix_cache"]
