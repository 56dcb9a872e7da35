"""The scheduler process: receives requests over ZMQ, steps the Scheduler, sends tokens on."""

from __future__ import annotations

import dataclasses
import os
import time
from multiprocessing.queues import Queue

import zmq

from minisgl.core import SamplingParams
from minisgl.message import AbortMsg, ExitMsg, SchedulerStatsMsg, TokenBatchMsg, UserMsg, encode
from minisgl.utils.logger import get_logger
from minisgl.utils.process import ParentWatch, run_worker
from minisgl.utils.zmq import PullSocket, PushSocket

from .config import SchedulerConfig
from .scheduler import Scheduler, StepOutput

logger = get_logger(__name__)
_PARAM_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}

def to_sampling_params(params: dict, prompt_len: int, max_seq_len: int) -> SamplingParams:
    """The API's parameters as SamplingParams; max_tokens None means the rest of the context."""
    kwargs = {k: v for k, v in params.items() if k in _PARAM_FIELDS and v is not None}
    kwargs.setdefault("max_tokens", max(1, max_seq_len - prompt_len))
    for key in ("stop_token_ids", "stop"):
        if key in kwargs:
            kwargs[key] = tuple(kwargs[key])
    return SamplingParams(**kwargs)


def attention_label(backend) -> str:
    """The attention backend the engine built ('auto' resolved), as its start-up log names it:
    'TorchNative', 'FlashInfer (fa3 prefill)', 'A prefill + B decode'."""
    prefill, decode = getattr(backend, "prefill", None), getattr(backend, "decode", None)
    if prefill is not None and decode is not None:
        return f"{attention_label(prefill)} prefill + {attention_label(decode)} decode"
    kernel = getattr(backend, "prefill_kernel", None)
    name = type(backend).__name__.removesuffix("Backend")
    return f"{name} ({kernel} prefill)" if kernel else name


class StatsReporter:
    """Sends the API process what /metrics shows from the scheduler: queue times, running and
    waiting requests, KV pages, prefix-cache tokens (minisgl.server.metrics says why a message).

    Queue time runs from a request's arrival here to the step that admits it. Admission happens
    inside Scheduler.step, so this watches the waiting queue instead: it is first come, first
    served, and a request leaves it only by admission or by an abort, which `aborted` sees first.
    """

    INTERVAL_S = 0.25  # at most this often; nothing is sent while nothing changes
    MAX_QUEUE_TIMES = 10_000  # kept while unsent (the oldest go first)

    def __init__(self, scheduler: Scheduler, addr: str):
        self.scheduler = scheduler
        self.out = PushSocket(addr)
        self.arrived: dict[int, float] = {}  # uid -> arrival, for requests in the waiting queue
        self.queue_times: list[float] = []
        self.reported = (0, 0)  # prompt tokens and prefix-cache hits sent so far
        self.gauges: tuple[int, ...] | None = None
        self.last_sent = 0.0
        self.pending_info: dict[str, str] | None = self.info()  # goes with the first message sent

    def info(self) -> dict[str, str]:
        e = self.scheduler.engine
        return {"dtype": str(e.dtype).removeprefix("torch."), "device": e.device.type, "page_size": str(e.page_size),
                "attention_backend": attention_label(e.attn_backend)}

    def queued(self, uid: int) -> None:
        if uid in self.scheduler.reqs:  # not rejected
            self.arrived[uid] = time.monotonic()

    def aborted(self, uid: int) -> None:
        self.arrived.pop(uid, None)  # still waiting: it never gets a queue time

    def stepped(self, step_start: float) -> None:
        """After a step that began at `step_start`: the requests it admitted have waited until then."""
        waiting = self.scheduler.prefill.waiting
        if len(self.arrived) > len(waiting):
            still = {r.uid for r in waiting}
            for uid in [u for u in self.arrived if u not in still]:
                self.queue_times.append(step_start - self.arrived.pop(uid))

    def send(self) -> None:
        now = time.monotonic()
        if now - self.last_sent < self.INTERVAL_S:
            return
        s = self.scheduler
        gauges = (s.num_running, s.num_waiting, s.cache.used_pages, s.engine.num_pages)
        counters = (s.stats.prompt_tokens, s.stats.prefix_hit_tokens)
        if gauges == self.gauges and counters == self.reported and not self.queue_times and not self.pending_info:
            return
        queried, hits = counters[0] - self.reported[0], counters[1] - self.reported[1]
        msg = SchedulerStatsMsg(os.getpid(), *gauges, prefix_queried_tokens=queried, prefix_hit_tokens=hits,
                                queue_times=self.queue_times, info=self.pending_info)
        self.last_sent = now
        try:
            # Never block the scheduler on metrics: with nobody reading (the shell has no /metrics)
            # the socket fills up, and what was not sent simply goes with the next message.
            self.out.sock.send(encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            del self.queue_times[: -self.MAX_QUEUE_TIMES]
            return
        self.gauges, self.reported, self.queue_times, self.pending_info = gauges, counters, [], None


class SchedulerServer:
    def __init__(self, scheduler: Scheduler, addrs: dict[str, str]):
        self.scheduler = scheduler
        self.inbox = PullSocket(addrs["scheduler"])
        self.to_detok = PushSocket(addrs["detokenizer"])
        self.vocab_size = scheduler.engine.model_config.vocab_size
        # Only the primary rank reports, so tensor-parallel ranks are never counted twice.
        primary = scheduler.engine.tp.is_primary
        self.stats = StatsReporter(scheduler, addrs["stats"]) if primary and "stats" in addrs else None
        if self.stats:
            self.stats.send()  # before the launcher hears "ready": the info metric is there by then

    def handle(self, msg) -> bool:
        """Apply one message; False when told to exit."""
        s = self.scheduler
        if isinstance(msg, ExitMsg):
            return False
        if isinstance(msg, AbortMsg):
            if self.stats:
                self.stats.aborted(msg.uid)
            s.abort(msg.uid)
        elif isinstance(msg, UserMsg):
            try:
                params = to_sampling_params(msg.params, len(msg.input_ids), s.engine.max_seq_len)
                bad = next((t for t in msg.input_ids if not 0 <= t < self.vocab_size), None)
                if bad is not None:
                    raise ValueError(f"token id {bad} is outside the vocabulary (0..{self.vocab_size - 1})")
            except (ValueError, TypeError) as e:
                self.send([StepOutput(msg.uid, None, "error", str(e), len(msg.input_ids))])
                return True
            s.add_request(msg.uid, msg.input_ids, params)
            if self.stats:
                self.stats.queued(msg.uid)
        return True

    def send(self, outputs: list[StepOutput]) -> None:
        if outputs:
            self.to_detok.send(TokenBatchMsg([dataclasses.asdict(o) for o in outputs]))

    def serve(self) -> None:
        watch = ParentWatch()
        while watch.alive():
            busy = self.scheduler.has_work
            for msg in self.inbox.recv_all(timeout_ms=0 if busy else 100):
                if not self.handle(msg):
                    return
            if self.scheduler.has_work:
                step_start = time.monotonic()
                self.send(self.scheduler.step())
                if self.stats:
                    self.stats.stepped(step_start)
            if self.stats:
                self.stats.send()

def run_scheduler(config: SchedulerConfig, addrs: dict[str, str], status: Queue) -> None:
    def body(ready):
        scheduler = Scheduler(config)
        server = SchedulerServer(scheduler, addrs)
        ready()
        try:
            server.serve()
        finally:
            scheduler.shutdown()

    run_worker("scheduler", status, body)
