"""The FP8 weight-streaming GEMV (minisgl.quantization.triton_fp8.fp8_gemv) computes x @ (w * s)^T
as a float32 GEMM of the same e4m3 weights does, and its gated form silu(gate) * up, for 1 to 16
rows, N not a multiple of its tile and K not a multiple of its step, on both of its paths (CUDA
cores and tl.dot). On the CPU its kernel runs under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1); the device runs this file on the GPU too.

    python -m pytest tests/quantization/test_fp8_gemv.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.quantization.fp8 import quantize_rows  # noqa: E402
from minisgl.quantization.triton_fp8 import GemvConfig, fp8_gemv, gemv_config  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def reference(x: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor, gated: bool) -> torch.Tensor:
    y = x.float().cpu() @ (wq.float().cpu() * ws.cpu()[:, None]).T
    if gated:
        gate, up = y.chunk(2, dim=-1)
        y = torch.nn.functional.silu(gate) * up
    return y


def check(rows: int, n: int, k: int, gated: bool, config: GemvConfig | None = None) -> None:
    torch.manual_seed(rows * 1000 + n + k)
    x = torch.randn(rows, k, dtype=torch.bfloat16, device=DEVICE)
    wq, ws = quantize_rows(torch.randn(2 * n if gated else n, k, device=DEVICE) * 0.05)
    got = fp8_gemv(x, wq, ws, gated=gated, config=config)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, n)
    want = reference(x, wq, ws, gated)
    # Exact products, float32 sums: the bf16 output's rounding (2^-9 relative) is the error.
    assert torch.allclose(got.float().cpu(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item()), (
        (got.float().cpu() - want).abs().max())


@pytest.mark.parametrize("rows", [1, 2, 5, 16])
@pytest.mark.parametrize("gated", [False, True])
def test_gemv_equals_a_float32_gemm_of_the_fp8_weight(rows, gated):
    # N = 70: not a multiple of any tile width; K = 200: not a multiple of any K step.
    check(rows, 70, 200, gated)


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("gated", [False, True])
def test_both_paths_agree_with_the_reference_whatever_the_rows(rows, gated):
    for dot in (False, True):
        check(rows, 40, 96, gated, GemvConfig(block_n=16, block_k=64, num_warps=4, num_stages=2, dot=dot))


def test_configs_tile_output_features_only_and_fill_the_gpu():
    # Llama-3.1-8B's o_proj at batch 1: at least two programs per SM of an H100 (132), no K split.
    cfg = gemv_config(1, 4096, 4096)
    assert 4096 // cfg.block_n >= 264 and not cfg.dot
    assert gemv_config(16, 28672, 4096).dot  # 16 rows: tl.dot over 16-row tiles
    narrow = gemv_config(16, 512, 4096)  # a tensor-parallel shard: too few 16-wide tiles
    assert not narrow.dot and 512 // narrow.block_n >= 128


def test_more_than_16_rows_is_refused():
    x = torch.zeros(17, 32, dtype=torch.bfloat16, device=DEVICE)
    wq, ws = quantize_rows(torch.ones(16, 32, device=DEVICE))
    with pytest.raises(ValueError, match="at most 16 rows"):
        fp8_gemv(x, wq, ws)
