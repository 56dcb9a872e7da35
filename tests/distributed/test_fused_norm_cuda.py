"""On a machine with two or more GPUs: the all-reduce fused with the residual add and RMSNorm
(minisgl/distributed/fused_norm.py) gives what NCCL's all-reduce followed by the add and the norm in
float32 give, eagerly and replayed from a CUDA graph with new inputs; RMSNorm(reduce=True) takes
it for decode batches and falls back to the unfused path above its row limit. Each case in its own
session. Skipped without two GPUs (CI has none); benchmark/device/tp.sh runs it."""

from __future__ import annotations

import pytest
import torch

from tests.distributed.isolation import failures_of_ranks, run_isolated

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")

HIDDEN, MAX_TOKENS, EPS = 2048, 16, 1e-6


def _reference(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NCCL's sum, then the add and the norm in float32 (as HF computes RMSNorm)."""
    import torch.distributed as dist

    total = x.float().clone()
    dist.all_reduce(total)
    summed = total + residual.float()
    normed = summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + EPS) * weight.float()
    return normed, summed


def _rank(rank: int, world: int, addr: str, failures) -> None:
    from minisgl.distributed import DistributedInfo, comm, destroy, enable_fused_norm, init_process_group
    from minisgl.layers.norm import RMSNorm

    try:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        init_process_group(DistributedInfo(rank, world), addr, device)
        enable_fused_norm(HIDDEN, MAX_TOKENS, torch.bfloat16, device)
        fused = comm._FUSED_NORM
        assert fused is not None, "the fused all-reduce + RMSNorm did not start"
        norm = RMSNorm(HIDDEN, EPS).to(device=device, dtype=torch.bfloat16)
        g = torch.Generator(device=device).manual_seed(0)  # the same weight on every rank
        norm.weight.copy_(torch.rand(HIDDEN, generator=g, device=device) + 0.5)

        def inputs(rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
            g = torch.Generator(device=device).manual_seed(seed * 100 + rank)
            x = torch.randn(rows, HIDDEN, generator=g, device=device).bfloat16()
            residual = torch.randn(rows, HIDDEN, generator=torch.Generator(device=device).manual_seed(seed),
                                   device=device).bfloat16()  # the residual stream is the same on every rank
            return x, residual

        for rows in (1, 3, MAX_TOKENS, MAX_TOKENS + 5):  # the last is past the fused kernel's rows
            x, residual = inputs(rows, rows)
            assert fused.takes(x, residual) == (rows <= MAX_TOKENS)
            want_normed, want_summed = _reference(x, residual, norm.weight)
            normed, summed = norm(x.clone(), residual.clone(), reduce=True)
            torch.testing.assert_close(summed.float(), want_summed, rtol=2e-2, atol=2e-2)
            torch.testing.assert_close(normed.float(), want_normed, rtol=2e-2, atol=2e-2)

        # Captured once, replayed with new inputs in static buffers: the decode graphs' use, two
        # fused calls in a row (as a layer's two norms).
        static_x, static_res = inputs(4, 7)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            norm(static_x, static_res, reduce=True)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            mid, res = norm(static_x, static_res, reduce=True)
            out, out_res = norm(mid, res, reduce=True)
        for step in range(3):
            x, residual = inputs(4, 20 + step)
            static_x.copy_(x)
            static_res.copy_(residual)
            graph.replay()
            torch.cuda.synchronize()
            want_mid, want_res = _reference(x, residual, norm.weight)
            want_out, want_out_res = _reference(want_mid.bfloat16(), want_res.bfloat16(), norm.weight)
            torch.testing.assert_close(out_res.float(), want_out_res, rtol=3e-2, atol=3e-2)
            torch.testing.assert_close(out.float(), want_out, rtol=3e-2, atol=3e-2)
    except BaseException as e:
        failures.put(f"rank {rank}: {e!r}")
        raise
    finally:
        destroy()


@pytest.mark.parametrize("world", [w for w in (2, 4) if w <= torch.cuda.device_count()])
def test_fused_all_reduce_add_rmsnorm_matches_nccl_then_norm(world):
    assert run_isolated(failures_of_ranks, _rank, world, timeout=600) == []
