"""The offline workload the field compares on (nano-vllm, Mini-SGLang), scalable for small machines."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class OfflineRequest:
    prompt_ids: list[int]
    max_tokens: int


def offline_workload(num_requests: int = 256, max_input_len: int = 1024, max_output_len: int = 1024,
                     vocab_size: int = 10001, seed: int = 0) -> list[OfflineRequest]:
    """random.seed(0); per request: prompt = [randint(0, 10000)] * randint(100, 1024), then
    max_tokens = randint(100, 1024). With the defaults this is exactly the field's 256 requests
    (133,966 output tokens); smaller limits scale lengths down, token ids wrap to the vocab."""
    rng = random.Random(seed)
    min_in, min_out = min(100, max_input_len), min(100, max_output_len)
    prompts = [[rng.randint(0, 10000) % vocab_size for _ in range(rng.randint(min_in, max_input_len))]
               for _ in range(num_requests)]
    outputs = [rng.randint(min_out, max_output_len) for _ in range(num_requests)]
    return [OfflineRequest(p, o) for p, o in zip(prompts, outputs)]
