from __future__ import annotations

import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from .request_fields import MAX_LOGPROBS, REQUEST_FIELDS, TOKEN_ID_FIELDS


def _is_tuple(t) -> bool:
    return typing.get_origin(t) is tuple or any(typing.get_origin(a) is tuple for a in typing.get_args(t))


_TUPLES = tuple(f.name for f in REQUEST_FIELDS if _is_tuple(f.type))  # arrive as lists (JSON, msgpack)

__all__ = ["SamplingParams", "MAX_LOGPROBS"]


@dataclass(frozen=True)
class SamplingParams:
    """What a user asks of one request's generation: one field per entry of
    minisgl.core.request_fields.REQUEST_FIELDS (its type, default, range and meaning are there).

    temperature 0 means greedy. top_k <= 0 and top_p >= 1 and min_p <= 0 turn those filters off.
    A fixed seed makes the draws of this request reproducible whatever else runs in its batch.
    """

    # The table's entries written out, in its order (the positional and wire form), so that readers,
    # IDEs and type checkers see them; tests/core/test_request_fields.py holds them equal to it.
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    min_p: float = 0.0
    max_tokens: int | None = 128
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    allowed_token_ids: tuple[int, ...] = ()
    min_tokens: int = 0
    constraint: tuple[str, str] | None = None
    lora: str | None = None
    priority: int = 0
    prompt_logprobs: int | None = None
    client: str = ""

    def __post_init__(self) -> None:
        # Sequences arrive as lists (JSON, msgpack); stored as tuples, so the params stay hashable.
        for name in _TUPLES:
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.logit_bias, tuple) or any(isinstance(b, list) for b in self.logit_bias):
            pairs = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias
            object.__setattr__(self, "logit_bias", tuple((int(t), float(b)) for t, b in pairs))
        problem = self.validate()
        if problem:
            raise ValueError(problem)

    def validate(self) -> str | None:
        for f in REQUEST_FIELDS:
            problem = f.problem(getattr(self, f.name))
            if problem:
                return problem
        if any(not -100 <= bias <= 100 for _, bias in self.logit_bias):
            return "logit_bias values must be in [-100, 100]"
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            return f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}"
        if self.constraint is not None:
            from minisgl.constrained.constraints import constraint_problem

            problem = constraint_problem(self.constraint)
            if problem:
                return problem
            if self.min_tokens:  # the grammar may allow nothing but its end, which min_tokens forbids
                return "min_tokens cannot be combined with structured output (response_format, guided_*)"
            if self.allowed_token_ids:  # the grammar's tokens and these may have nothing in common
                return "allowed_token_ids cannot be combined with structured output (response_format, guided_*, tools)"
        return None

    def token_ids(self) -> Iterator[tuple[str, Iterable[int]]]:
        """(field, ids) for every token id the request carries: each indexes the logits somewhere."""
        yield "logit_bias", (t for t, _ in self.logit_bias)
        for f in TOKEN_ID_FIELDS:
            yield f.name, getattr(self, f.name)

    @cached_property
    def stop_token_set(self) -> frozenset[int]:
        """stop_token_ids for the per-token membership test: up to 1024 ids, checked for every
        sampled token of the request, must not be a tuple scan."""
        return frozenset(self.stop_token_ids)

    @property
    def adjusts_logits(self) -> bool:
        """Whether the logits of this request are changed before sampling (costs a step extra work)."""
        return bool(self.uses_history or self.logit_bias or self.min_tokens or self.allowed_token_ids)

    @property
    def uses_history(self) -> bool:
        """Whether its penalties read the tokens generated so far."""
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
