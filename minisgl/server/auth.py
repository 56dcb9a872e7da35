"""The API key gate: an ASGI middleware in front of everything else, so a client without the key
gets 401 before the server reads (and buffers up to --max-request-bytes of) its body or parses it."""

from __future__ import annotations

import hmac
from collections.abc import Callable

from .protocol import error_response

GUARDED_TAGS = frozenset({"openai", "extensions"})  # the routes a key protects (not probes, /metrics, docs)


def key_matches(authorization: str, api_key: str) -> bool:
    """Constant-time compare: response timing says nothing about the key."""
    return hmac.compare_digest(authorization.encode(), f"Bearer {api_key}".encode())


def guarded_paths(app) -> Callable[[str], bool]:
    """Whether a request path needs the key: every route tagged openai or extensions, and anything
    else under /v1/ (an unknown /v1 path is 401 to a client without the key, not 404)."""
    paths = frozenset(r.path for r in app.routes if GUARDED_TAGS & set(getattr(r, "tags", None) or ()))
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
