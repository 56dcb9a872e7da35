"""benchmark/offline/bench.py on the demo model (CPU): the workload runs once unmeasured and then
--repeats times, and the reported throughput is the mean of the measured runs, with each one's
value and their spread beside it."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # an LLM on the CPU, several runs of the workload: out of the fast loop


@pytest.mark.timeout(300)
def test_the_reported_throughput_is_the_mean_of_the_measured_runs(offline_result):
    data, size = offline_result.data, offline_result.size
    assert {k: data["workload"][k] for k in size} == size
    runs = data["runs"]
    assert len(runs) == 1 + offline_result.repeats  # the first unmeasured
    per_request = size["max_output_len"]  # <= 100: every request asks for exactly this many (ignore_eos)
    assert all(r["requests"] == size["num_requests"] and r["output_tokens"] == size["num_requests"] * per_request
               for r in runs)
    measured = [r["tokens_per_s"] for r in runs[1:]]
    mean = sum(measured) / len(measured)
    summary = data["repeats"]
    assert summary["values"] == measured and summary["runs"] == offline_result.repeats
    assert summary["mean"] == pytest.approx(mean) and data["tokens_per_s"] == pytest.approx(mean)
    assert (summary["min"], summary["max"]) == (min(measured), max(measured))
    assert summary["spread"] == pytest.approx((max(measured) - min(measured)) / mean)


def test_the_dumped_workload_holds_every_run_for_the_reference_to_replay(offline_result):
    """reference_offline.py runs what bench.py ran: the workload, then per measured run its lengths
    with fresh ids (a rerun of the same prompts would be served from the prefix cache)."""
    work = offline_result.workload
    runs = work["runs"]
    assert len(runs) == 1 + offline_result.repeats and runs[0] == work["prompts"]
    assert all([len(p) for p in run] == [len(p) for p in work["prompts"]] for run in runs)
    firsts = [tuple(p[:4]) for run in runs for p in run]
    assert len(set(firsts)) == len(firsts)  # no prompt of one run begins as any other's
