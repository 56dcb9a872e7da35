"""minisgl.kernels.triton_kernels.add_rmsnorm (the decode path's residual add + RMSNorm on Hopper)
computes what minisgl.layers.RMSNorm's torch code computes, in place; built for Hopper, it waits
for the kernel before it and then lets the next kernel launch before reading anything. Its greedy
sampling (sample_gumbel_max without temperatures) is torch.argmax, ties to the lowest index. The
decode graphs' input gather is torch's indexing of the token pool and page table. On the CPU
the kernel runs under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1); the device
runs this file on the GPU too.

    python -m pytest tests/kernels/test_triton_kernels.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("triton")

from minisgl.layers import RMSNorm  # noqa: E402
from minisgl.kernels.triton_kernels import (  # noqa: E402
    add_rmsnorm, gather_decode_inputs, pdl_supported, sample_gumbel_max,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("rows, dim", [(1, 4096), (3, 96), (16, 1000)])
def test_add_rmsnorm_equals_the_torch_layer_in_place(rows, dim):
    torch.manual_seed(rows + dim)
    norm = RMSNorm(dim, 1e-6)
    norm.weight.data = torch.randn(dim) * 0.5 + 1
    norm = norm.to(DEVICE, torch.bfloat16)
    x = torch.randn(rows, dim, dtype=torch.bfloat16, device=DEVICE) * 3
    residual = torch.randn(rows, dim, dtype=torch.bfloat16, device=DEVICE)
    # Twice: the first call compiles the kernel, the second launches the kept compiled one (with
    # programmatic dependent launch where the GPU has it, as RMSNorm calls it).
    for _ in range(2):
        x1, residual1 = x.clone(), residual.clone()
        want_residual = x1 + residual1
        want = norm._norm(want_residual)
        add_rmsnorm(x1, residual1, norm.weight, norm.eps, pdl=pdl_supported(DEVICE))
        # The same roundings as torch (bf16 add, float32 norm, bf16 product), to a bf16 ulp (2^-7)
        # a rounding: Triton's CPU interpreter truncates where the GPU rounds to nearest.
        torch.testing.assert_close(residual1, want_residual, rtol=2**-7, atol=0)
        torch.testing.assert_close(x1, want, rtol=2**-5, atol=1e-2)


HOPPER_BUILD = r"""
import inspect, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from minisgl.kernels import triton_kernels as tk

kernel = tk._add_rmsnorm_kernel
names = list(inspect.signature(kernel.fn).parameters)
types = {"x_ptr": "*bf16", "r_ptr": "*bf16", "w_ptr": "*bf16", "eps": "fp32"}
consts = {"BLOCK": 4096, "PDL": True}
sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in names}
ptx = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                     options={"num_warps": 8}).asm["ptx"]
wait, launch = ptx.find("griddepcontrol.wait"), ptx.find("griddepcontrol.launch_dependents")
# The trigger comes right after the wait, before the loads of x and the residual.
assert -1 < wait < launch and "ld.global" not in ptx[wait:launch], (wait, launch)
print("built")
"""


def test_add_rmsnorm_builds_for_hopper_triggering_the_next_kernel_at_once():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", HOPPER_BUILD], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "built" in proc.stdout, proc.stderr[-4000:]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [4, 20])  # one block a program; above WIDE_ROWS, 16 slices a row
def test_greedy_rows_are_torch_argmax_with_ties_to_the_lowest_index(dtype, rows):
    torch.manual_seed(rows)
    vocab = 3000  # three 1,024-token blocks and a partial one
    logits = torch.randn(rows, vocab).to(dtype)
    logits[1, [5, 2500]] = 9.0  # a tie across slices
    logits[2, [1030, 1031]] = 9.0  # within one
    logits[3] = -1.0  # all tied
    got = sample_gumbel_max(logits.to(DEVICE), None)
    assert got.dtype == torch.int32
    want = logits.argmax(dim=-1)
    assert want[1:4].tolist() == [5, 1030, 0]
    assert got.cpu().tolist() == want.tolist()


@pytest.mark.parametrize("temperatures", [None, [0.0, 0.7, 0.0]])
def test_the_sampled_tokens_are_also_written_to_the_host_and_into_the_token_pool(temperatures):
    torch.manual_seed(3)
    logits = torch.randn(3, 5000).to(DEVICE)
    temps = None if temperatures is None else torch.tensor(temperatures, device=DEVICE)
    pool = torch.full((4, 16), -1, dtype=torch.int32, device=DEVICE)
    index = torch.tensor([5, 17, 40], device=DEVICE)  # flat: rows 0, 1, 2 at positions 5, 1, 8
    host = torch.full((3,), -1, dtype=torch.int32, pin_memory=DEVICE.type == "cuda")
    got = sample_gumbel_max(logits, temps, 11, host=host, pool=pool.view(-1), pool_index=index)
    assert got.cpu().tolist() == sample_gumbel_max(logits, temps, 11).cpu().tolist()  # same seed, same draws
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    assert host.tolist() == got.cpu().tolist()
    flat = pool.view(-1).cpu()
    assert flat[index.cpu()].tolist() == got.cpu().tolist() and (flat >= 0).sum() == 3  # nothing else touched


@pytest.mark.parametrize("bs", [1, 5, 40])
def test_decode_inputs_are_the_token_pool_and_page_table_at_each_request_position(bs):
    torch.manual_seed(bs)
    rows, width = 50, 64
    token_pool = torch.randint(0, 32000, (rows, width), dtype=torch.int32, device=DEVICE)
    page_table = torch.randint(0, 10_000, (rows, width), dtype=torch.int32, device=DEVICE)
    req_rows = torch.randperm(rows)[:bs]
    positions = torch.randint(0, width, (bs,))
    flat = req_rows * width + positions
    step = torch.cat([positions, flat]).to(DEVICE)
    out_pos = torch.full((bs,), -1, dtype=torch.int64, device=DEVICE)
    out_ids = torch.full((bs,), -1, dtype=torch.int32, device=DEVICE)
    out_loc = torch.full((bs,), -1, dtype=torch.int64, device=DEVICE)
    next_index = torch.full((bs,), -1, dtype=torch.int64, device=DEVICE)
    rows_lens = torch.full((2 * bs,), -1, dtype=torch.int32, device=DEVICE)
    gather_decode_inputs(step, token_pool, page_table, out_pos, out_ids, out_loc, next_index, rows_lens)
    assert out_pos.cpu().tolist() == positions.tolist()
    assert out_ids.cpu().tolist() == token_pool.cpu()[req_rows, positions].tolist()
    assert out_loc.cpu().tolist() == page_table.cpu()[req_rows, positions].long().tolist()
    # The next token goes right after this one; the attention reads the row and the length.
    assert next_index.cpu().tolist() == (flat + 1).tolist()
    assert rows_lens.cpu().tolist() == req_rows.tolist() + (positions + 1).tolist()
    # Without a rows/lengths buffer (a backend whose graphs do not read them) the rest is the same.
    out_loc.fill_(-1)
    gather_decode_inputs(step, token_pool, page_table, out_pos, out_ids, out_loc, next_index)
    assert out_loc.cpu().tolist() == page_table.cpu()[req_rows, positions].long().tolist()
