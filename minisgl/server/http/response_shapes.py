"""The shapes of the two OpenAI responses, /v1/chat/completions (`ChatShape`) and /v1/completions
(`CompletionShape`): each knows its id prefix and `object` names, how a finished choice reads and
the stream events of one choice. `serve_generation` (generation.py) runs a request the same way for
both and asks its shape for everything the two spell differently. (A request's `response_format` is
the structured-output constraint, minisgl.constrained; nothing here.)"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel

from minisgl.message import Reply

from ..parsers import ChatOutputFormat, ChatOutputReader
from .chat_protocol import AssistantMessage, ChatChoice, ChatCompletionResponse
from .completions_protocol import CompletionChoice, CompletionResponse
from .protocol import Usage

if TYPE_CHECKING:
    from .generation import Choice


def openai_finish_reason(reason: str | None) -> str | None:
    """The pipeline's finish reason as OpenAI names it: an aborted choice simply stopped."""
    return "stop" if reason == "abort" else reason


def _lp(value: float) -> float:
    return max(value, -9999.0)  # JSON has no -Infinity


def chat_logprobs(entries: list | None) -> dict | None:
    """Reply.logprobs entries in the chat format (ChatLogprobs)."""
    if entries is None:
        return None

    def top(text: str, lp: float) -> dict:
        return {"token": text, "logprob": _lp(lp), "bytes": list(text.encode("utf-8", "surrogatepass"))}

    return {"content": [{**top(text, lp), "top_logprobs": [top(t, v) for t, v in alts]} for text, lp, alts in entries],
            "refusal": None}


def completion_logprobs(entries: list | None, offset: int = 0) -> dict | None:
    """The legacy completions format (CompletionLogprobs); `offset`: where this piece starts in
    the choice's text."""
    if entries is None:
        return None
    offsets, at = [], offset
    for text, _, _ in entries:
        offsets.append(at)
        at += len(text)
    return {"tokens": [e[0] for e in entries], "token_logprobs": [None if e[1] is None else _lp(e[1]) for e in entries],
            "top_logprobs": [None if e[2] is None else _by_text(e[2]) for e in entries],
            "text_offset": offsets}


def _by_text(alternatives: list) -> dict[str, float]:
    """Alternatives keyed by their text, most likely first: two tokens of one text (partial UTF-8
    bytes) keep the likelier's logprob, as the greedy check of a scoring client expects."""
    out: dict[str, float] = {}
    for text, lp in alternatives:
        out.setdefault(text, _lp(lp))
    return out


def echoed_prompt(prompt_text: str | None, prompt_entries: list | None) -> tuple[str, list]:
    """An echoed prompt's text (as sent, or its tokens' texts joined for token ids) and its
    Reply.prompt_logprobs in Reply.logprobs' form, the first token's logprob and alternatives None."""
    entries = [[text, lp, None if lp is None else [[t, v] for _, t, v in alts]]
               for _, text, lp, alts in prompt_entries or []]
    return (prompt_text if prompt_text is not None else "".join(e[0] for e in entries)), entries


def vllm_prompt_logprobs(prompt_entries: list) -> list:
    """Reply.prompt_logprobs as vLLM returns them: per prompt token None (the first) or
    {token id: {logprob, decoded_token}} for the token and its alternatives."""
    def one(token: int, text: str, lp: float) -> tuple[str, dict]:
        return str(token), {"logprob": _lp(lp), "decoded_token": text}

    return [None if lp is None else dict([one(i, text, lp), *(one(*alt) for alt in alts)])
            for i, text, lp, alts in prompt_entries]


# Stream chunks are plain dicts, not pydantic models: the per-token path is event-loop bound, and a
# chunk built and dumped through models costs several times the whole per-token path of
# serve_generation (benchmark/NOTES.md).


class ChoiceStream(ABC):
    """One choice of a streamed response: the `choices` entries of its chunks, reply by reply."""

    def opening(self) -> list[dict]:
        """Entries sent before any output."""
        return []

    @abstractmethod
    def events(self, reply: Reply) -> list[dict]:
        """Entries for one reply with text, logprobs or an end (errors are the caller's)."""


def _finish_event(index: int, finish: str) -> dict:
    return {"index": index, "delta": {}, "logprobs": None, "finish_reason": finish}


@dataclass
class PlainChatStream(ChoiceStream):
    """The output as it comes, as content deltas."""

    index: int

    def opening(self) -> list[dict]:
        return [{"index": self.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                 "finish_reason": None}]

    def events(self, reply: Reply) -> list[dict]:
        out = []
        if reply.text or reply.logprobs:
            out.append({"index": self.index, "delta": {"content": reply.text},
                        "logprobs": chat_logprobs(reply.logprobs), "finish_reason": None})
        finish = openai_finish_reason(reply.finish_reason)
        if finish:
            out.append(_finish_event(self.index, finish))
        return out


@dataclass
class ParsedChatStream(PlainChatStream):
    """The output read back by the tool-call / reasoning parsers: reasoning_content, content and
    tool_calls deltas, the reply's logprobs on the first of them."""

    reader: ChatOutputReader = field(kw_only=True)

    def events(self, reply: Reply) -> list[dict]:
        deltas, finish = self.reader.read(reply.text, openai_finish_reason(reply.finish_reason))
        out, logprobs = [], chat_logprobs(reply.logprobs) if deltas else None
        for delta in deltas:
            out.append({"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": None})
            logprobs = None  # the reply's logprobs go with its first delta
        if finish:
            out.append(_finish_event(self.index, finish))
        return out


@dataclass(frozen=True)
class Echo:
    text: str | None  # the prompt as sent; None: token ids (their tokens' texts are joined)


@dataclass
class CompletionStream(ChoiceStream):
    """Text pieces, each with its logprobs (offsets into the whole text) and the end on the last."""

    index: int
    # Where the next token starts: the tokens' texts so far, as in the JSON response. Not the text
    # sent so far, which lags the tokens while the detokenizer holds back an incomplete character.
    token_text_length: int = 0
    echo: Echo | None = None  # the prompt to send first (echo), with its logprobs if asked
    logprobs: bool = False
    prompt_logprobs: bool = False  # vLLM's, on the first event

    def events(self, reply: Reply) -> list[dict]:
        text, entries = reply.text, reply.logprobs
        if self.echo is not None:  # the first reply: the prompt before it
            prompt, prompt_entries = echoed_prompt(self.echo.text, reply.prompt_logprobs)
            text, entries = prompt + text, (prompt_entries + (entries or [])) if self.logprobs else entries
            self.echo = None
        logprobs = completion_logprobs(entries, self.token_text_length)
        if entries:
            self.token_text_length += sum(len(entry[0]) for entry in entries)
        event = {"index": self.index, "text": text, "logprobs": logprobs,
                 "finish_reason": openai_finish_reason(reply.finish_reason)}
        if reply.prompt_logprobs is not None and self.prompt_logprobs:
            event["prompt_logprobs"] = vllm_prompt_logprobs(reply.prompt_logprobs)
        return [event]


class ResponseShape(ABC):
    """What a generation route calls its objects, and how its choices read."""

    id_prefix: ClassVar[str]
    object: ClassVar[str]  # the JSON response's
    chunk_object: ClassVar[str]  # each stream chunk's
    response: ClassVar[type[BaseModel]]  # the JSON response's model

    def new_id(self) -> str:
        return f"{self.id_prefix}-{uuid.uuid4().hex}"

    @abstractmethod
    def choice(self, index: int, text: str, finish_reason: str | None) -> BaseModel:
        """A finished choice of the JSON response (its logprobs are added by `body`)."""

    @abstractmethod
    def logprobs(self, entries: list | None) -> dict | None:
        """A whole choice's Reply.logprobs entries in this format."""

    @abstractmethod
    def stream(self, index: int, prompt_index: int = 0) -> ChoiceStream:
        """The stream of choice `index` of prompt `prompt_index` (one per choice: it may hold text
        back while parsing)."""

    def body(self, rid: str, created: int, model: str, choices: Sequence[Choice], usage: dict,
             logprobs: bool) -> dict:
        """The JSON response, built through its pydantic model (chat_protocol.py, completions_protocol.py)."""
        response = self.response(id=rid, object=self.object, created=created, model=model,
                                 choices=[self.choice(c.index, c.text, c.finish_reason) for c in choices],
                                 usage=Usage(**usage))
        out = response.model_dump(exclude_unset=True)
        # Logprobs join as plain dicts, in the place the model gave them: validated as models they
        # cost several times the dicts a token (benchmark/NOTES.md).
        for entry, c in zip(out["choices"], choices):
            entry["logprobs"] = self.logprobs(c.logprobs if logprobs else None)
        return out


@dataclass(frozen=True)
class ChatShape(ResponseShape):
    """/v1/chat/completions: an assistant message per choice, read back by `output`'s parsers."""

    output: ChatOutputFormat = ChatOutputFormat()

    id_prefix: ClassVar[str] = "chatcmpl"
    object: ClassVar[str] = "chat.completion"
    chunk_object: ClassVar[str] = "chat.completion.chunk"
    response: ClassVar[type[BaseModel]] = ChatCompletionResponse

    def choice(self, index: int, text: str, finish_reason: str | None) -> ChatChoice:
        message, finish = self.output.reader().message(text, openai_finish_reason(finish_reason))
        return ChatChoice(index=index, message=AssistantMessage(**message), logprobs=None, finish_reason=finish)

    def logprobs(self, entries: list | None) -> dict | None:
        return chat_logprobs(entries)

    def stream(self, index: int, prompt_index: int = 0) -> ChoiceStream:
        if self.output.plain:
            return PlainChatStream(index)
        return ParsedChatStream(index, reader=self.output.reader())


@dataclass(frozen=True)
class CompletionShape(ResponseShape):
    """/v1/completions: the text of each choice as it is, after its prompt with `echo`."""

    # Per prompt, its text as sent (None: token ids) when the request echoes its prompts; else empty.
    echo_texts: tuple[str | None, ...] = ()
    prompt_logprobs: bool = False  # vLLM's prompt_logprobs asked: each choice carries them
    with_logprobs: bool = False  # logprobs asked (an echo's include the prompt's)
    prompt_only: bool = False  # max_tokens 0 with echo: the generated token is left out

    id_prefix: ClassVar[str] = "cmpl"
    object: ClassVar[str] = "text_completion"
    chunk_object: ClassVar[str] = "text_completion"
    response: ClassVar[type[BaseModel]] = CompletionResponse

    def choice(self, index: int, text: str, finish_reason: str | None) -> CompletionChoice:
        return CompletionChoice(index=index, text=text, logprobs=None,
                                finish_reason=openai_finish_reason(finish_reason))

    def logprobs(self, entries: list | None) -> dict | None:
        return completion_logprobs(entries)

    def stream(self, index: int, prompt_index: int = 0) -> ChoiceStream:
        echo = Echo(self.echo_texts[prompt_index]) if self.echo_texts else None
        return CompletionStream(index, echo=echo, logprobs=self.with_logprobs, prompt_logprobs=self.prompt_logprobs)

    def body(self, rid: str, created: int, model: str, choices: Sequence[Choice], usage: dict,
             logprobs: bool) -> dict:
        if self.prompt_only:
            usage = {**usage, "completion_tokens": 0, "total_tokens": usage["prompt_tokens"]}
        out = super().body(rid, created, model, choices, usage, logprobs)
        for entry, c in zip(out["choices"], choices):
            if self.echo_texts:
                prompt, prompt_entries = echoed_prompt(self.echo_texts[c.prompt_index], c.prompt_logprobs)
                entry["text"] = prompt + ("" if self.prompt_only else entry["text"])
                if self.prompt_only:
                    entry["finish_reason"] = "length"  # OpenAI's for max_tokens 0
                if logprobs:
                    entry["logprobs"] = completion_logprobs(prompt_entries + ([] if self.prompt_only else c.logprobs))
            if self.prompt_logprobs:
                entry["prompt_logprobs"] = vllm_prompt_logprobs(c.prompt_logprobs or [])
        return out
