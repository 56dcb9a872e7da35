"""The scheduler process: receives requests over ZMQ, steps the Scheduler, sends tokens on."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch
import zmq

from minisgl.distributed import broadcast_objects
from minisgl.message import (
    AbortMsg,
    ExitMsg,
    LoraUpdateMsg,
    SchedulerStatsMsg,
    TokenBatchMsg,
    TokenizedRequestMsg,
    encode,
)
from minisgl.message.sockets import PullSocket, PushSocket
from minisgl.utils.liveness import Heartbeat, WorkerLink
from minisgl.utils.logger import get_logger
from minisgl.utils.process import ParentWatch, run_worker

from .config import SchedulerConfig
from .scheduler import Scheduler, StepOutput

logger = get_logger(__name__)


class StatsReporter:
    """Sends the API process what /metrics shows from the scheduler: queue times, running and
    waiting requests, KV pages, prefix-cache tokens (minisgl.server.http.metrics says why a message).

    Queue time runs from a request's arrival here to the step that first admits it (the prefill
    manager lists those); an abort before that, which `aborted` sees, gives none.
    """

    INTERVAL_S = 0.25  # at most this often, and only when something changed
    MAX_QUEUE_TIMES = 10_000  # kept while unsent (the oldest go first)

    def __init__(self, scheduler: Scheduler, addr: str):
        self.scheduler = scheduler
        self.out = PushSocket(addr)
        self.arrived: dict[int, float] = {}  # uid -> arrival, for requests in the waiting queue
        self.queue_times: list[float] = []
        self.reported = (0, 0, 0, 0, 0)  # prompt tokens, prefix-cache hits, preemptions, drafted and accepted tokens sent so far
        self.gauges: tuple[int, ...] | None = None
        self.last_sent = 0.0
        self.reported_down: str | None = None
        self.pending_info: dict[str, str] | None = self.info()  # goes with the first message sent

    def info(self) -> dict[str, str]:
        e = self.scheduler.engine
        return {"dtype": str(e.dtype).removeprefix("torch."), "device": e.device.type, "page_size": str(e.page_size),
                "attention_backend": e.attn_backend.label}

    def queued(self, uid: int) -> None:
        if uid in self.scheduler.reqs:  # not rejected
            self.arrived[uid] = time.monotonic()

    def aborted(self, uid: int) -> None:
        self.arrived.pop(uid, None)  # still waiting: it never gets a queue time

    def stepped(self, step_start: float) -> None:
        """After a step that began at `step_start`: the requests it admitted have waited until then."""
        admitted = self.scheduler.prefill.admitted
        while admitted:
            uid = admitted.popleft()
            arrived = self.arrived.pop(uid, None)
            if arrived is not None:
                self.queue_times.append(step_start - arrived)

    def send(self, idle: bool = False) -> None:
        """Rate-limited while busy; once idle, what changed goes at once, so the gauges read 0 by
        the time the last reply reaches its client (it takes the detokenizer's extra hop)."""
        now = time.monotonic()
        if now - self.last_sent < self.INTERVAL_S and not idle:
            return
        s = self.scheduler
        gauges = (s.num_running, s.num_waiting, s.cache.used_pages, s.engine.num_pages)
        down = s.grammars.down
        counters = (s.stats.prompt_tokens, s.stats.prefix_hit_tokens, s.stats.preemptions, s.stats.draft_tokens,
                    s.stats.accepted_tokens)
        unchanged = (gauges == self.gauges and counters == self.reported and not self.queue_times
                     and down == self.reported_down)
        if unchanged and not self.pending_info:
            return
        queried, hits, preempted, drafted, accepted = (now_ - then for now_, then in zip(counters, self.reported))
        msg = SchedulerStatsMsg(os.getpid(), *gauges, prefix_queried_tokens=queried, prefix_hit_tokens=hits,
                                preemptions=preempted, draft_tokens=drafted, accepted_draft_tokens=accepted,
                                queue_times=self.queue_times, info=self.pending_info, structured_output_down=down)
        self.last_sent = now
        try:
            # Never block the scheduler on metrics: with nobody reading (the shell has no /metrics)
            # the socket fills up, and what was not sent simply goes with the next message.
            self.out.sock.send(encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            del self.queue_times[: -self.MAX_QUEUE_TIMES]
            return
        self.gauges, self.reported, self.queue_times, self.pending_info = gauges, counters, [], None
        self.reported_down = down


class LocalInbox:
    """An in-process stand-in for the scheduler's ZMQ inbox (the offline LLM uses it)."""

    def __init__(self) -> None:
        self.pending: list = []

    def put(self, msg) -> None:
        self.pending.append(msg)

    def recv_all(self, timeout_ms: int) -> list:
        msgs, self.pending = self.pending, []
        return msgs


class SchedulerServer:
    """Every tensor-parallel rank runs one, each with its own Scheduler. Rank 0 alone has an inbox
    and an output; it broadcasts what it received each iteration, so all ranks apply the same
    messages in the same order, make the same scheduling decisions and run the same batches."""

    def __init__(self, scheduler: Scheduler, inbox=None, send: Callable[[list[StepOutput]], None] | None = None,
                 stats: StatsReporter | None = None, heartbeat: Heartbeat | None = None):
        self.scheduler = scheduler
        self.primary = scheduler.engine.tp.is_primary
        self.tp_size = scheduler.engine.tp.size
        self.inbox = inbox if self.primary else None
        self._send = send if self.primary else None
        self.watch = ParentWatch(heartbeat)  # every rank beats, once per turn of its loop
        self.stats = stats
        if self.stats:
            self.stats.send()  # before the launcher hears "ready": the info metric is there by then

    @classmethod
    def over_zmq(cls, scheduler: Scheduler, addrs: dict[str, str],
                 heartbeat: Heartbeat | None = None) -> SchedulerServer:
        if not scheduler.engine.tp.is_primary:
            return cls(scheduler, heartbeat=heartbeat)
        to_detok = PushSocket(addrs["detokenizer"])
        # Only the primary rank reports, so tensor-parallel ranks are never counted twice.
        stats = StatsReporter(scheduler, addrs["stats"]) if "stats" in addrs else None
        return cls(scheduler, PullSocket(addrs["scheduler"]),
                   lambda outs: to_detok.send(TokenBatchMsg(outs)), stats, heartbeat)

    def receive(self, timeout_ms: int) -> list:
        msgs = None
        launcher_alive = self.watch.alive()
        if self.primary:
            msgs = self.inbox.recv_all(timeout_ms) if launcher_alive else [ExitMsg()]
        if self.tp_size > 1:
            msgs = broadcast_objects([msgs])[0]
        return msgs

    def handle(self, msg) -> bool:
        """Apply one message; False when told to exit."""
        s = self.scheduler
        if isinstance(msg, ExitMsg):
            return False
        if isinstance(msg, AbortMsg):
            if self.stats:
                self.stats.aborted(msg.uid)
            s.abort(msg.uid)
        elif isinstance(msg, TokenizedRequestMsg):
            s.add_request(msg.uid, msg.input_ids, msg.params)  # a request that cannot run gets an error output
            if self.stats:
                self.stats.queued(msg.uid)
        elif isinstance(msg, LoraUpdateMsg):
            s.update_lora(msg.uid, msg.name, msg.path)
        return True

    def send(self, outputs: list[StepOutput]) -> None:
        if outputs and self._send:
            self._send(outputs)

    def run_once(self) -> bool:
        """Apply what arrived, run one step if there is work; False once told to exit."""
        for msg in self.receive(timeout_ms=0 if self.scheduler.has_work else 100):
            if not self.handle(msg):
                return False
        if self.scheduler.has_work:
            step_start = time.monotonic()
            self.send(self.scheduler.step())
            if self.stats:
                self.stats.stepped(step_start)
        if self.stats:
            self.stats.send(idle=not self.scheduler.has_work)
        return True

    def serve(self) -> None:
        while self.run_once():
            pass


def run_scheduler(config: SchedulerConfig, addrs: dict[str, str], link: WorkerLink,
                  before_ready: Callable[[], None] = lambda: None) -> None:
    """The scheduler process: the engine loaded and warmed up, then `before_ready` (the launcher's
    go: it loads while the launcher starts, and is reported ready once that can be seen)."""

    def body(ready):
        if config.tp_info.size > 1 and not torch.cuda.is_available():
            # CPU ranks share the machine's cores.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // config.tp_info.size))
        scheduler = Scheduler(config)
        if scheduler.engine.device.type == "cuda" and not config.skip_server_warmup:
            scheduler.warm_up()  # compiles and allocations happen now, not in the first burst's latency
        server = SchedulerServer.over_zmq(scheduler, addrs, link.heartbeat)
        before_ready()
        ready()
        try:
            server.serve()
        finally:
            scheduler.shutdown()

    run_worker(link, body)
