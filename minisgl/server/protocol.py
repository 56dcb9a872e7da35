"""OpenAI request bodies (pydantic) and the OpenAI error body.

The models describe exactly what the server accepts, so FastAPI's OpenAPI schema documents the
real API and malformed bodies are rejected before they reach the pipeline.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from minisgl.core.params import MAX_LOGPROBS

StopField = str | Annotated[list[str], Field(max_length=4)] | None
INT32_MAX = 2**31 - 1
TokenId = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]  # strict: JSON true/false are not token ids
Text = Annotated[str, Field(min_length=1)]
TokenIds = Annotated[list[TokenId], Field(min_length=1)]


class SamplingFields(BaseModel):
    # Unknown OpenAI fields (logit_bias, user, ...) are accepted and ignored, as vLLM does. Strict:
    # a JSON value of the wrong type is an error, never silently converted (0 is not false).
    model_config = ConfigDict(extra="ignore", strict=True)

    model: str
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = Field(None, ge=-1, le=INT32_MAX, description="extension: keep the k most likely tokens")
    min_p: float | None = Field(None, ge=0, le=1, description="extension")
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stop: StopField = Field(None, description="a string or up to 4; generation ends before any of them")
    stop_token_ids: list[TokenId] | None = Field(None, description="extension")
    ignore_eos: bool = Field(False, description="extension: keep generating past end-of-sequence")
    n: int = Field(1, ge=1, le=INT32_MAX)
    stream: bool = False
    stream_options: StreamOptions | None = None

    def logprobs_k(self) -> int | None:
        """How many alternatives per token the request wants (None: no logprobs)."""
        return None

    def unsupported_field(self) -> str | None:
        """The first OpenAI feature the request asks for that this server does not implement, or
        None. Those fields are declared so that asking is refused, never silently ignored."""
        return None

    def sampling_params(self, max_tokens: int | None) -> dict:
        stop = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return {
            "temperature": 1.0 if self.temperature is None else self.temperature,
            "top_p": 1.0 if self.top_p is None else self.top_p,
            "top_k": -1 if self.top_k is None else self.top_k,
            "min_p": self.min_p or 0.0,
            "seed": self.seed,
            "stop": stop,
            "stop_token_ids": self.stop_token_ids or [],
            "ignore_eos": self.ignore_eos,
            "max_tokens": max_tokens,
            "logprobs": self.logprobs_k(),
        }


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True)

    include_usage: bool = False


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True)

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def as_template_input(self) -> dict:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        return {"role": self.role, "content": content or ""}


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=INT32_MAX, description="deprecated alias of max_completion_tokens")
    max_completion_tokens: int | None = Field(None, ge=1, le=INT32_MAX)
    logprobs: bool | None = Field(None, description="return each output token's log-probability")
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                     description="with logprobs: that many most likely tokens per position")

    @model_validator(mode="after")
    def _top_logprobs_needs_logprobs(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        return self

    def logprobs_k(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(SamplingFields):
    prompt: Text | TokenIds | Annotated[list[Text], Field(min_length=1)] | Annotated[list[TokenIds], Field(min_length=1)] = \
        Field(description="text or token ids, one or a batch")
    max_tokens: int | None = Field(16, ge=1, le=INT32_MAX)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                 description="return each output token's log-probability and that many alternatives")
    echo: bool = Field(False, description="not supported: true is refused")
    best_of: int | None = Field(None, description="not supported: values above 1 are refused")
    suffix: str | None = Field(None, description="not supported: refused")

    def logprobs_k(self) -> int | None:
        return self.logprobs

    def unsupported_field(self) -> str | None:
        asked = {"echo": self.echo, "suffix": bool(self.suffix),
                 "best_of": (self.best_of or 1) > 1}
        return next((name for name, yes in asked.items() if yes), None)

    def prompts(self) -> list[dict]:
        """Each prompt as generate() keyword arguments."""
        p = self.prompt
        if isinstance(p, str):
            return [{"text": p}]
        if p and all(isinstance(x, int) for x in p):
            return [{"input_ids": list(p)}]
        return [{"text": x} if isinstance(x, str) else {"input_ids": list(x)} for x in p]


SamplingFields.model_rebuild()


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


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict | None = None) -> JSONResponse:
    kind = ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return AsciiJSONResponse(body, status_code=status, headers=headers)


# -- response bodies (documented in the OpenAPI schema; the routes build them as plain dicts) -------


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: None = None


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


# One server-sent event of a stream: `data` holds a JSON chunk object, or "[DONE]" at the end.
SSE_EVENT = {"type": "object", "required": ["data"],
             "properties": {"data": {"type": "string", "description": "a JSON chunk, or [DONE]"},
                            "event": {"type": "string"}}}


def generation_responses(model: type[BaseModel]) -> dict:
    """OpenAPI responses of a generation route: JSON, or server-sent events when stream=true."""
    return {200: {"model": model, "content": {"text/event-stream": {"schema": SSE_EVENT}}},
            413: {"model": ErrorResponse}, 429: {"model": ErrorResponse}}
