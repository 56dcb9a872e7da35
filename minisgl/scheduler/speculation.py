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

Drafters: a per-request one (`Drafter`: n-gram, the benchmarks' replay drafter) sees token ids
only; the EAGLE-3 head (`Eagle3Drafter`) drafts a batch on the device and runs after every
forward pass (`after_forward`), over the target's hidden states, which the engine records for it
(`engine_config`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from minisgl.core.batch import Batch, Req
from minisgl.core.host import to_device
from minisgl.distributed import broadcast_objects
from minisgl.models import load_model_config
from minisgl.speculative import (
    Drafter,
    Eagle3Drafter,
    NgramDrafter,
    SpeculationPolicy,
    accepted_prefix,
    head_aux_layers,
    load_eagle3_head,
)
from minisgl.utils.choices import SPECULATIVE_DRAFTERS
from minisgl.utils.logger import get_logger

from .config import SchedulerConfig

if TYPE_CHECKING:
    from minisgl.engine import Engine

logger = get_logger(__name__)


def engine_config(config: SchedulerConfig) -> SchedulerConfig:
    """The engine's config under this drafter: with eagle3, the head's directory (downloaded when
    an HF id) and the target layers whose hidden states it reads, which every forward pass then
    records, CUDA graphs included (the engine knows them before it captures any)."""
    if config.speculative != "eagle3" or not config.draft_model:
        return config
    path = _local_draft_model(config.draft_model)
    layers = head_aux_layers(path, load_model_config(config.model_path).num_layers)
    return replace(config, draft_model=path, record_hidden_layers=layers)


@dataclass
class Verdict:
    tokens: list[int]  # the accepted drafts and the target's next token
    rows: list[int]  # each token's row among the batch's logits (for its logprobs)
    proposed: int
    accepted: int


class Speculator:
    def __init__(self, config: SchedulerConfig, engine: Engine):
        if config.speculative not in SPECULATIVE_DRAFTERS:
            raise ValueError(f"unknown speculative drafter {config.speculative!r}; use {', '.join(SPECULATIVE_DRAFTERS)}")
        if (config.speculative == "eagle3") != (config.draft_model is not None):
            raise ValueError("--draft-model goes with --speculative eagle3, and --speculative eagle3 needs it")
        self.drafter: Drafter | Eagle3Drafter = (
            _eagle3(config, engine) if config.speculative == "eagle3"
            else NgramDrafter(config.speculative_ngram_min, config.speculative_ngram_max))
        self.policy = SpeculationPolicy(config.speculative_num_tokens, config.speculative_max_batch,
                                        config.speculative_min_acceptance)
        self.max_seq_len = engine.max_seq_len
        self.tp_size = engine.tp.size

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
        asked = [(r, k) for r in running if (k := self._room(r))]
        drafts = {}
        for (r, _), tokens in zip(asked, self._draft(asked)):
            self.policy.drafted(r.uid, len(tokens))
            if tokens:
                drafts[r.uid] = tokens
        return drafts

    def _draft(self, asked: list[tuple[Req, int]]) -> list[list[int]]:
        if not isinstance(self.drafter, Eagle3Drafter):
            return [self.drafter.propose(r.all_ids, k) for r, k in asked]
        if not asked:
            return []
        drafts = self.drafter.propose_batch([r for r, _ in asked], [k for _, k in asked])
        # The ranks compute the same drafts; rank 0's are taken so that a near-tie cannot part them.
        return broadcast_objects([drafts])[0] if self.tp_size > 1 else drafts

    def after_forward(self, batch: Batch) -> None:
        """After the target's forward pass of `batch` (launched, not yet read)."""
        if isinstance(self.drafter, Eagle3Drafter):
            self.drafter.after_forward(batch)

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
        if isinstance(self.drafter, Eagle3Drafter):
            self.drafter.forget(uid)


def _local_draft_model(name: str) -> str:
    if os.path.isdir(name):
        return name
    from huggingface_hub import snapshot_download

    return snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "*.bin"])


def _eagle3(config: SchedulerConfig, engine: Engine) -> Eagle3Drafter:
    path = config.draft_model or ""  # (engine_config made it a local directory)
    head = load_eagle3_head(path, engine.model_config, engine.max_seq_len, engine.device, engine.dtype)
    drafter = Eagle3Drafter(head, engine.model, engine.page_table, engine.token_pool,
                            engine.kv_cache.k_buffer.shape[1], config.speculative_num_tokens)
    logger.info("EAGLE-3 head %s: draft vocabulary %d, reads the inputs of target layers %s", config.draft_model,
                head.cfg.draft_vocab_size, drafter.target.aux_layers)
    return drafter
