"""The online benchmark end to end: it launches the demo server on the CPU, sends an unmeasured
warm-up burst, sweeps two rates twice, stops the server, and leaves a JSON with every repeat's
statistics, each rate's mean, min, max and spread, the server's mean at rate inf over the offline
engine's on the same requests, and a PNG. Its command line refuses what it cannot measure."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys

import pytest

from tests.reaper import end_group, start_in_own_group

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "benchmark", "online", "bench.py")

RATES, REPEATS = ["20", "inf"], 2


@pytest.mark.slow  # starts the server: out of the fast loop (tests/test_tiers.py)
@pytest.mark.timeout(600)  # a hang, not a slow machine: the run takes 1-2 minutes on 2 loaded cores
def test_online_bench_launches_the_demo_server_and_reports(tmp_path, offline_result):
    size = offline_result.size  # the offline engine's workload: the same requests
    requests, output_len = size["num_requests"], size["max_output_len"]
    out = tmp_path / "online.json"
    cmd = [sys.executable, SCRIPT, "--launch", "--rates", ",".join(RATES), "--repeats", str(REPEATS),
           *(f"--{k.replace('_', '-')}={v}" for k, v in size.items()), "--offline-json", str(offline_result.path),
           "--request-timeout", "60", "--ready-timeout", "90", "--out", str(out),
           "--", "--device", "cpu", "--num-pages", "256", "--max-seq-len", "128"]
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
    assert data["workload"]["repeats"] == REPEATS and data["workload"]["num_requests"] == requests
    assert data["warmup_burst"]["completed"] == requests  # sent, and not among the results
    rows = data["results"]
    assert [(r["rate"], r["repeat"]) for r in rows] == [(rate, k) for k in range(REPEATS) for rate in RATES]
    for r in rows:
        assert r["completed"] == requests and r["failed"] == 0
        # ignore_eos: every request streams exactly max_tokens, counted by the usage chunk
        assert r["output_tokens"] == r["expected_output_tokens"] == requests * output_len
        assert r["input_tokens"] == requests * size["max_input_len"]  # max_input_len <= 100: fixed lengths
        assert r["request_throughput"] > 0 and r["output_throughput"] > 0
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            p = r[key]
            assert 0 < p["p50"] <= p["p90"] <= p["p99"] <= p["max"], (key, p)
        assert r["ttft_ms"]["p99"] <= r["e2e_ms"]["max"]

    # Each rate's summary, against the same figures computed here from its repeats' rows.
    assert [s["rate"] for s in data["summary"]] == RATES
    for s in data["summary"]:
        values = [r["output_throughput"] for r in rows if r["rate"] == s["rate"]]
        mean = sum(values) / len(values)
        assert s["runs"] == REPEATS and s["values"] == values
        assert s["mean"] == pytest.approx(mean) and (s["min"], s["max"]) == (min(values), max(values))
        assert s["spread"] == pytest.approx((max(values) - min(values)) / mean)

    vs = data["vs_offline"]
    server_mean = next(s["mean"] for s in data["summary"] if s["rate"] == "inf")
    engine_mean = offline_result.data["tokens_per_s"]
    assert vs["ratio"] == pytest.approx(server_mean / engine_mean)
    assert vs["offline"]["runs"] == offline_result.repeats

    assert (tmp_path / "online.png").stat().st_size > 10_000
    assert "| inf | 8/8 |" in stdout and "server stopped (exit 0)" in stdout
    assert f"output throughput over {REPEATS} repeat(s) of each rate" in stdout
    assert f"= {vs['ratio']:.3f}" in stdout


def parse(argv: list[str]):
    return runpy.run_path(SCRIPT)["parse_args"](argv)


def test_the_serving_workload_sends_at_least_1024_requests_per_rate_by_default():
    args, _ = parse([])
    assert args.workload == "serving" and args.num_requests >= 1024 and args.repeats >= 1


def test_the_long_output_mode_asks_for_longer_outputs():
    assert parse(["--workload", "long"])[0].max_output_len > parse([])[0].max_output_len


def refusal(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


def offline_json(tmp_path, **workload) -> str:
    """A result of benchmark/offline/bench.py, as far as --offline-json reads it before the run."""
    path = tmp_path / "offline.json"
    path.write_text(json.dumps({"benchmark": "offline", "workload": workload, "repeats": {}}))
    return str(path)


def test_the_offline_engine_is_compared_only_on_the_same_workload_at_rate_inf(tmp_path, capsys):
    same = offline_json(tmp_path, num_requests=8, max_input_len=24, max_output_len=6, temperature=0.6)
    size = ["--num-requests", "8", "--max-input-len", "24", "--max-output-len", "6"]
    assert parse([*size, "--rates", "inf", "--offline-json", same])[0].offline_json == same
    err = refusal([*size, "--num-requests", "16", "--rates", "inf", "--offline-json", same], capsys)
    assert "--offline-json" in err and "another workload" in err
    err = refusal([*size, "--rates", "8,32", "--offline-json", same], capsys)
    assert "--offline-json" in err and "rate inf" in err
    err = refusal([*size, "--rates", "inf", "--offline-json", str(tmp_path / "missing.json")], capsys)
    assert "--offline-json" in err and "no file" in err
    online = tmp_path / "online.json"
    online.write_text(json.dumps({"benchmark": "online"}))
    err = refusal([*size, "--rates", "inf", "--offline-json", str(online)], capsys)
    assert "--offline-json" in err and "not benchmark/offline/bench.py's result" in err


def test_repeats_below_one_are_refused(capsys):
    assert "--repeats" in refusal(["--repeats", "0"], capsys)
