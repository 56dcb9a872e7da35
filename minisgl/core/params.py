from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


MAX_LOGPROBS = 20  # most alternatives reported per token (OpenAI's top_logprobs limit)


@dataclass(frozen=True)
class SamplingParams:
    """What a user asks of one request's generation.

    temperature 0 means greedy. top_k <= 0 and top_p >= 1 and min_p <= 0 turn those filters off.
    A fixed seed makes the draws of this request reproducible whatever else runs in its batch.
    """

    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    min_p: float = 0.0
    # None: the rest of the context, at most the server's max_new_tokens. Only the scheduler knows
    # both, so the request carries None that far and Scheduler.resolve makes it a number there,
    # before anything reads it (admission, page budget, the finish check).
    max_tokens: int | None = 128
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()  # stop strings, matched on detokenized text by the frontend
    seed: int | None = None
    # None: off. k >= 0: report each sampled token's log-probability and the k most likely
    # tokens' (under the model's own distribution: the raw logits, before temperature and filters).
    logprobs: int | None = None
    # Penalties over the tokens so far. presence/frequency (OpenAI): subtracted from the logits
    # of tokens already generated, once / once per occurrence. repetition (HF, vLLM): over prompt
    # and output, positive logits divided by it and negative ones multiplied; 1 is off.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, added to its logit)
    min_tokens: int = 0  # end-of-sequence and stop_token_ids are impossible before this many
    # Structured output: (kind, spec) with kind json_object / json_schema / regex / choice
    # (minisgl.constrained compiles it); None: unconstrained.
    constraint: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        # Sequences arrive as lists (JSON, msgpack); stored as tuples, so the params stay hashable.
        for name in ("stop_token_ids", "stop", "constraint"):
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        if not isinstance(self.logit_bias, tuple) or any(isinstance(b, list) for b in self.logit_bias):
            pairs = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias
            object.__setattr__(self, "logit_bias", tuple((int(t), float(b)) for t, b in pairs))
        problem = self.validate()
        if problem:
            raise ValueError(problem)

    def validate(self) -> str | None:
        if self.temperature < 0:
            return f"temperature must be >= 0, got {self.temperature}"
        if not 0 < self.top_p <= 1:
            return f"top_p must be in (0, 1], got {self.top_p}"
        if not 0 <= self.min_p <= 1:
            return f"min_p must be in [0, 1], got {self.min_p}"
        if self.max_tokens is not None and self.max_tokens < 1:
            return f"max_tokens must be >= 1, got {self.max_tokens}"
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            return f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}"
        for name in ("presence_penalty", "frequency_penalty"):
            if not -2 <= getattr(self, name) <= 2:
                return f"{name} must be in [-2, 2], got {getattr(self, name)}"
        if not 0 < self.repetition_penalty <= 2**31:
            return f"repetition_penalty must be > 0, got {self.repetition_penalty}"
        if any(not -100 <= bias <= 100 for _, bias in self.logit_bias):
            return "logit_bias values must be in [-100, 100]"
        if self.min_tokens < 0:
            return f"min_tokens must be >= 0, got {self.min_tokens}"
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            return f"min_tokens must be in [0, max_tokens={self.max_tokens}], got {self.min_tokens}"
        if self.constraint is not None:
            from minisgl.constrained import constraint_problem

            problem = constraint_problem(self.constraint)
            if problem:
                return problem
            if self.min_tokens:  # the grammar may allow nothing but its end, which min_tokens forbids
                return "min_tokens cannot be combined with structured output (response_format, guided_*)"
        return None

    @cached_property
    def stop_token_set(self) -> frozenset[int]:
        """stop_token_ids for the per-token membership test: up to 1024 ids, checked for every
        sampled token of the request, must not be a tuple scan (issue 21)."""
        return frozenset(self.stop_token_ids)

    @property
    def adjusts_logits(self) -> bool:
        """Whether the logits of this request are changed before sampling (costs a step extra work)."""
        return bool(self.uses_history or self.logit_bias or self.min_tokens)

    @property
    def uses_history(self) -> bool:
        """Whether its penalties read the tokens generated so far."""
        return self.presence_penalty != 0 or self.frequency_penalty != 0 or self.repetition_penalty != 1

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
