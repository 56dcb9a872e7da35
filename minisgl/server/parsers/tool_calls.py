"""Tool-call parsers: the model's own tool-call text back into OpenAI `tool_calls`.

Each knows where a call starts (so a stream can show the text before it as content and hold the
rest) and how to read the calls out of the whole output.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from minisgl.constrained.constraints import json_depth

# Model output nested deeper than this is never read as a call: json's decoder recurses (a
# RecursionError near a thousand levels, a request's worth of stack), so depth is checked first by
# a scan that does not.
MAX_JSON_DEPTH = 128


def loads(text: str):
    """json.loads for model output: a ValueError (not a call) for JSON nested beyond MAX_JSON_DEPTH."""
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return json.loads(text)


def raw_decode(decoder: json.JSONDecoder, text: str, at: int):
    """decoder.raw_decode(text, at), bounded as `loads` is (the depth of what follows `at`)."""
    if json_depth(text[at:]) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested more than {MAX_JSON_DEPTH} levels deep")
    return decoder.raw_decode(text, at)


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: str  # a JSON object, as OpenAI sends it

    def as_openai(self, index: int | None = None) -> dict:
        call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}
        return call if index is None else {"index": index, **call}


def _call(obj) -> ParsedCall | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models emit the arguments already as a JSON string
        try:
            args = loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return ParsedCall(obj["name"], json.dumps(args, ensure_ascii=False))


class HermesToolParser:
    """Hermes / Qwen2.5 / Qwen3: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
    one block per call, after optional content."""

    starts = ("<tool_call>",)
    only_at_start = False
    syntax = "hermes"  # how a stream finds its calls' arguments (chat_output._NEXT_CALL)
    _block = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

    def parse(self, text: str) -> tuple[str, list[ParsedCall]]:
        """(content, calls); text that is not a well-formed call stays content."""
        at = text.find(self.starts[0])
        if at == -1:
            return text, []
        calls = []
        for match in self._block.finditer(text, at):
            try:
                call = _call(loads(match.group(1)))
            except ValueError:
                call = None
            if call is None:
                return text, []
            calls.append(call)
        return text[:at].rstrip(), calls


class Llama3JsonToolParser:
    """Llama 3.1/3.2 JSON tool calling: the output is `{"name": ..., "parameters": {...}}`
    (optionally after `<|python_tag|>`), several separated by `;`."""

    starts = ("<|python_tag|>", "{")
    only_at_start = True  # a brace later in an answer is just text
    syntax = "llama3_json"
    _decoder = json.JSONDecoder()

    def parse(self, text: str) -> tuple[str, list[ParsedCall]]:
        body = text.strip().removeprefix("<|python_tag|>").lstrip()
        if not body.startswith("{"):
            return text, []
        calls, at = [], 0
        while at < len(body):
            try:
                obj, end = raw_decode(self._decoder, body, at)
            except ValueError:
                return text, []
            call = _call(obj)
            if call is None:
                return text, []
            calls.append(call)
            at = end
            while at < len(body) and body[at] in " \t\r\n;":
                at += 1
        return "", calls


def _xml_value(text: str):
    """A <parameter=...> value as written: JSON where it reads as JSON (numbers, true, objects,
    lists), else the text itself (a string needs no quotes in this syntax)."""
    try:
        return loads(text)
    except ValueError:
        return text


class Qwen3CoderToolParser:
    """Qwen3-Coder's XML calls: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>
    ...\\n</function>\\n</tool_call>`, one block per call, after optional content."""

    starts = ("<tool_call>",)
    only_at_start = False
    syntax = None  # arguments are not one JSON object as written: calls stream whole, at their end
    _function = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*(?:</tool_call>|$)", re.DOTALL)
    _parameter = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)

    def parse(self, text: str) -> tuple[str, list[ParsedCall]]:
        at = text.find(self.starts[0])
        if at == -1:
            return text, []
        calls, end = [], at
        for match in self._function.finditer(text, at):
            if text[end:match.start()].strip():
                return text, []  # something between the calls that is not a call
            args = {key.strip(): _xml_value(value) for key, value in self._parameter.findall(match.group(2))}
            calls.append(ParsedCall(match.group(1).strip(), json.dumps(args, ensure_ascii=False)))
            end = match.end()
        if not calls or text[end:].strip():
            return text, []
        return text[:at].rstrip(), calls


class MistralToolParser:
    """Mistral's `[TOOL_CALLS]`: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]` (v3 tokenizers),
    or `[TOOL_CALLS]NAME[ARGS]{...}` once per call (v11 and later), after optional content."""

    starts = ("[TOOL_CALLS]",)
    only_at_start = False
    syntax = None
    _decoder = json.JSONDecoder()

    def parse(self, text: str) -> tuple[str, list[ParsedCall]]:
        at = text.find(self.starts[0])
        if at == -1:
            return text, []
        calls = []
        for part in text[at:].split(self.starts[0])[1:]:
            part = part.strip()
            name, sep, args = part.partition("[ARGS]")
            try:
                if sep:  # NAME[ARGS]{...}
                    obj, end = raw_decode(self._decoder, args, 0)
                    call = _call({"name": name.strip(), "arguments": obj}) if not args[end:].strip() else None
                    found = [call]
                else:  # a JSON list of calls (or one call)
                    obj, end = raw_decode(self._decoder, part, 0)
                    found = [_call(c) for c in (obj if isinstance(obj, list) else [obj])] if not part[end:].strip() \
                        else [None]
            except ValueError:
                return text, []
            if not found or None in found:
                return text, []
            calls += [c for c in found if c is not None]
        return text[:at].rstrip(), calls


# --tool-call-parser's names are minisgl.utils.choices.TOOL_PARSERS (the flags import no parser); the same here.
TOOL_PARSERS: dict[str, type[HermesToolParser | Llama3JsonToolParser | Qwen3CoderToolParser | MistralToolParser]] = {
    "hermes": HermesToolParser, "qwen": HermesToolParser, "llama3_json": Llama3JsonToolParser,
    "qwen3_coder": Qwen3CoderToolParser, "mistral": MistralToolParser}
