"""Connection hygiene for the HTTP server: slow clients are cut off, connections are capped, and
the process may hold as many sockets as the system allows.

uvicorn already closes idle keep-alive connections (--timeout-keep-alive) and refuses requests
beyond `limit_concurrency` with 503; what it lacks is a deadline for a request's *head*: a client
sending its headers a byte every few seconds (slowloris) resets uvicorn's keep-alive timer with
each byte and holds its socket forever. `head_deadline_protocol` adds that deadline to uvicorn's
own HTTP protocol classes (httptools or h11, whichever uvicorn would pick). The body's deadline is
an ASGI concern and lives in http.middleware.BodySizeLimit, which reads the body anyway.
"""

from __future__ import annotations

import asyncio
import resource

from minisgl.utils.logger import get_logger

logger = get_logger(__name__)


def raise_open_file_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (children inherit it): every
    connection is a file descriptor, and the usual soft limit of 1024 runs out long before memory
    does. Returns the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as e:  # e.g. a hard limit above the kernel's nr_open
            logger.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, e)
    return soft


# File descriptors the server needs besides client connections: model files, ZMQ sockets, pipes.
RESERVED_FDS = 256


def connection_limit(requested: int, open_file_limit: int) -> int:
    """The connection cap actually enforced: `requested`, but never so many that accepting them
    would exhaust the open-file limit (then /health itself could not be answered)."""
    room = max(1, open_file_limit - RESERVED_FDS)
    if requested > room:
        logger.warning("--max-connections %d is above what the open-file limit %d allows: capping at %d",
                       requested, open_file_limit, room)
    return min(requested, room)


def head_deadline_protocol(base: type[asyncio.Protocol], timeout: float) -> type[asyncio.Protocol]:
    """`base` (a uvicorn HTTP protocol class) with a deadline: a connection that has not sent a
    complete request head `timeout` seconds after it opened, or after its previous response, is
    closed. Both uvicorn protocols create `self.cycle` when a head is complete and call
    `on_response_complete` after each response, which is all this relies on."""

    class HeadDeadlineProtocol(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_head_deadline()

        def on_response_complete(self) -> None:
            # Armed with the finished cycle before uvicorn may start a pipelined next one, which
            # then counts as the head having come.
            self._arm_head_deadline()
            super().on_response_complete()

        def connection_lost(self, exc) -> None:
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            waiting_after = self.cycle  # the head has come once self.cycle is a new one
            self._head_timer = self.loop.call_later(timeout, self._head_overdue, waiting_after)

        def _disarm_head_deadline(self) -> None:
            timer = getattr(self, "_head_timer", None)
            if timer is not None:
                timer.cancel()
                self._head_timer = None

        def _head_overdue(self, waiting_after) -> None:
            self._head_timer = None
            if self.cycle is waiting_after and not self.transport.is_closing():
                logger.debug("closing a connection that sent no complete request head in %.0f s", timeout)
                self.transport.close()

    HeadDeadlineProtocol.__name__ = f"HeadDeadline{base.__name__}"
    return HeadDeadlineProtocol


def uvicorn_http_protocol(timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's own choice of HTTP protocol (httptools when installed, else h11), with the head
    deadline."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return head_deadline_protocol(base, timeout)
