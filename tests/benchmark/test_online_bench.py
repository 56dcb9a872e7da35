"""The online benchmark end to end: it launches the demo server on the CPU, sweeps two rates with the
openai client, stops the server, and leaves a JSON with the statistics and a PNG."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.reaper import end_group, start_in_own_group

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "benchmark", "online", "bench.py")

REQUESTS, OUTPUT_LEN, RATES = 8, 6, ["20", "inf"]


@pytest.mark.timeout(600)  # a hang, not a slow machine: the run takes 1-2 minutes on 2 loaded cores
def test_online_bench_launches_the_demo_server_and_reports(tmp_path):
    out = tmp_path / "online.json"
    cmd = [sys.executable, SCRIPT, "--launch", "--rates", ",".join(RATES), "--repeats", "2", "--num-requests", str(REQUESTS),
           "--max-input-len", "24", "--max-output-len", str(OUTPUT_LEN), "--request-timeout", "60",
           "--ready-timeout", "90", "--out", str(out), "--", "--device", "cpu", "--num-pages", "256",
           "--max-seq-len", "128"]
    # No wall-clock limit of its own: the benchmark ends when its work is done (and takes its
    # server with it, whatever happens to this test).
    proc = start_in_own_group(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate()
    finally:
        end_group(proc)
    assert proc.returncode == 0, stdout + stderr

    data = json.loads(out.read_text())
    assert data["benchmark"] == "online" and data["launched"] and data["model"] == "minisgl-demo"
    assert [r["rate"] for r in data["results"]] == RATES * 2  # --repeats 2: the sweep twice, fresh prompts
    assert [(s["rate"], s["runs"]) for s in data["spread"]] == [(rate, 2) for rate in RATES]
    for s in data["spread"]:
        assert 0 < s["min"] <= s["mean"] <= s["max"] and s["cv"] >= 0
    for r in data["results"]:
        assert r["completed"] == REQUESTS and r["failed"] == 0
        # ignore_eos: every request streams exactly max_tokens, counted by the usage chunk
        assert r["output_tokens"] == r["expected_output_tokens"] == REQUESTS * OUTPUT_LEN
        assert r["input_tokens"] == REQUESTS * 24  # max_input_len <= 100: fixed lengths
        assert r["request_throughput"] > 0 and r["output_throughput"] > 0
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            p = r[key]
            assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["max"], (key, p)
        assert r["ttft_ms"]["p99"] <= r["e2e_ms"]["max"]
    assert (tmp_path / "online.png").stat().st_size > 10_000
    assert "| inf | 8/8 |" in stdout and "spread over 2 repeats" in stdout and "server stopped (exit 0)" in stdout
