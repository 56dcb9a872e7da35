"""With an API key set, a client without it can consume nothing a keyed client needs: it reserves no
part of the request-body budget and takes no place under --max-connections, whatever length it
declares or however long it leaves its request unfinished; its requests are answered (401, 404,
405, the probes) without their bodies being read. The key's scheme is case-insensitive; a request
head over --max-header-bytes is refused however it arrives. Real server, raw loopback sockets."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from tests.server.serving import ServerProcess

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_CONNECTIONS = 8
BODY_BUDGET = 1_000_000
MAX_BODY = 65_536


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    srv = ServerProcess("--model", tiny_model_dir("Qwen3ForCausalLM"), "--num-pages", "256", "--max-seq-len", "256",
                        "--max-connections", str(MAX_CONNECTIONS), "--max-buffered-request-bytes", str(BODY_BUDGET),
                        "--max-request-bytes", str(MAX_BODY), "--body-timeout", "30", "--header-timeout", "30",
                        "--max-header-bytes", "65536", env={"MINISGL_API_KEY": KEY}).wait_ready()
    assert keyed_completion(srv)[0] == 200  # warm: the timed requests below measure only the waiting
    yield srv
    assert srv.stop() == 0


def send_heads(url: str, heads: list[bytes]) -> list[socket.socket]:
    """One socket per head, each sent whole, its body (if it declares one) never."""
    host, port = url.removeprefix("http://").split(":")
    socks = []
    for head in heads:
        sock = socket.create_connection((host, int(port)), timeout=10)
        sock.sendall(head)
        socks.append(sock)
    return socks


def keyed_completion(server, timeout: float = 60) -> tuple[int, float]:
    start = time.monotonic()
    resp = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, headers=AUTH,
                      timeout=timeout)
    return resp.status_code, time.monotonic() - start


def test_declared_lengths_without_the_key_reserve_none_of_the_body_budget(server):
    """40 sockets, none with the key, each declaring a body the server would accept (64 KiB; 2.6 MB
    in all against a budget of 1 MB) and sending none of it, on an unknown path, on OPTIONS of an
    API path, and on a probe: a keyed request is still served at once."""
    declared = b"Content-Length: %d\r\n\r\n" % MAX_BODY
    heads = [b"POST /x HTTP/1.1\r\nHost: x\r\n" + declared] * 14 + \
            [b"OPTIONS /v1/completions HTTP/1.1\r\nHost: x\r\n" + declared] * 13 + \
            [b"POST /health HTTP/1.1\r\nHost: x\r\n" + declared] * 13
    socks = send_heads(server.url, heads)
    try:
        time.sleep(1.0)  # every head has arrived
        status, seconds = keyed_completion(server)
        assert status == 200 and seconds < 10, (status, seconds)
    finally:
        for s in socks:
            s.close()


def test_unfinished_requests_without_the_key_take_no_place_under_max_connections(server):
    """Three times --max-connections sockets without the key, each declaring a 10-byte body and
    sending none (on an API path, an unknown path, a probe): keyed requests and /health_generate
    are still served at once."""
    declared = b"Content-Type: application/json\r\nContent-Length: 10\r\n\r\n"
    heads = [b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + declared] * MAX_CONNECTIONS + \
            [b"POST /x HTTP/1.1\r\nHost: x\r\n" + declared] * MAX_CONNECTIONS + \
            [b"GET /health_generate HTTP/1.1\r\nHost: x\r\n" + declared] * MAX_CONNECTIONS
    socks = send_heads(server.url, heads)
    try:
        time.sleep(1.0)
        for _ in range(3):
            status, seconds = keyed_completion(server)
            assert status == 200 and seconds < 10, (status, seconds)
        probe = httpx.get(server.url + "/health_generate", timeout=30)
        assert probe.status_code == 200, probe.text
    finally:
        for s in socks:
            s.close()


def test_keyed_requests_in_progress_are_still_capped(server):
    """The cap holds for keyed clients: with --max-connections keyed requests unfinished (their
    bodies never sent), one more gets 503 JSON with Retry-After; once they close, it is served."""
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
            b"\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n")
    socks = send_heads(server.url, [head] * MAX_CONNECTIONS)
    try:
        time.sleep(1.0)
        resp = httpx.post(server.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, headers=AUTH,
                          timeout=30)
        assert resp.status_code == 503 and resp.headers["retry-after"], resp.text
        assert resp.json()["error"]["code"] == "service_unavailable"
        assert httpx.get(server.url + "/health", timeout=5).status_code == 200
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 10
    while keyed_completion(server)[0] != 200:
        assert time.monotonic() < deadline, "the closed requests still hold their places"
        time.sleep(0.2)


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_authorization_scheme_is_case_insensitive(server, scheme):
    resp = httpx.get(server.url + "/v1/models", headers={"Authorization": f"{scheme} {KEY}"}, timeout=10)
    assert resp.status_code == 200, resp.text
    wrong = httpx.get(server.url + "/v1/models", headers={"Authorization": f"{scheme} {KEY.upper()}"}, timeout=10)
    assert wrong.status_code == 401


def test_a_head_over_the_limit_is_refused_even_when_it_arrives_in_one_packet(server):
    """A 70 KiB head written in one send (the parser completes it in one read) gets 431 as one
    trickled in would."""
    head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (70 << 10) + b"\r\n\r\n"
    (sock,) = send_heads(server.url, [head])
    answer = b""
    try:
        while chunk := sock.recv(65536):
            answer += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert httpx.get(server.url + "/health", headers={"X-Big": "a" * 60_000}, timeout=5).status_code == 200



def test_a_websocket_upgrade_is_answered_without_a_traceback(server):
    """The server speaks no websocket: an upgrade (with or without the key, on any path) is
    refused or answered as plain HTTP, never a 5xx, and leaves no traceback in the log."""
    for path in (b"/", b"/v1/completions", b"/health", b"/x"):
        for auth in (b"", b"Authorization: Bearer " + KEY.encode() + b"\r\n"):
            head = (b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                    b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" + auth + b"\r\n")
            (sock,) = send_heads(server.url, [head])
            try:
                status = sock.recv(65536).split(b"\r\n", 1)[0]
            finally:
                sock.close()
            assert status.startswith(b"HTTP/1.1 ") and not status.startswith(b"HTTP/1.1 5"), (path, auth, status)
            assert not status.startswith(b"HTTP/1.1 101"), (path, status)
    assert httpx.get(server.url + "/health", timeout=5).status_code == 200
    assert "Traceback" not in server.output()
