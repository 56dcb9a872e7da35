"""A stream still queued (or its grammar compiling) gets its response head within a second or so
and keep-alive comments while it waits, never seconds of silence a client or proxy takes for a
dead server; a request refused at once still gets its HTTP error status. Real server on a tiny
model that runs one request at a time."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.server.serving import ServerProcess

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM", max_position_embeddings=4096),
                        "--max-seq-len", "4096", "--num-pages", "1024", "--max-running-requests", "1",
                        "--sse-keepalive", "2").wait_ready()
    yield srv
    assert srv.stop() == 0


def test_a_queued_stream_gets_its_head_and_keep_alives_before_its_first_token(server):
    busy = threading.Thread(target=httpx.post, args=(server.url + "/v1/completions",), daemon=True,
                            kwargs={"json": {"prompt": "x", "max_tokens": 2500, "ignore_eos": True}, "timeout": 600})
    busy.start()
    time.sleep(1.0)  # the long request holds the one running slot
    start = time.monotonic()
    with httpx.stream("POST", server.url + "/v1/completions", timeout=600,
                      json={"prompt": "y", "max_tokens": 2, "stream": True}) as resp:
        head, queued = time.monotonic() - start, busy.is_alive()
        assert resp.status_code == 200
        lines = [line for line in resp.iter_lines() if line]
    assert queued, "the head came only once the long request had ended"
    assert head < 5.0, f"the head came after {head:.1f} s"
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data:"))
    assert any(line.startswith(": keep-alive") for line in lines[:first_data]), "silence while queued"
    assert lines[-1] == "data: [DONE]"
    busy.join(timeout=600)


def test_a_stream_refused_at_once_still_gets_its_http_status(server):
    """Refused before its head is due (a bad regex, the compile workers warm): a 400, not an event."""
    warm = httpx.post(server.url + "/v1/completions", timeout=600,
                      json={"prompt": "x", "max_tokens": 2, "guided_regex": "[0-9]+"})
    assert warm.status_code == 200, warm.text
    resp = httpx.post(server.url + "/v1/completions", timeout=60,
                      json={"prompt": "x", "max_tokens": 2, "stream": True, "guided_regex": "("})
    assert resp.status_code == 400, resp.text
