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
    # While nearly every row decodes, freed rows gather for one prefill, waiting at most this many
    # decode steps (PrefillManager.gathered); 0 prefills each freed row at once.
    prefill_delay_steps: int = 8
    cache: str = "radix"  # radix | naive
    max_prompt_tokens: int | None = None  # None: the context length
    # The max_tokens of a request that names none: the rest of the context, at most this.
    max_new_tokens: int | None = None
    # Admission (minisgl/scheduler/cache.py): "dynamic" reserves the prompt plus decode_reserve_tokens
    # and preempts when the pool runs out; "reserve" reserves the whole max_tokens and never preempts.
    admission: str = "dynamic"
    decode_reserve_tokens: int = 256
    scheduling_policy: str = "fcfs"  # fcfs | priority (the request's priority field, lower first)
    skip_server_warmup: bool = False  # the server process on a GPU runs Scheduler.warm_up before it is ready
    # Overlap scheduling: prepare and launch step N+1 before reading step N's tokens.
    overlap: bool = True
    # Structured output, what compiling one request's constraint may cost (minisgl.constrained.compiler):
    # seconds one compile may run (a 400 naming this beyond), compiles running at once (a process
    # each), how deeply a JSON schema may nest, and the bytes of compiled grammars kept in the cache.
    grammar_compile_timeout: float = 10.0
    grammar_compile_workers: int = 2
    max_grammar_depth: int = 64
    grammar_cache_bytes: int = 512 << 20
    # Speculative decoding (minisgl.speculative): the drafter (None: off), the EAGLE-3 head's
    # directory or HF id (eagle3), the most tokens a request drafts a step, the n-gram sizes prompt
    # lookup matches, the most running requests that still draft, and the acceptance below which a
    # request stops drafting for a while.
    speculative: str | None = None
    draft_model: str | None = None
    speculative_num_tokens: int = 4
    speculative_ngram_min: int = 1
    speculative_ngram_max: int = 4
    speculative_max_batch: int = 16
    speculative_min_acceptance: float = 0.3
