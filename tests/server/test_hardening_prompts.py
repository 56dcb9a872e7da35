"""Every text a chat template renders counts toward a prompt's size, so no field carries a prompt
past the size checks: 7 million characters of tool-call arguments (chat completions, the Responses
API's function_call items, /tokenize) are refused from their rendered size at once, while other
clients are served and the probes answer, never tokenized for tens of seconds first. Real server
on a tiny model with the demo's tool-calling template, loopback only."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from minisgl.demo.model import DEMO_CHAT_TEMPLATE
from tests.server.serving import ServerProcess

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

ARGUMENTS = json.dumps({"a": "x " * 3_500_000})  # 7 MB: within the default --max-request-bytes of 8 MiB


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    template = tmp_path_factory.mktemp("template") / "chat_template.jinja"
    template.write_text(DEMO_CHAT_TEMPLATE)
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--num-pages", "256", "--max-seq-len", "256",
                        "--chat-template", str(template)).wait_ready()
    yield srv
    assert srv.stop() == 0


def chat(server, timeout: float = 120) -> httpx.Response:
    return httpx.post(server.url + "/v1/chat/completions", timeout=timeout,
                      json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})


def beside(server, hostile) -> tuple[httpx.Response, float, list[float]]:
    """Run `hostile()` (it returns a response) while another client sends short chats one after
    another and the probes are called: (its response, its seconds, each short chat's seconds)."""
    assert chat(server).status_code == 200  # warm
    out: list = []
    start = time.monotonic()
    worker = threading.Thread(target=lambda: out.append(hostile()))
    worker.start()
    others = []
    while worker.is_alive() and time.monotonic() - start < 120:
        t0 = time.monotonic()
        assert chat(server).status_code == 200
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
        others.append(time.monotonic() - t0)
    worker.join(120)
    return out[0], time.monotonic() - start, others


def slowest_health_while(server, work) -> float:
    """Run `work()` in a thread while /health is called one call after another: the slowest
    answer's seconds (each must be 200)."""
    worker = threading.Thread(target=work)
    worker.start()
    slowest = 0.0
    with httpx.Client(base_url=server.url, timeout=30) as http:
        while worker.is_alive():
            t0 = time.monotonic()
            assert http.get("/health").status_code == 200
            slowest = max(slowest, time.monotonic() - t0)
    worker.join()
    return slowest


def test_tool_call_arguments_count_toward_the_prompt_size(server):
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": ARGUMENTS}}
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c", "content": "ok"}], "max_tokens": 4}
    resp, seconds, others = beside(server, lambda: httpx.post(server.url + "/v1/chat/completions", json=body,
                                                              timeout=300))
    assert resp.status_code == 400 and "more than 256 tokens" in resp.json()["error"]["message"], resp.text[:300]
    assert seconds < 15, f"refused after {seconds:.1f} s"
    assert max(others, default=0) < 5, f"other clients waited {max(others):.1f} s"


def test_responses_function_call_items_count_toward_the_prompt_size(server):
    body = {"input": [{"type": "message", "role": "user", "content": "hi"},
                      {"type": "function_call", "call_id": "c", "name": "f", "arguments": ARGUMENTS},
                      {"type": "function_call_output", "call_id": "c", "output": "ok"}], "max_output_tokens": 4}
    resp, seconds, others = beside(server, lambda: httpx.post(server.url + "/v1/responses", json=body, timeout=300))
    assert resp.status_code == 400 and "more than 256 tokens" in resp.json()["error"]["message"], resp.text[:300]
    assert seconds < 15, f"refused after {seconds:.1f} s"
    assert max(others, default=0) < 5, f"other clients waited {max(others):.1f} s"


def test_tokenize_measures_a_chat_as_rendered_and_leaves_the_loop_free(server):
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": ARGUMENTS}}
    body = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]}
    resp, seconds, others = beside(server, lambda: httpx.post(server.url + "/tokenize", json=body, timeout=300))
    error = resp.json()["error"]
    assert resp.status_code == 400 and error["param"] == "messages" and "--max-tokenize-bytes" in error["message"]
    assert seconds < 15, f"refused after {seconds:.1f} s"
    assert max(others, default=0) < 5, f"other clients waited {max(others):.1f} s"
    # Within the limit, the count is the chat's as rendered, tool calls included.
    small_call = {**call, "function": {"name": "f", "arguments": '{"a": 1}'}}
    small = {"messages": [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "", "tool_calls": [small_call]}]}
    plain = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}]}
    with_call = httpx.post(server.url + "/tokenize", json=small, timeout=60).json()
    assert with_call["count"] > httpx.post(server.url + "/tokenize", json=plain, timeout=60).json()["count"]


def test_a_large_tokenize_reply_is_encoded_off_the_event_loop(server):
    """A reply of a million token ids (the --max-tokenize-bytes limit of text) is built beside the
    loop: /health answers within a second all along."""
    done: list[httpx.Response] = []
    slowest = slowest_health_while(server, lambda: done.append(
        httpx.post(server.url + "/tokenize", json={"prompt": "a " * 524_000}, timeout=300)))
    assert done[0].status_code == 200 and done[0].json()["count"] > 500_000
    assert slowest < 1.0, f"/health took {slowest:.2f} s"


def test_a_tokenize_in_flight_at_sigterm_is_drained_and_then_gets_503_json(tiny_model_dir):
    """/tokenize counts as in flight, as a generation does: a drain waits for it, and one still
    running at the drain's deadline gets the promised 503 JSON (not a cancelled handler's
    plain-text 500); the server exits 0 with no traceback."""
    import signal

    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--num-pages", "256", "--max-seq-len", "256",
                        "--drain-timeout", "0.5", "--max-tokenize-bytes", str(4 << 20)).wait_ready()
    try:
        assert httpx.post(srv.url + "/tokenize", json={"prompt": "warm"}, timeout=60).status_code == 200
        done: list[httpx.Response] = []
        worker = threading.Thread(target=lambda: done.append(
            httpx.post(srv.url + "/tokenize", json={"prompt": "x y " * 1_000_000}, timeout=120)))  # tens of seconds
        worker.start()
        time.sleep(0.5)  # its tokenizing (seconds) has begun
        assert worker.is_alive(), "the tokenize ended before the signal: the test proves nothing"
        srv.proc.send_signal(signal.SIGTERM)
        worker.join(120)
        resp = done[0]
        assert resp.status_code == 503, (resp.status_code, resp.text[:300])
        assert resp.json()["error"]["code"] == "service_unavailable" and resp.headers["retry-after"]
        assert srv.proc.wait(60) == 0
        assert "Traceback" not in srv.output()
    finally:
        srv.stop()


def test_a_four_million_id_prompt_is_refused_unparsed_and_the_loop_stays_free(server):
    """A list of token ids longer than any field takes (here /detokenize's 262,144: the context is
    256) is refused from the raw body, naming the field, before the JSON parser and the validator
    spend a second of the event loop on it: /health answers within a second while such bodies
    (8 MB each) arrive one after another, on every route that takes token ids."""
    ids = ("[" + ",".join(["1"] * 4_000_000) + "]").encode()
    bodies = [("/v1/completions", b'{"prompt":' + ids + b',"max_tokens":1}', "prompt"),
              ("/v1/completions", b'{"prompt":[[1,2],' + ids + b'],"max_tokens":1}', "prompt"),
              ("/detokenize", b'{"tokens":' + ids + b"}", "tokens")]
    answers: list[httpx.Response] = []

    def send():
        with httpx.Client(base_url=server.url, timeout=120) as http:
            for path, body, _ in bodies * 2:
                answers.append(http.post(path, content=body, headers={"Content-Type": "application/json"}))

    slowest = slowest_health_while(server, send)
    assert slowest < 1.0, f"/health took {slowest:.2f} s"
    for resp, (_, _, field) in zip(answers, bodies * 2):
        error = resp.json()["error"]
        assert resp.status_code == 400 and error["param"] == field and error["code"] == "request_too_large", resp.text
        assert "more than 262144 numbers" in error["message"]
    # Token ids within the limits are served as before.
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": [1] * 100, "max_tokens": 1}, timeout=60)
    assert ok.status_code == 200 and ok.json()["usage"]["prompt_tokens"] == 100


def test_a_chat_of_more_turns_than_openai_takes_is_refused_naming_messages(server):
    """OpenAI's bound of 2,048 messages a request: 100,000 one-letter turns (2.9 MB) are refused
    naming `messages` as soon as the validator counts past the bound, while other clients are
    served, not validated turn by turn for a second of the event loop and then refused by size."""
    turns = [{"role": "user", "content": "a"}]
    body = {"messages": turns * 100_000, "max_tokens": 4}
    resp, _, others = beside(server, lambda: httpx.post(server.url + "/v1/chat/completions", json=body, timeout=120))
    error = resp.json()["error"]
    assert resp.status_code == 400 and error["param"] == "messages", resp.text
    assert "at most 2048" in error["message"], error
    ok = httpx.post(server.url + "/v1/chat/completions", json={"messages": turns * 2048, "max_tokens": 1}, timeout=60)
    # 2,048 turns pass the count, and are then too long for this server's 256-token context.
    assert ok.status_code == 400 and "at most 2048" not in ok.json()["error"]["message"], ok.text
