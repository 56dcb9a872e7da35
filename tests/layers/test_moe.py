"""The GPU MoE paths compute what the per-expert loop (the reference) computes: the grouped GEMM on
the CPU directly, the fused Triton path under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 where no GPU is, which runs its kernels on CPU tensors; its kernels one by one:
tests/kernels/test_fused_moe.py); and a whole Qwen3-MoE model matches HF transformers with either
path."""

from __future__ import annotations

import os

import pytest
import torch

from minisgl.core.context import Context, set_global_ctx
from minisgl.distributed import DistributedInfo
from minisgl.engine import Engine, EngineConfig
from minisgl.kernels import fused_moe
from minisgl.layers import MoELayer
from tests.helpers import EngineDriver, hf_greedy

# The GPU paths on the GPU where there is one (the device runs this file too), else on the CPU.
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
CASES = [(1, 8, 2), (37, 8, 2), (64, 16, 4), (5, 4, 4), (40, 128, 8)]  # tokens, experts, top-k


@pytest.fixture
def moe_layer():
    """moe_layer(tokens, experts, top_k) -> (layer with random weights, input, its Context)."""
    ctx = Context(device=DEVICE, tp=DistributedInfo())
    set_global_ctx(ctx)

    def build(tokens: int, experts: int, top_k: int, norm_topk_prob: bool = True):
        torch.manual_seed(tokens * experts + top_k)
        layer = MoELayer(64, 32, experts, top_k, norm_topk_prob=norm_topk_prob).to(DEVICE)
        for p in layer.parameters():
            p.data.normal_(std=0.1)
        return layer, torch.randn(tokens, 64, device=DEVICE), ctx

    yield build
    set_global_ctx(None)


@pytest.mark.parametrize("tokens, experts, top_k", CASES)
def test_grouped_equals_loop(moe_layer, tokens, experts, top_k):
    layer, x, ctx = moe_layer(tokens, experts, top_k)
    ctx.moe_backend = "loop"
    want = layer(x)
    ctx.moe_backend = "grouped"
    assert torch.allclose(layer(x), want, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("norm_topk_prob", [True, False])
@pytest.mark.parametrize("tokens, experts, top_k", CASES)
def test_fused_triton_path_equals_loop(moe_layer, tokens, experts, top_k, norm_topk_prob):
    layer, x, ctx = moe_layer(tokens, experts, top_k, norm_topk_prob)
    ctx.moe_backend = "loop"
    want = layer(x)
    got = fused_moe.fused_experts(x, layer.gate(x), layer.w13, layer.w2, top_k, norm_topk_prob)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("extra", [0, 1])
def test_fused_backend_equals_loop_on_both_sides_of_the_decode_path_limit(moe_layer, extra):
    """Up to DECODE_MAX_TOKENS tokens the layer takes the GEMV path (its router GEMV included),
    above it the block-aligned one: both compute the loop's result."""
    from minisgl.kernels.moe_decode import DECODE_MAX_TOKENS

    layer, x, ctx = moe_layer(DECODE_MAX_TOKENS + extra, 8, 2)
    ctx.moe_backend = "loop"
    want = layer(x)
    ctx.moe_backend = "fused"
    assert torch.allclose(layer(x), want, atol=1e-5, rtol=1e-5)


def test_the_cpu_suite_runs_triton_kernels_under_the_interpreter():
    """Else the fused-path tests here could not run on the CPU (they would fail, not skip)."""
    assert torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


# float32 to compare tokens with HF: the fused kernels on the GPU (or under the interpreter); the
# grouped GEMM on the CPU, as on CUDA it is bfloat16 only (see the refusal test below).
@pytest.mark.parametrize("moe_backend, device", [("grouped", "cpu"),
                                                  pytest.param("fused", str(DEVICE), marks=pytest.mark.slow)])
def test_qwen3_moe_with_gpu_moe_paths_matches_hf(tiny_model_dir, moe_backend, device):
    model_dir = tiny_model_dir("Qwen3MoeForCausalLM")
    engine = Engine(EngineConfig(model_dir, dtype=torch.float32, device=device, moe_backend=moe_backend,
                                 num_pages=64, max_running_requests=2))
    try:
        assert engine.ctx.moe_backend == moe_backend
        driver = EngineDriver(engine)
        prompt = [5, 17, 42, 99, 3, 8]
        req = driver.add(prompt)
        for _ in range(16):
            driver.step([req])
        assert req.output_ids == hf_greedy(model_dir, prompt, 16)[0]
    finally:
        engine.shutdown()


def test_grouped_gemm_on_cuda_outside_bfloat16_is_refused_at_start():
    """Else CUDA graph capture fails inside PyTorch with a host copy (found on an H200)."""
    from minisgl.engine.config import check_moe_backend_dtype

    with pytest.raises(ValueError, match="grouped on CUDA needs bfloat16.*float32"):
        check_moe_backend_dtype("grouped", torch.device("cuda"), torch.float32)
    check_moe_backend_dtype("grouped", torch.device("cuda"), torch.bfloat16)
    check_moe_backend_dtype("grouped", torch.device("cpu"), torch.float32)


def test_unknown_moe_backend_is_refused_with_the_choices():
    from minisgl.engine.config import resolve_moe_backend

    with pytest.raises(ValueError, match="loop, grouped, fused, auto"):
        resolve_moe_backend("triton", torch.device("cpu"))
    assert resolve_moe_backend("auto", torch.device("cpu")) == "loop"
