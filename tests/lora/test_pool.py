"""The adapter pool: adapters take free slots of a pool sized at start and give them back; a load in
flight holds its slot from its start to its install; one in use by a request is never unloaded
under it; a reload is a new prefix-cache namespace; a CUDA graph's slot mask is the eager pass's;
and under tensor parallelism (gloo, 2 ranks) A and B are sharded as their base linears, giving
TP=1's tokens, which are peft's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.lora.peft_adapters import peft_greedy

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [300, 301, 302], [7] * 20]
NAMES = ["r16", None, "r4", "r8"]


def test_adapters_fill_free_slots_and_give_them_back(lora_scheduler, lora_adapters):
    pool = lora_scheduler.engine.lora
    assert pool.slot("r4") == 1
    assert pool.load("r8", lora_adapters["r8"]) == 2
    with pytest.raises(ValueError, match="cannot load LoRA adapter 'r16': all 2 slots are taken \\(--max-loras\\)"):
        pool.load("r16", lora_adapters["r16"])
    with pytest.raises(ValueError, match="'r8' is already loaded"):
        pool.load("r8", lora_adapters["r8"])
    first_load = pool.load_ids[1]
    pool.unload("r4")
    assert pool.load("r16", lora_adapters["r16"]) == 1
    assert pool.load_ids[1] != first_load, "a new adapter in a slot must not see the old one's cached KV"


def test_a_slot_reserved_for_a_load_in_flight_is_nobody_elses_and_serves_once_installed(lora_scheduler, lora_adapters):
    pool = lora_scheduler.engine.lora
    assert pool.reserve("r8") == 2
    with pytest.raises(ValueError, match="cannot load LoRA adapter 'r16': all 2 slots are taken"):
        pool.reserve("r16")
    with pytest.raises(ValueError, match="LoRA adapter 'r8' is already being loaded"):
        pool.load("r8", lora_adapters["r8"])
    read = pool.read("r8", lora_adapters["r8"])  # what a load's thread does: no slot changes
    assert "r8" not in pool.names and pool.adapters[2] is None
    assert pool.install("r8", read) == 2 and pool.slot("r8") == 2 and not pool.reserved
    pool.unload("r8")
    pool.reserve("r16")
    pool.unreserve("r16")  # a load refused after its reservation gives the slot back
    assert pool.load("r16", lora_adapters["r16"]) == 2


def test_an_adapter_in_use_is_not_unloaded_until_its_requests_end(lora_scheduler):
    pool = lora_scheduler.engine.lora
    lora_scheduler.add_request(0, PROMPTS[0], SamplingParams(temperature=0, max_tokens=4, lora="r4"))
    with pytest.raises(ValueError, match="LoRA adapter 'r4' is in use by 1 request\\(s\\)"):
        pool.unload("r4")
    outputs = []
    while lora_scheduler.has_work:
        outputs += lora_scheduler.step()
    assert [o.finish_reason for o in outputs if o.finish_reason] == ["length"]
    pool.unload("r4")
    assert "r4" not in pool.names


def test_an_aborted_request_gives_its_adapter_back(lora_scheduler):
    pool = lora_scheduler.engine.lora
    lora_scheduler.add_request(0, PROMPTS[1], SamplingParams(temperature=0, max_tokens=4, lora="r4"))
    lora_scheduler.abort(0)
    pool.unload("r4")


def test_the_graph_mask_is_the_eager_one(lora_scheduler, lora_adapters):
    pool = lora_scheduler.engine.lora
    slots = [1, 0, 2, 1]
    pool.prepare(slots, np.ones(4, dtype=np.int64))
    eager = pool.state.mask.clone()
    pool.graph_buffers(8)
    pool.graph_slots[:6] = torch.tensor(slots + [0, 0])  # padded to a captured size
    pool.graph_mask(6)
    assert torch.equal(pool.state.mask[:4], eager)
    assert not pool.state.mask[4:, 1:].any()  # padding rows are the base model's


def test_an_eager_pass_is_masked_per_token(lora_scheduler, lora_adapters):
    pool = lora_scheduler.engine.lora
    pool.prepare([1, 0, 2], np.array([2, 1, 3]))
    assert pool.state.mask.argmax(1).tolist() == [1, 1, 0, 2, 2, 2]
    pool.prepare([0, 0], np.array([4, 1]))
    assert pool.state.mask is None  # no adapter: the layers skip it


@pytest.mark.slow
def test_tensor_parallel_adapters_match_tp1_and_peft(lora_model_dir, lora_adapters):
    outs = {}
    for tp in (1, 2):
        llm = LLM(lora_model_dir, tp=tp, device="cpu", dtype=torch.float32, page_size=4, num_pages=256,
                  max_prefill_length=16, lora_modules=lora_adapters)
        try:
            outs[tp] = [o["token_ids"] for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False, lora=NAMES)]
        finally:
            llm.shutdown()
    assert outs[2] == outs[1]
    assert outs[1] == [peft_greedy(lora_model_dir, lora_adapters.get(n), p, 8) for p, n in zip(PROMPTS, NAMES)]


def test_unloading_an_adapter_frees_its_cached_kv(lora_scheduler):
    lora_scheduler.add_request(0, PROMPTS[1], SamplingParams(temperature=0, max_tokens=4, lora="r4"))
    while lora_scheduler.has_work:
        lora_scheduler.step()
    cache = lora_scheduler.cache
    assert cache.prefix_cache.cached_pages > 0
    lora_scheduler.update_lora(1, "r4", None)
    assert [(o.uid, o.finish_reason, o.error) for o in lora_scheduler.step()] == [(1, "stop", None)]
    assert cache.prefix_cache.cached_pages == 0 and len(cache.free_pages) == cache.num_pages
    lora_scheduler.update_lora(2, "r4", None)
    assert [(o.finish_reason, o.error) for o in lora_scheduler.step()] == [("error", "unknown LoRA adapter 'r4'")]
