"""The serving-path benchmark on the CPU, at a small size: the real API, tokenizer and
detokenizer processes behind a model-free engine, driven by the raw-SSE client; the client's own
ceiling against a canned server; and two servers compared with the same requests. These check
that every run completes and counts right; speeds are reported in benchmark/NOTES.md, not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from minisgl.utils.net import free_port

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(REPO, "benchmark", "online", "bench.py")
CEILING = os.path.join(REPO, "benchmark", "online", "client_ceiling.py")
N, OUT_LEN = 24, 20


def run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.timeout(180)
def test_model_free_server_streams_every_token_through_two_tokenizers(tmp_path):
    out = tmp_path / "serving.json"
    run([sys.executable, BENCH, "--launch", "--model-free", "--api", "chat", "--rates", "inf", "--num-requests", str(N),
         "--max-input-len", "48", "--max-output-len", str(OUT_LEN), "--no-warmup-burst", "--no-progress", "--out", str(out),
         "--", "--tokenizer-workers", "2", "--num-pages", "512"], 170)
    row = json.loads(out.read_text())["results"][0]
    assert row["completed"] == N and row["failed"] == 0
    assert row["output_tokens"] == row["expected_output_tokens"] == N * OUT_LEN
    assert row["short_outputs"] == 0 and row["tokens_from"] == "usage"
    assert row["output_throughput"] > 0
    # the engine ran no model (the scheduler process swapped it in)
    assert "BENCHMARK ENGINE: no model runs" in (tmp_path / "serving-server.log").read_text()


@pytest.mark.timeout(120)
def test_client_ceiling_receives_every_canned_event(tmp_path):
    out = tmp_path / "ceiling.json"
    run([sys.executable, CEILING, "--client-processes", "1,2", "--server-processes", "1", "--num-requests", "16",
         "--tokens", "32", "--out", str(out)], 110)
    rows = json.loads(out.read_text())["results"]
    assert [r["client_processes"] for r in rows] == [1, 2]
    assert all(r["events"] == 16 * 32 and r["events_per_s"] > 0 for r in rows)
    assert (tmp_path / "ceiling.png").stat().st_size > 5_000


@pytest.mark.timeout(180)
def test_compare_drives_a_second_server_with_the_same_requests(tmp_path):
    """The second server sends no usage: its tokens are counted from the stream's text chunks."""
    out, port = tmp_path / "compare.json", free_port()
    proc = run([sys.executable, BENCH, "--launch", "--model-free", "--rates", "inf", "--num-requests", str(N),
                "--max-input-len", "16", "--max-output-len", str(OUT_LEN), "--no-warmup-burst", "--no-progress", "--out", str(out),
                "--compare-base-url", f"http://127.0.0.1:{port}", "--compare-name", "canned",
                "--compare-launch", f"{sys.executable} {CEILING} --serve {port} --no-usage", "--",
                "--num-pages", "512"], 170)
    data = json.loads(out.read_text())
    mine, other = data["results"][0], data["compare"]["results"][0]
    assert data["compare"]["name"] == "canned" and other["tokens_from"] == "chunks"
    assert mine["output_tokens"] == other["output_tokens"] == N * OUT_LEN
    assert "minisgl vs canned" in proc.stdout and "| inf |" in proc.stdout
