"""No cheap request may freeze the server, fail its probes or starve paying clients. Each
test is one of the issue's findings against the real server on a tiny model (loopback only): the
probes stay cheap and open, /tokenize is bounded and off the event loop, client input is checked
before it is echoed, and a request right after a worker's death gets the promised 503."""

from __future__ import annotations

import json
import os
import signal
import threading

import httpx
import pytest

from tests.server.serving import ServerProcess, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}
TOKENIZE_LIMIT = 400_000


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM")


@pytest.fixture(scope="module")
def server(model_dir):
    # At debug level the tokenizer logs each request it passes to the scheduler (sent_to_scheduler).
    srv = ServerProcess("--model", model_dir, "--num-pages", "256", "--max-seq-len", "256",
                        "--max-pending-requests", "1", "--health-generate-interval", "60",
                        "--max-tokenize-bytes", str(TOKENIZE_LIMIT), "--max-detokenize-tokens", "1000",
                        env={"MINISGL_API_KEY": KEY, "MINISGL_LOG_LEVEL": "debug"}).wait_ready()
    yield srv
    assert srv.stop() == 0


def post(server, path: str, body: dict | str, **kw) -> httpx.Response:
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(server.url + path, content=content, timeout=120,
                      headers={**AUTH, "Content-Type": "application/json"}, **kw)


def error_of(resp: httpx.Response, status: int = 400) -> dict:
    assert resp.status_code == status, resp.text[:500]
    return resp.json()["error"]


def test_head_on_the_probes_answers_like_get(server):
    for path in ("/health", "/ready"):
        resp = httpx.head(server.url + path, timeout=10)
        assert resp.status_code == 200 and resp.content == b"", path


def test_a_health_generate_flood_generates_once_and_takes_no_clients_slot(server):
    """30 unauthenticated /health_generate calls at once share one generation, which does not
    count toward --max-pending-requests (1 here): a paying client's request is still admitted.
    The scheduler stands still meanwhile, so everything is certainly in flight together."""
    before = server.sent_to_scheduler()
    probes: list[httpx.Response] = []
    chat: list[httpx.Response] = []
    flood = [threading.Thread(target=lambda: probes.append(httpx.get(server.url + "/health_generate", timeout=120)))
             for _ in range(30)]
    client = threading.Thread(target=lambda: chat.append(post(server, "/v1/completions",
                                                              {"prompt": "hi", "max_tokens": 2})))
    with server.stopped("scheduler"):
        for t in flood:
            t.start()
        wait_for(lambda: server.sent_to_scheduler() == before + 1, 60, "the probe's one request to be sent")
        client.start()
        wait_for(lambda: server.sent_to_scheduler() == before + 2 or chat, 60, "the client's request to be admitted")
        assert not chat, f"the client was refused while the probe ran: {chat[0].status_code} {chat[0].text[:200]}"
    for t in [*flood, client]:
        t.join(120)
    assert chat[0].status_code == 200, chat[0].text[:300]
    assert [(p.status_code, p.text) for p in probes] == [(200, "ok")] * 30
    assert server.sent_to_scheduler() == before + 2  # one probe generation for 30 callers, and the client's


def test_tokenize_and_detokenize_are_bounded_by_flags(server):
    over = error_of(post(server, "/tokenize", {"prompt": "a" * (TOKENIZE_LIMIT + 1)}))
    assert over["param"] == "prompt" and "--max-tokenize-bytes" in over["message"]
    chat = error_of(post(server, "/tokenize", {"messages": [{"role": "user", "content": "a" * (TOKENIZE_LIMIT + 1)}]}))
    assert chat["param"] == "messages"
    detok = error_of(post(server, "/detokenize", {"tokens": [5] * 1001}))
    assert detok["param"] == "tokens" and "--max-detokenize-tokens" in detok["message"]
    assert post(server, "/detokenize", {"tokens": [5] * 1000}).status_code == 200


def test_a_large_tokenize_does_not_hold_the_event_loop(server):
    """While one near-limit /tokenize runs (seconds on this tokenizer), /health is answered again and
    again: tokenizing runs beside the event loop, not on it."""
    done: list[httpx.Response] = []
    worker = threading.Thread(target=lambda: done.append(post(server, "/tokenize", {"prompt": "ab " * 130_000})))
    worker.start()
    answered_meanwhile = 0
    with httpx.Client(base_url=server.url, timeout=60) as http:
        while worker.is_alive():
            ok = http.get("/health").status_code == 200
            answered_meanwhile += ok and worker.is_alive()
    assert done[0].status_code == 200 and done[0].json()["count"] > 100_000
    assert answered_meanwhile >= 3, f"/health answered {answered_meanwhile} time(s) during the tokenize"


def test_lone_surrogates_are_400_naming_the_field(server):
    surrogate = '"\\ud800"'  # JSON's escape for a lone surrogate: valid JSON, not encodable text
    tokenize = error_of(post(server, "/tokenize", '{"prompt": ' + surrogate + "}"))
    assert tokenize["param"] == "prompt"
    user = error_of(post(server, "/v1/responses", '{"input": "hi", "max_output_tokens": 2, "user": ' + surrogate + "}"))
    assert user["param"] == "user"
    for metadata in ('{"k": ' + surrogate + "}", "{" + surrogate + ': "v"}'):
        meta = error_of(post(server, "/v1/responses",
                             '{"input": "hi", "max_output_tokens": 2, "stream": true, "metadata": ' + metadata + "}"))
        assert meta["param"].startswith("metadata")


def test_client_input_is_echoed_only_within_bounds(server):
    huge_model = error_of(post(server, "/v1/completions", {"model": "m" * 1_000_000, "prompt": "hi"}), 404)
    assert len(huge_model["message"]) < 500 and "1000000 characters" in huge_model["message"]
    # Responses metadata is sent back (thrice in a stream): OpenAI's bounds, 16 pairs of 64/512 characters.
    for metadata in ({f"k{i}": "v" for i in range(17)}, {"k": "v" * 513}, {"k" * 65: "v"}):
        assert error_of(post(server, "/v1/responses", {"input": "hi", "metadata": metadata}))["param"].startswith("metadata")
    ok = post(server, "/v1/responses", {"input": "hi", "max_output_tokens": 2, "metadata": {"k": "v" * 512}})
    assert ok.status_code == 200 and ok.json()["metadata"] == {"k": "v" * 512}


def test_no_redirect_copies_the_clients_host_header(server):
    for path in ("/v1/models/", "/health/"):
        resp = httpx.get(server.url + path, headers={**AUTH, "Host": "evil.example"}, timeout=10)
        assert resp.status_code == 404 and "location" not in resp.headers, (path, resp.status_code, resp.headers)


def test_the_openapi_schema_declares_the_bearer_key_on_guarded_operations(server):
    schema = httpx.get(server.url + "/openapi.json", timeout=10).json()
    assert schema["components"]["securitySchemes"]["apiKey"] == {**schema["components"]["securitySchemes"]["apiKey"],
                                                                 "type": "http", "scheme": "bearer"}
    assert schema["paths"]["/v1/chat/completions"]["post"]["security"] == [{"apiKey": []}]
    assert schema["paths"]["/tokenize"]["post"]["security"] == [{"apiKey": []}]
    assert "security" not in schema["paths"]["/health"]["get"]


def test_ambiguous_or_unsatisfiable_requests_are_refused_with_the_reason(server):
    chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    dup = error_of(post(server, "/v1/chat/completions", {**chat, "tools": [tool, tool], "tool_choice": "required"}))
    assert "used twice" in dup["message"]
    rdup = error_of(post(server, "/v1/responses", {"input": "hi", "tools": [{"type": "function", "name": "f"}] * 2}))
    assert "used twice" in rdup["message"]
    for digits in ("\u0661\u0662", "\u00b2", "\uff11"):  # Arabic-Indic, superscript, full-width: int() reads some
        bias = error_of(post(server, "/v1/chat/completions", {**chat, "logit_bias": {digits: 1}}))
        assert "logit_bias" in (bias["param"] or "") + bias["message"]
    cyclic = {"type": "json_schema", "json_schema": {"name": "c", "schema": {
        "$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}}}
    cycle = error_of(post(server, "/v1/chat/completions", {**chat, "response_format": cyclic}))
    assert cycle["param"] == "response_format" and "#/$defs/a -> #/$defs/b -> #/$defs/a" in cycle["message"]
    tree = {"type": "json_schema", "json_schema": {"name": "t", "schema": {
        "$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {
            "kids": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 0}}}}}}}
    assert post(server, "/v1/chat/completions", {**chat, "response_format": tree}).status_code == 200


def test_a_request_right_after_a_worker_died_gets_503_not_connection_refused(model_dir):
    srv = ServerProcess("--model", model_dir, "--num-pages", "256", "--max-seq-len", "256").wait_ready()
    try:
        with httpx.Client(base_url=srv.url, timeout=10) as http:
            assert http.get("/health").status_code == 200
            os.kill(srv.worker_pid("scheduler"), signal.SIGKILL)
            wait_for(lambda: http.get("/health").status_code == 503, 10, "/health to report the death")
            resp = http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "service_unavailable"
        assert srv.proc.wait(30) != 0
    finally:
        srv.stop()
