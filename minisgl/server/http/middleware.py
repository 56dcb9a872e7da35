"""The ASGI middleware in front of the app, outermost first: the API key gate, so a client without
the key gets 401 before it counts toward anything or the server reads (and buffers up to
--max-request-bytes of) its body; the cap on API requests in progress (ConnectionCap: the probes,
/metrics and every route the key does not guard are never counted nor refused); then the body's
size, time and memory limits (BodySizeLimit: only bodies of routes that take one are read, so
nobody reserves the body budget with a declared length on a route that reads none; a list of
numbers longer than any field takes is refused unparsed), and keep-alive
comments on quiet event streams (SseKeepAlive)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Iterable

from .long_lists import overlong_number_list
from .protocol import error_response

GUARDED_TAGS = frozenset({"openai", "extensions"})  # the routes a key protects (not probes, /metrics, docs)


def key_matches(authorization: str, api_key: str) -> bool:
    """Constant-time compare: response timing says nothing about the key. The scheme is
    case-insensitive (RFC 9110), the key is not."""
    scheme, _, given = authorization.partition(" ")
    return hmac.compare_digest(scheme.lower().encode() + b" " + given.strip(" ").encode("latin-1"),
                               f"bearer {api_key}".encode())


def guarded_paths(routes: Iterable) -> Callable[[str], bool]:
    """Whether a request path needs the key: every route tagged openai or extensions, and anything
    else under /v1/ (an unknown /v1 path is 401 to a client without the key, not 404)."""
    paths = frozenset(r.path for r in routes if GUARDED_TAGS & set(getattr(r, "tags", None) or ()))
    return lambda path: path in paths or path.startswith("/v1/")


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def body_routes(routes: Iterable) -> Callable[[str, str], bool]:
    """Whether a request (method, path) is for a route that reads a body: a POST, PUT or PATCH
    route of the app."""
    patterns = [r.path_regex for r in routes if BODY_METHODS & set(getattr(r, "methods", None) or ())]
    return lambda method, path: method in BODY_METHODS and any(p.match(path) for p in patterns)


class ApiKeyGate:
    """401 (OpenAI-style JSON) for a guarded path without 'Authorization: Bearer <key>', decided
    from the request head alone: the body is never read."""

    def __init__(self, app, api_key: str, guarded: Callable[[str], bool]):
        self.app, self.api_key, self.guarded = app, api_key, guarded

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("method") != "OPTIONS" and self.guarded(scope["path"]):
            given = next((v for k, v in scope.get("headers") or () if k == b"authorization"), b"")
            if not key_matches(given.decode("latin-1"), self.api_key):
                response = error_response(401, "invalid or missing API key; send 'Authorization: Bearer <key>'",
                                          code="invalid_api_key", headers={"Connection": "close"})
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class ConnectionCap:
    """503 (JSON, Retry-After, the connection closed) for an API request (a path the key guards,
    whether or not a key is set) arriving while `limit` are in progress (`state.requests_in_progress`;
    an HTTP/1.1 connection carries one at a time). Inside the key gate, so requests without the key
    never count; the probes, /metrics and other unguarded routes are neither counted nor refused:
    they never compete with clients, and clients never with them."""

    def __init__(self, app, limit: int, state, capped: Callable[[str], bool]):
        self.app, self.limit, self.state, self.capped = app, limit, state, capped

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.capped(scope["path"]):
            return await self.app(scope, receive, send)
        if self.state.requests_in_progress >= self.limit:
            response = error_response(503, f"the server is at its limit of {self.limit} connections; retry later",
                                      code="service_unavailable", headers={"Retry-After": "1", "Connection": "close"})
            return await response(scope, receive, send)
        self.state.requests_in_progress += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.state.requests_in_progress -= 1


class BodyBudget:
    """Bytes of request bodies held at once, all connections together, at most `limit`."""

    def __init__(self, limit: int):
        self.limit, self.held = limit, 0

    def take(self, n: int) -> bool:
        if self.held + n > self.limit:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        self.held -= n


class BodySizeLimit:
    """Refuse request bodies over `max_bytes` with 413, whether or not they declare a length, and
    bodies not complete within `timeout` seconds with 408 (a client trickling its body holds a
    connection and a buffer): the body is read before the app sees it, then handed on unchanged.
    Bodies held at once, in all, stay within `budget` (a declared length is reserved up front): a
    body beyond it gets 503 with Retry-After. Its bytes count until the app has answered.
    Only a request for which `takes_body(method, path)` holds has its body read at all: any other
    (an unknown path, a probe, OPTIONS) is answered with its body unread, so a declared length
    there reserves nothing. A body holding a list of more than `max_list_items` numbers gets 400
    naming its field before anything parses it (long_lists.py)."""

    def __init__(self, app, max_bytes: int, timeout: float = 30.0, budget: BodyBudget | None = None,
                 takes_body: Callable[[str, str], bool] = lambda method, path: True, max_list_items: int = 0):
        self.app, self.max_bytes, self.timeout, self.takes_body = app, max_bytes, timeout, takes_body
        self.max_list_items = max_list_items
        self.budget = budget or BodyBudget(1 << 62)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.takes_body(scope.get("method", ""), scope["path"]):
            return await self.app(scope, receive, send)
        reserved = 0

        def hold(n: int) -> bool:
            nonlocal reserved
            if n > reserved:
                if not self.budget.take(n - reserved):
                    return False
                reserved = n
            return True

        try:
            await self._read_then_call(scope, receive, send, hold)
        finally:
            self.budget.give(reserved)

    async def _read_then_call(self, scope, receive, send, hold):
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        too_large = declared.isdigit() and int(declared) > self.max_bytes
        busy = not too_large and declared.isdigit() and not hold(int(declared))
        chunks, size, more = [], 0, not (too_large or busy)
        deadline = asyncio.get_running_loop().time() + self.timeout
        while more:
            try:
                message = await asyncio.wait_for(receive(), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                response = error_response(408, f"the request body did not arrive within {self.timeout:g} s",
                                          code="request_timeout", headers={"Connection": "close"})
                return await response(scope, receive, send)
            if message["type"] != "http.request":
                return await self.app(scope, _replay([message], receive), send)  # client went away
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            too_large = size > self.max_bytes
            busy = not too_large and not hold(size)
            more = more and not (too_large or busy)
        if too_large:
            response = error_response(413, f"request body larger than {self.max_bytes} bytes",
                                      code="request_too_large", headers={"Connection": "close"})
            return await response(scope, receive, send)
        if busy:
            response = error_response(503, f"the server holds its limit of {self.budget.limit} bytes of request "
                                           "bodies; retry later", code="service_unavailable",
                                      headers={"Retry-After": "1", "Connection": "close"})
            return await response(scope, receive, send)
        data = b"".join(chunks)
        field = overlong_number_list(data, self.max_list_items) if self.max_list_items else None
        if field is not None:
            response = error_response(400, f"{field or 'the body'}: a list of more than {self.max_list_items} numbers; "
                                           f"no field of this server takes that many", param=field or None,
                                      code="request_too_large")
            return await response(scope, receive, send)
        body = {"type": "http.request", "body": data, "more_body": False}
        await self.app(scope, _replay([body], receive), send)


class SseKeepAlive:
    """An SSE comment line (': keep-alive') on an event stream that has been silent for `interval`
    seconds (a long step, a queue), so proxies with idle timeouts keep it open; clients skip
    comment lines. Sends are serialized, so a comment never lands inside an event."""

    COMMENT = b": keep-alive\n\n"

    def __init__(self, app, interval: float):
        self.app, self.interval = app, interval

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        loop = asyncio.get_running_loop()
        lock = asyncio.Lock()
        last_sent = loop.time()
        ticker: asyncio.Task | None = None

        async def keep_alive() -> None:
            nonlocal last_sent
            while True:
                wait = last_sent + self.interval - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                async with lock:
                    await send({"type": "http.response.body", "body": self.COMMENT, "more_body": True})
                    last_sent = loop.time()

        async def serialized_send(message) -> None:
            nonlocal last_sent, ticker
            if message["type"] == "http.response.body" and not message.get("more_body") and ticker is not None:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)
                ticker = None
            async with lock:
                await send(message)
                last_sent = loop.time()
            if message["type"] == "http.response.start" and _is_event_stream(message):
                ticker = loop.create_task(keep_alive())

        try:
            await self.app(scope, receive, serialized_send)
        finally:
            if ticker is not None:
                ticker.cancel()
                await asyncio.gather(ticker, return_exceptions=True)


def _is_event_stream(start: dict) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in start.get("headers", ()))


def _replay(messages: list[dict], receive):
    async def replay():
        return messages.pop(0) if messages else await receive()

    return replay
