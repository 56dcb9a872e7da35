"""minisgl.quantization.gemm's FP8 GEMMs: the gate/up layer's silu(gate) * up equals the
activation of the float32 GEMM of the same e4m3 weight. On the CPU the GEMV kernel runs under
Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1); the device runs this file on
the GPU too.

    python -m pytest tests/quantization/test_gemm.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.quantization.fp8 import quantize_rows  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("bias", [False, True])
def test_fp8_linear_silu_and_mul_equals_the_activation_of_fp8_linear(bias):
    """The gate/up layer's FP8 gemm (gemm.py): the fused GEMV without a bias, GEMV then
    silu_and_mul with one; both as silu(gate) * up of the float32 GEMM, batch dims kept."""
    from minisgl.quantization.gemm import fp8_linear_silu_and_mul

    torch.manual_seed(1)
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16, device=DEVICE)
    wq, ws = quantize_rows(torch.randn(2 * 48, 64, device=DEVICE) * 0.05)
    b = torch.randn(2 * 48, dtype=torch.bfloat16, device=DEVICE) if bias else None
    got = fp8_linear_silu_and_mul(x, wq, b, weight_scale=ws.view(1, -1))
    y = x.float().cpu().reshape(6, 64) @ (wq.float().cpu() * ws.cpu()[:, None]).T
    if bias:
        y = y + b.float().cpu()
    gate, up = y.chunk(2, dim=-1)
    want = (torch.nn.functional.silu(gate) * up).reshape(2, 3, 48)
    assert got.shape == (2, 3, 48)
    assert torch.allclose(got.float().cpu(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item())
