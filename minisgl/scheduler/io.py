"""The scheduler process: receives requests over ZMQ, steps the Scheduler, sends tokens on."""

from __future__ import annotations

import dataclasses
from multiprocessing.queues import Queue

from minisgl.core import SamplingParams
from minisgl.message import AbortMsg, ExitMsg, TokenBatchMsg, UserMsg
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

class SchedulerServer:
    def __init__(self, scheduler: Scheduler, addrs: dict[str, str]):
        self.scheduler = scheduler
        self.inbox = PullSocket(addrs["scheduler"])
        self.to_detok = PushSocket(addrs["detokenizer"])
        self.vocab_size = scheduler.engine.model_config.vocab_size

    def handle(self, msg) -> bool:
        """Apply one message; False when told to exit."""
        s = self.scheduler
        if isinstance(msg, ExitMsg):
            return False
        if isinstance(msg, AbortMsg):
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
                self.send(self.scheduler.step())

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
