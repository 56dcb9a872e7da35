"""A list of numbers longer than the limit is found in the raw body, with the field it is the value
of; anything else (shorter lists, text, a batch of short lists) is not."""

from __future__ import annotations

import json

from minisgl.server.http.long_lists import overlong_number_list


def body(value) -> bytes:
    return json.dumps(value).encode()


def test_a_list_over_the_limit_is_named_by_its_field():
    assert overlong_number_list(body({"max_tokens": 1, "prompt": list(range(1001))}), 1000) == "prompt"
    assert overlong_number_list(body({"prompt": [[1, 2]] * 3 + [[7] * 1001]}), 1000) == "prompt"  # in a batch
    assert overlong_number_list(body({"tokens": [-1.5] * 1001}), 1000) == "tokens"
    assert overlong_number_list(body([5] * 1001), 1000) == ""  # no field: the body itself


def test_lists_within_the_limit_and_text_pass():
    assert overlong_number_list(body({"prompt": list(range(1000))}), 1000) is None
    assert overlong_number_list(body({"prompt": [[1] * 900] * 16}), 1000) is None  # a batch, each within it
    assert overlong_number_list(body({"prompt": "a, b, " * 5000}), 1000) is None
    assert overlong_number_list(body({"prompt": [1] * 5}), 1000) is None  # shorter than any such list
