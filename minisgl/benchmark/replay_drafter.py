"""A drafter for measuring speculative decoding at a set acceptance rate: it replays the target
model's own greedy continuation of each prompt (known from a run without speculation), each drafted
token replaced by a wrong one with probability 1 - `rate`. Benchmarks and tests put it in place of
the scheduler's drafter (`scheduler.speculator.drafter`)."""

from __future__ import annotations

import random

KEY_TOKENS = 8  # prompts are told apart by their first tokens


class ReplayDrafter:
    def __init__(self, sequences: list[list[int]], rate: float, vocab_size: int, seed: int = 0):
        """`sequences`: each prompt followed by its greedy continuation."""
        self.by_start = {tuple(s[:KEY_TOKENS]): s for s in sequences}
        if len(self.by_start) != len(sequences):
            raise ValueError(f"prompts must differ in their first {KEY_TOKENS} tokens")
        self.rate, self.vocab_size = rate, vocab_size
        self.rng = random.Random(seed)

    def propose(self, ids: list[int], k: int) -> list[int]:
        # By position, not by prefix: where the run parted from the recorded continuation (bf16 verify
        # and decode kernels summing in another order can tip a near-tie) the drafts are simply
        # wrong, and the acceptance measured says so.
        full = self.by_start.get(tuple(ids[:KEY_TOKENS]))
        if full is None:
            return []
        right = full[len(ids) : len(ids) + k]
        return [t if self.rng.random() < self.rate else (t + 1) % self.vocab_size for t in right]
