"""Command-line flags of the server: the one place where each flag, its default and its help live.

Everything else (the launcher, the Dockerfile test, the Kubernetes operator) reads these values
from here instead of repeating them.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 1919
API_KEY_ENV = "MINISGL_API_KEY"

# Probe paths, shared with the Dockerfile HEALTHCHECK and the operator's pod probes.
LIVENESS_PATH = "/health"
READINESS_PATH = "/ready"
METRICS_PATH = "/metrics"


def _flag(help: str, default: Any = None, **argparse_kwargs: Any) -> Any:
    return field(default=default, metadata={"help": help, **argparse_kwargs})


@dataclass(frozen=True)
class ServerArgs:
    model: str | None = _flag(
        "HF model id or local directory. Without it a small built-in demo model with random "
        "weights is served on the CPU (its output is random text)."
    )
    tp: int = _flag("Tensor-parallel size: one engine process per rank.", 1)
    host: str = _flag("Address to listen on (use 0.0.0.0 inside a container).", DEFAULT_HOST)
    port: int = _flag("Port to listen on.", DEFAULT_PORT)
    dtype: str = _flag("Weight and activation dtype: auto, bfloat16, float16 or float32.", "auto")
    device: str = _flag("Device to run on: auto (CUDA when present, else CPU), cuda or cpu.", "auto")
    page_size: int = _flag("Tokens per KV-cache page.", 16)
    max_running_requests: int = _flag("Most requests decoding at once.", 256)
    max_prefill_length: int = _flag(
        "Most prompt tokens computed in one step; longer prompts are split (chunked prefill).", 8192
    )
    max_seq_len: int | None = _flag("Cap on prompt + output tokens (default: the model's).")
    cache: str = _flag("Prefix cache: radix (share prompt prefixes) or naive.", "radix", choices=["radix", "naive"])
    attn: str = _flag("Attention backend(s): 'auto', a name, or 'prefill,decode' (an unknown name lists them).",
                      "auto")
    cuda_graph_max_bs: int | None = _flag("Largest decode batch captured in a CUDA graph (0 turns graphs off).")
    memory_ratio: float = _flag("Fraction of device memory for weights, graphs and KV cache.", 0.9)
    num_pages: int | None = _flag("Fix the number of KV pages instead of sizing from memory.")
    dummy_weight: bool = _flag("Random weights instead of loading a checkpoint (benchmarks).", False)
    served_model_name: str | None = _flag("Model name reported by the API (default: --model).")
    api_key: str | None = _flag(f"Require 'Authorization: Bearer KEY' on /v1/* (also from ${API_KEY_ENV}).")
    shell: bool = _flag("Open an interactive chat in the terminal instead of serving HTTP.", False)
    drain_timeout: float = _flag("Seconds to let in-flight requests finish after SIGTERM.", 30.0)
    watchdog_timeout: float = _flag(
        "Seconds the scheduler may go silent (one step that long: a hung GPU or collective) before /health "
        "fails, so the orchestrator restarts the server.", 300.0)
    max_request_bytes: int = _flag("Largest request body accepted, in bytes (413 beyond).", 8 << 20)
    max_prompt_tokens: int | None = _flag("Most prompt tokens per request (default: the context length).")
    max_new_tokens: int | None = _flag("Largest max_tokens a request may ask for (default: the context length).")
    max_n: int = _flag("Largest n (choices per request) and number of prompts per completion request.", 16)
    max_pending_requests: int = _flag(
        "Requests in the server at once, running or queued; beyond it new ones get 429 with Retry-After.", 1024)
    tokenizer_workers: int | None = _flag(
        "Tokenizer processes (chat template + encoding run in parallel for many arriving requests); "
        "default: one per 8 CPU cores, 1 to 4.")
    log_level: str = _flag("Logging level.", "info")

    @property
    def num_tokenizers(self) -> int:
        return self.tokenizer_workers or max(1, min(4, (os.cpu_count() or 1) // 8))

    @property
    def model_name(self) -> str:
        return self.served_model_name or self.model or "minisgl-demo"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minisgl",
        description="minisgl: an OpenAI-compatible LLM inference server.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for f in fields(ServerArgs):
        flag = "--" + f.name.replace("_", "-")
        meta = dict(f.metadata)
        help_text = meta.pop("help")
        if f.type in ("bool", bool):
            parser.add_argument(flag, action="store_true", help=help_text)
            continue
        kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
        parser.add_argument(flag, type=kind, default=f.default, help=help_text, **meta)
    return parser


def parse_args(argv: list[str] | None = None) -> ServerArgs:
    parser = build_parser()
    ns = parser.parse_args(argv)
    values = vars(ns)
    if values["api_key"] is None:
        values["api_key"] = os.environ.get(API_KEY_ENV) or None
    args = ServerArgs(**values)
    problem = validate(args)
    if problem:
        parser.error(problem)
    return args


def validate(args: ServerArgs) -> str | None:
    if args.tp < 1:
        return "--tp must be >= 1"
    if not 0 < args.port < 65536:
        return "--port must be in 1..65535"
    if args.page_size < 1:
        return "--page-size must be >= 1"
    if args.max_running_requests < 1:
        return "--max-running-requests must be >= 1"
    if args.max_prefill_length < 1:
        return "--max-prefill-length must be >= 1"
    if not 0 < args.memory_ratio <= 1:
        return "--memory-ratio must be in (0, 1]"
    for name in ("tokenizer_workers", "max_request_bytes", "max_n", "max_pending_requests", "max_prompt_tokens", "max_new_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            return f"--{name.replace('_', '-')} must be >= 1"
    if args.dtype not in ("auto", "bfloat16", "float16", "float32"):
        return "--dtype must be one of auto, bfloat16, float16, float32"
    if args.device not in ("auto", "cuda", "cpu"):
        return "--device must be one of auto, cuda, cpu"
    return None


def defaults() -> dict[str, Any]:
    """Default value of every flag, keyed by field name."""
    return {f.name: f.default for f in fields(ServerArgs) if f.default is not MISSING}


__all__ = ["ServerArgs", "build_parser", "parse_args", "defaults", "asdict"]
