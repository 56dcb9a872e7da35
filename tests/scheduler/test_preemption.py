"""Admission on current need and preemption (minisgl/scheduler/scheduler.py, cache.py): under a KV
pool a quarter of what the batch needs, requests are preempted and resumed by recomputation, and
every stream is exactly what it is without pressure: no token lost, repeated or changed, greedy or
seeded sampling, on every registered architecture, with chunked prefill and the radix cache on; a
preempted request keeps its grammar, its LoRA adapter and its stop string; priority orders
admission and the choice of victims; --admission reserve never preempts."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler import Scheduler, SchedulerConfig
from tests.conftest import ARCHITECTURES
from tests.lora.peft_adapters import build_adapters, peft_greedy

PAGE = 4
NEW_TOKENS = 40


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(3, 380) for _ in range(rng.randint(8, 40))] for _ in range(n)]


def pages_needed(batch: list[list[int]], new_tokens: int) -> int:
    return sum(-(-(len(p) + new_tokens) // PAGE) for p in batch)


def make_scheduler(model_dir: str, num_pages: int, **options) -> Scheduler:
    options = {"device": "cpu", "dtype": torch.float32, "page_size": PAGE, "max_running_requests": 32,
               "max_prefill_length": 16, "cache": "radix", "decode_reserve_tokens": 4, **options}
    return Scheduler(SchedulerConfig(model_path=model_dir, num_pages=num_pages, **options))


def streams(s: Scheduler, batch: list[list[int]], params: list[SamplingParams]) -> tuple[dict[int, list[int]], list[int]]:
    """Each request's tokens in the order the scheduler sent them, and the uids it preempted (in order)."""
    preempted: list[int] = []
    preempt = s._preempt
    s._preempt = lambda r: (preempted.append(r.uid), preempt(r))  # watch, do not change
    for uid, (prompt, p) in enumerate(zip(batch, params)):
        s.add_request(uid, prompt, p)
    got: dict[int, list[int]] = {uid: [] for uid in range(len(batch))}
    ended: dict[int, str] = {}
    while s.has_work:
        for out in s.step():
            assert out.uid not in ended, f"request {out.uid} sent a token after it finished"
            assert out.error is None, out.error
            if out.token_id is not None:
                got[out.uid].append(out.token_id)
            if out.finish_reason:
                ended[out.uid] = out.finish_reason
    assert len(ended) == len(batch)
    # Everything was handed back: no page or table row is held any more.
    assert s.cache.used_pages == 0 and s.cache.reserved == 0 and s.table.num_free == s.table.rows
    return got, preempted


def run(model_dir: str, batch, params, num_pages: int, **options):
    s = make_scheduler(model_dir, num_pages, **options)
    try:
        return streams(s, batch, params)
    finally:
        s.shutdown()


@pytest.mark.slow  # tens of seconds per architecture on 2 cores
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_greedy_and_seeded_streams_under_a_quarter_pool_equal_the_unpressured_ones(tiny_model_dir, architecture):
    model_dir = tiny_model_dir(architecture)
    batch = prompts(16)
    greedy = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    seeded = [SamplingParams(temperature=0.9, top_k=50, seed=100 + i, frequency_penalty=0.5, repetition_penalty=1.2,
                             max_tokens=NEW_TOKENS, ignore_eos=True) for i in range(len(batch))]
    quarter = pages_needed(batch, NEW_TOKENS) // 4
    assert quarter >= -(-(40 + NEW_TOKENS) // PAGE), "the longest request alone must fit"
    for params in ([greedy] * len(batch), seeded):
        want, none = run(model_dir, batch, params, num_pages=2048)
        got, preempted = run(model_dir, batch, params, num_pages=quarter)
        assert not none and preempted, "the small pool must force preemption, the large one none"
        for uid in range(len(batch)):
            assert len(got[uid]) == NEW_TOKENS, f"request {uid}: {len(got[uid])} tokens, a gap or a repeat"
            assert got[uid] == want[uid], f"{architecture}: request {uid} changed after preemption"


def test_greedy_under_pressure_still_equals_hf(tiny_model_dir):
    """The unpressured run's own reference: HF transformers' greedy tokens (tests/helpers.py)."""
    from tests.helpers import hf_greedy

    model_dir = tiny_model_dir("LlamaForCausalLM")
    batch = prompts(8, seed=3)
    got, preempted = run(model_dir, batch, [SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)] * 8,
                         num_pages=pages_needed(batch, 24) // 4)
    assert preempted
    for uid, prompt in enumerate(batch):
        assert got[uid] == hf_greedy(model_dir, prompt, 24)[0]


@pytest.mark.slow  # a minute on 2 cores: a grammar compile, an adapter and preemption
def test_a_preempted_request_keeps_its_grammar_adapter_and_stop_string(tiny_model_dir, tmp_path):
    """Each special request arrives last behind a batch of plain ones, so it is the first victim
    whenever the pool runs out while it runs."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    adapters = build_adapters(model_dir, tmp_path)
    fillers = prompts(10, seed=5)
    prompt = [30 + i for i in range(20)]
    plain = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
    longer = 2 * NEW_TOKENS  # than the others: still running when the pool runs out
    special = {"stop": SamplingParams(temperature=0, max_tokens=longer, ignore_eos=True),
               "grammar": SamplingParams(temperature=0, max_tokens=longer, constraint=("regex", "[a-z]{200}")),
               "lora": SamplingParams(temperature=0, max_tokens=longer, ignore_eos=True, lora="r8")}

    def make(num_pages: int) -> LLM:
        llm = LLM(model_dir, device="cpu", dtype=torch.float32, page_size=PAGE, num_pages=num_pages,
                  max_prefill_length=16, decode_reserve_tokens=4, lora_modules=adapters, max_lora_rank=16)
        # The grammar compiled (its worker started) first: the constrained request then joins the
        # queue with the others, not seconds later when the pool is free.
        llm.generate([[1, 2, 3]], special["grammar"], use_tqdm=False)
        return llm

    def generate(llm: LLM, last: SamplingParams) -> tuple[dict, bool]:
        """The last request's output, and whether it was preempted."""
        preempted: list[int] = []
        s = llm.scheduler
        preempt = s._preempt
        s._preempt = lambda r: (preempted.append(r.uid), preempt(r))
        first = s.arrivals  # the LLM's uids count its requests, as arrivals do
        outs = llm.generate(fillers + [prompt], [plain] * len(fillers) + [last], use_tqdm=False)
        s._preempt = preempt
        return outs[-1], first + len(fillers) in preempted

    llm = make(2048)
    try:
        want = {name: generate(llm, params)[0] for name, params in special.items()}
    finally:
        llm.shutdown()
    text = want["stop"]["text"]
    # A stop string first seen in the last quarter: it ends the stream after preemption has struck.
    stop = next(text[i : i + 3] for i in range(3 * len(text) // 4, len(text) - 3)
                if text[i : i + 3] not in text[: i + 2] and "\ufffd" not in text[i : i + 3])
    special["stop"] = replace(special["stop"], stop=(stop,))
    llm = make(pages_needed(fillers + [prompt], NEW_TOKENS) // 4)
    try:
        got = {}
        for name, params in special.items():
            got[name], preempted = generate(llm, params)
            assert preempted, f"the {name} request was not preempted: {llm.scheduler.stats.preemptions}"
    finally:
        llm.shutdown()
    assert re.fullmatch("[a-z]+", got["grammar"]["text"]) and got["grammar"]["finish_reason"] == "length"
    assert got["grammar"]["token_ids"] == want["grammar"]["token_ids"]
    assert got["lora"]["token_ids"] == want["lora"]["token_ids"] == peft_greedy(model_dir, adapters["r8"], prompt,
                                                                                 longer)
    assert got["stop"]["finish_reason"] == "stop" and got["stop"]["text"] == text[: text.index(stop)]


def test_an_abort_of_a_preempted_request_frees_everything(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    batch = prompts(10, seed=7)
    s = make_scheduler(model_dir, pages_needed(batch, NEW_TOKENS) // 4)
    try:
        params = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)
        for uid, prompt in enumerate(batch):
            s.add_request(uid, prompt, params)
        while not s.stats.preemptions:
            s.step()
        waiting = [r.uid for r in s.prefill.waiting if r.preemptions]
        assert waiting
        for uid in waiting:
            s.abort(uid)
        while s.has_work:
            s.step()
        assert s.stats.finished.get("abort") == len(waiting)
        assert s.cache.used_pages == 0 and s.cache.reserved == 0 and s.table.num_free == s.table.rows
    finally:
        s.shutdown()


def test_requests_without_max_tokens_run_together_instead_of_reserving_the_context(tiny_model_dir):
    """A default client sends no max_tokens: dynamic admission runs all of them at once where the
    old rule (--admission reserve) held the rest of the context for each and ran a handful."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")  # context 1024 tokens
    batch = prompts(32, seed=9)
    counts = {}
    for admission in ("dynamic", "reserve"):
        s = make_scheduler(model_dir, num_pages=1024, admission=admission, decode_reserve_tokens=64,
                           max_running_requests=64, max_prefill_length=4096)
        try:
            for uid, prompt in enumerate(batch):
                s.add_request(uid, prompt, SamplingParams(temperature=0, max_tokens=None))
            for _ in range(12):
                s.step()
            counts[admission] = s.num_running
            for uid in range(len(batch)):
                s.abort(uid)
            while s.has_work:
                s.step()
        finally:
            s.shutdown()
    assert counts["dynamic"] == 32
    assert counts["reserve"] <= 4  # 4096 tokens of pool, each holding ~1024 - prompt


@pytest.mark.slow  # tens of seconds on 2 cores
def test_reserve_admission_never_preempts(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    batch = prompts(16)
    params = [SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)] * len(batch)
    want, _ = run(model_dir, batch, params, num_pages=2048)
    got, preempted = run(model_dir, batch, params, num_pages=pages_needed(batch, NEW_TOKENS) // 4, admission="reserve")
    assert not preempted and got == want


@pytest.mark.slow  # tens of seconds on 2 cores
def test_priority_orders_admission_and_preempts_the_lower_class(tiny_model_dir):
    """Under --scheduling-policy priority later, more urgent requests (lower value) take the place of
    running requests of the lower class when the pool is full, are never preempted while a lower
    class runs, and finish first; every output is unchanged."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    batch = prompts(12, seed=11)
    low, high = range(8), range(8, 12)
    params = [SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True, priority=0 if i in high else 1)
              for i in range(len(batch))]
    want, _ = run(model_dir, batch, params, num_pages=2048, scheduling_policy="priority")
    s = make_scheduler(model_dir, pages_needed(batch[:8], NEW_TOKENS) // 2, scheduling_policy="priority")
    preempted: list[int] = []
    preempt = s._preempt
    s._preempt = lambda r: (preempted.append(r.uid), preempt(r))
    got: dict[int, list[int]] = {uid: [] for uid in range(len(batch))}
    finished_at: dict[int, int] = {}
    try:
        for uid in low:  # the low class arrives first and fills the pool
            s.add_request(uid, batch[uid], params[uid])
        for step in range(1, 1000):
            if step == 7:
                for uid in high:
                    s.add_request(uid, batch[uid], params[uid])
            if not s.has_work:
                break
            for out in s.step():
                if out.token_id is not None:
                    got[out.uid].append(out.token_id)
                if out.finish_reason:
                    finished_at[out.uid] = step
    finally:
        s.shutdown()
    assert got == want
    assert preempted and not set(preempted) & set(high), preempted
    assert max(finished_at[u] for u in high) < max(finished_at[u] for u in low)


def test_a_nonzero_priority_is_refused_under_fcfs(tiny_model_dir):
    s = make_scheduler(tiny_model_dir("Qwen3ForCausalLM"), 256)
    try:
        _, problem = s.admit([5, 6, 7], SamplingParams(max_tokens=4, priority=3))
        assert problem and "--scheduling-policy priority" in problem
        assert s.admit([5, 6, 7], SamplingParams(max_tokens=4, priority=0))[1] is None
    finally:
        s.shutdown()
