"""Which tokenizer worker a request goes to. There may be several (--tokenizer-workers); a request
and its abort go to the same one (uid % workers), so the abort never overtakes the request."""

from __future__ import annotations


def tokenizer_name(index: int) -> str:
    """Tokenizer worker `index`'s process name and address key."""
    return "tokenizer" if index == 0 else f"tokenizer-{index}"


def tokenizer_addresses(addrs: dict[str, str]) -> list[str]:
    """Every tokenizer worker's address, in worker order (the API sends request uid to uid % len)."""
    count = sum(1 for name in addrs if name == "tokenizer" or name.startswith("tokenizer-"))
    return [addrs[tokenizer_name(i)] for i in range(count)]
