"""Grammars are client input the server runs: none may slow other clients, starve their
structured requests or take structured output down unnoticed. Real server on a tiny model."""

from __future__ import annotations

import os
import signal
import time

import httpx
import psutil
import pytest

from tests.server.serving import ServerProcess, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)


@pytest.fixture
def server(tiny_model_dir):
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--grammar-compile-workers", "1").wait_ready()
    yield srv
    assert srv.stop() == 0


def compile_workers(server: ServerProcess) -> list[psutil.Process]:
    """The server's live grammar compile worker processes."""
    found = []
    for p in psutil.Process(server.proc.pid).children(recursive=True):
        try:
            if "minisgl.constrained.worker" in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def structured(server: ServerProcess, regex: str, timeout: float = 300) -> httpx.Response:
    return httpx.post(server.url + "/v1/completions", timeout=timeout,
                      json={"prompt": "x", "max_tokens": 4, "guided_regex": regex})


def test_a_compile_worker_killed_before_ready_is_a_503_and_health_says_so_until_one_is_back(server):
    """SIGKILL of the compile worker while it starts: the structured request waiting for it gets 503
    (the server's state, not the request's fault: never a 400), /health stays 200 but says structured
    output is down, and once the backoff has passed the next structured request starts a new worker,
    succeeds, and /health is plain "ok" again."""
    import threading

    answer: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answer.append(structured(server, "[0-9]+")))
    first.start()
    wait_for(lambda: compile_workers(server), timeout=120, what="a compile worker to start")
    (worker,) = compile_workers(server)
    os.kill(worker.pid, signal.SIGKILL)
    first.join(timeout=300)
    assert answer[0].status_code == 503, answer[0].text
    assert "structured output is unavailable for now" in answer[0].json()["error"]["message"]

    wait_for(lambda: "structured output is unavailable" in httpx.get(server.url + "/health", timeout=10).text,
             timeout=30, what="/health to say structured output is down")
    health = httpx.get(server.url + "/health", timeout=10)
    assert health.status_code == 200, "alive: the workers are retried without a restart"

    time.sleep(1.5)  # the first backoff
    again = structured(server, "[a-z]+")
    assert again.status_code == 200, again.text
    wait_for(lambda: httpx.get(server.url + "/health", timeout=10).text == "ok", timeout=30,
             what="/health to be plain ok again")


AMBIGUOUS = 'root ::= e\ne ::= e e | e | [a-z] | ""'


def test_an_ambiguous_grammar_is_refused_naming_its_field_and_slows_no_other_client(server):
    """Its matcher's cost grows with every token (it ran seconds a step by token 200, in the
    scheduler, for the whole batch): refused at compile time with a 400 naming guided_grammar, while
    other clients' short chats are answered in their usual time."""
    from concurrent.futures import ThreadPoolExecutor

    def chat() -> float:
        start = time.monotonic()
        resp = httpx.post(server.url + "/v1/chat/completions", timeout=300,
                          json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "ignore_eos": True})
        assert resp.status_code == 200, resp.text
        return time.monotonic() - start

    chat()  # warm
    with ThreadPoolExecutor(4) as pool:
        hostile = pool.submit(httpx.post, server.url + "/v1/completions", timeout=300,
                              json={"prompt": "x", "max_tokens": 300, "ignore_eos": True, "guided_grammar": AMBIGUOUS})
        times = [pool.submit(chat) for _ in range(6)]
        resp = hostile.result()
        assert resp.status_code == 400, resp.text
        message = resp.json()["error"]["message"]
        assert "guided_grammar" in message and "ambiguous" in message, message
        assert max(t.result() for t in times) < 5.0, "a chat waited behind the ambiguous grammar"
    unambiguous = httpx.post(server.url + "/v1/completions", timeout=300,
                             json={"prompt": "x", "max_tokens": 40, "ignore_eos": True,
                                   "guided_grammar": 'root ::= e\ne ::= [a-z] e | ""'})
    assert unambiguous.status_code == 200, unambiguous.text


def test_a_light_clients_structured_request_is_not_queued_behind_a_heavy_clients_slow_schemas(tiny_model_dir):
    """Compiles waiting for the one worker take turns between clients (here told apart by their
    loopback addresses): four slow schemas from 127.0.0.2, each killed at the 2 s budget, then a
    simple structured request from 127.0.0.3, which is answered after at most two of them (one
    compile of one FIFO waited for all four)."""
    import threading

    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--grammar-compile-workers", "1",
                        "--grammar-compile-timeout", "2", env={"MINISGL_LOG_LEVEL": "debug"}).wait_ready()
    finished: list[tuple[str, int]] = []

    def send(name: str, address: str, body: dict) -> None:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=600) as http:
            resp = http.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 4, **body})
        finished.append((name, resp.status_code))

    try:
        assert structured(srv, "[0-9]+").status_code == 200  # the worker is up
        sent = srv.sent_to_scheduler()
        heavy = [threading.Thread(target=send, args=(f"heavy{i}", "127.0.0.2", {"guided_json": {
            "type": "string", "pattern": f"[a-z]{{1,{12000 + i}}}[0-9]{{1,{12000 + i}}}"}})) for i in range(4)]
        for t in heavy:
            t.start()
        wait_for(lambda: srv.sent_to_scheduler() >= sent + 4, timeout=120, what="the heavy requests to be queued")
        light = threading.Thread(target=send, args=("light", "127.0.0.3", {"guided_regex": "[0-9]{3}"}))
        light.start()
        for t in (light, *heavy):
            t.join(600)
        order = [name for name, _ in finished]
        assert dict(finished)["light"] == 200
        assert order.index("light") <= 2, f"answered in this order: {order}"
    finally:
        assert srv.stop() == 0
