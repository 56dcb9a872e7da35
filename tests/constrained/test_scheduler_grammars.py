"""The scheduler's side of structured output: a request waits for its grammar off the prefill
queue, can be aborted while it waits, and a constrained request gives up overlap only while it
runs (its next mask needs its last token)."""

from __future__ import annotations

import json

import pytest
import torch

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig

SCHEMA = json.dumps({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
                     "additionalProperties": False})


@pytest.fixture
def scheduler(tiny_model_dir):
    s = Scheduler(SchedulerConfig(model_path=tiny_model_dir("Qwen3ForCausalLM"), device="cpu", dtype=torch.float32,
                                  num_page_override=256, page_size=4, max_running_req=8))
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
