"""The one object every router takes (`ApiDeps`): the flags, the server's state, the pipeline's
client, the model's sampling defaults, and the checks every generation route makes before it
sends anything to the workers: a route's preamble is one call, admit_chat or admit_completion."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Generic, TypeVar

from ..args import ServerArgs
from ..parsers import ChatOutputFormat, ToolParserChoice
from ..runtime.frontend import FrontendClient
from ..runtime.state import LoraAdapters, ServerState
from .chat_protocol import ChatCompletionRequest
from .completions_protocol import CompletionRequest
from .jobs import Job, chat_jobs, completion_jobs, with_lora
from .metrics import ObservedClient, ServerMetrics
from .protocol import APIError
from .request_cost import depth_problem, ref_cycle_problem, request_cost_problem

ECHO_CHARS = 100  # the most of a client's own value an error message repeats


def clipped(value: str) -> str:
    """A client's value as an error message quotes it: at most ECHO_CHARS characters."""
    return value if len(value) <= ECHO_CHARS else f"{value[:ECHO_CHARS]}... ({len(value)} characters)"


def check_utf8(param: str, value) -> None:
    """400 naming `param` when its text (a string, or the strings in a dict or list) is not valid
    Unicode: JSON's \\ud800 escapes decode to lone surrogates, which no UTF-8 output can carry."""
    strings = [*value, *value.values()] if isinstance(value, dict) else value if isinstance(value, list) else (value,)
    for s in strings:
        if isinstance(s, str):
            try:
                s.encode("utf-8")
            except UnicodeEncodeError:
                raise APIError(400, f"{param}: not valid Unicode text (a lone surrogate escape)", param=param,
                               code="invalid_request") from None


Body = TypeVar("Body", ChatCompletionRequest, CompletionRequest)


@dataclass(frozen=True)
class Admitted(Generic[Body]):
    """A generation request the server takes: the body with the model's sampling defaults, its
    choices as the pipeline's jobs, and the model its response names."""

    body: Body
    jobs: list[Job]
    model: str  # the LoRA adapter the request named, else the served model
    output: ChatOutputFormat = ChatOutputFormat()  # how a chat's output is read back (a completion's: as text)


@dataclass(frozen=True)
class ApiDeps:
    args: ServerArgs
    state: ServerState
    frontend: FrontendClient  # the pipeline's client; the probes' requests go through it uncounted
    metrics: ServerMetrics
    sampling_defaults: dict  # --generation-config: the model's values for fields a request leaves unset
    tool_parser: ToolParserChoice  # reads tool_choice auto's calls: --tool-call-parser, else the model's (parsers/detect.py)
    loras: LoraAdapters  # served and loading: they change while serving (http/lora.py)

    @cached_property
    def client(self) -> ObservedClient:
        """The client of the OpenAI routes: their requests are timed and counted (/metrics)."""
        return ObservedClient(self.frontend, self.metrics)

    def check_serving(self, model: str | None = None) -> str | None:
        """503 unless the server can take requests now; 404 for a model it does not serve. Returns
        the LoRA adapter `model` names (--lora-modules), None for the base model."""
        state, args = self.state, self.args
        if state.failed:
            raise APIError(503, f"the server cannot take requests: {state.failed}", code="service_unavailable")
        if state.draining:
            raise APIError(503, "the server is shutting down", code="service_unavailable", headers={"Retry-After": "5"})
        if not state.ready:
            raise APIError(503, "the model is still loading", code="service_unavailable", headers={"Retry-After": "5"})
        adapters = self.loras.served
        if model is not None and model in adapters:
            return model
        if model is not None and model not in args.model_names:
            also = f" and the LoRA adapters {', '.join(map(repr, adapters))}" if adapters else ""
            raise APIError(404, f"the model '{clipped(model)}' does not exist; this server serves '{args.model_name}'"
                           f"{also}", param="model", code="model_not_found")
        return None

    def check_unsupported(self, body) -> None:
        """400 naming the first field the request sends that this server does not implement."""
        unsupported = body.unsupported_field(self.args.allow_unknown_fields)
        if unsupported:
            raise APIError(400, f"{unsupported} is not supported by this server", param=unsupported,
                           code="unsupported_parameter")

    def check_limits(self, body: ChatCompletionRequest | CompletionRequest, choices: int) -> None:
        """The server's limits on one generation request of `choices` choices (prompts x n)."""
        args = self.args
        max_tokens = body.max_new_tokens()
        if args.max_new_tokens and max_tokens and max_tokens > args.max_new_tokens:
            raise APIError(400, f"max_tokens {max_tokens} is above this server's limit of {args.max_new_tokens}",
                           param="max_tokens")
        if body.n > args.max_n:
            raise APIError(400, f"n {body.n} is above this server's limit of {args.max_n}", param="n")
        if choices // body.n > args.max_n:
            raise APIError(400, f"{choices // body.n} prompts in one request; this server takes at most {args.max_n}",
                           param="prompt")
        too_deep = depth_problem(body, args.max_grammar_depth)
        if too_deep:
            raise APIError(400, too_deep[1], param=too_deep[0], code="invalid_request")
        too_costly = request_cost_problem(body)
        if too_costly:
            raise APIError(400, too_costly[1], param=too_costly[0], code="request_too_large")
        cycle = ref_cycle_problem(body)
        if cycle:
            raise APIError(400, cycle[1], param=cycle[0], code="invalid_request")
        self.check_unsupported(body)
        # The route creates the request's streams before its first await, so no other request can
        # pass this check in between (client.in_flight counts streams from their creation).
        if self.frontend.pending + choices > args.max_pending_requests:
            raise APIError(429, f"the server is at its limit of {args.max_pending_requests} requests; retry later",
                           code="too_many_requests", headers={"Retry-After": "1"})

    def chat_output(self, body: ChatCompletionRequest) -> ChatOutputFormat:
        """How a chat's output is read back (reasoning, content, tool calls). Free-form tool calls
        (tool_choice auto, the default with tools) need a parser: 400 without one."""
        parser = self.tool_parser.parser
        if body.tool_mode == "auto" and not parser:
            raise APIError(400, f"tool_choice auto (the default with tools) needs a tool-call parser, and this server "
                                f"has none: {self.tool_parser.why} (start it with --tool-call-parser to name one); "
                                "tool_choice required or a named function work without one",
                           param="tool_choice", code="unsupported_parameter")
        return ChatOutputFormat.for_chat(body, self.args.reasoning_parser, parser)

    def admit_chat(self, model: str | None, chat: Callable[[], ChatCompletionRequest],
                   names: Mapping[str, str] | None = None) -> Admitted[ChatCompletionRequest]:
        """A chat the server takes now, or the APIError that refuses it. `chat` makes the chat
        request the route's body means, once the server is known to serve `model`; `names` spell
        the chat's fields as the route's body does, in the errors of the server's limits."""
        lora = self.check_serving(model)
        body = chat().with_defaults(self.sampling_defaults)
        try:
            self.check_limits(body, body.n)
        except APIError as e:
            if names and e.param in names:
                e.message, e.param = e.message.replace(e.param, names[e.param]), names[e.param]
            raise
        output = self.chat_output(body)
        return Admitted(body, with_lora(chat_jobs(body, output), lora), lora or self.args.model_name, output)

    def admit_completion(self, body: CompletionRequest) -> Admitted[CompletionRequest]:
        """A completion the server takes now (every prompt, n choices each), or the APIError that refuses it."""
        lora = self.check_serving(body.model)
        body = body.with_defaults(self.sampling_defaults)
        if not body.prompts():
            raise APIError(400, "prompt must not be empty", param="prompt")
        self.check_limits(body, len(body.prompts()) * body.n)
        return Admitted(body, with_lora(completion_jobs(body), lora), lora or self.args.model_name)
