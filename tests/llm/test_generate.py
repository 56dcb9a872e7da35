"""LLM.generate takes SamplingParams as they are: max_tokens None runs to the end of the context,
and a call with a prompt that can never run is refused whole, leaving nothing queued."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.params import SamplingParams
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


def test_a_stop_string_ends_the_text_before_it_and_frees_the_request(llm):
    """The reference is the same greedy request without the stop string: its text, cut where the
    stop string first appears."""
    prompt = "The quick brown fox"
    free = dict(temperature=0, max_tokens=24, ignore_eos=True)
    whole = llm.generate(prompt, SamplingParams(**free), use_tqdm=False)[0]
    text = whole["text"]
    stop = text[len(text) // 2: len(text) // 2 + 3]
    assert stop.strip(), f"the model's text has no usable middle: {text!r}"
    cut = llm.generate(prompt, SamplingParams(**free, stop=(stop,)), use_tqdm=False)[0]
    assert cut["finish_reason"] == "stop"
    assert cut["text"] == text[: text.index(stop)]
    assert whole["token_ids"][: len(cut["token_ids"])] == cut["token_ids"] and len(cut["token_ids"]) < 24
    assert llm.scheduler.cache.used_pages == 0 and not llm.scheduler.reqs  # aborted, pages given back


def test_a_stop_string_that_never_appears_changes_nothing(llm):
    params = dict(temperature=0, max_tokens=8, ignore_eos=True)
    plain = llm.generate("hello", SamplingParams(**params), use_tqdm=False)[0]
    watched = llm.generate("hello", SamplingParams(**params, stop=("\x00never\x00",)), use_tqdm=False)[0]
    assert watched == plain and plain["finish_reason"] == "length"


def test_mini_sglang_keyword_names_set_the_same_settings(tiny_model_dir):
    """Mini-SGLang's LLM(path, dtype, **kwargs) names, mapped onto minisgl's own (the flags')."""
    llm = LLM(tiny_model_dir("Qwen3ForCausalLM"), torch.float32, device="cpu", max_running_req=4,
              num_page_override=96, max_seq_len_override=48, max_extend_tokens=32, use_dummy_weight=True,
              attention_backend="torch", cache_type="naive", page_size=4)
    try:
        config = llm.scheduler.config
        assert (config.dtype, config.max_running_requests, config.num_pages, config.max_seq_len,
                config.max_prefill_length, config.dummy_weight, config.attn, config.cache) == \
            (torch.float32, 4, 96, 48, 32, True, "torch", "naive")
        assert config.max_running_req == 4 and config.cache_type == "naive"  # read back by the seed's names too
        out = llm.generate([list(range(5, 15))], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True),
                           use_tqdm=False)[0]
        assert len(out["token_ids"]) == 3
    finally:
        llm.shutdown()


def test_a_setting_named_twice_is_refused_with_the_projects_spelling(tiny_model_dir):
    with pytest.raises(TypeError, match="max_running_req and max_running_requests are the same setting; "
                                        "pass max_running_requests only"):
        LLM(tiny_model_dir("Qwen3ForCausalLM"), device="cpu", max_running_req=4, max_running_requests=8)
