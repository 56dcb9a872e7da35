"""benchmark/offline/prefill_host.py on the demo model (CPU): each measured step admits its prompts
and launches one prefill, host time within its wall time; the sampler attributes the host's time to
the engine's forward pass; the JSON and PNG are written."""

from __future__ import annotations

import json
import os

import pytest

from tests.benchmark.conftest import run_benchmark

pytestmark = pytest.mark.slow  # starts an engine on the demo model: out of the fast loop (tests/test_tiers.py)


@pytest.mark.timeout(300)
def test_each_step_is_one_prefill_whose_host_time_is_sampled(tmp_path):
    out = tmp_path / "ph.json"
    run_benchmark("offline/prefill_host.py", "--steps", "2", "--skip", "1", "--sample", "--top", "200",
                  "--out", str(out))
    result = json.loads(out.read_text())
    assert len(result["steps"]) == 2
    for s in result["steps"]:
        assert 4 <= s["requests"] <= 14 and 100 * s["requests"] <= s["tokens"] <= 1024 * s["requests"]
        assert 0 < s["host_ms"] <= s["wall_ms"]
    assert result["samples"] > 0
    forward = [share for name, share in result["inclusive"] if name.startswith("forward_batch (engine/engine.py:")]
    assert forward and forward[0] > 0.5  # the step's host time: mostly the forward pass
    assert os.path.exists(tmp_path / "ph.png")
