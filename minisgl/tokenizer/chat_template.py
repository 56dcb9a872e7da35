"""Rendering a chat request with the tokenizer's chat template: the messages, the tools, and the
request's template options (add_generation_prompt, chat_template_kwargs such as Qwen3's
enable_thinking)."""

from __future__ import annotations

from typing import Any

# Arguments of apply_chat_template that the server sets itself; chat_template_kwargs may not
# replace them (a request must not switch tokenization off or swap the template).
RESERVED = frozenset({"conversation", "messages", "tools", "documents", "chat_template", "tokenize", "return_dict",
                      "return_tensors", "return_assistant_tokens_mask", "add_generation_prompt",
                      "continue_final_message", "padding", "truncation", "max_length", "tokenizer_kwargs"})


def render_chat_text(tokenizer, messages: list[dict], options: dict[str, Any] | None = None) -> str:
    """The text of a chat as the template writes it: everything it renders (contents, tool-call
    arguments, tool definitions...), so the text's size bounds the prompt before it is tokenized.
    `options`: {"add_generation_prompt": bool, "kwargs": dict, "tools": [OpenAI tool objects]} as
    the API sends them (all optional)."""
    if not tokenizer.chat_template:
        raise ValueError("this model's tokenizer has no chat template; use /v1/completions")
    options = options or {}
    kwargs = options.get("kwargs") or {}
    reserved = sorted(RESERVED & set(kwargs))
    if reserved:
        raise ValueError(f"chat_template_kwargs may not set {', '.join(reserved)}")
    return tokenizer.apply_chat_template(messages, tools=options.get("tools") or None,
                                         add_generation_prompt=options.get("add_generation_prompt", True),
                                         tokenize=False, **kwargs)


def encode_chat_text(tokenizer, text: str) -> list[int]:
    """A rendered chat's token ids: as apply_chat_template(tokenize=True) encodes it (the template
    writes the special tokens itself)."""
    return tokenizer.encode(text, add_special_tokens=False)


def render_chat(tokenizer, messages: list[dict], options: dict[str, Any] | None = None) -> list[int]:
    """Prompt token ids of a chat (render_chat_text, then encode_chat_text)."""
    return encode_chat_text(tokenizer, render_chat_text(tokenizer, messages, options))
