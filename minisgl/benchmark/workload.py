"""The offline workload the field compares on (nano-vllm, Mini-SGLang), scalable for small machines."""

from __future__ import annotations

import argparse
import random
from dataclasses import asdict, dataclass, fields, replace


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


def fresh_ids(prompts: list[list[int]], seed: int, vocab_size: int = 10001) -> list[list[int]]:
    """The same prompt lengths with other random ids, drawn as offline_workload draws them: a rerun
    of the workload that finds none of its prompts in the prefix cache."""
    rng = random.Random(seed)
    return [[rng.randint(0, 10000) % vocab_size for _ in p] for p in prompts]


@dataclass(frozen=True)
class WorkloadSize:
    num_requests: int
    max_input_len: int
    max_output_len: int


# Named sizes of offline_workload; --workload picks one, --num-requests etc. override its fields.
WORKLOADS = {
    "field": WorkloadSize(256, 1024, 1024),  # nano-vllm's and Mini-SGLang's offline benchmark
    # The serving benchmark: 256 requests finish on a GPU too fast to tell a 5% change apart.
    "serving": WorkloadSize(1024, 1024, 256),
    "long": WorkloadSize(1024, 1024, 2048),  # the serving one with long outputs: 1,074 tokens on average
}


def add_workload_flags(p: argparse.ArgumentParser, default: str = "field") -> None:
    """The benchmarks' workload on their command line: a named size, each of its fields
    overridable, and the sampling temperature. Read the sizes with workload_size(args)."""
    p.add_argument("--workload", choices=sorted(WORKLOADS), default=default,
                   help="named size: " + "; ".join(f"{name} {w.num_requests} requests, inputs <= {w.max_input_len}, "
                                                   f"outputs <= {w.max_output_len}" for name, w in WORKLOADS.items())
                   + " (lengths random in [min(100, max), max])")
    for field in fields(WorkloadSize):
        p.add_argument("--" + field.name.replace("_", "-"), type=int, help="default: the --workload's")
    p.add_argument("--temperature", type=float, default=0.6)


def workload_size(args: argparse.Namespace) -> WorkloadSize:
    """The --workload's size with the fields given on the command line in its place."""
    named = WORKLOADS[args.workload]
    given = {f.name: getattr(args, f.name) for f in fields(WorkloadSize) if getattr(args, f.name) is not None}
    return replace(named, **given)


def workload_settings(args: argparse.Namespace) -> dict:
    """The flags' values, for a result's JSON."""
    return {"workload": args.workload, **asdict(workload_size(args)), "temperature": args.temperature}


def workload_requests(args: argparse.Namespace, vocab_size: int) -> tuple[list[list[int]], list]:
    """The flags' workload as prompts and their SamplingParams (each request's max_tokens, the
    temperature, ignore_eos: every request runs to its length)."""
    from minisgl.core.params import SamplingParams  # (here: the online benchmark's client processes import this module)

    size = workload_size(args)
    workload = offline_workload(size.num_requests, size.max_input_len, size.max_output_len, vocab_size=vocab_size)
    params = [SamplingParams(temperature=args.temperature, max_tokens=r.max_tokens, ignore_eos=True) for r in workload]
    return [r.prompt_ids for r in workload], params
