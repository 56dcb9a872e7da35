"""The FastAPI app: OpenAI routes under /v1, probes, /metrics, auth and OpenAI-style errors."""

from __future__ import annotations

import asyncio
import hmac
import time
from dataclasses import dataclass

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from .args import LIVENESS_PATH, METRICS_PATH, READINESS_PATH, ServerArgs
from .frontend import FrontendClient
from .metrics import ObservedClient, ServerMetrics
from .openai_api import chat_jobs, completion_jobs, serve_generation
from .protocol import ChatCompletionRequest, CompletionRequest, ErrorResponse, error_response


@dataclass
class ServerState:
    """What the probes report; the launcher updates it."""

    ready: bool = False  # model loaded, every worker started
    draining: bool = False  # SIGTERM received: finishing in-flight requests
    healthy: bool = True  # every child process alive
    created: int = 0


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def create_app(args: ServerArgs, client: FrontendClient, state: ServerState,
               metrics: ServerMetrics | None = None) -> FastAPI:
    app = FastAPI(title="minisgl", version="0.1.0", description="OpenAI-compatible LLM inference server",
                  responses={400: {"model": ErrorResponse}, 401: {"model": ErrorResponse},
                             404: {"model": ErrorResponse}, 503: {"model": ErrorResponse}})
    state.created = state.created or int(time.time())
    metrics = metrics or ServerMetrics(args.model_name, args.model or args.model_name, args.tp)

    def can_serve() -> bool:  # /ready, and minisgl_server_ready for the alert rules
        return state.ready and state.healthy and not state.draining

    metrics.track_readiness(can_serve)
    observed = ObservedClient(client, metrics)  # the OpenAI routes' requests are timed and counted

    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError):
        return error_response(e.status, e.message, e.param, e.code, e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        message = first.get("msg", "invalid request")
        return error_response(400, f"{'.'.join(loc) + ': ' if loc else ''}{message}", param=".".join(loc) or None,
                              code="invalid_request")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException):
        return error_response(e.status_code, str(e.detail))

    def check_key(request: Request) -> None:
        if not args.api_key:
            return
        given = request.headers.get("authorization", "")
        expected = f"Bearer {args.api_key}"
        # Constant-time compare: response timing says nothing about the key.
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise APIError(401, "invalid or missing API key; send 'Authorization: Bearer <key>'",
                           code="invalid_api_key")

    def check_serving(model: str | None = None) -> None:
        if state.draining:
            raise APIError(503, "the server is shutting down", headers={"Retry-After": "5"})
        if not state.ready:
            raise APIError(503, "the model is still loading", headers={"Retry-After": "5"})
        if model is not None and model != args.model_name:
            raise APIError(404, f"the model '{model}' does not exist; this server serves '{args.model_name}'",
                           param="model", code="model_not_found")

    v1 = [Depends(check_key)]

    @app.get(LIVENESS_PATH, tags=["probes"])
    async def health():
        ok = state.healthy
        return PlainTextResponse("ok" if ok else "unhealthy", status_code=200 if ok else 503)

    @app.get(READINESS_PATH, tags=["probes"])
    async def ready():
        ok = can_serve()
        reason = "ready" if ok else "draining" if state.draining else "loading" if not state.ready else "unhealthy"
        return PlainTextResponse(reason, status_code=200 if ok else 503)

    @app.get("/health_generate", tags=["probes"])
    async def health_generate():
        if not (state.ready and state.healthy):
            return PlainTextResponse("not ready", status_code=503)
        params = {"temperature": 0.0, "max_tokens": 1, "ignore_eos": True}

        async def one_token():
            async for reply in client.generate(params, input_ids=[0]):
                if reply.finish_reason == "error":
                    raise RuntimeError(reply.error)

        try:
            await asyncio.wait_for(one_token(), timeout=20)
        except (asyncio.TimeoutError, RuntimeError) as e:
            return PlainTextResponse(f"generation failed: {e!r}", status_code=503)
        return PlainTextResponse("ok")

    @app.get(METRICS_PATH, tags=["monitoring"])
    async def prometheus_metrics():
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    @app.get("/v1/models", dependencies=v1, tags=["openai"])
    async def models():
        return {"object": "list", "data": [{"id": args.model_name, "object": "model", "created": state.created,
                                            "owned_by": "minisgl", "root": args.model or args.model_name}]}

    @app.post("/v1/chat/completions", dependencies=v1, tags=["openai"])
    async def chat(body: ChatCompletionRequest, request: Request):
        check_serving(body.model)
        return await serve_generation("chat", body, chat_jobs(body), args.model_name, observed, request)

    @app.post("/v1/completions", dependencies=v1, tags=["openai"])
    async def completions(body: CompletionRequest, request: Request):
        check_serving(body.model)
        if not body.prompts():
            raise APIError(400, "prompt must not be empty", param="prompt")
        return await serve_generation("completion", body, completion_jobs(body), args.model_name, observed,
                                      request)

    return app


__all__ = ["create_app", "ServerState", "APIError", "JSONResponse"]
