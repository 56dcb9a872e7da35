"""Connection hygiene for the HTTP server: slow clients are cut off, connections are capped, and
the process may hold as many sockets as the system allows.

uvicorn already closes idle keep-alive connections (--timeout-keep-alive); what it lacks is a
deadline and a size limit for a request's *head*: a client sending its headers a byte every few
seconds (slowloris) resets uvicorn's keep-alive timer with each byte and holds its socket forever,
and httptools buffers headers of any size. `head_deadline_protocol` adds both to uvicorn's own HTTP
protocol classes (httptools or h11, whichever uvicorn would pick), and enforces the connection
cap in two halves. Here: a connection opened beyond the cap closes those that have waited longest
for a request head (sockets opened and left idle first, then keep-alive ones idle between
requests), so idle sockets stay bounded. In the app (http.middleware.ConnectionCap): an API request
arriving while the cap of them are in progress gets 503 JSON; requests without the key, the probes
and /metrics are never counted, so neither idle sockets nor unauthenticated ones can lock clients
out. (uvicorn's own limit_concurrency counted every socket and refused the probes too, in plain
text: idle sockets beyond the cap failed /health.) The body's deadline and size are ASGI concerns
(http.middleware.BodySizeLimit, which reads the body anyway).

A head's size is counted before the parser sees the bytes: a whole oversized head arriving in one
read is refused as surely as one trickled in.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import resource

from minisgl.utils.logger import get_logger

from .state import ServerState

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


IDLE_GRACE_S = 1.0  # a connection idle for less is not closed to make room for another

HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                  b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


def head_deadline_protocol(base: type[asyncio.Protocol], timeout: float, max_head_bytes: int = 64 << 10,
                           state: ServerState | None = None, max_connections: int | None = None,
                           ) -> type[asyncio.Protocol]:
    """`base` (a uvicorn HTTP protocol class) with a deadline and a size limit for request heads:
    a connection that has not sent a complete request head `timeout` seconds after it opened, or
    after its previous response, is closed; one whose head grows past `max_head_bytes` gets 431
    and is closed. Both uvicorn protocols create `self.cycle` when a head is complete and call
    `on_response_complete` after each response, which is all this relies on. `state` counts the
    open connections; one opened beyond `max_connections` closes as many of the longest idle as it
    takes to get back to it, where there are such."""
    too_large = json.dumps({"error": {"message": f"request head larger than {max_head_bytes} bytes",
                                      "type": "invalid_request_error", "param": None,
                                      "code": "request_header_too_large"}}).encode()

    class HeadDeadlineProtocol(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport) -> None:
            self._counted, self._head_tail = True, b""
            if state is not None:
                state.connections += 1
            super().connection_made(transport)
            self._arm_head_deadline()
            if state is not None and max_connections is not None and state.connections > max_connections:
                self._close_longest_idle(state.connections - max_connections)

        def _close_longest_idle(self, n: int) -> None:
            """Close up to `n` idle connections: those that never sent a request, longest waiting
            first, then those idle between requests (a client's keep-alive connection goes last);
            none idle for less than IDLE_GRACE_S (a client that just connected is sending its request)."""
            idle_before = self.loop.time() - IDLE_GRACE_S
            idle = [c for c in self.connections if c is not self and getattr(c, "_waiting_after", 0) is c.cycle
                    and c._counted and c._idle_since <= idle_before]
            for victim in heapq.nsmallest(n, idle, key=lambda c: (c.cycle is not None, c._idle_since)):
                victim._uncount()  # at once: the next request's cap check must not count it
                victim.transport.close()

        def _uncount(self) -> None:
            if state is not None and self._counted:
                state.connections -= 1
            self._counted = False

        def data_received(self, data: bytes) -> None:
            if self.cycle is self._waiting_after and not self.transport.is_closing():
                # Waiting for a head: its bytes are those up to the blank line that ends it (the rest,
                # a body or a pipelined request, is the parser's), counted before the parser runs.
                seen = self._head_tail + data
                end = seen.find(b"\r\n\r\n")
                head_part = len(data) if end < 0 else max(0, end + 4 - len(self._head_tail))
                self._head_tail = seen[-3:] if end < 0 else b""
                self._head_bytes += head_part
                if self._head_bytes > max_head_bytes:
                    logger.debug("closing a connection whose request head passed %d bytes", max_head_bytes)
                    self.transport.write(HEAD_TOO_LARGE % (len(too_large), too_large))
                    self.transport.close()
                    return
            super().data_received(data)

        def on_response_complete(self) -> None:
            # Armed with the finished cycle before uvicorn may start a pipelined next one, which
            # then counts as the head having come.
            self._arm_head_deadline()
            super().on_response_complete()

        def connection_lost(self, exc) -> None:
            self._uncount()
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            self._waiting_after = waiting_after = self.cycle  # the head has come once self.cycle is a new one
            self._head_bytes, self._head_tail, self._idle_since = 0, b"", self.loop.time()
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


def uvicorn_http_protocol(timeout: float, max_head_bytes: int, state: ServerState,
                          max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's own choice of HTTP protocol (httptools when installed, else h11), with the head
    deadline and size limit, counting connections in `state` (idle ones closed beyond
    `max_connections`)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return head_deadline_protocol(base, timeout, max_head_bytes, state, max_connections)
