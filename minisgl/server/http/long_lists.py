"""A body's lists of numbers, measured before it is parsed: a 4-million-id prompt takes its
parser and validator a second of the event loop, so a list longer than any field takes is refused
from the raw bytes. The check is C-speed: one translate and one find over the bytes."""

from __future__ import annotations

import re

# What a list of numbers is made of besides its commas: removed, "[1, 2, 3]" is "[,,]".
_NUMBER_BYTES = b"0123456789-. \t\r\n"
# The field whose value the list is, or holds it (a batch's earlier lists before it), digits dropped.
_KEY_BEFORE = re.compile(rb'"([A-Za-z_]{1,64})":[\[\],]*$')


def overlong_number_list(body: bytes, limit: int) -> str | None:
    """The name of the field holding a JSON list of more than `limit` numbers in `body` ("" when
    no key precedes it), else None. Text that reads as such a list (a run of numbers and commas
    inside a string) counts too: it would tokenize to more tokens than that anyway."""
    if len(body) <= 2 * limit:  # each number takes a byte and a comma
        return None
    commas = body.translate(None, _NUMBER_BYTES)
    at = commas.find(b"," * limit)
    if at < 0:
        return None
    key = _KEY_BEFORE.search(commas, max(0, at - 4096), at)
    return key[1].decode() if key else ""


def max_list_items(args) -> int:
    """The most items a list of numbers in a request body may hold: the longest any field takes
    (a prompt's token ids, /detokenize's, a field of MAX_TOKEN_IDS). A longer one is refused from
    the raw body, before it is parsed on the event loop."""
    from minisgl.core.request_fields import MAX_TOKEN_IDS

    prompt = min(filter(None, (args.max_prompt_tokens, args.max_seq_len)), default=0)
    return max(prompt, args.max_detokenize_tokens, MAX_TOKEN_IDS)
