"""LLM.generate takes SamplingParams as they are: max_tokens None runs to the end of the context,
and a call with a prompt that can never run is refused whole, leaving nothing queued."""

from __future__ import annotations

import pytest
import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM


@pytest.fixture(scope="module")
def llm(tiny_model_dir):
    model = LLM(tiny_model_dir("Qwen3ForCausalLM"), device="cpu", dtype=torch.float32, max_seq_len=64,
                num_pages=128, page_size=4)
    yield model
    model.shutdown()


def test_no_max_tokens_generates_to_the_end_of_the_context(llm):
    out = llm.generate([list(range(5, 15))], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True),
                       use_tqdm=False)[0]
    assert out["finish_reason"] == "length" and len(out["token_ids"]) == 64 - 10


@pytest.mark.parametrize("bad, message", [
    (SamplingParams(max_tokens=60), "prompt 1: this model's maximum context length is 64 tokens"),
    (SamplingParams(max_tokens=None, min_tokens=60), r"prompt 1: min_tokens must be in \[0, max_tokens=54\], got 60"),
])
def test_a_refused_prompt_queues_none_of_the_call(llm, bad, message):
    good = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    prompt = list(range(5, 15))
    with pytest.raises(ValueError, match=message):
        llm.generate([prompt, prompt], [good, bad], use_tqdm=False)
    again = llm.generate([prompt], good, use_tqdm=False)
    assert len(again) == 1 and len(again[0]["token_ids"]) == 4
