from __future__ import annotations

from dataclasses import dataclass


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
    max_tokens: int = 128
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    stop: tuple[str, ...] = ()  # stop strings, matched on detokenized text by the frontend
    seed: int | None = None
    # None: off. k >= 0: report each sampled token's log-probability and the k most likely
    # tokens' (under the model's own distribution: the raw logits, before temperature and filters).
    logprobs: int | None = None

    def __post_init__(self) -> None:
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
        if self.max_tokens < 1:
            return f"max_tokens must be >= 1, got {self.max_tokens}"
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            return f"logprobs must be in [0, {MAX_LOGPROBS}], got {self.logprobs}"
        return None

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1
