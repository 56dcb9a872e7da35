"""The parallel linear layers multiply through `dense_linear`: on the CPU and above two rows the
library GEMM; at decode's one or two bf16 rows on a Hopper GPU the weight-streaming GEMV (the lm_head's),
whose launch costs a few microseconds where cuBLAS took ~10 per projection. Either way the result
is x @ W^T + b. Under tensor parallelism a row-parallel layer may leave its all-reduce to the norm
after it (reduce=False): its ranks' partial sums then add up to that, with the bias once.

    python -m pytest tests/layers/test_linear.py -q
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from minisgl.core.context import Context, set_global_ctx
from minisgl.distributed import DistributedInfo
from minisgl.layers.linear import LINEAR_GEMV_MAX_ROWS, QKVParallelLinear, RowParallelLinear

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)


@pytest.fixture
def layers():
    """layers(device, dtype, bias) -> (a q/k/v layer of 8 + 2 + 2 heads of 64, an o layer), random."""
    set_global_ctx(Context(device=torch.device("cpu"), tp=DistributedInfo()))

    def make(device: str, dtype: torch.dtype, bias: bool):
        torch.manual_seed(0)
        qkv, o = QKVParallelLinear(512, 64, 8, 2, bias), RowParallelLinear(512, 512, bias)
        for layer in (qkv, o):
            for param in (layer.weight, layer.bias):
                if param is not None:
                    param.data = (torch.randn(param.shape) / 16).to(device=device, dtype=dtype)
        return qkv, o

    yield make
    set_global_ctx(None)


def _reference(layer, x: torch.Tensor) -> torch.Tensor:
    bias = None if layer.bias is None else layer.bias.float()
    return F.linear(x.float(), layer.weight.float(), bias)


@pytest.mark.parametrize("bias", [False, True])
def test_cpu_layers_are_the_linear_projection(layers, bias):
    for layer in layers("cpu", torch.float32, bias):
        x = torch.randn(3, 512)
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


@pytest.mark.skipif(not HOPPER, reason="the weight-streaming GEMV runs on Hopper GPUs")
@pytest.mark.parametrize("rows", [1, 2, 3, 8])
@pytest.mark.parametrize("bias", [False, True])
def test_decode_rows_on_hopper_go_through_the_gemv(layers, rows, bias):
    for layer in layers("cuda", torch.bfloat16, bias):
        x = torch.randn(rows, 512, device="cuda", dtype=torch.bfloat16)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            got = layer(x)
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        assert any("_gemv_kernel" in n for n in names) == (rows <= LINEAR_GEMV_MAX_ROWS), names  # above: cuBLAS
        want = _reference(layer, x)
        # float32 sums of exact products: the bf16 output's rounding (2^-9 relative) is the error.
        assert torch.allclose(got.float(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())


def _row_parallel_rank(rank: int, world: int, addr: str, failures) -> None:
    """One gloo rank: a row-parallel layer's partial sums (reduce=False) add up over the ranks to the
    whole layer's output with the bias once, and RMSNorm(reduce=True) reduces them before its add
    and norm; reduce=True gives every rank the whole output."""
    from minisgl.distributed import all_reduce, destroy, init_process_group
    from minisgl.layers.norm import RMSNorm

    try:
        tp = DistributedInfo(rank, world)
        set_global_ctx(Context(device=torch.device("cpu"), tp=tp))
        init_process_group(tp, addr, torch.device("cpu"))
        g = torch.Generator().manual_seed(0)  # the same full weight, input and residual on every rank
        weight, bias = torch.randn(256, 512, generator=g), torch.randn(256, generator=g)
        x, residual = torch.randn(3, 512, generator=g), torch.randn(3, 256, generator=g)
        want = F.linear(x, weight, bias)
        shard = x[:, rank * 512 // world : (rank + 1) * 512 // world]
        for reduce in (False, True):
            layer = RowParallelLinear(512, 256, bias=True, reduce=reduce)
            layer.weight_loader(layer.weight, weight)
            layer.bias.data.copy_(bias)
            got = layer(shard)
            total = all_reduce(got.clone()) if not reduce else got
            torch.testing.assert_close(total, want, rtol=1e-5, atol=1e-5)
            if not reduce:
                norm = RMSNorm(256, 1e-6)
                normed, summed = norm(got.clone(), residual.clone(), reduce=True)
                torch.testing.assert_close(summed, want + residual, rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(normed, norm(want + residual), rtol=1e-5, atol=1e-5)
    except BaseException as e:
        failures.put(f"rank {rank}: {e!r}")
        raise
    finally:
        destroy()
        set_global_ctx(None)


@pytest.mark.slow
def test_row_parallel_partial_sums_add_up_to_the_layer_with_its_bias_once():
    from tests.distributed.isolation import failures_of_ranks, run_isolated

    assert run_isolated(failures_of_ranks, _row_parallel_rank, 2, timeout=180) == []
