from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine import EngineConfig


@dataclass(frozen=True)
class SchedulerConfig(EngineConfig):
    max_prefill_length: int = 8192  # prompt tokens computed per step; longer prompts are chunked
    cache: str = "radix"  # radix | naive
    max_prompt_tokens: int | None = None  # None: the context length
    # The max_tokens of a request that names none: the rest of the context, at most this.
    max_new_tokens: int | None = None
    # Overlap scheduling: prepare and launch step N+1 before reading step N's tokens.
    overlap: bool = True
