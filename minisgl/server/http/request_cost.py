"""Per-request cost bounded at the door, before any work is copied to the workers.

Field-level caps live in the request models (*_protocol.py: stop strings, stop_token_ids,
logit_bias, the number of tools) and the prompt-token limit in the tokenizer worker
(minisgl.tokenizer.prompt_bound). What is checked here spans fields: the total size of the schemas
and grammars a request asks the grammar compiler to build (tools' parameter schemas, a JSON
schema, a regex, a grammar, the choices), which compile in time and memory that grow with them,
and how deeply those schemas nest (checked first, without recursion: reading or writing a deeply
nested value recursively fails, and compile time grows steeply with depth).
"""

from __future__ import annotations

import json

from minisgl.constrained.constraints import json_depth

from .chat_protocol import ChatCompletionRequest
from .completions_protocol import CompletionRequest

MAX_SCHEMA_BYTES = 64 << 10  # a large real tool set is a few KiB; grammars compiled from this stay cheap
MAX_TEMPLATE_KWARGS_BYTES = 16 << 10


def _size(value) -> int:
    if value is None:
        return 0
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text.encode("utf-8", "surrogatepass"))


def structured_output_sizes(body: ChatCompletionRequest | CompletionRequest) -> dict[str, int]:
    """UTF-8 size of each structured-output specification the request carries, by field name."""
    sizes = {name: _size(getattr(body, name)) for name in ("guided_json", "guided_regex", "guided_grammar",
                                                          "guided_choice")}
    rf = body.response_format
    if rf is not None and rf.type == "json_schema":
        sizes["response_format"] = _size(rf.json_schema.schema_)
    tools = getattr(body, "tools", None)
    if tools:
        sizes["tools"] = sum(_size(t.function.parameters) + _size(t.function.description) for t in tools)
    return sizes


def value_depth(value) -> int:
    """How deeply the objects and arrays of a parsed JSON value nest (as json_depth for text),
    without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def depth_problem(body: ChatCompletionRequest | CompletionRequest, max_depth: int) -> tuple[str, str] | None:
    """(field, message) for the first schema that nests deeper than `max_depth`, or None."""
    rf = body.response_format
    values = {"guided_json": body.guided_json, "tools": [t.function.parameters for t in getattr(body, "tools", None) or ()],
              "response_format": rf.json_schema.schema_ if rf is not None and rf.type == "json_schema" else None}
    for name, value in values.items():
        depth = json_depth(value) if isinstance(value, str) else value_depth(value) - (name == "tools")
        if depth > max_depth:
            return name, (f"{name}: the schema nests {depth} levels deep, more than this server's limit of "
                          f"{max_depth} (--max-grammar-depth)")
    return None


def structured_output_schemas(body: ChatCompletionRequest | CompletionRequest) -> dict[str, list]:
    """The JSON schemas a request asks output to follow, by field name."""
    out: dict[str, list] = {}
    guided = body.guided_json
    if isinstance(guided, str):
        try:
            guided = json.loads(guided)
        except ValueError:
            guided = None  # refused later, naming the field
    if isinstance(guided, dict):
        out["guided_json"] = [guided]
    rf = body.response_format
    if rf is not None and rf.type == "json_schema" and rf.json_schema.schema_:
        out["response_format"] = [rf.json_schema.schema_]
    tools = getattr(body, "tools", None)
    if tools:
        out["tools"] = [t.function.parameters for t in tools if t.function.parameters]
    return out


def ref_cycle(schema: dict) -> list[str] | None:
    """A chain of `$ref`s that leads back to itself with no value in between to consume (e.g.
    '#/$defs/a' is {"$ref": "#/$defs/a"}): no output can ever match it. Recursion through a
    property or an item (a tree) is fine. Returns the chain, or None."""
    def resolve(ref: str):
        if not ref.startswith("#"):
            return None
        node = schema
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, dict) else None
        return node

    stack = [schema]
    while stack:  # every subschema, without recursion (a schema may nest deeply)
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        stack.extend(node.values())
        chain, target = [], node
        while isinstance(target, dict) and isinstance(target.get("$ref"), str):
            if target["$ref"] in chain:
                return chain[chain.index(target["$ref"]):] + [target["$ref"]]
            chain.append(target["$ref"])
            target = resolve(target["$ref"])
    return None


def request_cost_problem(body: ChatCompletionRequest | CompletionRequest) -> tuple[str, str] | None:
    """(field, message) for the first bound the request exceeds, or None."""
    for name, size in structured_output_sizes(body).items():
        if size > MAX_SCHEMA_BYTES:
            return name, f"{name} is {size} bytes; this server takes at most {MAX_SCHEMA_BYTES} bytes of schema or grammar"
    kwargs = getattr(body, "chat_template_kwargs", None)
    if _size(kwargs) > MAX_TEMPLATE_KWARGS_BYTES:
        return "chat_template_kwargs", f"chat_template_kwargs is over {MAX_TEMPLATE_KWARGS_BYTES} bytes"
    return None


def ref_cycle_problem(body: ChatCompletionRequest | CompletionRequest) -> tuple[str, str] | None:
    """(field, message) for the first schema with a $ref cycle (ref_cycle), or None."""
    for name, schemas in structured_output_schemas(body).items():
        cycle = next(filter(None, map(ref_cycle, schemas)), None)
        if cycle:
            return name, (f"{name}: the schema's $ref chain {' -> '.join(cycle)} refers back to itself, so no "
                          "output can match it")
    return None
