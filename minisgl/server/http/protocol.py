"""OpenAI request bodies (pydantic) and the OpenAI error body.

The models describe exactly what the server accepts, so FastAPI's OpenAPI schema documents the
real API and malformed bodies are rejected before they reach the pipeline.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from minisgl.constrained.tools import call_or_answer, forced_calls_schema
from minisgl.core import SamplingParams
from minisgl.core.request_fields import (
    FIELDS,
    INT32_MAX,
    MAX_LOGIT_BIAS_TOKENS,
    MAX_LOGPROBS,
    MAX_TOKEN_IDS,
    REQUEST_FIELDS,
)
from minisgl.message import TextParams

from ..parsers.tool_calls import loads

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
JSON_FORMS: dict[str, Any] = {"logit_bias": LogitBias}
API_FIELDS = tuple(f for f in REQUEST_FIELDS if f.in_api)  # on the chat and completions bodies as themselves


def api_field(name: str) -> Any:
    """The pydantic Field of request field `name`, for a body that writes the field out: null or
    absent meaning the field's default; bounded and described as minisgl.core.request_fields declares."""
    f = FIELDS[name]
    return Field(None, description=f.doc, **(f.api_range.bounds() if f.api_range else {}))


def token_limit(default: int | None, description: str | None = None) -> Any:
    """A request's limit on generated tokens (max_tokens, max_completion_tokens, max_output_tokens):
    the endpoints spell and default it differently, its bounds are max_tokens'."""
    return Field(default, description=description, **FIELDS["max_tokens"].api_range.bounds())


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(strict=True, populate_by_name=True, extra="forbid")

    name: str = Field(max_length=64)
    description: str | None = None
    schema_: dict | None = Field(None, alias="schema")
    strict: bool | None = None


class TextFormat(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    type: Literal["json_object"]


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


ResponseFormat = Annotated[TextFormat | JsonObjectFormat | JsonSchemaFormat, Field(discriminator="type")]


# Fields clients send that this server does not implement, with the values that ask for nothing
# (a client library filling in a default must not be refused). Anything else is refused with 400
# unsupported_parameter naming the field, never silently ignored.
REFUSED_UNLESS: dict[str, tuple] = {
    # OpenAI
    "audio": (None,), "modalities": (None, ["text"]), "prediction": (None,), "reasoning_effort": (None,),
    "web_search_options": (None,), "verbosity": (None,), "functions": (None,), "function_call": (None, "none"),
    "store": (None, False), "service_tier": (None, "auto", "default"), "echo": (None, False), "suffix": (None, ""),
    "best_of": (None, 1),
    # vLLM / SGLang extensions
    "use_beam_search": (None, False), "length_penalty": (None, 1, 1.0), "include_stop_str_in_output": (None, False),
    "spaces_between_special_tokens": (None, True), "prompt_logprobs": (None,), "truncate_prompt_tokens": (None,),
    "bad_words": (None, []), "logits_processors": (None,), "structural_tag": (None,),
    "guided_decoding_backend": (None,), "guided_whitespace_pattern": (None,), "documents": (None,),
    "chat_template": (None,), "return_tokens_as_token_ids": (None, False),
    "add_special_tokens": (None,), "continue_final_message": (None, False), "regex": (None,), "ebnf": (None,),
    "json_schema": (None,), "no_stop_trim": (None, False), "lora_path": (None,), "return_hidden_states": (None, False),
    "separate_reasoning": (None,), "stream_reasoning": (None,), "mm_processor_kwargs": (None,),
    "cache_salt": (None,), "kv_transfer_params": (None,), "vllm_xargs": (None,), "min_p_decay": (None,),
}


class KnownFieldsOnly(BaseModel):
    """A request body that refuses what it does not implement. Fields not declared land in
    model_extra and are refused by unsupported_field() (or ignored, with --allow-unknown-fields,
    unless `refused_unless` lists them). Strict: a JSON value of the wrong type is an error, never
    silently converted (0 is not false)."""

    model_config = ConfigDict(extra="allow", strict=True)
    refused_unless: ClassVar[dict[str, tuple]] = REFUSED_UNLESS

    def unsupported_field(self, allow_unknown: bool = False) -> str | None:
        """The first field the request sends that this server does not implement, or None.
        Unknown fields are refused too unless `allow_unknown` (--allow-unknown-fields)."""
        for name, value in (self.model_extra or {}).items():
            neutral = self.refused_unless.get(name)
            if neutral is None:
                if not allow_unknown:
                    return name
            elif not any(value == v and type(value) is type(v) for v in neutral):
                return name
        return None


class SamplingFields(KnownFieldsOnly):
    """The request fields the chat and completions bodies take as themselves (API_FIELDS), written
    out in the table's order so that readers, IDEs and type checkers see them; their bounds and
    descriptions are the table's (api_field), and tests/server/test_request_bodies.py holds the
    names and JSON forms (JSON_FORMS, TokenIdList for token ids, else the field's api_type or type)
    equal to the table."""

    temperature: float | None = api_field("temperature")
    top_k: int | None = api_field("top_k")
    top_p: float | None = api_field("top_p")
    min_p: float | None = api_field("min_p")
    ignore_eos: bool | None = api_field("ignore_eos")
    stop_token_ids: TokenIdList | None = api_field("stop_token_ids")
    seed: int | None = api_field("seed")
    presence_penalty: float | None = api_field("presence_penalty")
    frequency_penalty: float | None = api_field("frequency_penalty")
    repetition_penalty: float | None = api_field("repetition_penalty")
    logit_bias: LogitBias | None = api_field("logit_bias")
    allowed_token_ids: TokenIdList | None = api_field("allowed_token_ids")
    min_tokens: int | None = api_field("min_tokens")
    priority: int | None = api_field("priority")


class GenerationRequest(SamplingFields):
    """What the chat and completions bodies share: the sampling fields (SamplingFields, from
    minisgl.core.request_fields) and these."""

    model: str | None = Field(None, description="optional: the one model this server serves")
    stop: StopField = Field(None, description=f"a string or up to 4, each up to {MAX_STOP_CHARS} characters; "
                                              "generation ends before any of them")
    n: int | None = Field(1, ge=1, le=INT32_MAX)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    guided_json: dict | str | None = Field(None, description="extension (vLLM): output matches this JSON schema")
    guided_regex: str | None = Field(None, description="extension (vLLM): output matches this regular expression")
    guided_choice: Annotated[list[str], Field(min_length=1)] | None = \
        Field(None, description="extension (vLLM): output is one of these strings")
    guided_grammar: str | None = Field(None, description="extension (vLLM): output matches this EBNF grammar")
    skip_special_tokens: bool | None = Field(True, description="extension: leave special tokens out of the text")
    user: str | None = Field(None, description="an end-user id; not used")
    metadata: Metadata | None = Field(None, description="not used")
    safety_identifier: str | None = Field(None, description="not used")
    prompt_cache_key: str | None = Field(None, description="not used: the prefix cache needs no key")

    # `null` for these means their default, as in vLLM (the spec allows null for stream, n, ...).
    # Not max_tokens: null there means "as many as fit" (vLLM too), not completions' 16.
    NULL_IS_DEFAULT: ClassVar[frozenset[str]] = frozenset(
        {"n", "stream", "ignore_eos", "skip_special_tokens", "add_generation_prompt"})

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data):
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if not (v is None and k in cls.NULL_IS_DEFAULT)}
        return data

    @model_validator(mode="after")
    def _checks(self):
        if self.logit_bias:
            for key in self.logit_bias:
                if not (key.isascii() and key.isdigit()) or int(key) > INT32_MAX:  # int() reads '١٢' too
                    raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
        constraints = [name for name in ("response_format", "guided_json", "guided_regex", "guided_choice",
                                         "guided_grammar") if getattr(self, name) is not None
                       and not (name == "response_format" and self.response_format.type == "text")]
        if len(constraints) > 1:
            raise ValueError(f"only one of {', '.join(constraints)} may be given")
        return self

    def with_defaults(self, defaults: dict):
        """The request with the server's sampling defaults (--generation-config) for the fields it
        leaves unset."""
        unset = {k: v for k, v in defaults.items() if getattr(self, k, None) is None}
        return self.model_copy(update=unset) if unset else self

    def logprobs_k(self) -> int | None:
        """How many alternatives per token the request wants (None: no logprobs)."""
        return None

    def constraint(self) -> tuple[str, str] | None:
        """The structured-output constraint as (kind, spec), SamplingParams.constraint's form."""
        rf = self.response_format
        if rf is not None and rf.type == "json_object":
            return ("json_object", "")
        if rf is not None and rf.type == "json_schema":
            schema = rf.json_schema.schema_ if rf.json_schema.schema_ is not None else {}
            return ("json_schema", json.dumps(schema))  # strict or not, enforced as vLLM does (grammar.py)
        if self.guided_json is not None:
            spec = self.guided_json if isinstance(self.guided_json, str) else json.dumps(self.guided_json)
            return ("json_schema", spec)
        if self.guided_regex is not None:
            return ("regex", self.guided_regex)
        if self.guided_choice is not None:
            return ("choice", json.dumps(self.guided_choice))
        if self.guided_grammar is not None:
            return ("grammar", self.guided_grammar)
        return None

    def max_new_tokens(self) -> int | None:
        """The most tokens a choice may generate (None: as many as fit); each request spells it its way."""
        raise NotImplementedError

    def sampling_params(self) -> SamplingParams:
        """The request's SamplingParams, checked here in the API server: an impossible combination
        (min_tokens above max_tokens, min_tokens with a grammar, a schema that is not JSON) is the
        client's 400 naming the field, and nothing invalid enters the pipeline. max_tokens None
        stays for the scheduler to resolve."""
        values = {}
        for f in API_FIELDS:
            value = getattr(self, f.name)
            values[f.name] = f.default if value is None else f.from_api(value) if f.from_api else value
        try:
            return SamplingParams(**values, max_tokens=self.max_new_tokens(), logprobs=self.logprobs_k(),
                                  constraint=self.constraint())
        except ValueError as e:
            raise APIError(400, str(e), code="invalid_request") from None

    def text_params(self, template: dict | None = None) -> TextParams:
        """What only the tokenizer (`template`: chat) and the detokenizer read of the request."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return TextParams(stop, self.skip_special_tokens, template)


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    include_usage: bool = False


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = Field(None, description="an assistant's earlier tool calls")
    tool_call_id: str | None = Field(None, description="a tool message: the call it answers")
    reasoning_content: str | None = Field(None, description="an assistant's earlier reasoning")

    def as_template_input(self) -> dict:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text for p in content)
        out = {"role": self.role, "content": content or ""}
        for key in ("name", "tool_call_id", "reasoning_content"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.tool_calls:
            # Templates render the arguments themselves (as JSON): they get a mapping, as in vLLM.
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.function.name, "arguments": c.function.parsed_arguments()}}
                                 for c in self.tool_calls]
        return out


class FunctionCall(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    name: str
    arguments: str = Field(description="a JSON object, as a string")

    def parsed_arguments(self) -> dict | str:
        try:
            value = loads(self.arguments)  # bounded in depth: a client's arguments may nest a thousand deep
        except ValueError:
            return self.arguments
        return value if isinstance(value, dict) else self.arguments


class ToolCall(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionDef(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict | None = Field(None, description="a JSON schema of the arguments object")
    strict: bool | None = None


class Tool(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    type: Literal["function"]
    function: FunctionDef


# tool_choice's modes, for Chat Completions and Responses alike (a named function is the other form).
ToolChoiceMode = Literal["none", "auto", "required"]


class ChosenFunction(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    type: Literal["function"]
    function: ChosenFunction


class ChatCompletionRequest(GenerationRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = token_limit(None, "deprecated alias of max_completion_tokens")
    max_completion_tokens: int | None = token_limit(None)
    logprobs: bool | None = Field(None, description="return each output token's log-probability")
    top_logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                     description="with logprobs: that many most likely tokens per position")

    tools: Annotated[list[Tool], Field(max_length=128)] | None = None
    tool_choice: ToolChoiceMode | NamedToolChoice | None = \
        Field(None, description="auto (default with tools) reads calls with the model's tool-call parser; required "
                                "and a named function are enforced by the grammar (beside response_format: a call "
                                "or an answer in the format)")
    parallel_tool_calls: bool | None = Field(None, description="with tool_choice required: false allows one call")
    add_generation_prompt: bool | None = Field(True, description="extension: end the prompt with the assistant's turn")
    chat_template_kwargs: dict | None = Field(None, description="extension: more variables for the chat template, "
                                                               "e.g. {\"enable_thinking\": false}")

    def template_options(self) -> dict:
        """What the tokenizer's apply_chat_template gets besides the messages."""
        tools = [t.model_dump(exclude_none=True) for t in self.tools] if self.tools and self.tool_mode != "none" else None
        return {"add_generation_prompt": self.add_generation_prompt, "kwargs": self.chat_template_kwargs or {},
                "tools": tools}

    @property
    def tool_mode(self) -> str:
        """none, auto, required, or named (tool_choice naming one function)."""
        if not self.tools:
            return "none"
        if isinstance(self.tool_choice, NamedToolChoice):
            return "named"
        return self.tool_choice or "auto"

    def answer_constraint(self) -> tuple[str, str] | None:
        """What response_format / guided_* ask of an answer (beside forced tool calls: the model
        may answer in it instead of calling)."""
        return super().constraint()

    def constraint(self) -> tuple[str, str] | None:
        """Forced tool calls are structured output: the arguments of the named function (a client
        naming one expects that call, response_format or not: instructor's RESPONSES_TOOLS), or
        for `required` a list of {name, parameters} (minisgl.constrained.tools). Either way this
        turn is a call, as OpenAI guarantees: a response_format beside them shapes the final answer,
        in a later turn whose tool_choice lets the model answer."""
        mode = self.tool_mode
        if mode not in ("named", "required"):
            return self.answer_constraint()
        schemas = {t.function.name: t.function.parameters or {"type": "object"} for t in self.tools}
        if mode == "named":
            return ("json_schema", json.dumps(schemas[self.tool_choice.function.name]))
        return ("json_schema", json.dumps(forced_calls_schema(schemas, one_call=self.parallel_tool_calls is False)))

    def call_or_answer(self, tool_syntax: str | None) -> tuple[str, str] | None:
        """tool_choice auto beside a JSON answer format (the Agents SDK's agent with tools and an
        output_type): as OpenAI allows, one call in the model's own syntax (`tool_syntax`, its tool
        parser's) or an answer in the format. None where the request's constraint() stands."""
        answer = self.answer_constraint()
        if self.tool_mode != "auto" or not tool_syntax or answer is None or answer[0] not in ("json_schema",
                                                                                              "json_object"):
            return None
        schemas = {t.function.name: t.function.parameters or {"type": "object"} for t in self.tools}
        return call_or_answer(schemas, json.loads(answer[1]) if answer[0] == "json_schema" else {"type": "object"},
                              tool_syntax)

    @model_validator(mode="after")
    def _top_logprobs_needs_logprobs(self):
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("tool_choice other than none/auto needs tools")
        check_tool_names_unique(t.function.name for t in self.tools or ())
        if isinstance(self.tool_choice, NamedToolChoice) and self.tool_choice.function.name not in \
                {t.function.name for t in self.tools}:
            raise ValueError(f"tool_choice names {self.tool_choice.function.name!r}, which is not among the tools")
        answer = self.answer_constraint()
        if self.tool_mode in ("named", "required") and answer is not None and answer[0] not in ("json_schema",
                                                                                                "json_object"):
            raise ValueError("tool_choice required or named can be combined with response_format or guided_json, "
                             "not with guided_regex, guided_choice or guided_grammar")
        return self

    def logprobs_k(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(GenerationRequest):
    prompt: Text | TokenIds | Annotated[list[Text], Field(min_length=1)] | Annotated[list[TokenIds], Field(min_length=1)] = \
        Field(description="text or token ids, one or a batch")
    max_tokens: int | None = token_limit(16)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS,
                                 description="return each output token's log-probability and that many alternatives")

    def logprobs_k(self) -> int | None:
        return self.logprobs

    def max_new_tokens(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[dict]:
        """Each prompt as generate() keyword arguments."""
        p = self.prompt
        if isinstance(p, str):
            return [{"text": p}]
        if p and all(isinstance(x, int) for x in p):
            return [{"input_ids": list(p)}]
        return [{"text": x} if isinstance(x, str) else {"input_ids": list(x)} for x in p]


GenerationRequest.model_rebuild()
ChatMessage.model_rebuild()


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


# -- response bodies (the OpenAPI schema; openai_formats.py builds the JSON ones through them) -----


class PromptTokensDetails(BaseModel):
    cached_tokens: int  # prompt tokens found in the prefix cache (not computed again)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    root: str
    parent: str | None = None  # a LoRA adapter's base model
    max_model_len: int | None = None  # prompt plus output tokens a request may have (vLLM's field)


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


class ResponseFunctionCall(BaseModel):
    name: str
    arguments: str


class ResponseToolCall(BaseModel):
    id: str
    type: Literal["function"]
    function: ResponseFunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = Field(None, description="with --reasoning-parser: the model's reasoning")
    tool_calls: list[ResponseToolCall] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


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


def generation_responses(model: type[BaseModel] | None = None) -> dict:
    """OpenAPI responses of a generation route: JSON (of `model` where the body has one here),
    or server-sent events when stream=true."""
    ok: dict = {"content": {"application/json": {}, "text/event-stream": {"schema": SSE_EVENT}}}
    if model is not None:
        ok = {"model": model, "content": {"text/event-stream": {"schema": SSE_EVENT}}}
    return {200: ok, 413: {"model": ErrorResponse}, 429: {"model": ErrorResponse}}
