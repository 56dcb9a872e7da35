"""The LM head's logits: on the CPU and above 16 rows the library GEMM; at decode's few bf16 rows on a
Hopper GPU the weight-streaming GEMV (minisgl.kernels.dispatch.dense_gemv), which reads the head
faster than cuBLAS. Either way the logits are x @ W^T of the head's weight, into `out` when given.

    python -m pytest tests/layers/test_embedding.py -q
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from minisgl.core.context import Context, set_global_ctx
from minisgl.distributed import DistributedInfo
from minisgl.layers import ParallelLMHead

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


@pytest.fixture
def head():
    """head(device, dtype) -> a ParallelLMHead of 1,000 tokens x 256 with random weights."""
    set_global_ctx(Context(device=torch.device("cpu"), tp=DistributedInfo()))

    def make(device: str, dtype: torch.dtype) -> ParallelLMHead:
        torch.manual_seed(0)
        layer = ParallelLMHead(1000, 256)
        layer.weight.data = torch.randn(1000, 256).to(device=device, dtype=dtype)
        return layer

    yield make
    set_global_ctx(None)


def test_cpu_logits_are_the_linear_projection_and_land_in_out(head):
    layer = head("cpu", torch.float32)
    x = torch.randn(3, 256)
    want = F.linear(x, layer.weight)
    assert torch.equal(layer(x), want)
    out = torch.empty(3, 1000)
    assert layer.project(x, out=out) is out and torch.equal(out, want)


@pytest.mark.skipif(not HOPPER, reason="the head GEMV runs on Hopper GPUs")
@pytest.mark.parametrize("rows", [1, 2, 8, 16, 17])
def test_decode_rows_on_hopper_stream_the_head_through_the_gemv(head, rows):
    layer = head("cuda", torch.bfloat16)
    x = torch.randn(rows, 256, device="cuda", dtype=torch.bfloat16)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        got = layer(x)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert any("_gemv_kernel" in n for n in names) == (rows <= 16), names  # above 16 rows: cuBLAS
    want = x.float() @ layer.weight.float().T
    # float32 sums of exact products: the bf16 output's rounding (2^-9 relative) is the error.
    assert torch.allclose(got.float(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())
