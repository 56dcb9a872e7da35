"""The benchmark tests' shared set-up: the offline benchmark's result on a small workload, run once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OFFLINE_BENCH = os.path.join(REPO, "benchmark", "offline", "bench.py")


def run_benchmark(script: str, *args: str) -> None:
    """benchmark/`script` with `args`, from the repository root; fails the test on a non-zero exit."""
    subprocess.run([sys.executable, os.path.join(REPO, "benchmark", script), *args], cwd=REPO, check=True,
                   capture_output=True, text=True)


@pytest.fixture(scope="session")
def offline_result(tmp_path_factory) -> SimpleNamespace:
    """benchmark/offline/bench.py on the demo model (CPU), 8 requests of 24 prompt and 6 output
    tokens, once unmeasured and `repeats` times measured: its JSON's path and contents, and the
    size and repeats it was given (the online benchmark drives a server with the same), and the
    workload it dumped for the reference engine."""
    out = tmp_path_factory.mktemp("offline") / "offline.json"
    dump = out.with_name("workload.json")
    size = {"num_requests": 8, "max_input_len": 24, "max_output_len": 6}
    repeats = 2
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in size.items()]
    subprocess.run([sys.executable, OFFLINE_BENCH, "--device", "cpu", *flags, "--repeats", str(repeats),
                    "--dump-workload", str(dump), "--out", str(out)], cwd=REPO, check=True, capture_output=True,
                   text=True, timeout=300)
    return SimpleNamespace(path=out, data=json.loads(out.read_text()), size=size, repeats=repeats,
                           workload=json.loads(dump.read_text()))
