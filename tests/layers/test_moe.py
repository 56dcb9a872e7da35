"""The GPU MoE paths compute what the per-expert loop (the reference) computes: the grouped GEMM on
the CPU directly, the fused Triton path under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 where no GPU is, which runs its kernels on CPU tensors); every fused kernel
variant builds for Hopper; and a whole Qwen3-MoE model matches HF transformers with either path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from minisgl.core import Context, set_global_ctx
from minisgl.distributed import DistributedInfo
from minisgl.engine import Engine, EngineConfig
from minisgl.layers import MoELayer
from minisgl.kernels import fused_moe
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


@pytest.mark.parametrize("norm_topk_prob", [True, False])
@pytest.mark.parametrize("tokens, experts, top_k", CASES)
def test_fused_triton_path_equals_loop(moe_layer, tokens, experts, top_k, norm_topk_prob):
    layer, x, ctx = moe_layer(tokens, experts, top_k, norm_topk_prob)
    ctx.moe_backend = "loop"
    want = layer(x)
    got = fused_moe.fused_experts(x, layer.gate(x), layer.w13, layer.w2, top_k, norm_topk_prob)
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_the_cpu_suite_runs_triton_kernels_under_the_interpreter():
    """Else the fused-path tests here could not run on the CPU (they would fail, not skip)."""
    assert torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"


def test_fused_routing_matches_softmax_topk():
    torch.manual_seed(0)
    logits = torch.randn(33, 128, device=DEVICE)
    weights, ids = fused_moe.route_topk(logits, 8, renormalize=True)
    probs = torch.softmax(logits, dim=-1)
    want_w, want_ids = torch.topk(probs, 8, dim=-1)
    assert ids.dtype == torch.int32 and torch.equal(ids.long(), want_ids)
    assert torch.allclose(weights, want_w / want_w.sum(-1, keepdim=True), atol=1e-6)


@pytest.mark.parametrize("tokens, experts, top_k, block_m", [(1, 128, 8, 16), (37, 8, 2, 16), (300, 16, 4, 64)])
def test_alignment_puts_each_pair_once_in_blocks_of_one_expert(tokens, experts, top_k, block_m):
    """The fixed-size sorted buffer holds every (token, slot) pair exactly once, padding is the
    sentinel, each used block holds pairs of the one expert it names, and the used length is a
    device tensor equal to the sum of the per-expert counts rounded up to the block size."""
    torch.manual_seed(tokens)
    ids = torch.stack([torch.randperm(experts)[:top_k] for _ in range(tokens)]).to(DEVICE, torch.int32)
    align = fused_moe.align_to_blocks(ids, experts, block_m)
    pairs = tokens * top_k
    capacity = fused_moe.align_capacity(pairs, experts, block_m)
    assert align.sorted_pairs.numel() == capacity and align.expert_ids.numel() == capacity // block_m
    counts = torch.bincount(ids.flatten().long(), minlength=experts)
    used = int(((counts + block_m - 1) // block_m * block_m).sum())
    assert int(align.num_padded) == used
    real = align.sorted_pairs[align.sorted_pairs < pairs]
    assert sorted(real.tolist()) == list(range(pairs))
    assert torch.all(align.sorted_pairs[used:] == pairs)
    flat = ids.flatten()
    for b in range(capacity // block_m):
        entries = align.sorted_pairs[b * block_m:(b + 1) * block_m]
        entries = entries[entries < pairs].long()
        if b * block_m >= used:
            assert int(align.expert_ids[b]) == -1 and entries.numel() == 0
        else:
            assert entries.numel() > 0 and torch.all(flat[entries] == align.expert_ids[b])


# Builds every kernel variant of the fused path for Hopper with Triton's compiler (no GPU needed),
# outside the interpreter, and checks each fits the 227 KiB of shared memory a block may use there.
HOPPER_BUILD = r"""
import inspect, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from minisgl.kernels import fused_moe as fm

INT_PTRS = {"ids_ptr", "sorted_ptr", "expert_ids_ptr", "num_padded_ptr"}

def build(kernel, dtype, consts, num_warps=4, num_stages=3):
    sig = {}
    for name in inspect.signature(kernel.fn).parameters:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = "*i32" if name in INT_PTRS else "*fp32" if name == "weights_ptr" else dtype
        else:
            sig[name] = "i32"
    compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    assert compiled.metadata.shared <= 227 * 1024, (kernel.fn.__name__, consts, compiled.metadata.shared)

build(fm._route_kernel, "*bf16", {"E": 128, "E_P": 128, "K": 8, "K_P": 8, "RENORM": True})
build(fm._align_kernel, "*bf16", {"E_P": 128, "BLOCK_M": 16, "CHUNK": 128}, num_warps=8)
for torch_dtype, dtype in ((torch.bfloat16, "*bf16"), (torch.float32, "*fp32")):
    for tokens in (1, 700, 5000):  # one per tile config at Qwen3-30B-A3B's 128 experts, top-8
        cfg = fm.tile_config(tokens, 128, 8, torch_dtype)
        for gated in (True, False):
            build(fm._expert_gemm_kernel, dtype,
                  {"A_ROW_DIV": 8 if gated else 1, "GATED": gated, "WEIGHTED": not gated, "BLOCK_M": cfg.block_m,
                   "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "IEEE": torch_dtype == torch.float32},
                  cfg.num_warps, cfg.num_stages)
print("built")
"""


def test_fused_kernels_build_for_hopper_within_its_shared_memory():
    """So a kernel or tile that cannot build or fit fails here, not at a GPU server's start."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", HOPPER_BUILD], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "built" in proc.stdout, proc.stderr[-4000:]


# float32 to compare tokens with HF: the fused kernels on the GPU (or under the interpreter); the
# grouped GEMM on the CPU, as on CUDA it is bfloat16 only (see the refusal test below).
@pytest.mark.parametrize("moe_backend, device", [("grouped", "cpu"), ("fused", str(DEVICE))])
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
