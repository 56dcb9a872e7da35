"""minisgl.kernels.moe_decode, the MoE feed-forward for decode's few tokens: it computes what the
per-expert loop (MoELayer.loop_experts, the reference) computes, for any expert width and hidden
size (steps that divide them or not), with and without renormalised top-k weights; and its
kernels build for Hopper within its shared memory. On the CPU the kernels run under Triton's
interpreter (tests/conftest.py sets TRITON_INTERPRET=1)."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.context import Context, set_global_ctx
from minisgl.distributed import DistributedInfo
from minisgl.kernels import moe_decode
from minisgl.layers import MoELayer
from tests.kernels.hopper_build import assert_builds_for_hopper

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def layer_and_input(tokens: int, hidden: int, inter: int, experts: int, top_k: int, norm: bool, dtype=torch.float32):
    set_global_ctx(Context(device=DEVICE, tp=DistributedInfo()))
    torch.manual_seed(tokens * 1000 + hidden + inter + experts + top_k)
    layer = MoELayer(hidden, inter, experts, top_k, norm_topk_prob=norm).to(DEVICE)
    for p in layer.parameters():
        p.data.normal_(std=0.1)
    layer.to(dtype)
    return layer, torch.randn(tokens, hidden, device=DEVICE, dtype=dtype)


def reference(layer: MoELayer, x: torch.Tensor) -> torch.Tensor:
    """The per-expert loop in float64."""
    layer64 = layer.to(torch.float64)
    try:
        x64 = x.double()
        return layer64.loop_experts(x64, *layer64.route(x64))
    finally:
        layer.to(x.dtype)


# tokens, hidden, expert width, experts, top-k, renormalised: widths that the K steps divide and
# that they do not (48: 16-element down steps; 40 and hidden 72: masked last steps), one token and
# a few (small: the CPU runs every program under the interpreter; the GPU adds Qwen3-30B-A3B's).
CASES = [(1, 64, 32, 8, 2, True), (5, 64, 48, 16, 4, False), (3, 72, 40, 8, 8, True)]


@pytest.mark.slow
@pytest.mark.parametrize("split", [True, False], ids=["program per slot", "program per token"])
@pytest.mark.parametrize("tokens, hidden, inter, experts, top_k, norm_topk_prob", CASES)
def test_decode_path_equals_the_per_expert_loop(tokens, hidden, inter, experts, top_k, norm_topk_prob, split):
    layer, x = layer_and_input(tokens, hidden, inter, experts, top_k, norm_topk_prob)
    got = moe_decode.decode_experts(x, moe_decode.router_logits(x, layer.gate.weight), layer.w13, layer.w2, top_k,
                                    norm_topk_prob, split=split)
    want = reference(layer, x)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert torch.linalg.norm(got.double() - want) / torch.linalg.norm(want) < 1e-5


@pytest.mark.skipif(DEVICE.type != "cuda", reason="bf16 arithmetic as the GPU runs it")
@pytest.mark.parametrize("tokens", [1, 8, 16])
def test_decode_path_in_bf16_at_qwen3_30b_a3b_shapes_is_within_bf16_rounding(tokens):
    layer, x = layer_and_input(tokens, 2048, 768, 128, 8, True, torch.bfloat16)
    got = moe_decode.decode_experts(x, layer.gate(x), layer.w13, layer.w2, 8, True)
    want = reference(layer, x)
    assert torch.linalg.norm(got.double() - want) / torch.linalg.norm(want) < 1e-2


@pytest.mark.slow
def test_split_down_leaves_its_arrival_counts_at_zero_for_the_next_launch():
    layer, x = layer_and_input(3, 64, 32, 8, 4, True)
    for _ in range(2):  # the second launch starts from the counts the first left
        got = moe_decode.decode_experts(x, layer.gate(x), layer.w13, layer.w2, 4, True, split=True)
        assert torch.linalg.norm(got.double() - reference(layer, x)) / torch.linalg.norm(reference(layer, x)) < 1e-5
    assert not moe_decode._arrivals(DEVICE).any()


def test_down_splits_over_slots_only_while_a_program_per_token_leaves_sms_idle():
    """Qwen3-30B-A3B's shapes on an H100 (the CPU's stand-in SM count): 128 tiles a token."""
    _, down = moe_decode.decode_tiles(768, 2048, 8, 2)
    tiles = 2048 // down.block_n
    assert moe_decode.split_down(tiles, torch.device("cpu"))
    assert not moe_decode.split_down(8 * tiles, torch.device("cpu"))


def test_no_tokens_give_an_empty_result():
    layer, x = layer_and_input(1, 64, 32, 8, 2, True)
    x = x[:0]
    assert moe_decode.decode_experts(x, layer.gate(x), layer.w13, layer.w2, 2, True).shape == (0, 64)


def test_down_steps_divide_the_expert_width_where_they_can():
    gate_up, down = moe_decode.decode_tiles(768, 2048, 8, 2)
    assert 768 % down.block_k == 0 and not down.dot and not gate_up.dot
    assert moe_decode.decode_tiles(40, 64, 8, 4)[1].block_k == 16  # none divides 40: masked last step


def test_narrow_experts_take_wide_down_tiles():
    # Qwen3-30B-A3B's 768-wide experts whole and at TP=2 and TP=4: 16, 16 and 32 hidden features
    # a program in 64-element steps (a one-row tile's steps there were a few hundred bytes); wider
    # experts keep the dense GEMV's one-row tiles.
    assert [(d.block_n, d.block_k) for _, d in (moe_decode.decode_tiles(i, 2048, 8, 2) for i in (768, 384, 192))] == [
        (16, 64), (16, 64), (32, 64)]
    assert moe_decode.decode_tiles(1536, 2048, 8, 2)[1].block_n == 4


HOPPER_BUILD = r"""
import inspect, torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from minisgl.kernels import moe_decode as md

def build(kernel, dtype, consts, num_warps, num_stages):
    sig = {}
    for name in inspect.signature(kernel.fn).parameters:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = ("*i32" if name in ("ids_ptr", "arrivals_ptr") else
                         "*fp32" if name in ("weights_ptr", "part_ptr") else dtype)
        else:
            sig[name] = "i32"
    compiled = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    assert compiled.metadata.shared <= 227 * 1024, (kernel.fn.__name__, consts, compiled.metadata.shared)

for inter in (768, 384, 192):  # Qwen3-30B-A3B's experts whole, and TP=2 and TP=4 shares
    gate_up, down = md.decode_tiles(inter, 2048, 8, 2)
    for dtype in ("*bf16", "*fp32"):
        build(md._gate_up_kernel, dtype, {"TOP_K": 8, "BLOCK_N": gate_up.block_n, "BLOCK_K": gate_up.block_k,
              "EVEN_K": True, "STAGES": gate_up.num_stages, "PDL": True}, gate_up.num_warps, gate_up.num_stages)
        for split in (True, False):
            build(md._down_kernel, dtype, {"TOP_K": 8, "K_P": 8, "BLOCK_N": down.block_n, "BLOCK_K": down.block_k,
                  "EVEN_K": True, "STAGES": down.num_stages, "SPLIT": split, "PDL": True}, down.num_warps,
                  down.num_stages)
print("built")
"""


@pytest.mark.slow
def test_decode_kernels_build_for_hopper_within_its_shared_memory():
    assert_builds_for_hopper(HOPPER_BUILD)
