"""POST /v1/chat/completions' request body (messages, tools, tool_choice, logprobs) and response
bodies, as the OpenAPI schema documents them (response_shapes.py builds the JSON ones through them)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from minisgl.constrained.tools import call_or_answer, forced_calls_schema, strict_calls
from minisgl.core.request_fields import MAX_LOGPROBS

from ..parsers.tool_calls import loads
from .generation_protocol import GenerationRequest
from .protocol import StrictBody, Usage, check_tool_names_unique, token_limit


class TextPart(StrictBody):
    type: Literal["text"]
    text: str


class FunctionCall(StrictBody):
    name: str
    arguments: str = Field(description="a JSON object, as a string")

    def parsed_arguments(self) -> dict | str:
        try:
            value = loads(self.arguments)  # bounded in depth: a client's arguments may nest a thousand deep
        except ValueError:
            return self.arguments
        return value if isinstance(value, dict) else self.arguments


class ToolCall(StrictBody):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(StrictBody):
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
        out: dict[str, Any] = {"role": self.role, "content": content or ""}
        for key in ("name", "tool_call_id", "reasoning_content"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.tool_calls:
            # Templates render the arguments themselves (as JSON): they get a mapping, as in vLLM.
            out["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.function.name, "arguments": c.function.parsed_arguments()}}
                                 for c in self.tool_calls]
        return out


class FunctionDef(StrictBody):
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict | None = Field(None, description="a JSON schema of the arguments object")
    strict: bool | None = None


class Tool(StrictBody):
    type: Literal["function"]
    function: FunctionDef


# tool_choice's modes, for Chat Completions and Responses alike (a named function is the other form).
ToolChoiceMode = Literal["none", "auto", "required"]


class ChosenFunction(StrictBody):
    name: str


class NamedToolChoice(StrictBody):
    type: Literal["function"]
    function: ChosenFunction


class ChatCompletionRequest(GenerationRequest):
    # OpenAI's bound on the turns of one request; the validator stops counting past it, where
    # 100,000 one-letter turns took a second of the event loop to validate before the prompt's size
    # refused them.
    messages: list[ChatMessage] = Field(min_length=1, max_length=2048)
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
        schemas = {t.function.name: t.function.parameters or {"type": "object"} for t in self.tools or ()}
        if isinstance(self.tool_choice, NamedToolChoice):  # mode named
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
        schemas = {t.function.name: t.function.parameters or {"type": "object"} for t in self.tools or ()}
        return call_or_answer(schemas, json.loads(answer[1]) if answer[0] == "json_schema" else {"type": "object"},
                              tool_syntax)

    def strict_calls(self, tool_syntax: str | None) -> tuple[str, str] | None:
        """tool_choice auto with a strict function and no answer format: a call the model begins in
        its syntax is held to the tools' names and the strict ones' schemas (OpenAI's strict).
        None where the request's constraint() stands."""
        strict = {t.function.name for t in self.tools or () if t.function.strict}
        if self.tool_mode != "auto" or not strict or not tool_syntax or self.answer_constraint() is not None:
            return None
        schemas = {t.function.name: t.function.parameters or {"type": "object"} for t in self.tools or ()}
        return strict_calls(schemas, strict, tool_syntax)

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


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: None = None


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
