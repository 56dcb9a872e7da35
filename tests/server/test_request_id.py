"""X-Request-Id on the real server: a client's id is echoed on the response (errors too) and
logged with the request; without one the server makes one up; an id that is too long or holds
characters a log line must not is cut and cleaned. Read with the official openai client and httpx."""

from __future__ import annotations

import re

import httpx
import openai
import pytest

from tests.server.serving import tiny_qwen3_server, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

MODEL = "tiny"
# The arguments of test_models.py (its two served names), test_request_errors.py and test_process_lifecycle.py:
# the four modules share one server.
model_dir, server, client = tiny_qwen3_server("--served-model-name", "org/tiny-qwen3", MODEL, "--dtype", "float32",
                                              "--num-pages", "256")


def assert_logged(server, pattern: str) -> None:
    """A line matching `pattern` in the server's log: the line is written once the response has been
    sent, so it may come a moment after the client has its answer."""
    wait_for(lambda: re.search(pattern, server.output(), re.M), 10, f"a log line matching {pattern}", poll_s=0.05)


def test_the_clients_id_is_echoed_and_logged(client, server):
    raw = client.with_options(default_headers={"X-Request-Id": "gw-7f3a.1"}).chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert raw.headers["x-request-id"] == "gw-7f3a.1"
    assert raw.parse().choices[0].message.content is not None
    assert_logged(server, r"POST /v1/chat/completions 200 \S+s request_id=gw-7f3a\.1$")


def test_without_an_id_each_request_gets_a_new_one(server):
    ids = [httpx.get(server.url + "/v1/models", timeout=10).headers["x-request-id"] for _ in range(2)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids) and ids[0] != ids[1]


def test_errors_carry_the_id_too(server):
    resp = httpx.post(server.url + "/v1/completions", content=b"{oops", headers={"X-Request-Id": "err-1"}, timeout=10)
    assert resp.status_code == 400 and resp.headers["x-request-id"] == "err-1"
    resp = httpx.get(server.url + "/v1/models/nope", headers={"X-Request-Id": "err-2"}, timeout=10)
    assert resp.status_code == 404 and resp.headers["x-request-id"] == "err-2"
    assert_logged(server, r"GET /v1/models/nope 404 \S+s request_id=err-2$")


def test_a_hostile_id_is_cut_and_cleaned(server):
    resp = httpx.get(server.url + "/v1/models", headers={"X-Request-Id": "a b\"c<d>;" + "x" * 5000}, timeout=10)
    echoed = resp.headers["x-request-id"]
    assert echoed == ("abcd" + "x" * 5000)[:128]
    assert_logged(server, rf"request_id={echoed}$")
    # Nothing usable left: a fresh id instead.
    resp = httpx.get(server.url + "/v1/models", headers={"X-Request-Id": "\" ;<>"}, timeout=10)
    assert re.fullmatch(r"[0-9a-f]{32}", resp.headers["x-request-id"])


def test_the_probes_answer_with_an_id_but_are_not_logged(server):
    resp = httpx.get(server.url + "/health", headers={"X-Request-Id": "probe-1"}, timeout=10)
    assert resp.headers["x-request-id"] == "probe-1"
    httpx.get(server.url + "/v1/models", headers={"X-Request-Id": "after-probe-1"}, timeout=10)
    assert_logged(server, r"request_id=after-probe-1$")  # logged after the probe would have been
    assert "request_id=probe-1" not in server.output()


def test_openai_errors_expose_the_id(client):
    try:
        client.with_options(default_headers={"X-Request-Id": "sdk-9"}).models.retrieve("nope")
    except openai.NotFoundError as e:
        assert e.response.headers["x-request-id"] == "sdk-9"
    else:
        raise AssertionError("an unknown model must be a 404")
