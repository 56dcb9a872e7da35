from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from minisgl.engine import EngineConfig
from minisgl.engine.config import accepts_seed_names


@accepts_seed_names
@dataclass(frozen=True)
class SchedulerConfig(EngineConfig):
    SEED_NAMES: ClassVar[dict[str, str]] = {**EngineConfig.SEED_NAMES, "max_extend_tokens": "max_prefill_length",
                                            "cache_type": "cache"}

    max_prefill_length: int = 8192  # prompt tokens computed per step; longer prompts are chunked
    cache: str = "radix"  # radix | naive
    max_prompt_tokens: int | None = None  # None: the context length
    # The max_tokens of a request that names none: the rest of the context, at most this.
    max_new_tokens: int | None = None
    # Overlap scheduling: prepare and launch step N+1 before reading step N's tokens.
    overlap: bool = True
