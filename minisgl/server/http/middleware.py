"""The ASGI middleware in front of the app. The API key gate comes first, so a client without the
key gets 401 before the server reads (and buffers up to --max-request-bytes of) its body or parses
it; then the body's size and time limits (BodySizeLimit)."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Iterable

from .protocol import error_response

GUARDED_TAGS = frozenset({"openai", "extensions"})  # the routes a key protects (not probes, /metrics, docs)


def key_matches(authorization: str, api_key: str) -> bool:
    """Constant-time compare: response timing says nothing about the key."""
    return hmac.compare_digest(authorization.encode(), f"Bearer {api_key}".encode())


def guarded_paths(routes: Iterable) -> Callable[[str], bool]:
    """Whether a request path needs the key: every route tagged openai or extensions, and anything
    else under /v1/ (an unknown /v1 path is 401 to a client without the key, not 404)."""
    paths = frozenset(r.path for r in routes if GUARDED_TAGS & set(getattr(r, "tags", None) or ()))
    return lambda path: path in paths or path.startswith("/v1/")


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


class BodySizeLimit:
    """Refuse request bodies over `max_bytes` with 413, whether or not they declare a length, and
    bodies not complete within `timeout` seconds with 408 (a client trickling its body holds a
    connection and a buffer): the body is read before the app sees it, then handed on unchanged."""

    def __init__(self, app, max_bytes: int, timeout: float = 30.0):
        self.app, self.max_bytes, self.timeout = app, max_bytes, timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        too_large = declared.isdigit() and int(declared) > self.max_bytes
        chunks, size, more = [], 0, not too_large
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
            more = more and not too_large
        if too_large:
            response = error_response(413, f"request body larger than {self.max_bytes} bytes",
                                      code="request_too_large")
            return await response(scope, receive, send)
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)


def _replay(messages: list[dict], receive):
    async def replay():
        return messages.pop(0) if messages else await receive()

    return replay
