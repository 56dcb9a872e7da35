from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch

from .host import req_arrays
from .params import SamplingParams

if TYPE_CHECKING:
    from minisgl.constrained.grammar import GrammarState


@dataclass(eq=False)
class Req:
    """One request's state as it moves through the scheduler and the engine.

    Token positions [0, cached_len) have their KV in the cache; the current forward computes
    positions [cached_len, device_len). `seq_len` counts the tokens that exist on the device
    (prompt plus every sampled token, including one still in flight), so `output_ids`, which the
    host fills when results arrive, may lag it by a step under overlap scheduling. `table_idx` is
    this request's row in the page table and in the engine's token pool.
    """

    uid: int
    prompt_ids: list[int]
    sampling_params: SamplingParams
    table_idx: int = -1
    cached_len: int = 0
    device_len: int = 0
    seq_len: int = -1  # -1: the prompt length
    output_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    grammar: GrammarState | None = None  # structured output: where the request is in its grammar
    # LoRA (minisgl.lora): the adapter's slot in the pool (0: the base model) and its load's number,
    # the prefix cache's namespace, so KV computed under one adapter is never reused for another.
    lora_slot: int = 0
    lora_load_id: int = 0
    # The tokens the prefill computes through: the prompt, or after a preemption every token known
    # (prompt and output so far), which the resumed request recomputes (from its cached prefix).
    prefill_len: int = -1  # -1: the prompt length
    arrival: int = 0  # the scheduler's arrival order: ties in priority go to the earlier request
    preemptions: int = 0
    prefix_hit: int = 0  # prompt tokens the prefix cache held at its first admission (usage's cached_tokens)
    # Prompt logprobs computed so far, chunk by chunk, until they leave with the first output token:
    # per prompt token from the second, [token id, logprob, [[id, logprob], ...]].
    prompt_scores: list[list] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.seq_len < 0:
            self.seq_len = len(self.prompt_ids)
        if self.prefill_len < 0:
            self.prefill_len = len(self.prompt_ids)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def samples_this_step(self) -> bool:
        """Whether the current forward reaches the sequence's end, so its last logits are sampled."""
        return self.device_len == self.seq_len

    @property
    def wants_prompt_logprobs(self) -> bool:
        """Whether the request asked for its prompt's logprobs and has sampled nothing yet: its
        prefill then gets logits at every prompt position (a resumed one was scored already)."""
        return self.sampling_params.prompt_logprobs is not None and self.seq_len == self.prompt_len

    @property
    def extend_len(self) -> int:
        return self.device_len - self.cached_len

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids


# verify: decoding requests with speculative drafts (minisgl.speculative), each computing its last
# token and its drafts (the extend path), with logits at every one of them.
Phase = Literal["prefill", "decode", "verify"]


@dataclass
class BaseAttnMetadata:
    """Per-batch facts every backend needs, built once before the forward pass."""

    # Tokens computed for each request (its extend length) and its full length after the step.
    extend_lens: list[int]
    seq_lens: list[int]


@dataclass(eq=False)
class Batch:
    """Requests run together in one forward pass.

    A prefill batch may mix requests at any position (each computes `extend_len` tokens); a
    decode batch computes exactly one token per request. The engine fills the tensors below.
    """

    reqs: list[Req]
    phase: Phase
    input_ids: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    out_loc: torch.Tensor | None = None
    # Rows among the batch's tokens whose logits the LM head computes, request by request, each
    # request's last token last (`logit_counts` of them per request).
    logit_indices: torch.Tensor | None = None
    attn_metadata: BaseAttnMetadata | None = None
    # float32 logits of each request's last token (every row of a verify batch), kept after the forward pass.
    logits: torch.Tensor | None = None
    # A verify batch's draft tokens, by request uid (a request without drafts computes one token).
    drafts: dict[int, list[int]] | None = None

    @property
    def size(self) -> int:
        return len(self.reqs)

    @cached_property
    def host_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(table rows, cached lengths, device lengths) of the requests as int64 arrays, computed once
        (the engine and the attention backend both read them; requests do not change while a batch
        is being launched)."""
        return req_arrays(self.reqs)

    @cached_property
    def logit_counts(self) -> np.ndarray:
        """How many of each request's computed tokens get logits, computed once: its last token,
        or every one it computes in a verify batch (each checks the draft after it) and in a
        prefill that scores its prompt (Req.wants_prompt_logprobs)."""
        _, cached, device_lens = self.host_arrays
        every = [self.phase == "verify" or r.wants_prompt_logprobs for r in self.reqs]
        return np.where(every, device_lens - cached, 1)

    @property
    def is_decode(self) -> bool:
        return self.phase == "decode"

    @property
    def num_tokens(self) -> int:
        return sum(r.extend_len for r in self.reqs)
