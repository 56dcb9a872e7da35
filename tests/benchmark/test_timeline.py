"""benchmark/offline/timeline.py on the demo model (CPU): every step of the timed run is in its
JSON with its phase and batch, every generated token is accounted for by a step, and the steps'
times add up to no more than the run's wall time; the decode summary covers every decode step."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "benchmark", "offline", "timeline.py")
REQUESTS = 6


@pytest.mark.timeout(300)
def test_every_token_of_the_timed_run_belongs_to_a_step(tmp_path):
    out = tmp_path / "timeline.json"
    subprocess.run([sys.executable, SCRIPT, "--num-requests", str(REQUESTS), "--max-input-len", "40",
                    "--max-output-len", "12", "--out", str(out)], cwd=REPO, check=True, capture_output=True, text=True)
    result = json.loads(out.read_text())
    steps, summary = result["steps"], result["summary"]
    assert {s["phase"] for s in steps} == {"prefill", "decode"}
    assert all(s["batch"] >= 1 and s["tokens"] >= s["batch"] and s["seconds"] > 0 for s in steps)
    # Each request's first token comes with its prompt's last chunk, every later one from a decode step.
    decode_tokens = sum(s["tokens"] for s in steps if s["phase"] == "decode")
    assert decode_tokens == result["output_tokens"] - REQUESTS
    assert sum(s["seconds"] for s in steps) <= result["seconds"]
    assert sum(r["steps"] for r in summary["decode_by_batch"]) == summary["phases"]["decode"]["steps"]
    assert os.path.exists(tmp_path / "timeline.png")
