"""What the assistant said, in OpenAI's shape: reasoning split out, tool calls parsed, for one
choice of a chat completion, whole or as stream deltas (a call's arguments in pieces as written)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .reasoning import REASONING_PARSERS, _partial_suffix
from .tool_calls import TOOL_PARSERS, ParsedCall, loads, raw_decode


@dataclass(frozen=True)
class ChatOutputFormat:
    """How a chat request's output is read back (one per request, shared by its choices)."""

    reasoning_parser: str | None = None  # --reasoning-parser
    tool_parser: str | None = None  # --tool-call-parser, for tool_choice auto
    # Forced tool calls (tool_choice required / named): the grammar made the output JSON
    # (minisgl.constrained.tools), read here directly: a named function's arguments object, or
    # for required a list of {name, parameters}.
    forced_tool: str | None = None  # the named function
    forced_list: bool = False  # tool_choice required
    tool_names: tuple[str, ...] = ()  # a required list's tools: a call cut inside its name may still name one

    @classmethod
    def for_chat(cls, body, reasoning_parser: str | None, tool_call_parser: str | None) -> ChatOutputFormat:
        """The format of a ChatCompletionRequest `body` on a server started with these parsers."""
        mode = body.tool_mode
        return cls(reasoning_parser=reasoning_parser, tool_parser=tool_call_parser if mode == "auto" else None,
                   forced_tool=body.tool_choice.function.name if mode == "named" else None,
                   forced_list=mode == "required",
                   tool_names=tuple(t.function.name for t in body.tools) if mode == "required" else ())

    @property
    def plain(self) -> bool:
        return not (self.reasoning_parser or self.tool_parser or self.forced_tool or self.forced_list)

    def reader(self) -> ChatOutputReader:
        return ChatOutputReader(self)


# A call's start in a list of calls as the grammar writes it (name first, as its schema orders them).
_CALL_NAME = re.compile(r'\s*,?\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")')
_CALL_ARGUMENTS = re.compile(r'\s*,\s*"parameters"\s*:\s*')
_DECODER = json.JSONDecoder()


def _forced_calls(fmt: ChatOutputFormat, text: str) -> list[ParsedCall] | None:
    """The calls of a forced output, or None for output that is no list of calls (read as content). An output cut
    off by max_tokens gives what OpenAI gives: the calls so far, the last one's arguments as far
    as they were written (never the call syntax as content)."""
    if not fmt.forced_list:
        try:
            return [ParsedCall(fmt.forced_tool, json.dumps(loads(text), ensure_ascii=False))]
        except ValueError:
            return [ParsedCall(fmt.forced_tool, text)]
    try:
        value = loads(text)
    except ValueError:
        return _cut_calls(text, fmt.tool_names)
    if not all(isinstance(c, dict) and c.keys() == {"name", "parameters"} for c in value):
        return None
    return [ParsedCall(c["name"], json.dumps(c["parameters"], ensure_ascii=False)) for c in value]


# The arguments of a call cut before they began: the grammar writes an object next, so its opening
# brace is what they are so far. Never "", which clients read as a whole call of no arguments
# (LangChain's args {}); "{" is an unfinished call to them (invalid_tool_calls), as OpenAI's cut ones are.
_NOT_BEGUN = "{"


def _cut_calls(text: str, names: tuple[str, ...] = ()) -> list[ParsedCall]:
    """The calls of a list cut short: each whole one, then the last one's with its arguments so far
    (cut inside its opening: the one tool of `names` its name can still become, arguments not begun)."""
    calls, at = [], text.find("[") + 1
    while at:
        head = _CALL_NAME.match(text, at)
        if head is None:
            name = _cut_name(text[at:], names, first=not calls)
            return calls + ([ParsedCall(name, _NOT_BEGUN)] if name else [])
        name, arguments = json.loads(head.group(1)), _CALL_ARGUMENTS.match(text, head.end())
        if arguments is None:  # cut before its arguments began
            return calls + [ParsedCall(name, _NOT_BEGUN)]
        start = arguments.end()
        try:
            args, at = raw_decode(_DECODER, text, start)
        except ValueError:
            return calls + [ParsedCall(name, text[start:])]
        calls.append(ParsedCall(name, json.dumps(args, ensure_ascii=False)))
        at = text.find("}", at) + 1  # past the call's own closing brace
    return calls


def _cut_name(rest: str, names: tuple[str, ...], first: bool) -> str | None:
    """The tool a call cut inside its opening (`rest`, as written) can only be, if one: the grammar
    lets the list hold nothing but calls of `names`, so a prefix of one's name is that call."""
    started = re.sub(r"\s", "", rest).removeprefix(",")
    if not started.startswith("{") and not (first and started == ""):
        return None  # after the last call: the list was closing, or nothing began
    fits = [n for n in names if f'{{"name":"{n}"'.startswith(started)]
    return fits[0] if len(fits) == 1 else None


_STRING = r'("(?:[^"\\]|\\.)*")'
# Where the next call's arguments start, anchored where the last call's arguments ended (or at the
# calls' start), per syntax: what may come between two calls, the call's name, its arguments key.
# The arguments must be an object (a model writing them as a JSON string has them read at the end).
_NEXT_CALL = {
    "hermes": re.compile(r'(?:\s*\}\s*</tool_call>)?\s*<tool_call>\s*\{\s*"name"\s*:\s*' + _STRING
                         + r'\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)'),
    "llama3_json": re.compile(r'(?:\s*\})?\s*;?\s*(?:<\|python_tag\|>)?\s*\{\s*"name"\s*:\s*' + _STRING
                              + r'\s*,\s*"(?:parameters|arguments)"\s*:\s*(?=\{)'),
    "forced_list": re.compile(r'(?:\s*\})?\s*[\[,]\s*\{\s*"name"\s*:\s*' + _STRING
                              + r'\s*,\s*"parameters"\s*:\s*(?=\{)'),
}
_NAMED_CALL = re.compile(r"\s*(?=\{)")  # a named tool_choice: the whole output is its arguments


class _JsonValueEnd:
    """Finds where a JSON object ends, fed its text piece by piece (string-aware brace counting)."""

    def __init__(self) -> None:
        self.depth, self.in_string, self.escaped, self.scanned = 0, False, False, 0

    def end(self, text: str, start: int) -> int | None:
        """The end (exclusive) of the object starting at text[start], or None while it is open."""
        for at in range(start + self.scanned, len(text)):
            c = text[at]
            if self.in_string:
                self.in_string, self.escaped = (self.escaped or c != '"'), (not self.escaped and c == "\\")
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return at + 1
        self.scanned = len(text) - start
        return None


class _CallStream:
    """The tool calls of held output as stream deltas while they are written: a call's id, type
    and name once its arguments begin, then its arguments text as it comes (OpenAI's shape), so
    the pieces join to the call's arguments exactly as the model wrote them."""

    def __init__(self, syntax: str | None, named: str | None = None):
        self.pattern = _NAMED_CALL if named else _NEXT_CALL[syntax]
        self.named = named
        self.count = 0  # calls started
        self.at = 0  # in the held text: where the open call's arguments start, or where the next call may
        self.sent = 0  # arguments characters of the open call sent
        self.value: _JsonValueEnd | None = None  # the open call's arguments, None between calls

    def deltas(self, held: str) -> list[dict]:
        out = []
        while True:
            if self.value is None:
                if self.named and self.count:
                    return out  # a named choice is one call
                match = self.pattern.match(held, self.at)
                if match is None:
                    return out
                name = self.named or json.loads(match.group(1))
                self.at, self.sent, self.value = match.end(), 0, _JsonValueEnd()
                out.append({"tool_calls": [{**ParsedCall(name, "").as_openai(self.count)}]})
                self.count += 1
            end = self.value.end(held, self.at)
            piece = held[self.at + self.sent: len(held) if end is None else end]
            if piece:
                out.append({"tool_calls": [{"index": self.count - 1, "function": {"arguments": piece}}]})
                self.sent += len(piece)
            if end is None:
                return out
            self.at, self.value = end, None


class ChatOutputReader:
    """Feed it a choice's text piece by piece (`feed`), then `finish`; or read a whole text
    with `message`."""

    def __init__(self, fmt: ChatOutputFormat):
        self.fmt = fmt
        self.reasoning = REASONING_PARSERS[fmt.reasoning_parser]() if fmt.reasoning_parser else None
        self.tools = TOOL_PARSERS[fmt.tool_parser]() if fmt.tool_parser else None
        self.held = ""  # answer text held back: it may be (the start of) tool calls
        self.holding = bool(fmt.forced_tool or fmt.forced_list)  # forced: the whole output is calls
        self.seen_answer = False  # answer text already shown (a call that starts only at the start cannot come)
        syntax = "forced_list" if fmt.forced_list else fmt.tool_parser and TOOL_PARSERS[fmt.tool_parser].syntax
        self.calls = _CallStream(syntax, fmt.forced_tool) if (syntax or fmt.forced_tool) else None

    def feed(self, text: str, final: bool = False) -> list[dict]:
        """Stream deltas ({"reasoning_content": ...} / {"content": ...}) for a new piece."""
        reasoning, answer = self.reasoning.feed(text, final) if self.reasoning else ("", text)
        deltas = [{"reasoning_content": reasoning}] if reasoning else []
        if self.holding:
            self.held += answer
            answer = ""
        elif self.tools is not None:
            answer, self.held = self.held + answer, ""
            at = self._call_start(answer)
            if at != -1:
                self.holding, self.held, answer = True, answer[at:], answer[:at]
            elif not final:  # the end may be a call's first characters: wait for the next piece
                keep = self._partial_start(answer)
                answer, self.held = answer[: len(answer) - keep], answer[len(answer) - keep:]
            self.seen_answer = self.seen_answer or bool(answer.strip())
        if answer:
            deltas.append({"content": answer})
        if self.holding and self.calls is not None:
            deltas += self.calls.deltas(self.held)
        return deltas

    def _call_start(self, answer: str) -> int:
        """Where tool calls start in the answer so far, or -1."""
        if self.tools.only_at_start:
            head = answer.lstrip()
            return len(answer) - len(head) if not self.seen_answer and head.startswith(self.tools.starts) else -1
        found = [at for at in (answer.find(s) for s in self.tools.starts) if at != -1]
        return min(found) if found else -1

    def _partial_start(self, answer: str) -> int:
        """How much of the answer's end might begin a call (to hold back while streaming)."""
        if self.tools.only_at_start:
            head = answer.lstrip()
            could = not self.seen_answer and any(s.startswith(head) for s in self.tools.starts)
            return len(answer) if could else 0
        return max(_partial_suffix(answer, s) for s in self.tools.starts)

    def read(self, text: str, finish_reason: str | None) -> tuple[list[dict], str | None]:
        """A streamed piece: its deltas, and with the choice's finish reason (None while it goes
        on) also the last deltas and the finish reason OpenAI gives (`finish`)."""
        deltas = self.feed(text)
        if finish_reason is None:
            return deltas, None
        last, finish_reason = self.finish(finish_reason)
        return deltas + last, finish_reason

    def finish(self, finish_reason: str | None) -> tuple[list[dict], str | None]:
        """The last deltas (the tool calls, or held text that turned out to be content) and the
        finish reason OpenAI gives (tool_calls when the model called tools)."""
        deltas = self.feed("", final=True)
        if not self.holding:
            return deltas, finish_reason
        content, calls = self._calls(self.held) if self.held else ("", [])
        streamed = self.calls.count if self.calls else 0
        if streamed:  # the calls the stream showed stand (as far as written); never their syntax as content
            content, calls = "", [None] * streamed + calls[streamed:]
        if content:
            deltas.append({"content": content})
        if calls[streamed:]:  # calls it could not show piece by piece (their name after their arguments)
            deltas.append({"tool_calls": [c.as_openai(i) for i, c in enumerate(calls) if i >= streamed]})
        return deltas, self._reason(calls, finish_reason)

    def message(self, text: str, finish_reason: str | None) -> tuple[dict, str | None]:
        """The whole assistant message of a non-streamed choice, and its finish reason."""
        reasoning, answer = self.reasoning.feed(text, final=True) if self.reasoning else ("", text)
        content, calls = self._calls(answer) if (self.tools or self.holding) else (answer, [])
        message = {"role": "assistant", "content": content if content or not calls else None}
        if self.reasoning:
            message["reasoning_content"] = reasoning or None
        if calls:
            message["tool_calls"] = [c.as_openai() for c in calls]
        return message, self._reason(calls, finish_reason)

    def _calls(self, text: str) -> tuple[str, list[ParsedCall]]:
        if self.fmt.forced_tool or self.fmt.forced_list:
            calls = _forced_calls(self.fmt, text)
            return (text, []) if calls is None else ("", calls)
        return self.tools.parse(text)

    def _reason(self, calls: list[ParsedCall], finish_reason: str | None) -> str | None:
        if calls and finish_reason == "stop" and not self.fmt.forced_tool:  # OpenAI: a named call ends with stop
            return "tool_calls"
        return finish_reason
