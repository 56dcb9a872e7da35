"""The FastAPI app: one router per endpoint family, each given the same `ApiDeps`; OpenAI-style
errors for everything that goes wrong; the middleware (API key, body limits, CORS) around it."""

from __future__ import annotations

import time
import traceback

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from minisgl.utils.logger import get_logger

from ..args import ServerArgs
from ..parsers import tool_parser_for
from ..runtime.frontend import FrontendClient
from ..runtime.state import LoraAdapters, ServerState
from . import anthropic, chat, completions, lora, models, probes, responses, tokenization
from .deps import ApiDeps
from .generation_defaults import sampling_defaults
from .long_lists import max_list_items
from .metrics import ServerMetrics
from .middleware import ApiKeyGate, BodyBudget, BodySizeLimit, ConnectionCap, SseKeepAlive, body_routes, guarded_paths
from .protocol import APIError, ErrorResponse, error_response
from .request_errors import describe
from .request_id import RequestId, current

logger = get_logger(__name__)
ROUTERS = (probes, models, chat, completions, responses, anthropic, tokenization, lora)  # in the OpenAPI schema's order


def create_app(args: ServerArgs, client: FrontendClient, state: ServerState,
               metrics: ServerMetrics | None = None) -> FastAPI:
    # No trailing-slash redirects: Starlette builds their Location from the client's Host header.
    app = FastAPI(title="minisgl", version="0.1.0", description="OpenAI-compatible LLM inference server",
                  responses={400: {"model": ErrorResponse}, 401: {"model": ErrorResponse},
                             404: {"model": ErrorResponse}, 503: {"model": ErrorResponse}}, redirect_slashes=False)
    state.created = state.created or int(time.time())
    metrics = metrics or ServerMetrics(args.model_name, args.model or args.model_name, args.tp, args.metrics_compat,
                                       args.max_loras or len(args.lora_adapters))
    metrics.track_readiness(lambda: state.can_serve)
    deps = ApiDeps(args, state, client, metrics, sampling_defaults(args.generation_config, args.model),
                   tool_parser_for(args), LoraAdapters(dict(args.lora_adapters)))
    _answer_errors_the_openai_way(app)
    routers = [module.router(deps) for module in ROUTERS]
    for router in routers:
        app.include_router(router)
    # Each add_middleware wraps what is there: the last one added sees a request first.
    app.add_middleware(SseKeepAlive, interval=args.sse_keepalive)
    app.add_middleware(BodySizeLimit, max_bytes=args.max_request_bytes, timeout=args.body_timeout,
                       budget=BodyBudget(args.max_buffered_request_bytes),
                       takes_body=body_routes([route for router in routers for route in router.routes]),
                       max_list_items=max_list_items(args))
    guarded = guarded_paths(route for router in routers for route in router.routes)
    app.add_middleware(ConnectionCap, limit=args.max_connections, state=state, capped=guarded)
    if args.api_key:  # outside the rest: a client without the key is never counted, nor its body read
        app.add_middleware(ApiKeyGate, api_key=args.api_key, guarded=guarded)
    if args.origins():
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=args.origins(), allow_methods=["*"], allow_headers=["*"],
                           expose_headers=["X-Request-Id"],
                           allow_credentials="*" not in args.origins())
    app.add_middleware(RequestId, logged=guarded)  # outermost: every answer carries X-Request-Id
    _document_schema(app, args.model_names, guarded if args.api_key else None)
    return app


def bounded_traceback(e: BaseException, frames: int = 16, chars: int = 8192) -> str:
    """The exception's last `frames` frames, at most `chars` characters: a RecursionError's
    thousand frames, or a message quoting the request, must not put a request's size in the log."""
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-frames))
    return text if len(text) <= chars else f"{text[:chars // 2]}\n[... {len(text) - chars} characters ...]\n{text[-chars // 2:]}"


def _answer_errors_the_openai_way(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, e: APIError):
        return error_response(e.status, e.message, e.param, e.code, e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, e: RequestValidationError):
        message, param, code = describe(e.errors())
        return error_response(400, message, param=param, code=code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException):
        return error_response(e.status_code, str(e.detail), headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, e: Exception):  # a bug: the client still gets an OpenAI error body
        logger.error("unhandled error in request %s:\n%s", current.get(), bounded_traceback(e))
        # Outside the middleware by now (Starlette answers it last): the id goes on here.
        return error_response(500, f"internal error: {type(e).__name__}", code="internal_error",
                              headers={"X-Request-Id": current.get() or ""})


def _document_schema(app: FastAPI, names: tuple[str, ...], guarded=None) -> None:
    """The OpenAPI schema names the one model served, so clients and fuzzers know the valid value,
    and declares the bearer key (securitySchemes), required by the `guarded` paths when a key is set."""
    from fastapi.openapi.utils import get_openapi

    def openapi():
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            for body in ("ChatCompletionRequest", "CompletionRequest", "ResponsesRequest"):
                schema["components"]["schemas"][body]["properties"]["model"]["anyOf"][0]["enum"] = list(names)
            schema["components"]["securitySchemes"] = {"apiKey": {
                "type": "http", "scheme": "bearer",
                "description": "the server's API key (--api-key-file, $MINISGL_API_KEY), when it has one"}}
            for path, operations in schema["paths"].items():
                if guarded is not None and guarded(path):
                    for operation in operations.values():
                        operation["security"] = [{"apiKey": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


__all__ = ["create_app"]
