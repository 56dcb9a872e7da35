"""The Responses API's request body (pydantic), read as the chat request it means, and the
response object as documented in the OpenAPI schema. Stateless: what would need a stored response
or a hosted tool is refused by name."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from minisgl.core.request_fields import FIELDS

from .chat_protocol import ChatCompletionRequest, ToolChoiceMode
from .generation_protocol import JsonObjectFormat, KnownFieldsOnly, TextFormat
from .protocol import ClientNotes, StrictBody, api_field, check_tool_names_unique, token_limit

# Responses fields this server does not implement, with the values that ask for nothing; every
# other undeclared field is refused too (KnownFieldsOnly), unless --allow-unknown-fields.
RESPONSES_REFUSED_UNLESS: dict[str, tuple] = {
    "store": (None, False),  # nothing is kept: a stored response could never be retrieved
    "previous_response_id": (None,), "conversation": (None,), "background": (None, False),
    "include": (None, []), "prompt": (None,), "truncation": (None, "disabled"), "reasoning": (None,),
    "top_logprobs": (None, 0), "max_tool_calls": (None,), "service_tier": (None, "auto", "default"),
    "stream_options": (None,), "prompt_cache_retention": (None,), "context_management": (None,),
}


class InputText(StrictBody):
    type: Literal["input_text"]
    text: str


class OutputText(StrictBody):
    """An earlier answer's text, as clients send output items back; its annotations and logprobs
    describe the output and are not model input."""

    type: Literal["output_text"]
    text: str
    annotations: list = []
    logprobs: list | None = None


def _text_or(listed: Any) -> Any:
    """A string or a list: a bad list is reported for what it is, not also as "not a string"."""
    return Annotated[Annotated[str, Tag("text")] | Annotated[listed, Tag("list")],
                     Discriminator(lambda v: "text" if isinstance(v, str) else "list")]


ItemStatus = Literal["in_progress", "completed", "incomplete"] | None


class MessageItem(StrictBody):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: _text_or(list[Annotated[InputText | OutputText, Field(discriminator="type")]])
    id: str | None = None  # an output item sent back keeps its id and status: not model input
    status: ItemStatus = None

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


class FunctionCallItem(StrictBody):
    """A tool call the model made in an earlier turn."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: ItemStatus = None


class FunctionCallOutputItem(StrictBody):
    """The result of a tool call, sent back by the client."""

    type: Literal["function_call_output"]
    call_id: str
    output: _text_or(list[InputText])
    id: str | None = None
    status: ItemStatus = None


class ReasoningText(StrictBody):
    type: Literal["reasoning_text", "summary_text"]
    text: str


class ReasoningItem(StrictBody):
    """An earlier turn's reasoning (output with --reasoning-parser), sent back."""

    type: Literal["reasoning"]
    summary: list[ReasoningText] = []
    content: list[ReasoningText] | None = None
    id: str | None = None
    status: ItemStatus = None


def _item_type(value: Any) -> str | None:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) else None


InputItem = Annotated[Annotated[MessageItem, Tag("message")] | Annotated[FunctionCallItem, Tag("function_call")]
                      | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
                      | Annotated[ReasoningItem, Tag("reasoning")], Discriminator(_item_type)]


class FunctionTool(StrictBody):
    """A function tool in the Responses' flat shape (name and parameters beside `type`)."""

    type: Literal["function"]
    name: str = Field(pattern=r"^[a-zA-Z0-9_.-]{1,64}$")
    description: str | None = None
    parameters: dict | None = None
    strict: bool | None = None


class BuiltInTool(BaseModel):
    """A hosted tool (web_search, file_search, ...): parsed only to be refused by its type."""

    model_config = ConfigDict(strict=True, extra="allow")
    type: str


def _tool_type(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "function" if kind == "function" else "built_in"


ResponsesTool = Annotated[Annotated[FunctionTool, Tag("function")] | Annotated[BuiltInTool, Tag("built_in")],
                          Discriminator(_tool_type)]


class NamedFunction(StrictBody):
    type: Literal["function"]
    name: str


class JsonSchemaTextFormat(StrictBody):
    """Responses' json_schema format: the chat's json_schema object flattened into it."""

    model_config = ConfigDict(populate_by_name=True)
    type: Literal["json_schema"]
    name: str = Field(max_length=64)
    schema_: dict = Field(alias="schema")
    description: str | None = None
    strict: bool | None = None


class TextConfig(StrictBody):
    format: Annotated[TextFormat | JsonObjectFormat | JsonSchemaTextFormat, Field(discriminator="type")] | None = None


class ResponsesSampling(KnownFieldsOnly):
    """The sampling fields the Responses API has, as minisgl.core.request_fields declares them
    (tests/server/test_request_bodies.py holds them equal to the table)."""

    temperature: float | None = api_field("temperature")
    top_p: float | None = api_field("top_p")


class ResponsesRequest(ResponsesSampling, ClientNotes):
    refused_unless: ClassVar[dict[str, tuple]] = RESPONSES_REFUSED_UNLESS

    model: str | None = Field(None, description="optional: the one model this server serves")
    input: _text_or(Annotated[list[InputItem], Field(min_length=1)]) = \
        Field(description="a user message, or messages, function calls and their outputs")
    instructions: str | None = Field(None, description="the first (system) message")
    max_output_tokens: int | None = token_limit(None)
    stream: bool | None = False
    tools: Annotated[list[ResponsesTool], Field(max_length=128)] | None = \
        Field(None, description="function tools only")
    tool_choice: ToolChoiceMode | NamedFunction | None = \
        Field(None, description="auto (default with tools) reads calls with the model's tool-call parser; required "
                                "and a named function are enforced by the grammar (beside text.format: a call or "
                                "an answer in the format)")
    parallel_tool_calls: bool | None = Field(None, description="with tool_choice required: false allows one call")
    text: TextConfig | None = Field(None, description="format: text, json_object or json_schema")

    @model_validator(mode="after")
    def _tool_choice_fits_the_tools(self):
        check_tool_names_unique(t.name for t in self.tools or () if isinstance(t, FunctionTool))
        names = {t.name for t in self.tools or () if isinstance(t, FunctionTool)}
        forced = self.tool_choice == "required" or isinstance(self.tool_choice, NamedFunction)
        if forced and not names:
            raise ValueError("tool_choice other than none/auto needs tools")
        if isinstance(self.tool_choice, NamedFunction) and self.tool_choice.name not in names:
            raise ValueError(f"tool_choice names {self.tool_choice.name!r}, which is not among the tools")
        return self

    def built_in_tool(self) -> str | None:
        """The type of the first hosted tool asked for (none is implemented), or None."""
        return next((t.type for t in self.tools or () if isinstance(t, BuiltInTool)), None)

    def chat_messages(self) -> list[dict]:
        """The input as chat messages: a function call joins the assistant message before it (the
        chat shape of "said this, then called that"), reasoning goes to the next assistant message."""
        messages = [] if self.instructions is None else [{"role": "system", "content": self.instructions}]
        items = [MessageItem(role="user", content=self.input)] if isinstance(self.input, str) else self.input
        reasoning: list[str] = []
        for item in items:
            if isinstance(item, ReasoningItem):
                reasoning += [p.text for p in item.content or item.summary]
                continue
            if isinstance(item, FunctionCallOutputItem):
                output = item.output if isinstance(item.output, str) else "".join(p.text for p in item.output)
                messages.append({"role": "tool", "tool_call_id": item.call_id, "content": output})
                continue
            if isinstance(item, MessageItem):
                messages.append({"role": item.role, "content": item.text()})
            else:  # a function call
                call = {"id": item.call_id, "type": "function",
                        "function": {"name": item.name, "arguments": item.arguments}}
                if not messages or messages[-1]["role"] != "assistant":
                    messages.append({"role": "assistant", "content": ""})
                messages[-1].setdefault("tool_calls", []).append(call)
            if messages[-1]["role"] == "assistant" and reasoning:
                messages[-1]["reasoning_content"], reasoning = "\n".join(reasoning), []
        return messages

    def chat_request(self) -> ChatCompletionRequest:
        """The chat completion request this one means."""
        fmt = self.text.format if self.text else None
        if isinstance(fmt, JsonSchemaTextFormat):
            spec = {"name": fmt.name, "schema": fmt.schema_, "description": fmt.description, "strict": fmt.strict}
            fmt = {"type": "json_schema", "json_schema": {k: v for k, v in spec.items() if v is not None}}
        elif fmt is not None:
            fmt = fmt.model_dump()
        tools = [{"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
                 for t in self.tools or ()]
        choice = self.tool_choice
        if isinstance(choice, NamedFunction):
            choice = {"type": "function", "function": {"name": choice.name}}
        body = {"messages": self.chat_messages(), "max_completion_tokens": self.max_output_tokens,
                "temperature": self.temperature, "top_p": self.top_p, "stream": bool(self.stream),
                "tools": tools or None, "tool_choice": choice, "parallel_tool_calls": self.parallel_tool_calls,
                "response_format": fmt, "user": self.user, "metadata": self.metadata}
        return ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})

    def echo(self, chat: ChatCompletionRequest) -> dict:
        """The request settings a response object carries (the sampling ones as used)."""
        fmt = self.text.format.model_dump(by_alias=True, exclude_none=True) if self.text and self.text.format \
            else {"type": "text"}
        choice = self.tool_choice.model_dump() if isinstance(self.tool_choice, NamedFunction) else \
            self.tool_choice or "auto"
        return {"instructions": self.instructions, "max_output_tokens": self.max_output_tokens,
                **{name: FIELDS[name].default if getattr(chat, name) is None else getattr(chat, name)
                   for name in ResponsesSampling.model_fields},
                "tools": [{"description": None, "parameters": None, "strict": None, **t.model_dump(exclude_none=True)}
                          for t in self.tools or ()],
                "tool_choice": choice, "parallel_tool_calls": self.parallel_tool_calls is not False,
                "text": {"format": fmt}, "metadata": self.metadata or {}, "user": self.user,
                "truncation": "disabled", "store": False, "background": False, "previous_response_id": None,
                "reasoning": None}


class ResponseUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: dict
    output_tokens_details: dict


class ResponseObject(BaseModel):
    """The response object (documented in the OpenAPI schema; the route builds it as a dict)."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "failed"]
    model: str
    output: list[dict]
    incomplete_details: dict | None = None
    error: dict | None = None
    usage: ResponseUsage | None = None


__all__ = ["ResponsesRequest", "ResponseObject", "RESPONSES_REFUSED_UNLESS"]
