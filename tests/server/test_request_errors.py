"""The errors a newcomer meets first, on the real server through the official openai client (and
httpx for bodies the client would never send): each names the field, says what is wrong and
what was sent, in words, not in pydantic's union branch names."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.server.serving import tiny_qwen3_server

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny"
# The arguments of test_models.py (its two served names), test_request_id.py and test_process_lifecycle.py:
# the four modules share one server.
model_dir, server, client = tiny_qwen3_server("--served-model-name", "org/tiny-qwen3", MODEL, "--dtype", "float32",
                                              "--num-pages", "256")
HI = [{"role": "user", "content": "hi"}]


def refusal(call) -> dict:
    with pytest.raises(openai.BadRequestError) as err:
        call()
    return err.value.body


def test_too_many_stop_strings_names_the_limit_and_the_count(client):
    body = refusal(lambda: client.completions.create(model=MODEL, prompt="x", stop=["a", "b", "c", "d", "e"]))
    assert body["message"] == "stop: at most 4 items; got 5" and body["param"] == "stop"


def test_an_image_part_is_refused_as_an_image_not_as_a_string(client):
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                             {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}]
    body = refusal(lambda: client.chat.completions.create(model=MODEL, messages=messages))
    assert body["param"] == "messages.0.content.1"
    assert body["message"].startswith("messages.0.content.1: 'image_url' content parts are not supported")
    assert "text only" in body["message"] and ".str" not in body["message"]


def test_a_value_of_the_wrong_type_says_what_was_expected_and_sent(client):
    body = refusal(lambda: client.chat.completions.create(model=MODEL, messages=HI, max_tokens="ten"))
    assert body["message"] == 'max_tokens: must be an integer; got "ten"'
    body = refusal(lambda: client.chat.completions.create(model=MODEL, messages="hi"))
    assert body["message"] == 'messages: must be a list; got "hi"'


def test_a_value_out_of_range_quotes_it(client):
    body = refusal(lambda: client.chat.completions.create(model=MODEL, messages=HI, temperature=-1))
    assert body["message"] == "temperature: input should be greater than or equal to 0; got -1"


def test_a_malformed_body_says_it_is_not_json_and_where(server):
    resp = httpx.post(server.url + "/v1/chat/completions", content=b'{"model": "m", "messages": [}',
                      headers={"content-type": "application/json"}, timeout=10)
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "the request body is not valid JSON: Expecting value at character 28"
    resp = httpx.post(server.url + "/v1/chat/completions", content=b"[1]", headers={"content-type": "application/json"},
                      timeout=10)
    assert resp.json()["error"]["message"] == "the request body must be a JSON object; got a list of 1"
    resp = httpx.post(server.url + "/v1/chat/completions", content=b"", headers={"content-type": "application/json"},
                      timeout=10)
    assert resp.json()["error"]["message"].startswith("the request has no body")


def test_an_unknown_nested_field_is_still_an_unsupported_parameter(client):
    body = refusal(lambda: client.chat.completions.create(
        model=MODEL, messages=HI, stream_options={"include_usage": True, "sparkle": 1}, stream=True))
    assert body["code"] == "unsupported_parameter" and body["param"] == "stream_options.sparkle"
