"""X-Request-Id, outermost of the middleware, so that gateway and server logs can be joined: the
client's id when it sends one (bounded and sanitised: it goes into a log line and a header), a
new one otherwise; echoed on every response, errors of the other middleware included, and logged
with each API request's method, path, status and duration (`current` holds it meanwhile, for the
log line of an unexpected error)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from contextvars import ContextVar

from minisgl.utils.logger import get_logger

logger = get_logger(__name__)

HEADER = b"x-request-id"
MAX_CHARS = 128
# Characters an id keeps: what gateways generate (UUIDs, hex, base64, dotted or slashed paths).
# Anything else (spaces, quotes, control characters) is dropped, so a log line cannot be forged.
NOT_ALLOWED = re.compile(r"[^A-Za-z0-9._~:/+=@-]")
current: ContextVar[str | None] = ContextVar("request_id", default=None)


def request_id(given: bytes | None) -> str:
    """The id of a request: the client's, cleaned and cut to MAX_CHARS, else a new UUID (hex)."""
    if given:
        clean = NOT_ALLOWED.sub("", given.decode("latin-1"))[:MAX_CHARS]
        if clean:
            return clean
    return uuid.uuid4().hex


class RequestId:
    """Pure ASGI middleware: streams pass through untouched, only the response head gets the header."""

    def __init__(self, app, logged: Callable[[str], bool]) -> None:
        self.app, self.logged = app, logged

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(next((v for k, v in scope["headers"] if k.lower() == HEADER), None))
        status, start = 0, time.perf_counter()
        current.set(rid)

        async def send_with_id(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            # `current` stays set: the error handler of a crash runs after this returns. Each
            # request runs in a task of its own, so it never leaks into another request.
            if self.logged(scope["path"]):
                path = scope.get("raw_path", b"").decode("latin-1")[:200]  # as sent: %0A stays three characters
                logger.info("%s %s %s %.3fs request_id=%s", scope["method"], path, status or "-",
                            time.perf_counter() - start, rid)


__all__ = ["RequestId", "request_id", "current", "MAX_CHARS"]
