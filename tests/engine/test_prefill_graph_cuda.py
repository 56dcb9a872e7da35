"""Piecewise CUDA graphs for prefill (minisgl.engine.prefill_graph) on a GPU: prefills padded to a
captured size score their prompts as HF transformers does, as closely as eager prefills do, and
leave the KV cache the decode steps after them read. Needs CUDA and FlashInfer; skipped without
them (CI has no GPU); on the device machine:
python -m pytest tests/engine/test_prefill_graph_cuda.py"""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.llm.test_prompt_logprobs import _hf_log_softmax

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
              pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer")]


def _prompts(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(3, 380) for _ in range(rng.randint(20, 150))] for _ in range(n)]


def _score(model_dir: str, prompts: list[list[int]], **kwargs):
    """Each prompt's logprobs of its own tokens (from the second) and its greedy continuation;
    with the engine's count of prefills that replayed graphs."""
    llm = LLM(model_dir, dtype=torch.bfloat16, num_pages=2048, max_running_requests=32, **kwargs)
    runner = llm.scheduler.engine.prefill_graphs
    try:
        params = SamplingParams(temperature=0, max_tokens=6, prompt_logprobs=0, ignore_eos=True)
        outs = llm.generate(prompts, [params] * len(prompts), use_tqdm=False)
        replays = runner.replays if runner is not None else 0
    finally:
        llm.shutdown()
    return [torch.tensor([e["logprob"] for e in o["prompt_logprobs"][1:]]) for o in outs], \
        [o["token_ids"] for o in outs], replays


@pytest.mark.parametrize("max_prefill_length", [4096, 100], ids=["whole-batch", "chunked"])
def test_graph_prefills_score_prompts_like_hf_and_like_eager(tiny_model_dir, max_prefill_length):
    """Prompts of 20-150 tokens prefill together (a few hundred tokens, padded to 512) or chunked
    to 100 tokens a step (the captured counts are 64 and 100; chunks resume mid-prompt); their prompt logprobs are HF's in
    float32 within bf16's rounding, no further off than the eager prefill's; the greedy tokens
    after them, decoded from the KV the graphs stored, start the same."""
    model = tiny_model_dir("Qwen3ForCausalLM", head_dim=128)
    prompts = _prompts(6, seed=max_prefill_length)
    graph, graph_tokens, replays = _score(model, prompts, max_prefill_length=max_prefill_length,
                                          piecewise_cuda_graph_max_tokens=8192)
    eager, eager_tokens, none = _score(model, prompts, max_prefill_length=max_prefill_length)  # (the default: off)
    assert replays > 0 and none == 0
    for prompt, g, e in zip(prompts, graph, eager):
        ref = _hf_log_softmax(model, prompt)
        want = ref[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])]
        graph_err, eager_err = (g - want).abs().max().item(), (e - want).abs().max().item()
        # bf16 against float32 is ~0.1 off at worst on this model, graphs or not (one H200 run: 0.108
        # both ways); KV stored at the wrong slots or a wrong row read would be off by whole nats.
        assert graph_err < 0.25, (graph_err, eager_err)
        assert graph_err <= 2 * eager_err + 0.02, (graph_err, eager_err)
    assert all(g[:2] == e[:2] for g, e in zip(graph_tokens, eager_tokens))


def test_long_prefill_above_the_largest_graph_runs_eagerly(tiny_model_dir):
    """A prefill longer than --piecewise-cuda-graph-max-tokens runs eagerly; shorter ones replay."""
    model = tiny_model_dir("Qwen3ForCausalLM", head_dim=128)
    llm = LLM(model, dtype=torch.bfloat16, num_pages=2048, max_running_requests=8, piecewise_cuda_graph_max_tokens=128)
    runner = llm.scheduler.engine.prefill_graphs
    try:
        assert runner is not None and runner.counts == [64, 128]
        params = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
        before = runner.replays
        llm.generate([list(range(3, 303))], [params], use_tqdm=False)
        assert runner.replays == before
        llm.generate([list(range(3, 103))], [params], use_tqdm=False)
        assert runner.replays == before + 1
    finally:
        llm.shutdown()
