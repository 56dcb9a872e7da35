"""What every endpoint's bodies share: the OpenAI error envelope (`APIError` and the response it
becomes), the bounded field types, the usage object and the OpenAPI responses of a generation
route. Each endpoint's bodies are in a module of their own: chat_protocol.py, completions_protocol.py,
responses_protocol.py, anthropic_protocol.py, with what chat and completions share in
generation_protocol.py. The models describe exactly what the server accepts, so FastAPI's OpenAPI
schema documents the real API and malformed bodies are rejected before they reach the pipeline."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from minisgl.core.request_fields import FIELDS, INT32_MAX, MAX_LOGIT_BIAS_TOKENS, MAX_TOKEN_IDS

# Per-request cost is bounded at the door: every stop string is matched against each new piece of
# text, and the parameters travel through every process.
MAX_STOP_CHARS = 1024
StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]
StopField = StopString | Annotated[list[StopString], Field(max_length=4)] | None
TokenId = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]  # strict: JSON true/false are not token ids
Text = Annotated[str, Field(min_length=1)]
TokenIds = Annotated[list[TokenId], Field(min_length=1)]
# OpenAI's bounds on metadata (echoed back by the Responses API): 16 pairs, keys of 64 characters, values of 512.
Metadata = Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
                     Field(max_length=16)]


class StrictBody(BaseModel):
    """A request body, or a part of one, that takes only what it declares (any other field is a 400
    naming it) and only in its JSON type: false is no temperature and 0 no bool."""

    model_config = ConfigDict(strict=True, extra="forbid")


class ClientNotes(BaseModel):
    """What OpenAI's clients may say about themselves: taken, and not used."""

    user: str | None = Field(None, description="an end-user id; not used (the Responses API echoes it)")
    metadata: Metadata | None = Field(None, description="not used (the Responses API echoes it)")
    safety_identifier: str | None = Field(None, description="not used")
    prompt_cache_key: str | None = Field(None, description="not used: the prefix cache needs no key")


def check_tool_names_unique(names) -> None:
    """Two tools of one name: the second would silently replace the first's schema."""
    seen = set()
    for name in names:
        if name in seen:
            raise ValueError(f"tools: the name {name!r} is used twice; tool names must be unique")
        seen.add(name)


# The JSON form of the request fields whose values are not plain scalars.
TokenIdList = Annotated[list[TokenId], Field(max_length=MAX_TOKEN_IDS)]
LogitBias = Annotated[dict[str, Annotated[float, Field(ge=-100, le=100)]], Field(max_length=MAX_LOGIT_BIAS_TOKENS)]


def api_field(name: str) -> Any:
    """The pydantic Field of request field `name`, for a body that writes the field out: null or
    absent meaning the field's default; bounded and described as minisgl.core.request_fields declares."""
    f = FIELDS[name]
    return Field(None, description=f.doc, **(f.api_range.bounds() if f.api_range else {}))


def token_limit(default: int | None, description: str | None = None) -> Any:
    """A request's limit on generated tokens (max_tokens, max_completion_tokens, max_output_tokens):
    the endpoints spell and default it differently, its bounds are max_tokens'."""
    return Field(default, description=description, **FIELDS["max_tokens"].api_range.bounds())

class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error",
               503: "service_unavailable"}


class AsciiJSONResponse(JSONResponse):
    """JSON with non-ASCII escaped: an error message that quotes client input (a model name with a
    lone surrogate, say) can always be encoded."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode()


class APIError(Exception):
    """Raised anywhere in a request's handling: the app answers it as error_response(...)."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def error_body(message: str, kind: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error envelope, as a response body or a stream's last event."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    return AsciiJSONResponse(error_body(message, kind, param, code), status_code=status, headers=headers)


class PromptTokensDetails(BaseModel):
    cached_tokens: int  # prompt tokens found in the prefix cache (not computed again)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


# One server-sent event of a stream: `data` holds a JSON chunk object, or "[DONE]" at the end.
SSE_EVENT = {"type": "object", "required": ["data"],
             "properties": {"data": {"type": "string", "description": "a JSON chunk, or [DONE]"},
                            "event": {"type": "string"}}}


def generation_responses(model: type[BaseModel] | None = None) -> dict:
    """OpenAPI responses of a generation route: JSON (of `model` where the body has one here),
    or server-sent events when stream=true."""
    ok: dict = {"content": {"application/json": {}, "text/event-stream": {"schema": SSE_EVENT}}}
    if model is not None:
        ok = {"model": model, "content": {"text/event-stream": {"schema": SSE_EVENT}}}
    return {200: ok, 413: {"model": ErrorResponse}, 429: {"model": ErrorResponse}}
