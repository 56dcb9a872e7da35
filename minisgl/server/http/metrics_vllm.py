"""``--metrics-compat vllm``: the server's metrics also under vLLM's names (``vllm:...``), so the
dashboards, KEDA scalers and gateways written for vLLM read minisgl unchanged.

Nothing is measured twice: at each scrape every series below is the minisgl series it names,
renamed, with the same samples and labels (``model_name``, ``finished_reason``, ``le``). Two
info-style series are built from what the server knows, with vLLM's label names:
``cache_config_info`` (``block_size``, ``num_gpu_blocks``) and ``lora_requests_info``
(``max_lora``, ``running_lora_adapters``: the adapters of requests in the server, queued ones
included, as the API process cannot tell them apart; ``waiting_lora_adapters`` stays empty).

Where a vLLM series has no exact counterpart here, the one it reads says so in this table's help:
``request_prefill_time_seconds`` is the time to first token (queue time included: only the
scheduler sees a request's admission), ``request_max_num_generation_tokens`` is the tokens of each
choice (every choice of ``n`` runs as a request of its own) and ``gpu_cache_usage_perc``, the name
vLLM's example dashboard still queries, is ``kv_cache_usage_perc`` again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .metrics import ServerMetrics

VLLM_PREFIX = "vllm:"

# vLLM's name (without the prefix) -> the minisgl series it shows (without minisgl's prefix).
RENAMES: dict[str, str] = {
    "num_requests_running": "num_requests_running",
    "num_requests_waiting": "num_requests_waiting",
    "kv_cache_usage_perc": "kv_cache_usage_ratio",  # a 0-1 fraction in both, despite vLLM's name
    "gpu_cache_usage_perc": "kv_cache_usage_ratio",
    "num_preemptions": "num_preemptions",
    "prompt_tokens": "prompt_tokens",
    "generation_tokens": "generation_tokens",
    "prefix_cache_queries": "prefix_cache_queries",
    "prefix_cache_hits": "prefix_cache_hits",
    "request_success": "request_success",
    "time_to_first_token_seconds": "time_to_first_token_seconds",
    "time_per_output_token_seconds": "inter_token_latency_seconds",
    "inter_token_latency_seconds": "inter_token_latency_seconds",
    "e2e_request_latency_seconds": "e2e_request_latency_seconds",
    "request_queue_time_seconds": "request_queue_time_seconds",
    "request_prefill_time_seconds": "time_to_first_token_seconds",
    "request_decode_time_seconds": "request_decode_time_seconds",
    "request_inference_time_seconds": "e2e_request_latency_seconds",
    "request_prompt_tokens": "request_prompt_tokens",
    "request_generation_tokens": "request_generation_tokens",
    "request_max_num_generation_tokens": "request_generation_tokens",
}


def renamed(family: Metric, name: str, note: str) -> Metric:
    out = Metric(name, f"{family.documentation} ({note})", family.type)
    for s in family.samples:
        out.add_sample(name + s.name[len(family.name):], s.labels, s.value, s.timestamp, s.exemplar)
    return out


class VllmNames(Collector):
    """Collects `metrics`' series again under vLLM's names, at every scrape."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self.metrics = metrics
        self.lora_changed = time.time()
        self.lora_seen: tuple[str, ...] = ()

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        for vllm_name, ours in RENAMES.items():
            for family in m.families[ours].collect():
                yield renamed(family, VLLM_PREFIX + vllm_name, f"minisgl_{ours}")
        yield from self.cache_config()
        yield self.lora_info()

    def cache_config(self) -> Iterator[Metric]:
        for family in self.metrics.cache_config.collect():
            for s in (s for s in family.samples if "page_size" in s.labels):  # known once the scheduler reported
                info = GaugeMetricFamily(VLLM_PREFIX + "cache_config_info", "The KV cache's block_size (tokens per "
                                         "page) and num_gpu_blocks (pages in the pool).",
                                         labels=["block_size", "num_gpu_blocks", "model_name"])
                info.add_metric([s.labels["page_size"], s.labels["num_pages"], s.labels["model_name"]], 1.0)
                yield info

    def lora_info(self) -> Metric:
        running = tuple(sorted(self.metrics.lora_in_flight))
        if running != self.lora_seen:  # vLLM's value: when the set last changed
            self.lora_seen, self.lora_changed = running, time.time()
        info = GaugeMetricFamily(VLLM_PREFIX + "lora_requests_info", "LoRA adapters of the requests in the server; "
                                 "the value is when that set last changed (Unix seconds).",
                                 labels=["max_lora", "running_lora_adapters", "waiting_lora_adapters"])
        info.add_metric([str(self.metrics.max_loras), ",".join(running), ""], self.lora_changed)
        return info


__all__ = ["VllmNames", "RENAMES", "VLLM_PREFIX"]
