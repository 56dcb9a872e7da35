"""benchmark/offline/prefill_delay.py on the demo model (CPU): every setting runs every round with all of
its requests' tokens, its steps and queue waits counted, the first setting is the others' reference,
and the JSON and PNG are written. (At 4 rows a prefill gathers a single row, so the settings run alike:
this checks the benchmark, tests/scheduler/test_prefill_gather.py the gathering.)"""

from __future__ import annotations

import json
import os

import pytest

from tests.benchmark.conftest import run_benchmark

pytestmark = pytest.mark.slow  # starts an engine on the demo model: out of the fast loop (tests/test_tiers.py)


@pytest.mark.timeout(300)
def test_each_setting_runs_each_round_with_every_token(tmp_path):
    out = tmp_path / "pd.json"
    run_benchmark("offline/prefill_delay.py", "--num-requests", "12", "--max-input-len", "40", "--max-output-len", "8",
                  "--max-running-requests", "4", "--delays", "0,8", "--rounds", "2", "--out", str(out))
    result = json.loads(out.read_text())
    assert result["delays"] == [0, 8]
    for delay in ("0", "8"):
        runs = result["runs"][delay]
        assert [r["round"] for r in runs] == [0, 1]
        assert all(r["output_tokens"] == 12 * 8 and r["prefill"] >= 12 / 4 and r["decode"] >= 7 for r in runs)
        assert all(0 <= r["queue_wait_s"]["p50"] <= r["queue_wait_s"]["p99"] <= r["seconds"] for r in runs)
    assert result["arms"]["0"]["over_first"] == 1 and result["arms"]["0"]["paired_ratios"] == [1, 1]
    assert os.path.exists(tmp_path / "pd.png")
