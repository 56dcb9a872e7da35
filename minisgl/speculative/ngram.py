"""Prompt lookup (n-gram) drafting: no extra weights, large wins where the output copies from the
prompt or from itself (code edits, RAG answers, tool loops)."""

from __future__ import annotations

from typing import Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


class Drafter(Protocol):
    """What the scheduler asks of a drafter: up to k tokens to follow a request's tokens so far
    (fewer, or none, where it has no guess). It runs on every tensor-parallel rank alike, so it must
    be deterministic in what it is given."""

    def propose(self, ids: list[int], k: int) -> list[int]: ...


class NgramDrafter:
    """Proposes the tokens that followed the latest earlier occurrence of the sequence's last n
    tokens (n from `max_n` down to `min_n`: the longest match wins), over prompt and output."""

    def __init__(self, min_n: int = 1, max_n: int = 4):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram sizes: need 1 <= min ({min_n}) <= max ({max_n})")
        self.min_n, self.max_n = min_n, max_n

    def propose(self, ids: list[int], k: int) -> list[int]:
        """At most `k` tokens to follow `ids`; empty when no suffix of `ids` occurred before."""
        if k < 1 or len(ids) < self.min_n + 1:
            return []
        seq = np.asarray(ids, dtype=np.int64)
        for n in range(min(self.max_n, len(seq) - 1), self.min_n - 1, -1):
            # Windows of the sequence less its last token: every n-gram but the suffix itself.
            windows = sliding_window_view(seq[:-1], n)
            hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n  # the latest occurrence: loops repeat their newest turn
                return seq[start : start + k].tolist()
        return []
