"""The scheduler's side of structured output: a request waits for its grammar off the prefill
queue, can be aborted while it waits (which stops its compile), fails alone with the budget's flag
named when its grammar compiles too long, is refused before compiling when its schema nests too
deep; and a constrained batch keeps the overlap of host and GPU work: its forward pass is launched
before the previous step's tokens are read, and its masks are filled after (they need those
tokens), with the same tokens as without overlap."""

from __future__ import annotations

import json
import re
import time

import psutil
import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from minisgl.scheduler import Scheduler, SchedulerConfig
from tests.constrained.helpers import SLOW_SCHEMA, compile_workers, nested_schema, wait_until

SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                     "additionalProperties": False})


def _scheduler(model_dir: str, **options) -> Scheduler:
    options.setdefault("grammar_compile_workers", 1)  # one process to start, unless a test needs two
    return Scheduler(SchedulerConfig(model_path=model_dir, device="cpu", dtype=torch.float32,
                                     num_pages=256, page_size=4, max_running_requests=8, **options))


@pytest.fixture
def scheduler(tiny_model_dir):
    s = _scheduler(tiny_model_dir("Qwen3ForCausalLM"))
    yield s
    s.shutdown()


def _run(s: Scheduler, hang: float = 600) -> list:
    """Every output until the scheduler has no work left (grammar workers start in seconds on a
    busy machine: steps, not a step count); `hang` seconds without an end is a failure."""
    outputs, give_up = [], time.monotonic() + hang
    while s.has_work:
        assert time.monotonic() < give_up, f"still working after {hang} s"
        outputs += s.step()
    return outputs


def test_abort_while_compiling_ends_the_request_and_holds_nothing(scheduler):
    s = scheduler
    s.add_request(1, [5, 6, 7], SamplingParams(max_tokens=20, constraint=("json_schema", SCHEMA)))
    assert s.compiling and not s.prefill.waiting  # waiting for its grammar, not for prefill
    s.abort(1)
    outputs = _run(s)
    assert [(o.uid, o.finish_reason) for o in outputs] == [(1, "abort")]
    assert not s.reqs and not s.compiling and s.cache.used_pages == 0


BUDGET = 4.0  # seconds, for the tests of the compile budget: SLOW_SCHEMA compiles for far longer


def _warm(s: Scheduler) -> None:
    """Serve one constrained request, then wait for every compile worker, as on a server that has
    served structured output before (the first request starts them)."""
    s.add_request(0, [1, 2], SamplingParams(max_tokens=2, constraint=("regex", "[0-9]+")))
    _run(s)
    wait_until(lambda: s.grammars.workers_ready == s.config.grammar_compile_workers, "every compile worker ready")


@pytest.mark.slow
def test_a_grammar_that_compiles_for_long_holds_up_no_other_request(tiny_model_dir):
    """A constrained and a plain request sent after a slow schema are served while it compiles."""
    s = _scheduler(tiny_model_dir("Qwen3ForCausalLM"), grammar_compile_timeout=3600, grammar_compile_workers=2,
                   max_grammar_depth=1000)
    try:
        _warm(s)
        s.add_request(1, [5, 6, 7], SamplingParams(max_tokens=20, constraint=("json_schema", SLOW_SCHEMA)))
        s.add_request(2, [8, 9], SamplingParams(temperature=0, max_tokens=20, constraint=("regex", "[a-f]{8}")))
        s.add_request(3, [4, 5], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
        outputs, give_up = [], time.monotonic() + 600
        while 2 in s.reqs or 3 in s.reqs:
            assert time.monotonic() < give_up, "requests 2 and 3 not served"
            outputs += s.step()
        assert [r.uid for r, _ in s.compiling] == [1]  # still compiling
        assert {o.uid: o.finish_reason for o in outputs if o.finish_reason} == {2: "stop", 3: "length"}
        s.abort(1)
        assert [(o.uid, o.finish_reason) for o in _run(s)] == [(1, "abort")]
    finally:
        s.shutdown()


@pytest.mark.slow
def test_a_schema_over_the_compile_budget_fails_alone_naming_the_budget(tiny_model_dir):
    """Its request ends with an error naming the field and the budget's flag (the API's 400) once
    the budget is spent; a plain request beside it is served."""
    s = _scheduler(tiny_model_dir("Qwen3ForCausalLM"), grammar_compile_timeout=BUDGET, max_grammar_depth=1000)
    try:
        _warm(s)
        s.add_request(1, [5, 6, 7], SamplingParams(max_tokens=20, constraint=("json_schema", SLOW_SCHEMA)))
        s.add_request(2, [4, 5], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
        outputs = _run(s, hang=BUDGET + 120)  # the budget, and slack for a busy machine
    finally:
        s.shutdown()
    assert {o.uid: o.finish_reason for o in outputs if o.finish_reason} == {1: "error", 2: "length"}
    error = next(o.error for o in outputs if o.uid == 1)
    assert "response_format" in error and f"budget of {BUDGET:g} s (--grammar-compile-timeout)" in error
    assert not s.reqs and not s.compiling


@pytest.mark.slow
def test_aborting_every_request_of_a_compiling_grammar_kills_its_compile(tiny_model_dir):
    """Two requests wait for the same slow grammar: aborting one leaves the compile running for the
    other; aborting both kills its worker process (and no grammar is ever admitted)."""
    s = _scheduler(tiny_model_dir("Qwen3ForCausalLM"), grammar_compile_timeout=3600, max_grammar_depth=1000)
    try:
        _warm(s)
        (worker,) = compile_workers()
        busy = psutil.Process(worker).cpu_times().user
        for uid in (1, 2):
            s.add_request(uid, [5, 6, 7], SamplingParams(max_tokens=20, constraint=("json_schema", SLOW_SCHEMA)))
        wait_until(lambda: psutil.Process(worker).cpu_times().user > busy + 1, "the worker compiling")
        s.abort(1)
        outputs = s.step()
        time.sleep(0.5)
        assert worker in compile_workers()  # request 2 still waits for it
        s.abort(2)
        outputs += _run(s)
        wait_until(lambda: worker not in compile_workers(), "the compile's worker gone")
        assert [(o.uid, o.finish_reason) for o in outputs] == [(1, "abort"), (2, "abort")]
        assert not s.reqs and not s.compiling and not s.prefill.waiting and s.cache.used_pages == 0
    finally:
        s.shutdown()


@pytest.mark.slow
def test_a_schema_nested_past_the_depth_limit_is_refused_before_compiling(scheduler):
    s = scheduler  # the default limit, 64 levels
    s.add_request(1, [5, 6, 7], SamplingParams(max_tokens=20, constraint=("json_schema", nested_schema(450))))
    (refused,) = s.step()
    assert (refused.uid, refused.finish_reason) == (1, "error")
    assert "response_format" in refused.error and "nests 901 levels deep" in refused.error
    assert "limit of 64 (--max-grammar-depth)" in refused.error
    assert not s.has_work and not compile_workers()  # nothing was compiled
    s.add_request(2, [5, 6, 7], SamplingParams(max_tokens=20, constraint=("json_schema", nested_schema(31))))
    outputs = _run(s)  # 63 levels: compiled and served (20 tokens are too few to close 31 objects)
    assert [(o.uid, o.finish_reason) for o in outputs if o.finish_reason] == [(2, "length")]
    assert sum(o.token_id is not None for o in outputs) == 20


@pytest.mark.slow
def test_tensor_parallel_ranks_share_rank_0s_verdict_on_the_budget(tiny_model_dir):
    """With tp=2 every rank compiles, but rank 0's budget decides for both (the follower has none of
    its own): the slow request fails with the budget's message, and both ranks serve on in step."""
    llm = LLM(tiny_model_dir("Qwen3ForCausalLM"), tp=2, device="cpu", dtype=torch.float32, num_pages=256, page_size=4,
              grammar_compile_timeout=BUDGET, grammar_compile_workers=1, max_grammar_depth=1000)
    try:
        with pytest.raises(ValueError, match="--grammar-compile-timeout"):
            llm.generate([[5, 6, 7]], SamplingParams(max_tokens=20, constraint=("json_schema", SLOW_SCHEMA)),
                         use_tqdm=False)
        out = llm.generate([[5, 6, 7], [8, 9]], [
            SamplingParams(temperature=0, max_tokens=20, constraint=("regex", "[a-f]{6}")),
            SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)], use_tqdm=False)
        assert re.fullmatch("[a-f]{6}", out[0]["text"]) and out[0]["finish_reason"] == "stop"
        assert len(out[1]["token_ids"]) == 5
    finally:
        llm.shutdown()


@pytest.mark.slow
def test_constrained_and_free_requests_finish_with_valid_output(scheduler):
    s = scheduler
    s.add_request(1, [5, 6, 7], SamplingParams(temperature=1.0, seed=1, max_tokens=30, constraint=("json_schema", SCHEMA)))
    s.add_request(2, [8, 9], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    outputs = _run(s)
    tokens = {uid: [o.token_id for o in outputs if o.uid == uid and o.token_id is not None] for uid in (1, 2)}
    ends = {o.uid: o.finish_reason for o in outputs if o.finish_reason}
    assert ends == {1: "stop", 2: "length"} and len(tokens[2]) == 12
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(s.config.model_path)
    assert isinstance(json.loads(tok.decode(tokens[1], skip_special_tokens=True))["ok"], bool)
    assert not s.reqs and not s.compiling


MIXED = [  # constrained and free requests of different lengths: some finish while others run on
    (1, [5, 6, 7], SamplingParams(temperature=0, max_tokens=30, constraint=("json_schema", SCHEMA))),
    (2, [8, 9], SamplingParams(temperature=0, max_tokens=7, ignore_eos=True)),
    (3, [11, 3, 4, 2], SamplingParams(temperature=0, max_tokens=25, constraint=("regex", "[a-f]{3,9}"))),
    (4, [1, 2, 3], SamplingParams(temperature=1.0, seed=4, max_tokens=16, constraint=("choice", '["yes", "no"]'))),
]


def _tokens(outputs) -> dict[int, tuple[list[int], str]]:
    ends = {o.uid: o.finish_reason for o in outputs if o.finish_reason}
    return {uid: ([o.token_id for o in outputs if o.uid == uid and o.token_id is not None], ends.get(uid))
            for uid, _, _ in MIXED}


@pytest.mark.slow
def test_constrained_batches_give_the_same_tokens_with_and_without_overlap(tiny_model_dir):
    results = {}
    for overlap in (True, False):
        s = _scheduler(tiny_model_dir("Qwen3ForCausalLM"), overlap=overlap)
        try:
            for uid, prompt, params in MIXED:
                s.add_request(uid, prompt, params)
            results[overlap] = _tokens(_run(s))
            assert not s.reqs and s.cache.used_pages == 0
        finally:
            s.shutdown()
    assert results[True] == results[False]
    assert results[True][2] == (results[True][2][0], "length") and len(results[True][2][0]) == 7


@pytest.mark.slow
def test_a_constrained_batch_is_launched_before_the_previous_tokens_are_read(scheduler):
    """The order of one overlapped step with a grammar: launch the forward pass, read the previous
    step's tokens, then fill the masks and sample (Engine.forward_batch calls back)."""
    s = scheduler
    events = []
    forward, process = s.engine.forward_batch, s._process

    def spy_forward(batch, args):
        events.append("forward")
        if callable(args):
            def resolve():
                resolved = args()
                events.append("masks")  # filled, after whatever args() had to read first
                return resolved
            return forward(batch, resolve)
        return forward(batch, args)

    def spy_process(done):
        events.append("read")
        return process(done)

    s.engine.forward_batch, s._process = spy_forward, spy_process
    s.add_request(1, [5, 6, 7], SamplingParams(temperature=0, max_tokens=12, constraint=("regex", "[a-f]{12}")))
    _run(s)
    steps = "".join({"forward": "F", "read": "R", "masks": "M"}[e] for e in events)
    # Prefill: F M (no previous step); every decode step: F R M (the read inside, before its masks);
    # the last step's tokens are read after it.
    assert re.fullmatch("FM(FRM){3,}R", steps), steps
