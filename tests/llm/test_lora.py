"""LLM with LoRA adapters computes what HF transformers + peft compute: for every supported
architecture, one batch mixing three adapters of different ranks and the base model, with chunked
prefill and the radix prefix cache on, gives peft's greedy tokens; KV computed under one adapter is
never reused for another, while the same adapter still hits the cache."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.conftest import ARCHITECTURES
from tests.lora.peft_adapters import ADAPTERS, build_adapters, peft_greedy

NEW_TOKENS = 12
SHARED = list(range(20, 44))  # 24 tokens: whole pages that every adapter's prompt starts with
PROMPTS = [SHARED + [5, 17, 42], SHARED + [99, 3], [7] * 12 + [250, 251, 252], SHARED + [300, 301]]
NAMES = ["r4", "r8", None, "r16"]  # three ranks (r8 with rsLoRA's scaling) and the base model
GREEDY = SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True)


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory):
    made = {}

    def build(architecture: str) -> dict[str, str]:
        if architecture not in made:
            made[architecture] = build_adapters(tiny_model_dir(architecture), tmp_path_factory.mktemp("lora"))
        return made[architecture]

    return build


def make_llm(model_dir: str, adapters: dict[str, str], **kwargs) -> LLM:
    # max_prefill_length 8: every prompt is computed in chunks, across steps shared with the others.
    return LLM(model_dir, device="cpu", dtype=torch.float32, page_size=4, num_pages=256, max_prefill_length=8,
               lora_modules=adapters, max_lora_rank=16, **kwargs)


# Qwen3 in the fast loop, the other architectures with the slow tests (tens of seconds each on 2 cores).
@pytest.mark.parametrize("architecture", [a if a == "Qwen3ForCausalLM" else pytest.param(a, marks=pytest.mark.slow)
                                          for a in ARCHITECTURES])
def test_a_batch_mixing_three_adapters_and_the_base_model_matches_peft(tiny_model_dir, adapters, architecture):
    model_dir, paths = tiny_model_dir(architecture), adapters(architecture)
    llm = make_llm(model_dir, paths)
    try:
        outs = llm.generate(PROMPTS, GREEDY, use_tqdm=False, lora=NAMES)
        # Again with the adapters swapped between prompts: the shared prefix is cached by now, under
        # each adapter that computed it, and must be computed afresh for a different one.
        again = llm.generate(PROMPTS, GREEDY, use_tqdm=False, lora=["r16", None, "r4", "r8"])
    finally:
        llm.shutdown()
    for prompt, name, out in zip(PROMPTS, NAMES, outs):
        assert out["token_ids"] == peft_greedy(model_dir, paths.get(name), prompt, NEW_TOKENS), \
            f"{architecture}: adapter {name} diverged from peft"
    for prompt, name, out in zip(PROMPTS, ["r16", None, "r4", "r8"], again):
        assert out["token_ids"] == peft_greedy(model_dir, paths.get(name), prompt, NEW_TOKENS), \
            f"{architecture}: adapter {name} diverged from peft on the cached prefixes"


def test_the_prefix_cache_hits_under_the_same_adapter_only(tiny_model_dir, adapters):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    llm = make_llm(model_dir, adapters("Qwen3ForCausalLM"))
    stats = llm.scheduler.stats
    try:
        first = llm.generate([PROMPTS[0]], GREEDY, use_tqdm=False, lora="r4")
        before = stats.prefix_hit_tokens
        llm.generate([PROMPTS[1]], GREEDY, use_tqdm=False, lora="r8")
        llm.generate([PROMPTS[1]], GREEDY, use_tqdm=False)  # the base model
        assert stats.prefix_hit_tokens == before, "KV computed under r4 was reused for another adapter"
        same = llm.generate([PROMPTS[0]], GREEDY, use_tqdm=False, lora="r4")
        assert stats.prefix_hit_tokens - before >= len(SHARED)
        assert same[0]["token_ids"] == first[0]["token_ids"]
    finally:
        llm.shutdown()


def test_an_unknown_adapter_is_refused_naming_it(tiny_model_dir, adapters):
    llm = make_llm(tiny_model_dir("Qwen3ForCausalLM"), adapters("Qwen3ForCausalLM"))
    try:
        with pytest.raises(ValueError, match="unknown LoRA adapter 'nope' \\(loaded: r4, r8, r16\\)"):
            llm.generate([PROMPTS[0]], GREEDY, use_tqdm=False, lora="nope")
    finally:
        llm.shutdown()


def test_adapters_are_refused_by_a_server_without_lora(tiny_model_dir):
    llm = LLM(tiny_model_dir("Qwen3ForCausalLM"), device="cpu", dtype=torch.float32, page_size=4, num_pages=64)
    try:
        with pytest.raises(ValueError, match="unknown LoRA adapter 'r4' \\(none is loaded\\)"):
            llm.generate([PROMPTS[0]], GREEDY, use_tqdm=False, lora="r4")
    finally:
        llm.shutdown()


def test_more_adapters_than_slots_are_refused_at_start(tiny_model_dir, adapters):
    with pytest.raises(ValueError, match="--lora-modules names 3 adapters but --max-loras is 2"):
        make_llm(tiny_model_dir("Qwen3ForCausalLM"), adapters("Qwen3ForCausalLM"), max_loras=2)


assert set(NAMES) - {None} == set(ADAPTERS)
