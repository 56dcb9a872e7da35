"""Which tool-call parser reads a model's free-form (tool_choice auto) calls, when the server is
started without --tool-call-parser: the one the model's chat template writes calls in, else the
one its architecture's family is trained on. Decided once, at startup (`tool_parser_for`)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from minisgl.utils.logger import get_logger

logger = get_logger(__name__)

# What a template shows of each parser's syntax (it renders earlier calls, or tells the model how to
# call), first match wins: Llama 3.1 writes <|python_tag|>, Llama 3.2 only the JSON's "parameters".
# Qwen3-Coder's template also writes <tool_call>, around its XML: its own marker comes first.
TEMPLATE_MARKERS = (("qwen3_coder", "<function="), ("hermes", "<tool_call>"), ("mistral", "[TOOL_CALLS]"),
                    ("llama3_json", "<|python_tag|>"), ("llama3_json", '"parameters": '))
# Families whose templates describe calls in words only, trained on one syntax.
ARCHITECTURE_PARSERS = {"Qwen2ForCausalLM": "hermes", "Qwen3ForCausalLM": "hermes", "Qwen3MoeForCausalLM": "hermes",
                        "LlamaForCausalLM": "llama3_json"}
# Syntaxes other servers read that minisgl does not: named in the reason a request gets.
UNREAD_MARKERS = {"<|tool_call_begin|>": "Kimi's / DeepSeek's"}
_RENDERS_TOOLS = re.compile(r"\btools\b")


@dataclass(frozen=True)
class ToolParserChoice:
    parser: str | None  # a TOOL_PARSERS name, or None: tool_choice auto is refused
    why: str  # how it was chosen, or why there is none (logged; the 400's reason)


def choose_tool_parser(template: str | None, architecture: str | None) -> ToolParserChoice:
    """The parser for a model with this chat template and architecture (config.json's first)."""
    if not template or not _RENDERS_TOOLS.search(template):
        return ToolParserChoice(None, "the model's chat template does not render tools")
    for parser, marker in TEMPLATE_MARKERS:
        if marker in template:
            return ToolParserChoice(parser, f"the chat template writes {marker}")
    unread = next((name for marker, name in UNREAD_MARKERS.items() if marker in template), None)
    if unread:
        return ToolParserChoice(None, f"the chat template writes tool calls in {unread} syntax, which minisgl does "
                                      "not read")
    if architecture in ARCHITECTURE_PARSERS:
        return ToolParserChoice(ARCHITECTURE_PARSERS[architecture], f"{architecture} models are trained on it")
    return ToolParserChoice(None, f"the chat template shows no tool-call syntax minisgl reads ({architecture})")


def _model_file(model_path: str, name: str) -> str | None:
    """A file of the model: in its directory, or fetched from the Hub like the workers' (None: none)."""
    if os.path.isdir(model_path):
        path = os.path.join(model_path, name)
        return path if os.path.isfile(path) else None
    try:
        from huggingface_hub import hf_hub_download

        return hf_hub_download(model_path, name)
    except Exception:  # noqa: BLE001 - no such file (or no Hub): the model has none to offer
        return None


def model_template_and_architecture(model_path: str, chat_template: str | None) -> tuple[str | None, str | None]:
    """The chat template the tokenizers use (`chat_template`: --chat-template's, else the model's:
    chat_template.jinja or tokenizer_config.json's default) and the model's architecture."""
    def read_json(name: str) -> dict:
        path = _model_file(model_path, name)
        if path is None:
            return {}
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    template = chat_template
    if template is None and (jinja := _model_file(model_path, "chat_template.jinja")):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    if template is None:
        template = read_json("tokenizer_config.json").get("chat_template")
        if isinstance(template, list):  # named templates: the default one renders chats
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    architecture = (read_json("config.json").get("architectures") or [None])[0]
    return template, architecture


def tool_parser_for(args) -> ToolParserChoice:
    """The tool-call parser of a server started with `args` (ServerArgs): --tool-call-parser's, else
    the one its model needs (the built-in demo's without --model); the choice is logged."""
    if args.tool_call_parser:
        return ToolParserChoice(args.tool_call_parser, "--tool-call-parser")
    from ..args import load_chat_template

    model = args.model
    if model is None:
        from minisgl.demo.model import demo_model_dir

        model = demo_model_dir()
    choice = choose_tool_parser(*model_template_and_architecture(model, load_chat_template(args.chat_template)))
    if choice.parser:
        logger.info("tool-call parser: %s (%s; --tool-call-parser overrides)", choice.parser, choice.why)
    else:
        logger.info("no tool-call parser: %s; tool_choice auto is refused (--tool-call-parser names one)", choice.why)
    return choice


__all__ = ["ToolParserChoice", "choose_tool_parser", "model_template_and_architecture", "tool_parser_for"]
