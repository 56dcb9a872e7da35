"""The server's engine flags on the offline benchmarks' command lines (added there with
minisgl.server.args.add_flags, which defines each once), passed on to LLM(...) under the same names."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from minisgl.engine.config import resolve_dtype

ENGINE_FLAGS = ("tp", "dtype", "device", "page_size", "kv_cache_dtype", "quantization", "max_running_requests",
                "max_prefill_length", "prefill_delay_steps", "attn", "moe_backend", "cuda_graph_max_bs",
                "piecewise_cuda_graph_max_tokens", "disable_custom_all_reduce", "memory_ratio", "dummy_weight")


def llm_kwargs(args: argparse.Namespace, names: Iterable[str] = ENGINE_FLAGS) -> dict[str, Any]:
    """LLM(model, **llm_kwargs(args)): the flags' values, with --dtype as a torch dtype."""
    values = {name: getattr(args, name) for name in names}
    if "dtype" in values:
        values["dtype"] = resolve_dtype(values["dtype"])
    return values
