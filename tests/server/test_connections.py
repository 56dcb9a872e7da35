"""Connection hygiene against a real server: slow clients (slowloris) are cut off after the header
or body timeout while /health keeps answering, connections are capped with a clear refusal, the
open-file limit is raised at start, and the API key is checked before the body is read."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psutil
import pytest

from minisgl.benchmark.server_process import ServerProcess as CommandProcess
from minisgl.server.args import parse_args
from minisgl.utils.net import free_port
from tests import chaos
from tests.server.serving import ServerProcess, tiny_qwen3_server, wait_for

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

FAST = ["--num-pages", "256", "--max-seq-len", "256"]


model_dir, server, client = tiny_qwen3_server(*FAST, "--header-timeout", "2", "--body-timeout", "2",
                                              "--max-connections", "64", "--max-header-bytes", "16384",
                                              "--max-buffered-request-bytes", "3000")


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.settimeout(10)
    return sock


def closed_by_server(sock: socket.socket) -> bytes | None:
    """What the server sent before closing (b'' for nothing), or None while it keeps the socket open."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return None
    except ConnectionResetError:
        return b""
    finally:
        sock.setblocking(True)
    if data:  # a response; the close may follow it
        rest = b""
        try:
            sock.settimeout(2)
            while chunk := sock.recv(65536):
                rest += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return data + rest
    return data


def test_slow_request_heads_are_closed_after_the_header_timeout_while_health_answers(server):
    """20 clients send their request head one byte every 0.4 s (each byte resets uvicorn's own
    keep-alive timer): all are closed about --header-timeout (2 s) after connecting, and /health
    answers the whole time (the chaos scenario tests.chaos.slowloris)."""
    result = chaos.slowloris(server.url, connections=20, seconds=8, byte_every_s=0.4)
    assert result["cut"] == 20, f"{20 - result['cut']} slow connections still open after 8 s"
    assert all(1.5 < t < 4.5 for t in result["cut_after_s"]), result["cut_after_s"]
    assert result["health_failures"] == 0


def test_a_slowly_sent_body_gets_408_after_the_body_timeout(server):
    sock = connect(server.url)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n{\"prompt\": ")
    start = time.monotonic()
    response = None
    while time.monotonic() - start < 8 and response is None:
        try:
            sock.send(b" ")
        except (BrokenPipeError, ConnectionResetError):
            response = b""
            break
        time.sleep(0.4)
        response = closed_by_server(sock)
    sock.close()
    assert response is not None, "a body trickling in is held open past the body timeout"
    assert response.startswith(b"HTTP/1.1 408"), response[:200]
    assert b'"code":"request_timeout"' in response
    assert 1.5 < time.monotonic() - start < 4.5


def test_idle_sockets_beyond_max_connections_lock_out_neither_clients_nor_probes(server):
    """84 sockets opened and left idle against --max-connections 64 (45 idle sockets
    against a cap of 40 once failed every liveness probe): sockets that never sent a request are not
    in use, so clients and the probes are served (HEAD too, as some load balancers probe)."""
    held = [connect(server.url) for _ in range(64 + 20)]
    try:
        with httpx.Client(base_url=server.url, timeout=5) as http:
            assert http.get("/v1/models").status_code == 200
            for probe in ("/health", "/ready", "/metrics"):
                assert http.get(probe).status_code == 200, probe
            for probe in ("/health", "/ready"):
                assert http.head(probe).status_code == 200, probe
    finally:
        for s in held:
            s.close()


def test_connections_in_use_beyond_max_connections_get_503_json_but_the_probes_are_answered(server):
    """64 connections each with a request in flight (the scheduler stands still, so none ends): a
    request on the 65th gets 503 (OpenAI-style JSON, Retry-After) at once, while /health, /ready
    and /metrics are answered. When the requests end, requests are served again."""
    results: list[int] = []
    body = {"prompt": "hi", "max_tokens": 1}
    busy = [threading.Thread(target=lambda: results.append(
        httpx.post(server.url + "/v1/completions", json=body, timeout=120).status_code)) for _ in range(64)]
    with server.stopped("scheduler"):
        for t in busy:
            t.start()
        wait_for(lambda: httpx.get(server.url + "/v1/models", timeout=5).status_code == 503, 120,
                 "the 65th connection in use to be refused")
        resp = httpx.get(server.url + "/v1/models", timeout=5)
        assert resp.json()["error"]["code"] == "service_unavailable" and resp.headers["retry-after"]
        for probe in ("/health", "/ready", "/metrics"):
            assert httpx.get(server.url + probe, timeout=5).status_code == 200, probe
    for t in busy:
        t.join(120)
    assert results == [200] * 64
    assert httpx.get(server.url + "/v1/models", timeout=5).status_code == 200


def test_a_request_head_over_max_header_bytes_gets_431_and_is_closed(server):
    """Checked while the head arrives, before any header (the API key included) is looked at:
    a 10 MB header is never buffered."""
    sock = connect(server.url)
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ")
    try:
        for _ in range(200):  # up to 1 MB, 5 KB at a time: the server stops reading long before
            sock.sendall(b"a" * 5000)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = b""
    try:
        while chunk := sock.recv(65536):  # what the server says before it closes (10 s timeout)
            answer += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    sock.close()
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert b'"code": "request_header_too_large"' in answer
    # A head under the limit is served.
    assert httpx.get(server.url + "/v1/models", headers={"X-Big": "a" * 8000}, timeout=5).status_code == 200


def test_request_bodies_held_at_once_stay_within_max_buffered_request_bytes(server):
    """A body of 2,000 bytes still arriving holds 2,000 of the 3,000 the server buffers at once: a
    second one gets 503 (JSON, Retry-After) until the first is done."""
    first = connect(server.url)
    first.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 2000\r\n\r\n{\"prompt\": ")
    second = {"prompt": "x" * 1900, "max_tokens": 1}
    try:
        wait_for(lambda: httpx.post(server.url + "/v1/completions", json=second, timeout=5).status_code == 503, 10,
                 "a second body to be refused while the first is held")
        busy = httpx.post(server.url + "/v1/completions", json=second, timeout=5)
        assert busy.json()["error"]["code"] == "service_unavailable" and busy.headers["retry-after"]
    finally:
        first.close()
    wait_for(lambda: httpx.post(server.url + "/v1/completions", json=second, timeout=5).status_code != 503, 10,
             "the first body's bytes to be given back")


def test_open_file_limit_is_raised_so_1100_idle_connections_do_not_starve_health(model_dir):
    """Started under the usual soft limit of 1024 open files: the server raises it to the hard
    limit (its workers inherit it), and /health still answers with 1,100 idle connections open."""
    soft, hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)
    if hard < 4096:
        pytest.skip(f"the hard open-file limit here is {hard}: too low to open 1,100 connections")
    port = free_port()
    minisgl = " ".join([sys.executable, "-m", "minisgl", "--port", str(port), "--device", "cpu", "--model",
                        model_dir, *FAST])
    srv = CommandProcess(["sh", "-c", f"ulimit -Sn 1024 && exec {minisgl}"], f"http://127.0.0.1:{port}",
                         f"/tmp/minisgl-nofile-{port}.log", command=True).wait_ready()
    socks = []
    try:
        procs = [psutil.Process(srv.proc.pid), *psutil.Process(srv.proc.pid).children(recursive=True)]
        for p in procs:
            assert p.rlimit(psutil.RLIMIT_NOFILE)[0] == hard, p.cmdline()
        with ThreadPoolExecutor(16) as pool:
            socks = list(pool.map(lambda _: connect(srv.url), range(1100)))
        time.sleep(0.5)
        assert httpx.get(srv.url + "/health", timeout=10).status_code == 200
        assert "Too many open files" not in srv.output()
    finally:
        for s in socks:
            s.close()
        assert srv.stop() == 0


def test_api_key_is_checked_before_the_body_is_read(model_dir):
    """Without the key, a request is refused with 401 from its head alone: a body that never comes,
    an oversized one and a malformed one all get 401 (not a wait, 413 or 400)."""
    srv = ServerProcess("--model", model_dir, *FAST, "--max-request-bytes", "1000",
                        env={"MINISGL_API_KEY": "s3cret"}).wait_ready()
    try:
        sock = connect(srv.url)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n")  # no body follows
        sock.settimeout(3)
        try:
            head = sock.recv(4096)
        except TimeoutError:
            head = b"(nothing in 3 s)"
        sock.close()
        assert head.startswith(b"HTTP/1.1 401"), f"the server waited for the body of a request without the key: {head[:60]}"
        for content in (b"x" * 5000, b"{not json"):
            resp = httpx.post(srv.url + "/v1/completions", content=content, headers={"Content-Type": "application/json"})
            assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"
        big = httpx.post(srv.url + "/v1/completions", content=b"x" * 5000, headers={"Authorization": "Bearer s3cret"})
        assert big.status_code == 413  # with the key, the body limits apply as before
    finally:
        assert srv.stop() == 0


def test_api_key_from_a_file_works_and_shows_in_no_command_line(model_dir, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-from-file\n")
    srv = ServerProcess("--model", model_dir, *FAST, "--api-key-file", str(key_file)).wait_ready()
    try:
        assert httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}).status_code == 401
        ok = httpx.post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                        headers={"Authorization": "Bearer s3cret-from-file"})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
        procs = [psutil.Process(srv.proc.pid), *psutil.Process(srv.proc.pid).children(recursive=True)]
        assert not any("s3cret" in " ".join(p.cmdline()) for p in procs)
    finally:
        assert srv.stop() == 0


def test_api_key_flags_one_source_each(tmp_path, monkeypatch, capsys):
    key_file = tmp_path / "key"
    key_file.write_text("  from-file  \nignored second line\n")
    monkeypatch.delenv("MINISGL_API_KEY", raising=False)
    assert parse_args(["--api-key-file", str(key_file)]).api_key == "from-file"
    monkeypatch.setenv("MINISGL_API_KEY", "from-env")
    assert parse_args([]).api_key == "from-env"
    assert parse_args(["--api-key-file", str(key_file)]).api_key == "from-file"  # the file wins over the environment
    for argv, problem in ((["--api-key", "a", "--api-key-file", str(key_file)], "give the API key once"),
                          (["--api-key-file", str(tmp_path / "missing")], "--api-key-file"),
                          (["--header-timeout", "0"], "--header-timeout")):
        with pytest.raises(SystemExit) as exit_info:
            parse_args(argv)
        assert exit_info.value.code == 2 and problem in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(SystemExit):
        parse_args(["--api-key-file", str(empty)])
    assert "is empty" in capsys.readouterr().err
    assert os.environ["MINISGL_API_KEY"] == "from-env"
