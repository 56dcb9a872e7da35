"""The FastAPI app: OpenAI routes under /v1, probes, /metrics, auth and OpenAI-style errors."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from minisgl.core import SamplingParams
from minisgl.utils.logger import get_logger

from .auth import ApiKeyGate, guarded_paths
from .args import LIVENESS_PATH, METRICS_PATH, READINESS_PATH, ServerArgs
from .frontend import UNAVAILABLE, FrontendClient
from .metrics import ObservedClient, ServerMetrics
from .openai_api import chat_jobs, completion_jobs, serve_generation
from .openai_formats import ChatFormat, CompletionFormat
from .generation_defaults import sampling_defaults
from .parsers import ChatOutputFormat
from .request_cost import request_cost_problem
from .responses_api import add_responses_route
from .tokenize_api import add_tokenize_routes
from .protocol import (
    APIError,
    ChatCompletionRequest,
    ChatCompletionResponse,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    ModelList,
    error_response,
    generation_responses,
)

logger = get_logger(__name__)
PLAIN_503 = {503: {"content": {"text/plain": {}}}}


@dataclass
class ServerState:
    """What the probes report; the launcher updates it (minisgl.server.launch's watch)."""

    ready: bool = False  # model loaded, every worker started
    draining: bool = False  # SIGTERM received: finishing in-flight requests
    failed: str | None = None  # why no more work can be done (a worker died): everything gets 503
    stalled: tuple[str, ...] = ()  # workers silent past --watchdog-timeout (hung: stopped, deadlocked, a stuck step)
    created: int = 0

    @property
    def healthy(self) -> bool:
        """What /health says: every worker alive and turning."""
        return self.failed is None and not self.stalled


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
    defaults = sampling_defaults(args.generation_config, args.model)

    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError):
        return error_response(e.status, e.message, e.param, e.code, e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        message = first.get("msg", "invalid request")
        # A field nested in an object (stream_options, a message, a tool) that the server does not
        # know is as unsupported as an unknown top-level field.
        code = "unsupported_parameter" if first.get("type") == "extra_forbidden" else "invalid_request"
        return error_response(400, f"{'.'.join(loc) + ': ' if loc else ''}{message}", param=".".join(loc) or None,
                              code=code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException):
        return error_response(e.status_code, str(e.detail), headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception):  # a bug: the client still gets an OpenAI error body
        logger.exception("unhandled error in a request")
        return error_response(500, f"internal error: {type(e).__name__}", code="internal_error")

    def check_serving(model: str | None = None) -> None:
        if state.failed:
            raise APIError(503, f"the server cannot take requests: {state.failed}", code="service_unavailable")
        if state.draining:
            raise APIError(503, "the server is shutting down", code="service_unavailable", headers={"Retry-After": "5"})
        if not state.ready:
            raise APIError(503, "the model is still loading", code="service_unavailable", headers={"Retry-After": "5"})
        if model is not None and model not in args.model_names:
            raise APIError(404, f"the model '{model}' does not exist; this server serves '{args.model_name}'",
                           param="model", code="model_not_found")

    def check_limits(body: ChatCompletionRequest | CompletionRequest, choices: int) -> None:
        max_tokens = getattr(body, "max_completion_tokens", None) or body.max_tokens
        if args.max_new_tokens and max_tokens and max_tokens > args.max_new_tokens:
            raise APIError(400, f"max_tokens {max_tokens} is above this server's limit of {args.max_new_tokens}",
                           param="max_tokens")
        if body.n > args.max_n:
            raise APIError(400, f"n {body.n} is above this server's limit of {args.max_n}", param="n")
        if choices // body.n > args.max_n:
            raise APIError(400, f"{choices // body.n} prompts in one request; this server takes at most {args.max_n}",
                           param="prompt")
        too_costly = request_cost_problem(body)
        if too_costly:
            raise APIError(400, too_costly[1], param=too_costly[0], code="request_too_large")
        unsupported = body.unsupported_field(args.allow_unknown_fields)
        if unsupported:
            raise APIError(400, f"{unsupported} is not supported by this server", param=unsupported,
                           code="unsupported_parameter")
        # The route creates the request's streams before its first await, so no other request can
        # pass this check in between (client.in_flight counts streams from their creation).
        if client.in_flight + choices > args.max_pending_requests:
            raise APIError(429, f"the server is at its limit of {args.max_pending_requests} requests; retry later",
                           code="too_many_requests", headers={"Retry-After": "1"})

    def check_tool_parser(body: ChatCompletionRequest) -> None:
        """Free-form tool calls (tool_choice auto, the default with tools) are read back by a parser."""
        if body.tool_mode == "auto" and not args.tool_call_parser:
            raise APIError(400, "tool_choice auto (the default with tools) needs the server started with "
                                "--tool-call-parser; use tool_choice required or a named function",
                           param="tool_choice", code="unsupported_parameter")

    v1: list = []  # the API key is checked before the body is read: auth.ApiKeyGate

    @app.get(LIVENESS_PATH, tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def health():
        ok = state.healthy
        return PlainTextResponse("ok" if ok else "unhealthy", status_code=200 if ok else 503)

    @app.get(READINESS_PATH, tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def ready():
        ok = can_serve()
        reason = "ready" if ok else "draining" if state.draining else "loading" if not state.ready else "unhealthy"
        return PlainTextResponse(reason, status_code=200 if ok else 503)

    @app.get("/health_generate", tags=["probes"], response_class=PlainTextResponse, responses=PLAIN_503)
    async def health_generate():
        if not (state.ready and state.healthy):
            return PlainTextResponse("not ready", status_code=503)
        params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)

        async def one_token():
            async for reply in client.generate(params, input_ids=[0]):
                if reply.finish_reason in ("error", UNAVAILABLE):
                    raise RuntimeError(reply.error)

        try:
            await asyncio.wait_for(one_token(), timeout=20)
        except (asyncio.TimeoutError, RuntimeError) as e:
            return PlainTextResponse(f"generation failed: {e!r}", status_code=503)
        return PlainTextResponse("ok")

    @app.get(METRICS_PATH, tags=["monitoring"], response_class=PlainTextResponse)
    async def prometheus_metrics():
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)

    @app.get("/v1/models", dependencies=v1, tags=["openai"], response_model=ModelList)
    async def models():
        return {"object": "list", "data": [{"id": name, "object": "model", "created": state.created,
                                            "owned_by": "minisgl", "root": args.model or args.model_name}
                                           for name in args.model_names]}

    @app.post("/v1/chat/completions", dependencies=v1, tags=["openai"], response_model=None,
              responses=generation_responses(ChatCompletionResponse))
    async def chat(body: ChatCompletionRequest, request: Request):
        check_serving(body.model)
        body = body.with_defaults(defaults)
        check_limits(body, body.n)
        check_tool_parser(body)
        output = ChatOutputFormat.for_chat(body, args.reasoning_parser, args.tool_call_parser)
        return await serve_generation(ChatFormat(output), body, chat_jobs(body), args.model_name, observed, request)

    @app.post("/v1/completions", dependencies=v1, tags=["openai"], response_model=None,
              responses=generation_responses(CompletionResponse))
    async def completions(body: CompletionRequest, request: Request):
        check_serving(body.model)
        body = body.with_defaults(defaults)
        if not body.prompts():
            raise APIError(400, "prompt must not be empty", param="prompt")
        check_limits(body, len(body.prompts()) * body.n)
        return await serve_generation(CompletionFormat(), body, completion_jobs(body), args.model_name, observed,
                                      request)

    add_responses_route(app, args, observed, check_serving, check_limits, check_tool_parser, defaults, v1)
    add_tokenize_routes(app, args, None, check_serving, v1)
    app.add_middleware(BodySizeLimit, max_bytes=args.max_request_bytes, timeout=args.body_timeout)
    if args.api_key:  # outside BodySizeLimit: a client without the key never gets its body read
        app.add_middleware(ApiKeyGate, api_key=args.api_key, guarded=guarded_paths(app))
    if args.origins():
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=args.origins(), allow_methods=["*"], allow_headers=["*"],
                           allow_credentials="*" not in args.origins())
    _document_model_name(app, args.model_names)
    return app


def _document_model_name(app: FastAPI, names: tuple[str, ...]) -> None:
    """The OpenAPI schema names the one model served, so clients and fuzzers know the valid value."""
    from fastapi.openapi.utils import get_openapi

    def openapi():
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for body in ("ChatCompletionRequest", "CompletionRequest", "ResponsesRequest"):
                schema["components"]["schemas"][body]["properties"]["model"]["anyOf"][0]["enum"] = list(names)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


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


__all__ = ["create_app", "ServerState", "APIError", "JSONResponse"]
