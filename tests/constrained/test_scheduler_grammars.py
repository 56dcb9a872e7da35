"""The scheduler's side of structured output: a request waits for its grammar off the prefill
queue, can be aborted while it waits, and a constrained batch keeps the overlap of host and GPU
work: its forward pass is launched before the previous step's tokens are read, and its masks are
filled after (they need those tokens), with the same tokens as without overlap."""

from __future__ import annotations

import json
import re

import pytest
import torch

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig

SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                     "additionalProperties": False})


def _scheduler(model_dir: str, **options) -> Scheduler:
    return Scheduler(SchedulerConfig(model_path=model_dir, device="cpu", dtype=torch.float32,
                                     num_pages=256, page_size=4, max_running_requests=8, **options))


@pytest.fixture
def scheduler(tiny_model_dir):
    s = _scheduler(tiny_model_dir("Qwen3ForCausalLM"))
    yield s
    s.shutdown()


def _run(s: Scheduler, steps: int = 500) -> list:
    outputs = []
    for _ in range(steps):
        if not s.has_work:
            break
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
