"""Refusing an over-long prompt from its size in bytes, before tokenizing it.

Tokenizing megabytes takes seconds and blocks every other request in the tokenizer worker. A
prompt can be refused unread when its byte count *proves* it has more tokens than the limit, and only then:

- A token stands for at most `max_token_bytes` bytes of normalized input: the longest token in the
  vocabulary (added tokens included), counted as the UTF-8 length of its vocabulary string. That
  string is never shorter than the input it covers: byte-level BPE spells each input byte as one
  character of one or two UTF-8 bytes, SentencePiece spells a 1-byte space as the 3-byte '▁',
  byte-fallback tokens spell one byte as '<0xNN>'. BPE without byte fallback maps one unknown
  character (at most 4 bytes) to its unknown token, so the bound is at least 4.
- Normalization may shrink the text first: by at most `SHRINK` for Unicode normal forms (NFKC maps
  a 3-byte full-width 'Ａ' to 1-byte 'A'; NFC composes three 3-byte Hangul jamo into one 3-byte
  syllable) and lowercasing; not at all for prepending or replacing ' ' with '▁'.
- Hence tokens >= bytes / (SHRINK * max_token_bytes), and bytes > limit * SHRINK * max_token_bytes
  means more than `limit` tokens. A chat is measured as its template renders it (contents,
  tool-call arguments, tool definitions, everything the template writes), before tokenizing.

A tokenizer whose normalizer or pre-tokenizer may drop text (BERT's clean-up, whitespace
splitting that removes spaces, whitespace collapsing) or whose model is not BPE (WordPiece maps a
whole unknown word to one token) gets no byte bound: its prompts are always tokenized. Note that
"bytes >= tokens" is the wrong direction for this purpose: it bounds tokens from above, not below.
"""

from __future__ import annotations

import json

SHRINK = 4  # the most a Unicode normal form or lowercasing shrinks UTF-8 text (3 seen; 4 for margin)
_SIZE_KEEPING_NORMALIZERS = {"Prepend", "NFC", "NFD", "NFKC", "NFKD", "Lowercase"}
_KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts"}


def _keeps_text(component: dict | None, allowed: set[str]) -> bool:
    """Whether a normalizer / pre-tokenizer (its tokenizer.json object) never drops input."""
    if component is None:
        return True
    kind = component.get("type")
    if kind == "Sequence":
        parts = component.get("normalizers") or component.get("pretokenizers") or []
        return all(_keeps_text(p, allowed) for p in parts)
    if kind == "Replace":  # keeps size when each match is replaced by at least as many bytes
        pattern = (component.get("pattern") or {}).get("String")
        return pattern is not None and len(component.get("content", "").encode()) >= len(pattern.encode())
    if kind == "Split":
        return component.get("behavior") != "Removed"
    return kind in allowed


def bytes_per_token_bound(backend) -> int | None:
    """Most input bytes one token of this tokenizer (a tokenizers.Tokenizer) can stand for,
    normalization included; None when no such bound is known."""
    spec = json.loads(backend.to_str())
    if (spec.get("model") or {}).get("type") != "BPE":
        return None
    if not _keeps_text(spec.get("normalizer"), _SIZE_KEEPING_NORMALIZERS):
        return None
    if not _keeps_text(spec.get("pre_tokenizer"), _KEEPING_PRE_TOKENIZERS):
        return None
    longest = max((len(token.encode("utf-8", "surrogatepass")) for token in backend.get_vocab(with_added_tokens=True)),
                  default=0)
    shrink = SHRINK if spec.get("normalizer") is not None else 1
    return shrink * max(longest, 4)


def prompt_bytes(text: str) -> int:
    """UTF-8 size of a prompt's text (a completion prompt, or a chat as its template renders it)."""
    return len(text.encode("utf-8", "surrogatepass"))


class PromptTooLong(ValueError):
    """A prompt refused for its size; the message says why."""


class PromptLimit:
    """The prompt-token limit of one server, checked from bytes first, then from the token count."""

    def __init__(self, max_prompt_tokens: int | None, backend) -> None:
        self.max_prompt_tokens = max_prompt_tokens
        bound = bytes_per_token_bound(backend) if max_prompt_tokens else None
        self.max_bytes = max_prompt_tokens * bound if bound else None

    def check_bytes(self, text: str) -> str | None:
        if self.max_bytes is None:
            return None
        size = prompt_bytes(text)
        if size <= self.max_bytes:
            return None
        return (f"prompt: {size} bytes is more than {self.max_prompt_tokens} tokens, this server's prompt limit "
                f"(no token of this tokenizer covers more than {self.max_bytes // self.max_prompt_tokens} bytes)")

    def check_tokens(self, count: int) -> str | None:
        if self.max_prompt_tokens and count > self.max_prompt_tokens:
            return f"prompt: {count} tokens, more than this server's limit of {self.max_prompt_tokens}"
        return None
