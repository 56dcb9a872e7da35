"""minisgl.kernels.rmsnorm.add_rmsnorm (the decode path's residual add + RMSNorm on Hopper)
computes what minisgl.layers.RMSNorm's torch code computes, in place; built for Hopper, it waits
for the kernel before it and then lets the next kernel launch before reading anything. On the CPU
the kernel runs under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1); the device
runs this file on the GPU too.

    python -m pytest tests/kernels/test_rmsnorm.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.device import pdl_supported  # noqa: E402
from minisgl.kernels.rmsnorm import add_rmsnorm  # noqa: E402
from minisgl.layers import RMSNorm  # noqa: E402
from tests.kernels.hopper_build import assert_builds_for_hopper  # noqa: E402

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
from minisgl.kernels import rmsnorm as tk

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


@pytest.mark.slow
def test_add_rmsnorm_builds_for_hopper_triggering_the_next_kernel_at_once():
    assert_builds_for_hopper(HOPPER_BUILD)
