"""Speculative decoding on the GPU (skipped without one): verify batches replayed from their CUDA
graphs (minisgl.engine.verify_graph; eagerly above the graphs' cap) beside decode steps in graphs
give the tokens decoding gives, and the off switch leaves a request that drafts badly on the plain
decode path."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

import pytest
import torch

from minisgl.core.params import SamplingParams
from tests.scheduler.test_speculation import GREEDY, NEW_TOKENS, assert_all_pages_back, generate, ids

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_flashinfer = pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer")


@pytest.fixture(scope="module")
def prompts():
    import random

    rng = random.Random(3)
    return [[rng.randint(3, 380) for _ in range(rng.randint(8, 40))] for _ in range(12)]


def test_float32_torch_attention_gives_the_same_tokens(tiny_model_dir, prompts):
    """float32, torch attention: decode and verify steps in CUDA graphs; identical tokens. Every
    verify batch (at most 12 requests, at most k + 1 = 5 tokens each) is replayed from a graph."""
    model = tiny_model_dir("Qwen3ForCausalLM")
    common = {"device": "cuda", "dtype": torch.float32, "attn": "torch", "max_seq_len": 512}  # a short table: graphs
    expected, s_base = generate(model, prompts, GREEDY, **common)
    assert "graph_capture_s" in s_base.engine.timings  # decode steps ran in graphs (shut down by now)
    assert s_base.engine.verify_steps == {"graph": 0, "eager": 0}  # no verify graphs without --speculative
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    got, scheduler = generate(model, prompts, GREEDY, replay=sequences, rate=0.7, **common)
    assert ids(got) == ids(expected)
    assert 0 < scheduler.stats.accepted_tokens < scheduler.stats.draft_tokens
    assert scheduler.engine.verify_steps["graph"] > 0 and scheduler.engine.verify_steps["eager"] == 0
    assert_all_pages_back(scheduler)


def test_verify_batches_above_the_graph_cap_run_eagerly_with_the_same_tokens(tiny_model_dir, prompts):
    """Decode graphs up to 4 requests (and so verify graphs): 12 requests of spread lengths verify
    eagerly while more than 4 run, in graphs after; seeded sampling draws what it draws without
    speculation either way (each verified row samples after the graph, as decode does)."""
    model = tiny_model_dir("Qwen3ForCausalLM")
    common = {"device": "cuda", "dtype": torch.float32, "attn": "torch", "max_seq_len": 512, "cuda_graph_max_bs": 4}
    params = [SamplingParams(temperature=0.9, top_k=50, seed=7 + i, max_tokens=NEW_TOKENS // 2 + 3 * i,
                             ignore_eos=True) for i in range(len(prompts))]
    expected, _ = generate(model, prompts, params, **common)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    got, scheduler = generate(model, prompts, params, replay=sequences, rate=0.8, **common)
    assert ids(got) == ids(expected)
    steps = scheduler.engine.verify_steps
    assert steps["graph"] > 0 and steps["eager"] > 0, steps
    assert_all_pages_back(scheduler)


@needs_flashinfer
@pytest.mark.parametrize("attn", ["auto", "flashinfer"])  # FA3 prefill kernels on Hopper; FA2's
def test_bfloat16_flashinfer_starts_with_the_same_tokens(tiny_model_dir, prompts, attn):
    """bf16, FlashInfer: verify steps replay graphs (on Hopper the decode graphs, a row per token;
    elsewhere graphs of FlashInfer's prefill kernels) whose GEMMs see k + 1 rows a request where
    decoding's see one (another summation order), so a tiny random model's near-ties may part the
    two (on one H200, 1 prompt in 12 within 4 tokens). Where they part, HF's float32 logits must call it
    a tie: the two tokens closer than bf16's own error there (HF in bf16 against HF in float32)."""
    model = tiny_model_dir("Qwen3ForCausalLM", head_dim=128)
    common = {"device": "cuda", "dtype": torch.bfloat16, "attn": attn}
    expected, _ = generate(model, prompts, GREEDY, **common)
    sequences = [p + o for p, o in zip(prompts, ids(expected))]
    got, scheduler = generate(model, prompts, GREEDY, replay=sequences, rate=0.8, **common)
    same = sum(a == b for g, e in zip(ids(got), ids(expected)) for a, b in zip(g, e))
    print(f"speculative vs plain: {same} of {sum(map(len, ids(expected)))} tokens agree")
    assert_parted_only_at_near_ties(model, prompts, ids(got), ids(expected))
    assert scheduler.stats.accepted_tokens > 0
    assert scheduler.engine.verify_steps["graph"] > 0 and scheduler.engine.verify_steps["eager"] == 0
    assert_all_pages_back(scheduler)


def test_drafts_that_always_fail_switch_speculation_off(tiny_model_dir, prompts):
    """At 0% acceptance a request stops drafting after a couple of verify steps and then tries
    rarely: most steps are plain decode steps (CUDA graphs, overlap)."""
    model = tiny_model_dir("Qwen3ForCausalLM")
    common = {"device": "cuda", "dtype": torch.float32, "attn": "torch", "max_seq_len": 512}  # a short table: graphs
    long = replace(GREEDY, max_tokens=200)
    expected, _ = generate(model, prompts[:1], long, **common)
    sequences = [prompts[0] + ids(expected)[0]]
    got, scheduler = generate(model, prompts[:1], long, replay=sequences, rate=0.0, **common)
    assert ids(got) == ids(expected)
    assert scheduler.stats.accepted_tokens == 0
    assert scheduler.stats.draft_tokens < 40  # of 200 steps: two verify steps of 4, then rare probes


def assert_parted_only_at_near_ties(model_dir, prompts, got, expected):
    from transformers import AutoModelForCausalLM

    models = {dtype: AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
              for dtype in (torch.float32, torch.bfloat16)}
    for prompt, g, e in zip(prompts, got, expected):
        n = next((i for i, (a, b) in enumerate(zip(g, e)) if a != b), None)
        if n is None:
            continue
        assert n > 0, "the first token comes from the same prefill either way"
        context = torch.tensor([prompt + e[:n]], device="cuda")
        with torch.no_grad():
            exact, rounded = (models[d](context).logits[0, -1].float() for d in (torch.float32, torch.bfloat16))
        bf16_error = (rounded - exact).abs().max().item()
        gap = abs(exact[g[n]] - exact[e[n]]).item()
        assert gap <= 2 * bf16_error, f"parted at token {n}: float32 logits {gap:.4f} apart, bf16 error {bf16_error:.4f}"
