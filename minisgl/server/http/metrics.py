"""Every Prometheus metric the server exports on /metrics: names, help, buckets and labels live here.

Names mirror vLLM's (``vllm:X`` -> ``minisgl_X``) so existing dashboards translate by a rename;
the one deliberate difference is ``minisgl_kv_cache_usage_ratio`` (vLLM: ``kv_cache_usage_perc``,
also a 0-1 fraction), named after Prometheus' unit convention. Labels take bounded values only:
``model_name`` (the served name) on every metric and ``finished_reason`` on finished requests.

Where the numbers come from, and why no multiprocess mode:

* Request timing and token counts are measured here, in the API process, on the stream of
  replies each request gets (``ServerMetrics.observe``): TTFT, inter-token latency and generated
  tokens are what the client actually receives.
* Queue time, running/waiting requests, KV pages and prefix-cache hits are known only to the
  scheduler process. It ships them as a small ``SchedulerStatsMsg`` over a ZMQ socket of their own
  a few times a second (``minisgl.scheduler.process.StatsReporter``), and this process exports them.
  Counters and queue times travel as increments since the previous message, so each is applied
  exactly once (PUSH/PULL between live processes drops nothing, and what the scheduler could not
  send without blocking goes with its next message); only tensor-parallel rank 0 reports. No
  double counting, then. Every series lives in this one process's registry, so the counters only
  grow while the server runs; a replaced scheduler process (new pid) just continues them and its
  first message sets the gauges afresh. When the server itself restarts, everything starts from
  zero together with ``process_start_time_seconds``: the reset ``rate()`` expects.
  prometheus_client's multiprocess mode would do the same with mmap files, a directory to create
  and clean at start, a per-gauge aggregation mode and stale files of dead pids; one message type
  is simpler.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)

from minisgl.core.params import SamplingParams
from minisgl.message import Reply, SchedulerStatsMsg
from minisgl.message.sockets import AsyncPullSocket
from minisgl.utils.logger import get_logger

logger = get_logger(__name__)

PREFIX = "minisgl_"
FINISHED_REASONS = ("stop", "length", "abort", "error")

# Buckets in seconds, from a millisecond to minutes: a short chat on a fast GPU and a long prompt
# waiting behind a full batch must both land in a bucket that tells them apart.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4,
               0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
                   120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
# Tokens per request, 1-2-5 steps from one token to a million-token context.
TOKEN_BUCKETS = tuple(float(m * 10**e) for e in range(7) for m in (1, 2, 5))


def minisgl_version() -> str:
    try:
        return importlib.metadata.version("minisgl")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def public_model_label(model: str, model_name: str) -> str:
    """What the info metric shows as `model`: a hub id as given, but never a local directory (a
    filesystem path says how the host is laid out to whoever can scrape /metrics): then the served
    name."""
    local = os.path.isabs(model) or model.startswith((".", "~")) or os.path.exists(model)
    return model_name if local else model


class ServerMetrics:
    """The metrics of one server, in a registry of its own (several apps in one test process must
    not collide in prometheus_client's global one)."""

    def __init__(self, model_name: str, model: str, tp: int = 1, compat: str | None = None,
                 max_loras: int = 0) -> None:
        # In the text format every counter and histogram would get a separate `_created` gauge:
        # twice the series, used by no dashboard. vLLM turns them off the same way.
        disable_created_metrics()
        self.model_name, self.model, self.tp = model_name, public_model_label(model, model_name), tp
        r = self.registry = CollectorRegistry(auto_describe=True)
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):  # process_*, python_*
            r.register(collector)
        label = ["model_name"]
        self.families: dict[str, Any] = {}  # name without the prefix -> the metric (metrics_vllm renames them)

        def kept(name: str, metric: Any) -> Any:
            self.families[name] = metric
            return metric

        def histogram(name: str, doc: str, buckets: tuple[float, ...]):
            return kept(name, Histogram(PREFIX + name, doc, label, buckets=buckets, registry=r)).labels(model_name)

        def counter(name: str, doc: str):
            return kept(name, Counter(PREFIX + name, doc, label, registry=r)).labels(model_name)

        def gauge(name: str, doc: str):
            return kept(name, Gauge(PREFIX + name, doc, label, registry=r)).labels(model_name)

        # Per request (API process).
        self.ttft = histogram("time_to_first_token_seconds",
                              "Time from a request's arrival to its first generated token.", TTFT_BUCKETS)
        self.itl = histogram("inter_token_latency_seconds",
                             "Time between consecutive generated tokens of a request (time per output token).",
                             ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds",
                             "Time from a request's arrival to its end (finished, failed or aborted).", REQUEST_BUCKETS)
        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens of requests that reached their first token.")
        self.generation_tokens = counter("generation_tokens", "Generated tokens delivered to clients.")
        self.request_prompt_tokens = histogram("request_prompt_tokens", "Prompt tokens of each request that reached "
                                               "its first token.", TOKEN_BUCKETS)
        self.request_generation_tokens = histogram("request_generation_tokens", "Tokens generated for each finished "
                                                   "request (each choice of n is a request).", TOKEN_BUCKETS)
        self.decode_time = histogram("request_decode_time_seconds", "Time from a request's first generated token "
                                     "to its end.", REQUEST_BUCKETS)
        finished = kept("request_success", Counter(
            PREFIX + "request_success", "Requests finished, by finished_reason "
            "(stop, length, abort: client gone, error: rejected or failed).",
            ["model_name", "finished_reason"], registry=r))
        # Every reason exists from the start at 0, so rate() sees the first one happen.
        self.finished = {reason: finished.labels(model_name, reason) for reason in FINISHED_REASONS}
        # lora_name is bounded: only loaded adapters' names pass the API's check.
        self.lora_requests = kept("lora_requests", Counter(
            PREFIX + "lora_requests", "Generation requests (one per choice) served by each LoRA adapter "
            "(--lora-modules).", ["model_name", "lora_name"], registry=r))
        # Requests in the server per adapter, for vLLM's lora_requests_info (metrics_vllm).
        self.lora_in_flight: dict[str, int] = {}
        self.max_loras = max_loras
        # From the scheduler process (SchedulerStatsMsg).
        self.queue_time = histogram("request_queue_time_seconds",
                                    "Time a request waited in the scheduler's queue before it was admitted.",
                                    REQUEST_BUCKETS)
        self.prefix_queries = counter("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("prefix_cache_hits", "Prompt tokens found in the prefix cache (not computed).")
        self.preemptions = counter("num_preemptions", "Running requests the scheduler preempted (their KV freed, "
                                   "to be computed again).")
        # Speculative decoding (--speculative): vLLM's spec_decode names; the rate is accepted / drafted
        # since start (rate() of the two counters gives it over a window).
        self.draft_tokens = counter("spec_decode_num_draft_tokens", "Speculative decoding: tokens drafted and "
                                    "verified by the target model.")
        self.accepted_draft_tokens = counter("spec_decode_num_accepted_tokens", "Speculative decoding: drafted "
                                             "tokens the target model accepted.")
        self.acceptance_rate = gauge("spec_decode_draft_acceptance_rate", "Speculative decoding: accepted / "
                                     "drafted tokens since the server started (0 before any draft).")
        self._drafted = self._accepted = 0
        self.running = gauge("num_requests_running", "Requests admitted by the scheduler: prefilling or decoding.")
        # The operator's HorizontalPodAutoscaler targets this exact name.
        self.waiting = gauge("num_requests_waiting", "Requests queued in the scheduler, not yet admitted.")
        self.kv_usage = gauge("kv_cache_usage_ratio", "Fraction of KV cache pages held by requests (0-1).")
        self.kv_used = gauge("kv_cache_used_pages", "KV cache pages held by requests.")
        self.kv_pages = gauge("kv_cache_pages", "KV cache pages in the pool.")
        self.ready = gauge("server_ready", "1 while /ready answers 200 (model loaded, not draining), else 0.")
        self.info = Info(PREFIX + "model", "The served model and how it runs; the value is always 1.", registry=r)
        # The KV cache's layout, as vLLM's cache_config_info and SGLang's give it: the Gateway API
        # Inference Extension's endpoint picker reads page_size and num_pages from these labels to
        # size its prefix-cache index per pod (the operator maps the names in its picker config).
        self.cache_config = Info(PREFIX + "cache_config", "The KV cache's page_size (tokens per page) and "
                                 "num_pages (pages in the pool), as labels; the value is always 1.", registry=r)
        self._scheduler_pid: int | None = None
        self.structured_output_down: str | None = None  # as the scheduler last said (/health shows it)
        if compat == "vllm":
            from .metrics_vllm import VllmNames

            r.register(VllmNames(self))

    # -- exposition ---------------------------------------------------------------------------

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def track_readiness(self, is_ready: Callable[[], bool]) -> None:
        self.ready.set_function(lambda: float(is_ready()))

    # -- requests (API process) ---------------------------------------------------------------

    async def observe(self, replies: AsyncIterator[Reply]) -> AsyncIterator[Reply]:
        """`replies`, unchanged, while timing and counting them. The clock starts at the first
        `anext`, when the request is sent. Leaving early closes `replies` (which aborts the
        request) and counts the request as aborted."""
        start = time.perf_counter()
        last = first = start
        tokens = 0
        finished = False
        async with aclosing(replies):  # type: ignore[type-var]
            try:
                async for reply in replies:
                    now = time.perf_counter()
                    new = reply.completion_tokens - tokens
                    if new > 0:
                        if tokens == 0:
                            self.ttft.observe(now - start)
                            self.prompt_tokens.inc(reply.prompt_tokens)
                            self.request_prompt_tokens.observe(reply.prompt_tokens)
                            first = now
                            gaps, gap = new - 1, 0.0  # tokens that came with the first one: no wait of their own
                        else:
                            gaps, gap = new, (now - last) / new  # k tokens in one reply: k gaps of 1/k each
                        for _ in range(gaps):
                            self.itl.observe(gap)
                        self.generation_tokens.inc(new)
                        tokens, last = reply.completion_tokens, now
                    if reply.finish_reason is not None and not finished:
                        finished = True
                        self._finish(reply.finish_reason, now - start, tokens, now - first)
                    yield reply
            finally:
                if not finished:
                    now = time.perf_counter()
                    self._finish("abort", now - start, tokens, now - first)

    def _finish(self, reason: str, elapsed: float, tokens: int, decoding: float) -> None:
        self.finished.get(reason, self.finished["error"]).inc()
        self.e2e.observe(elapsed)
        self.request_generation_tokens.observe(tokens)
        if tokens:
            self.decode_time.observe(decoding)

    # -- scheduler stats (from the scheduler process) -----------------------------------------

    def apply(self, msg: SchedulerStatsMsg) -> None:
        if msg.pid != self._scheduler_pid:
            if self._scheduler_pid is not None:
                logger.warning("scheduler process changed (pid %s -> %s): continuing its metrics",
                               self._scheduler_pid, msg.pid)
            self._scheduler_pid = msg.pid
        if msg.info:
            self.info.info({"model_name": self.model_name, "model": self.model, "tp": str(self.tp),
                            "version": minisgl_version(), **{k: str(v) for k, v in msg.info.items()}})
            self.cache_config.info({"model_name": self.model_name, "page_size": str(msg.info.get("page_size", "")),
                                    "num_pages": str(msg.num_pages)})
        self.prefix_queries.inc(msg.prefix_queried_tokens)
        self.prefix_hits.inc(msg.prefix_hit_tokens)
        self.preemptions.inc(msg.preemptions)
        if msg.draft_tokens:
            self.draft_tokens.inc(msg.draft_tokens)
            self.accepted_draft_tokens.inc(msg.accepted_draft_tokens)
            self._drafted += msg.draft_tokens
            self._accepted += msg.accepted_draft_tokens
            self.acceptance_rate.set(self._accepted / self._drafted)
        for seconds in msg.queue_times:
            self.queue_time.observe(seconds)
        self.structured_output_down = msg.structured_output_down
        self.running.set(msg.num_running)
        self.waiting.set(msg.num_waiting)
        self.kv_used.set(msg.used_pages)
        self.kv_pages.set(msg.num_pages)
        self.kv_usage.set(msg.used_pages / msg.num_pages if msg.num_pages else 0.0)

    async def follow_scheduler(self, addr: str) -> None:
        """Apply every SchedulerStatsMsg that arrives on `addr`; runs until cancelled."""
        inbox = AsyncPullSocket(addr)
        try:
            while True:
                msg = await inbox.recv()
                if isinstance(msg, SchedulerStatsMsg):
                    self.apply(msg)
        finally:
            inbox.sock.close()


class ObservedClient:
    """A FrontendClient whose generations are observed by `metrics`; everything else passes through.
    The OpenAI routes use it. /health_generate keeps the bare client: a probe's token is not client
    traffic (the scheduler's numbers still include it, as they include all its work)."""

    def __init__(self, client: Any, metrics: ServerMetrics) -> None:
        self._client, self._metrics = client, metrics

    def generate(self, params: SamplingParams, **kwargs: Any) -> AsyncIterator[Reply]:
        if params.lora is None:
            return self._metrics.observe(self._client.generate(params, **kwargs))
        self._metrics.lora_requests.labels(self._metrics.model_name, params.lora).inc()
        return self._in_flight(params.lora, self._metrics.observe(self._client.generate(params, **kwargs)))

    async def _in_flight(self, lora: str, replies: AsyncIterator[Reply]) -> AsyncIterator[Reply]:
        counts = self._metrics.lora_in_flight
        counts[lora] = counts.get(lora, 0) + 1
        try:
            async with aclosing(replies):  # type: ignore[type-var]
                async for reply in replies:
                    yield reply
        finally:
            counts[lora] -= 1
            if not counts[lora]:
                del counts[lora]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


__all__ = ["ServerMetrics", "ObservedClient", "FINISHED_REASONS", "PREFIX", "TTFT_BUCKETS", "ITL_BUCKETS",
           "REQUEST_BUCKETS", "TOKEN_BUCKETS"]
