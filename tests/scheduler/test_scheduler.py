"""The scheduler changes when and how tokens are computed, never which: every configuration
below produces HF transformers' greedy tokens."""

from __future__ import annotations

import random

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.helpers import hf_greedy

NEW_TOKENS = 24
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM")


@pytest.fixture(scope="module")
def workload():
    rng = random.Random(0)
    return [[rng.randint(3, 380) for _ in range(rng.randint(1, 90))] for _ in range(64)]


@pytest.fixture(scope="module")
def expected(model_dir, workload):
    return [hf_greedy(model_dir, p, NEW_TOKENS)[0] for p in workload]


def run(model_dir, prompts, one_at_a_time=False, **kwargs):
    kwargs = {"device": "cpu", "dtype": torch.float32, "max_running_requests": 64, "num_pages": 2048,
              "page_size": 4, **kwargs}
    llm = LLM(model_dir, **kwargs)
    try:
        if one_at_a_time:
            return [llm.generate([p], GREEDY, use_tqdm=False)[0]["token_ids"] for p in prompts], llm.scheduler
        return [o["token_ids"] for o in llm.generate(prompts, GREEDY, use_tqdm=False)], llm.scheduler
    finally:
        llm.shutdown()


CONFIGS = {
    "radix cache": {"cache": "radix"},
    "naive cache": {"cache": "naive"},
    "chunked prefill of 16 tokens": {"max_prefill_length": 16},
    "page size 1": {"page_size": 1},
    "page size 16": {"page_size": 16, "num_pages": 512},
    "KV pool of 40 pages of 4 tokens": {"num_pages": 40},
    "no overlap scheduling": {"overlap": False},
    "8 running requests at most": {"max_running_requests": 8},
}


@pytest.mark.slow  # 64 requests per configuration: tens of seconds each on 2 cores
@pytest.mark.parametrize("name", list(CONFIGS))
def test_batch_of_64_matches_hf(model_dir, workload, expected, name):
    got, scheduler = run(model_dir, workload, **CONFIGS[name])
    assert got == expected
    # Everything was handed back: no page is held by a request any more.
    assert scheduler.cache.used_pages == 0 and scheduler.cache.reserved == 0
    assert scheduler.table.num_free == scheduler.table.rows


def test_one_at_a_time_matches_hf(model_dir, workload, expected):
    got, _ = run(model_dir, workload[:12], one_at_a_time=True)
    assert got == expected[:12]


@pytest.mark.slow  # tens of seconds on 2 cores
def test_small_pool_makes_requests_wait_not_fail(model_dir, workload, expected):
    got, scheduler = run(model_dir, workload[:16], num_pages=30, page_size=4)
    assert got == expected[:16]
    assert scheduler.stats.finished == {"length": 16}


def test_shared_prefix_is_computed_once(model_dir):
    rng = random.Random(1)
    system = [rng.randint(3, 380) for _ in range(200)]
    prompts = [system + [rng.randint(3, 380) for _ in range(rng.randint(3, 10))] for _ in range(12)]
    want = [hf_greedy(model_dir, p, NEW_TOKENS)[0] for p in prompts[:3]]
    llm = LLM(model_dir, device="cpu", dtype=torch.float32, num_pages=2048, page_size=4)
    try:
        first = llm.generate(prompts[:1], GREEDY, use_tqdm=False)  # warms the cache with the system prompt
        rest = llm.generate(prompts[1:], GREEDY, use_tqdm=False)
        stats = llm.scheduler.stats
    finally:
        llm.shutdown()
    assert [first[0]["token_ids"]] + [o["token_ids"] for o in rest[:2]] == want
    total = sum(len(p) for p in prompts)
    # Each later request reuses the 200-token system prompt (page-aligned) and computes the rest.
    assert stats.prompt_tokens == total
    assert stats.prefix_hit_tokens == 11 * 200
    assert stats.computed_prompt_tokens == total - 11 * 200


@pytest.mark.parametrize("params, field", [
    (SamplingParams(max_tokens=4, min_tokens=2, stop_token_ids=(2147483647,)), "stop_token_ids"),
    (SamplingParams(max_tokens=4, stop_token_ids=(-1,)), "stop_token_ids"),
    (SamplingParams(max_tokens=4, logit_bias=((10**9, 1.0),)), "logit_bias"),
])
def test_an_id_outside_the_vocabulary_fails_its_request_not_the_scheduler(model_dir, params, field):
    """The request that once killed the server (stop_token_ids far outside the vocabulary, banned
    under min_tokens) is refused by name at admission; the next one runs."""
    llm = LLM(model_dir, device="cpu", dtype=torch.float32, num_pages=256, page_size=4)
    try:
        with pytest.raises(ValueError, match=rf"prompt 0: {field}: token id -?\d+ is outside the vocabulary"):
            llm.generate([[5, 6, 7]], params, use_tqdm=False)
        scheduler = llm.scheduler
        scheduler.add_request(99, [5, 6, 7], params)  # the server's way in: an error output, no exception
        outputs = scheduler.step()
        assert [(o.uid, o.finish_reason) for o in outputs] == [(99, "error")] and field in outputs[0].error
        ok = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)[0]
        assert len(ok["token_ids"]) == 3 and scheduler.cache.used_pages == 0
    finally:
        llm.shutdown()


def test_a_prefill_writes_each_admitted_prompt_into_its_token_pool_row(model_dir):
    """One prefill of several prompts (the admitted requests' ids go to the device in one copy): each
    request's row of the token pool holds its prompt, and its first sampled token after it."""
    from minisgl.scheduler import Scheduler, SchedulerConfig

    s = Scheduler(SchedulerConfig(model_path=model_dir, device="cpu", dtype=torch.float32, page_size=4,
                                  num_pages=512, max_running_requests=8))
    rng = random.Random(11)
    prompts = [[rng.randint(3, 380) for _ in range(n)] for n in (1, 17, 40, 5)]
    for uid, prompt in enumerate(prompts):
        s.add_request(uid, prompt, SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    first = {out.uid: out.token_id for out in s.step() + s.step()}  # (overlap: the prefill's tokens come a step late)
    assert sorted(first) == [0, 1, 2, 3]
    for uid, prompt in enumerate(prompts):
        row = s.reqs[uid].table_idx
        assert s.engine.token_pool[row, : len(prompt) + 1].tolist() == prompt + [first[uid]]
    while s.has_work:
        s.step()
