"""The scheduler's side of speculative decoding (minisgl.speculative): drafts for the decoding
requests, their place in the token pool, the sampling rows of a verify batch, and the verdict.

A request in a verify batch with k drafts computes k + 1 tokens: its last sampled token and the
drafts, at positions seq_len - 1 .. seq_len + k - 1 (the drafts written to the token pool at
seq_len ..), and gets logits at each. Row i samples the token at position seq_len + i as decoding
would (its own penalties, min_tokens and seed at that position), so the kept tokens are the rows up
to the first that disagrees with its draft (minisgl.speculative.acceptance says why this is the
rejection-sampling rule). The KV of the rejected drafts is left where it is, past the request's new
cached length (the next step writes over it), and the pages holding only that go back
(CacheManager.trim).

A request with a grammar has each verified row masked by the grammar after the drafts before it
(Scheduler._grammar_masks). Not drafted for: a request whose host view lags the device (its last
token still in flight).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from minisgl.core import Req
from minisgl.core.host import to_device
from minisgl.speculative import Drafter, NgramDrafter, SpeculationPolicy, accepted_prefix
from minisgl.utils.choices import SPECULATIVE_DRAFTERS

from .config import SchedulerConfig


@dataclass
class Verdict:
    tokens: list[int]  # the accepted drafts and the target's next token
    rows: list[int]  # each token's row among the batch's logits (for its logprobs)
    proposed: int
    accepted: int


class Speculator:
    def __init__(self, config: SchedulerConfig, max_seq_len: int):
        if config.speculative not in SPECULATIVE_DRAFTERS:
            raise ValueError(f"unknown speculative drafter {config.speculative!r}; use {', '.join(SPECULATIVE_DRAFTERS)}")
        self.drafter: Drafter = NgramDrafter(config.speculative_ngram_min, config.speculative_ngram_max)
        self.policy = SpeculationPolicy(config.speculative_num_tokens, config.speculative_max_batch,
                                        config.speculative_min_acceptance)
        self.max_seq_len = max_seq_len

    def _room(self, r: Req) -> int:
        """Most tokens `r` may draft: none beyond its max_tokens or the context."""
        if r.finished or r.prompt_len + len(r.output_ids) != r.seq_len:
            return 0
        # max_tokens is a number once admitted (Scheduler.resolve); the step's own token is one of them.
        left = (r.sampling_params.max_tokens or 0) - len(r.output_ids) - 1
        return max(0, min(self.policy.k_for(r.uid), left, self.max_seq_len - r.seq_len))

    def wants_fresh_tokens(self, running: list[Req]) -> bool:
        """Whether the next decode step may draft: then the previous step's tokens are read first
        (the drafter continues from them), not after the next launch."""
        return self.policy.on(len(running)) and any(self.policy.k_for(r.uid) for r in running)

    def propose(self, running: list[Req]) -> dict[int, list[int]]:
        """uid -> drafts, for the requests that draft this step."""
        self.policy.tick()
        if not self.policy.on(len(running)):
            return {}
        drafts = {}
        for r in running:
            k = self._room(r)
            if k:
                tokens = self.drafter.propose(r.all_ids, k)
                self.policy.drafted(r.uid, len(tokens))
                if tokens:
                    drafts[r.uid] = tokens
        return drafts

    @staticmethod
    def write(token_pool: torch.Tensor, reqs: list[Req], drafts: dict[int, list[int]]) -> None:
        """The drafts into the token pool after each request's last token: the forward reads them there."""
        width = token_pool.shape[1]
        flat = [r.table_idx * width + r.seq_len + i for r in reqs for i in range(len(drafts.get(r.uid, ())))]
        values = [t for r in reqs for t in drafts.get(r.uid, ())]
        both = to_device(np.array(flat + values, dtype=np.int64), token_pool.device)
        token_pool.view(-1)[both[: len(flat)]] = both[len(flat):].to(token_pool.dtype)

    @staticmethod
    def sampling_rows(reqs: list[Req], drafts: dict[int, list[int]]) -> list[Req]:
        """One entry per logits row: request r's row i stands for r with i drafts taken as its own
        tokens (seq_len + i), so its penalties, min_tokens and seed are those of that position."""
        rows = []
        for r in reqs:
            rows.append(r)
            rows += [replace(r, seq_len=r.seq_len + i) for i in range(1, len(drafts.get(r.uid, ())) + 1)]
        return rows

    def verdicts(self, reqs: list[Req], drafts: dict[int, list[int]], targets: list[int]) -> list[Verdict]:
        """Each request's kept tokens, from the tokens sampled at every row; acceptance recorded."""
        out, row = [], 0
        for r in reqs:
            d = drafts.get(r.uid, [])
            mine = targets[row : row + len(d) + 1]
            n = accepted_prefix(d, mine)
            if d:
                self.policy.verified(r.uid, len(d), n)
            out.append(Verdict(mine[: n + 1], list(range(row, row + n + 1)), len(d), n))
            row += len(d) + 1
        return out

    def forget(self, uid: int) -> None:
        self.policy.forget(uid)
