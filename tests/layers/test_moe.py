"""The grouped-GEMM MoE path computes what the per-expert loop (the reference) computes, and a
whole Qwen3-MoE model still matches HF transformers with it."""

from __future__ import annotations

import pytest
import torch

from minisgl.core import Context, set_global_ctx
from minisgl.distributed import DistributedInfo
from minisgl.engine import Engine, EngineConfig
from minisgl.layers import MoELayer
from tests.helpers import EngineDriver, hf_greedy


@pytest.mark.parametrize("tokens, experts, top_k", [(1, 8, 2), (37, 8, 2), (64, 16, 4), (5, 4, 4)])
def test_grouped_equals_loop(tokens, experts, top_k):
    ctx = Context(device=torch.device("cpu"), tp=DistributedInfo())
    set_global_ctx(ctx)
    try:
        torch.manual_seed(tokens)
        layer = MoELayer(64, 32, experts, top_k, norm_topk_prob=True)
        for p in layer.parameters():
            p.data.normal_(std=0.1)
        x = torch.randn(tokens, 64)
        ctx.moe_backend = "loop"
        want = layer(x)
        ctx.moe_backend = "grouped"
        got = layer(x)
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)
    finally:
        set_global_ctx(None)


def test_qwen3_moe_with_grouped_experts_matches_hf(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3MoeForCausalLM")
    engine = Engine(EngineConfig(model_dir, dtype=torch.float32, device="cpu", moe_backend="grouped",
                                 num_page_override=64, max_running_req=2))
    try:
        assert engine.ctx.moe_backend == "grouped"
        driver = EngineDriver(engine)
        prompt = [5, 17, 42, 99, 3, 8]
        req = driver.add(prompt)
        for _ in range(16):
            driver.step([req])
        assert req.output_ids == hf_greedy(model_dir, prompt, 16)[0]
    finally:
        engine.shutdown()
