"""Request life-cycle: stop conditions, aborts, and requests that can never fit."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig


@pytest.fixture()
def scheduler(tiny_model_dir):
    s = Scheduler(SchedulerConfig(tiny_model_dir("Qwen3ForCausalLM"), device="cpu", dtype=torch.float32,
                                  max_seq_len=128, page_size=4, num_pages=64, max_running_requests=8))
    yield s
    s.shutdown()


def drain(s: Scheduler) -> dict[int, dict]:
    results: dict[int, dict] = {}
    for _ in range(1000):
        if not s.has_work:
            break
        for out in s.step():
            r = results.setdefault(out.uid, {"tokens": [], "reason": None, "error": None})
            if out.token_id is not None:
                r["tokens"].append(out.token_id)
            if out.finish_reason:
                r["reason"], r["error"] = out.finish_reason, out.error
    return results


def test_max_tokens_and_stop_token_ids(scheduler):
    scheduler.add_request(1, [5, 6, 7], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
    first = drain(scheduler)[1]
    assert first["reason"] == "length" and len(first["tokens"]) == 10
    stop_at = first["tokens"][4]
    scheduler.add_request(2, [5, 6, 7], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True,
                                                       stop_token_ids=(stop_at,)))
    second = drain(scheduler)[2]
    assert second["reason"] == "stop"
    assert second["tokens"] == first["tokens"][: first["tokens"].index(stop_at) + 1]


def test_eos_stops_unless_ignored(scheduler):
    scheduler.eos_token_ids = set(range(400))  # every token ends the request
    scheduler.add_request(1, [5, 6, 7], SamplingParams(temperature=0, max_tokens=10))
    scheduler.add_request(2, [5, 6, 7], SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))
    results = drain(scheduler)
    assert results[1]["reason"] == "stop" and len(results[1]["tokens"]) == 1
    assert results[2]["reason"] == "length" and len(results[2]["tokens"]) == 10


def test_abort_running_and_waiting_frees_everything(scheduler):
    params = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
    scheduler.add_request(1, list(range(3, 20)), params)
    scheduler.add_request(2, list(range(3, 20)), params)
    for _ in range(4):
        scheduler.step()
    scheduler.abort(1)
    scheduler.abort(2)
    results = drain(scheduler)
    assert results[1]["reason"] == "abort" and results[2]["reason"] == "abort"
    assert scheduler.cache.used_pages == 0 and scheduler.cache.reserved == 0
    assert scheduler.table.num_free == scheduler.table.rows


@pytest.mark.parametrize("prompt_len, max_tokens, message", [
    (100, 50, r"maximum context length is 128 tokens, but 150 were requested \(100 in the prompt, 50 for the completion\)"),
    (0, 5, "the prompt is empty"),
])
def test_impossible_requests_are_rejected_and_others_still_run(scheduler, prompt_len, max_tokens, message):
    scheduler.add_request(1, [7] * prompt_len, SamplingParams(max_tokens=max_tokens))
    scheduler.add_request(2, [7, 8, 9], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    results = drain(scheduler)
    assert results[1]["reason"] == "error"
    assert __import__("re").search(message, results[1]["error"])
    assert results[2]["reason"] == "length" and len(results[2]["tokens"]) == 5


def test_no_max_tokens_means_the_rest_of_the_context(scheduler):
    """max_tokens None (a client that names none): generation runs to the context length (128
    here); a min_tokens above what the context then leaves is that request's error, not a crash."""
    scheduler.add_request(1, [5] * 100, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
    scheduler.add_request(2, [5] * 100, SamplingParams(max_tokens=None, min_tokens=29))
    scheduler.add_request(3, [7, 8, 9], SamplingParams(temperature=0, max_tokens=5, ignore_eos=True))
    results = drain(scheduler)
    assert results[1]["reason"] == "length" and len(results[1]["tokens"]) == 28
    assert results[2]["reason"] == "error" and results[2]["error"] == "min_tokens must be in [0, max_tokens=28], got 29"
    assert results[3]["reason"] == "length" and len(results[3]["tokens"]) == 5


def test_no_max_tokens_stops_at_the_servers_max_new_tokens(tiny_model_dir):
    s = Scheduler(SchedulerConfig(tiny_model_dir("Qwen3ForCausalLM"), device="cpu", max_seq_len=128,
                                  page_size=4, num_pages=64, max_running_requests=2, max_new_tokens=6))
    try:
        s.add_request(1, [5, 6, 7], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
        result = drain(s)[1]
        assert result["reason"] == "length" and len(result["tokens"]) == 6
    finally:
        s.shutdown()


def test_request_larger_than_the_whole_pool_is_rejected(tiny_model_dir):
    s = Scheduler(SchedulerConfig(tiny_model_dir("Qwen3ForCausalLM"), device="cpu", max_seq_len=64,
                                  page_size=4, num_pages=8, max_running_requests=2))
    try:
        s.add_request(1, [5] * 40, SamplingParams(max_tokens=20))
        out = s.step()
        assert out[0].finish_reason == "error"
        assert out[0].error == "the request needs 15 KV pages but the whole cache has 8"
    finally:
        s.shutdown()
