"""The HTTP server's watch over its workers, and its shutdown: what the probes say, when requests
are refused, how the requests in flight end.

* A worker that dies: every request in flight ends at once with a 503 (a stream: an error event,
  then [DONE]), new ones are refused with 503, /health fails and the server exits non-zero; the
  launcher then stops every other child (a container restarts).
* A worker that hangs (its heartbeat, minisgl.utils.liveness, silent past --watchdog-timeout):
  /health and /ready fail (the orchestrator restarts the pod) until it turns again.
* SIGTERM or SIGINT: new requests get 503 and those in flight may finish, for at most
  --drain-timeout in total. At the deadline the rest are ended like above, and aborted in the
  pipeline too (their KV pages freed); the server exits 0. A second signal exits at once,
  non-zero: what is still in flight is ended the same way first (for at most FORCED_SETTLE_S), so
  a client gets a 503 it can retry, never a 500 from a handler cancelled at exit.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

from minisgl.utils.logger import get_logger

from ..args import ServerArgs
from .frontend import FrontendClient
from .state import ServerState

logger = get_logger(__name__)


class Supervisor:
    POLL_S = 0.25  # how often the workers are looked at: a death is noticed this fast
    SETTLE_S = 2.0  # at most this long for ended requests to send their last bytes before the server stops
    FORCED_SETTLE_S = 0.5  # the same after a second signal: "at once", but each client still hears why
    # After a worker's death the port stays open this long, answering 503 (and /health 503), so a
    # request just after it gets the promised retryable 503, not "connection refused".
    FAILED_LINGER_S = 2.0

    def __init__(self, args: ServerArgs, workers: Any, state: ServerState, client: FrontendClient, server: Any):
        """`workers`: runtime.workers.Workers; `server`: the uvicorn.Server to stop."""
        self.args, self.workers, self.state, self.client, self.server = args, workers, state, client, server
        self.exit_code = 0
        self.stopping = asyncio.Event()  # a signal arrived (or the server is stopping anyway)
        self.forced = False  # a second signal: no more waiting

    # -- watching ---------------------------------------------------------------------------

    async def watch(self, on_ready=lambda: None) -> None:
        """Wait for every worker to start, then watch them until the server stops."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.workers.wait_ready, self.stopping.is_set)
        except RuntimeError as e:
            if not self.stopping.is_set():
                logger.error("%s", e)
                self.exit_code = 1
            self.server.should_exit = True
            return
        on_ready()
        self.state.ready = True
        while not self.server.should_exit:
            dead = self.workers.dead()
            if dead:
                await self.fail(f"worker {dead} died")
                return
            self._check_heartbeats()
            await asyncio.sleep(self.POLL_S)

    def _check_heartbeats(self) -> None:
        timeout = self.args.watchdog_timeout
        silent = self.workers.silent_past(timeout)
        stalled = tuple(sorted(silent))
        if stalled == self.state.stalled:
            return
        for name in stalled:
            if name not in self.state.stalled:
                logger.error("worker %s has been silent for %.0f s (--watchdog-timeout %.0f): reporting unhealthy",
                             name, silent[name], timeout)
        for name in self.state.stalled:
            if name not in stalled:
                logger.warning("worker %s is responsive again", name)
        self.state.stalled = stalled

    async def fail(self, reason: str) -> None:
        """A worker is gone: refuse everything, end what is in flight, exit non-zero."""
        logger.error("%s; shutting down", reason)
        self.state.failed = reason
        self.exit_code = 1
        # The pipeline is broken, so an abort could wait forever on a dead worker's socket.
        lingered = time.monotonic() + self.FAILED_LINGER_S
        ended = self.client.end_all(f"the server stopped: {reason}", upstream_alive=False)
        if ended:
            logger.error("ended %d request(s) in flight with 503", ended)
            await self._settle()
        while time.monotonic() < lingered and not self.forced:
            await asyncio.sleep(0.05)
        self.server.should_exit = True

    # -- shutting down ------------------------------------------------------------------------

    def on_signal(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self.stopping.is_set():
            logger.warning("received %s again: exiting now", name)
            self.forced = True
            self.exit_code = 128 + sig  # the shell's convention for "ended by this signal"
            self.client.end_all("the server was stopped at once (a second signal) before this request finished; "
                                "retry it")
            asyncio.get_running_loop().create_task(self._exit_at_once())
            return
        logger.info("received %s", name)
        self.stopping.set()
        asyncio.get_running_loop().create_task(self.drain())

    async def drain(self) -> None:
        self.state.draining = True
        timeout = self.args.drain_timeout
        deadline = time.monotonic() + timeout
        logger.info("draining: %d request(s) in flight, up to %.0f s", self.client.in_flight, timeout)
        while self.client.in_flight and time.monotonic() < deadline and not self.server.should_exit:
            await asyncio.sleep(0.05)
        if self.client.in_flight and not self.server.should_exit:
            ended = self.client.end_all(f"the server is shutting down: --drain-timeout ({timeout:g} s) passed "
                                        "before this request finished; retry it")
            logger.warning("drain timeout: ended and aborted %d request(s) still in flight", ended)
            await self._settle()
        self.server.should_exit = True

    async def _exit_at_once(self) -> None:
        await self._settle(self.FORCED_SETTLE_S)
        self.server.force_exit = self.server.should_exit = True

    async def _settle(self, limit_s: float = SETTLE_S) -> None:
        """Give the ended requests their turn to send the last event, [DONE] or the 503."""
        deadline = time.monotonic() + limit_s
        while self.client.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.02)


__all__ = ["Supervisor"]
