"""Prompt logprobs (vLLM's prompt_logprobs, the completions API's echo with logprobs): the
log-probability of each prompt token from the second, under the logits of the position before it.

A prefill that scores its prompt gets logits at every position it computes (`Batch.logit_counts`);
position p scores the prompt token at p + 1, read from the token pool, where the whole prompt is
from admission. A chunked prefill scores its chunk's positions, so the chunks together score every
token; the last prompt position's logits are the first output token's, sampled as usual.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from minisgl.core.batch import Batch
from minisgl.core.host import to_device

from .sample import TokenLogprobs, token_logprobs


class PromptScores(NamedTuple):
    spans: list[tuple[int, int]]  # per scoring request: (its index in the batch, how many prompt tokens scored)
    logprobs: TokenLogprobs  # their rows, request by request, in prompt order


def last_rows(batch: Batch) -> np.ndarray:
    """Each request's row among the batch's logits that is sampled: its last."""
    return np.cumsum(batch.logit_counts) - 1


def score_prompts(batch: Batch, logits: torch.Tensor, token_pool: torch.Tensor) -> PromptScores | None:
    """The log-probabilities of the prompt tokens this prefill scores, or None when it scores none."""
    table_rows, cached, device_lens = batch.host_arrays
    starts = np.cumsum(batch.logit_counts) - batch.logit_counts
    width = token_pool.shape[1]
    spans, rows, flat, k = [], [], [], 0
    for i, r in enumerate(batch.reqs):
        n = min(int(device_lens[i]), r.prompt_len - 1) - int(cached[i])  # positions whose next token is the prompt's
        if not r.wants_prompt_logprobs or n <= 0:
            continue
        spans.append((i, n))
        rows.append(starts[i] + np.arange(n))
        flat.append(table_rows[i] * width + cached[i] + 1 + np.arange(n))
        k = max(k, r.sampling_params.prompt_logprobs or 0)
    if not spans:
        return None
    dev = to_device(np.concatenate(rows + flat), logits.device)
    n_rows = len(dev) // 2
    targets = token_pool.view(-1)[dev[n_rows:]]
    return PromptScores(spans, token_logprobs(logits[dev[:n_rows]], targets, k))
