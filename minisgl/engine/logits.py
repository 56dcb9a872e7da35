"""Changes to the logits before sampling: penalties, logit_bias, min_tokens, allowed_token_ids and
grammar masks.

Built per step only when some request of the batch asks for one of them (otherwise the batch's
`BatchSamplingArgs.adjust` is None and sampling reads the model's logits untouched). Everything is
batched tensor work on the device: the host gathers a few small index arrays per step, copies
them once, and the penalties read the tokens so far from the engine's token pool (which holds
prompt and output ids on the device, the newest sampled token included), so nothing waits for
the GPU and there is no per-request kernel launch.

Semantics, as the references define them:
- repetition_penalty (HF `RepetitionPenaltyLogitsProcessor`, vLLM): every token seen in prompt or
  output has a positive logit divided by the penalty, a negative one multiplied by it.
- frequency_penalty / presence_penalty (OpenAI): logit -= frequency * count + presence * (count > 0),
  counting the generated tokens only.
- logit_bias (OpenAI): added to the token's logit (before the penalties, as in vLLM and HF).
- min_tokens (vLLM, HF `MinNewTokensLengthLogitsProcessor`): end-of-sequence and stop ids are
  -inf while fewer tokens than that were generated.
- allowed_token_ids (vLLM): every token not listed is -inf.
- a grammar's token bitmask (minisgl.constrained): disallowed tokens are -inf.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from minisgl.core.batch import Req
from minisgl.core.host import to_device

if TYPE_CHECKING:
    from minisgl.constrained.grammar import BatchMasks


@dataclass
class Penalties:
    """Rows of the batch with presence/frequency/repetition penalties, and where their tokens are."""

    rows: torch.Tensor  # int64 [P]: rows of the batch
    pool_rows: torch.Tensor  # int64 [P]: their rows in the token pool
    seq_lens: torch.Tensor  # int64 [P]: tokens so far (prompt + output)
    prompt_lens: torch.Tensor  # int64 [P]
    max_len: int  # the longest of seq_lens (host-known: how many pool columns to read)
    presence: torch.Tensor  # float32 [P]
    frequency: torch.Tensor  # float32 [P]
    repetition: torch.Tensor | None  # float32 [P]; None when no row uses it

    def apply(self, logits: torch.Tensor, token_pool: torch.Tensor) -> None:
        sub = logits[self.rows]
        ids = token_pool[self.pool_rows, : self.max_len].long()
        pos = torch.arange(self.max_len, device=logits.device)
        known = pos < self.seq_lens.unsqueeze(1)  # the rest of the pool row is stale
        generated = known & (pos >= self.prompt_lens.unsqueeze(1))
        counts = torch.zeros_like(sub).scatter_add_(1, ids, generated.to(sub.dtype))
        if self.repetition is not None:
            seen = torch.zeros_like(sub).scatter_add_(1, ids, known.to(sub.dtype)) > 0
            rep = self.repetition.unsqueeze(1)
            sub = torch.where(seen, torch.where(sub > 0, sub / rep, sub * rep), sub)
        sub = sub - self.frequency.unsqueeze(1) * counts - self.presence.unsqueeze(1) * (counts > 0).to(sub.dtype)
        logits[self.rows] = sub


@dataclass
class LogitsAdjustment:
    penalties: Penalties | None = None
    bias: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (rows, token ids, values)
    banned: tuple[torch.Tensor, torch.Tensor] | None = None  # (rows, token ids) set to -inf
    allowed: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None  # (rows, their index in rows, token ids)
    grammar_masks: BatchMasks | None = None  # the constrained rows' xgrammar bitmasks, on the host

    @classmethod
    def from_reqs(cls, reqs: list[Req], device: torch.device, eos_token_ids: Iterable[int] = (),
                  grammar_masks: BatchMasks | None = None) -> LogitsAdjustment | None:
        """None when no request of the batch changes its logits (the common case costs nothing)."""
        params = [r.sampling_params for r in reqs]
        if grammar_masks is None and not any(p.adjusts_logits for p in params):
            return None
        adjust = cls(grammar_masks=grammar_masks)
        pen = [i for i, p in enumerate(params) if p.uses_history]
        if pen:
            ints = np.array([[i, reqs[i].table_idx, reqs[i].seq_len, reqs[i].prompt_len] for i in pen], dtype=np.int64)
            floats = np.array([[params[i].presence_penalty, params[i].frequency_penalty, params[i].repetition_penalty]
                               for i in pen], dtype=np.float32)
            ints_d, floats_d = to_device(ints.T.copy(), device), to_device(floats.T.copy(), device)
            adjust.penalties = Penalties(
                rows=ints_d[0], pool_rows=ints_d[1], seq_lens=ints_d[2], prompt_lens=ints_d[3],
                max_len=int(ints[:, 2].max()), presence=floats_d[0], frequency=floats_d[1],
                repetition=floats_d[2] if (floats[:, 2] != 1).any() else None)
        biased = [(i, tok, bias) for i, p in enumerate(params) for tok, bias in p.logit_bias]
        if biased:
            rows, toks, values = zip(*biased)
            adjust.bias = (to_device(np.array(rows, dtype=np.int64), device),
                           to_device(np.array(toks, dtype=np.int64), device),
                           to_device(np.array(values, dtype=np.float32), device))
        eos = tuple(eos_token_ids)
        # Output tokens so far: seq_len counts the prompt and every sampled token, in flight too.
        banned = [(i, tok) for i, (p, r) in enumerate(zip(params, reqs)) if r.seq_len - r.prompt_len < p.min_tokens
                  for tok in set(eos + p.stop_token_ids)]
        if banned:
            rows, toks = zip(*banned)
            adjust.banned = (to_device(np.array(rows, dtype=np.int64), device),
                             to_device(np.array(toks, dtype=np.int64), device))
        limited = [i for i, p in enumerate(params) if p.allowed_token_ids]
        if limited:
            at, toks = zip(*[(k, tok) for k, i in enumerate(limited) for tok in params[i].allowed_token_ids])
            adjust.allowed = tuple(to_device(np.array(x, dtype=np.int64), device) for x in (limited, at, toks))
        return adjust

    def apply(self, logits: torch.Tensor, token_pool: torch.Tensor) -> torch.Tensor:
        """The adjusted logits (float32), a new tensor: the model's own (a CUDA graph's static
        output, read again for logprobs) are left as they are."""
        logits = logits.to(torch.float32, copy=True)
        # The order of vLLM and HF: biases and min_tokens first, then the penalties.
        if self.bias is not None:
            rows, toks, values = self.bias
            logits.index_put_((rows, toks), values, accumulate=True)
        if self.banned is not None:
            logits[self.banned] = float("-inf")
        if self.allowed is not None:  # every other token of those rows impossible
            rows, at, toks = self.allowed
            outside = torch.ones((len(rows), logits.shape[1]), dtype=torch.bool, device=logits.device)
            outside[at, toks] = False
            logits[rows] = logits[rows].masked_fill(outside, float("-inf"))
        if self.penalties is not None:
            self.penalties.apply(logits, token_pool)
        if self.grammar_masks is not None:
            self.grammar_masks.apply(logits)
        return logits
