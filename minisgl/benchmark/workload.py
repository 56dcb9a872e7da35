"""The offline workload the field compares on (nano-vllm, Mini-SGLang), scalable for small machines."""

from __future__ import annotations

import argparse
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


WORKLOAD_FLAGS = ("num_requests", "max_input_len", "max_output_len", "temperature")


def add_workload_flags(p: argparse.ArgumentParser) -> None:
    """The offline benchmarks' workload on their command line (WORKLOAD_FLAGS): its size, the
    field's by default, and the sampling temperature."""
    p.add_argument("--num-requests", type=int, default=256)
    p.add_argument("--max-input-len", type=int, default=1024)
    p.add_argument("--max-output-len", type=int, default=1024)
    p.add_argument("--temperature", type=float, default=0.6)


def workload_settings(args: argparse.Namespace) -> dict:
    """The flags' values, for a result's JSON."""
    return {name: getattr(args, name) for name in WORKLOAD_FLAGS}


def workload_requests(args: argparse.Namespace, vocab_size: int) -> tuple[list[list[int]], list]:
    """The flags' workload as prompts and their SamplingParams (each request's max_tokens, the
    temperature, ignore_eos: every request runs to its length)."""
    from minisgl.core import SamplingParams  # (here: the online benchmark's client processes import this module)

    workload = offline_workload(args.num_requests, args.max_input_len, args.max_output_len, vocab_size=vocab_size)
    params = [SamplingParams(temperature=args.temperature, max_tokens=r.max_tokens, ignore_eos=True) for r in workload]
    return [r.prompt_ids for r in workload], params
