"""minisgl.kernels.fused_moe, kernel by kernel: the routing is softmax top-k, the alignment puts
every (token, slot) pair once into blocks of one expert; and every kernel variant builds for
Hopper within its shared memory. On the CPU the kernels run under Triton's interpreter
(tests/conftest.py sets TRITON_INTERPRET=1); the whole fused path against the per-expert loop is
in tests/layers/test_moe.py."""

from __future__ import annotations

import pytest
import torch

from minisgl.kernels import fused_moe
from tests.kernels.hopper_build import assert_builds_for_hopper

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


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

for pdl in (False, True):
    build(fm._route_kernel, "*bf16", {"E": 128, "E_P": 128, "K": 8, "K_P": 8, "RENORM": True, "PDL": pdl})
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


@pytest.mark.slow
def test_fused_kernels_build_for_hopper_within_its_shared_memory():
    assert_builds_for_hopper(HOPPER_BUILD)
