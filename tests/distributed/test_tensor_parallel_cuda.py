"""On a machine with two or more GPUs: TP=2 over NCCL gives TP=1's greedy tokens (dense and MoE).
Skipped without them: CI has no GPU; the device runs it (see benchmark/NOTES.md)."""

from __future__ import annotations

import pytest
import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")
PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [300], [7] * 20]


def greedy(model_dir: str, tp: int) -> list[list[int]]:
    llm = LLM(model_dir, tp=tp, device="cuda", dtype=torch.float32, num_page_override=512, page_size=16)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True), use_tqdm=False)
        return [o["token_ids"] for o in outs]
    finally:
        llm.shutdown()


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "LlamaForCausalLM"])
def test_nccl_tp2_matches_tp1(tiny_model_dir, architecture):
    model_dir = tiny_model_dir(architecture)
    tp2, tp1 = greedy(model_dir, tp=2), greedy(model_dir, tp=1)
    # Where each prompt first diverges, so a failure on the device says more than "lists differ".
    diverged = {i: next((j for j, (a, b) in enumerate(zip(x, y)) if a != b), min(len(x), len(y)))
                for i, (x, y) in enumerate(zip(tp2, tp1)) if x != y}
    assert not diverged, f"first differing token per prompt: {diverged}; tp2={tp2}; tp1={tp1}"
