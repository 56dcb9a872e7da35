"""On a machine with two or more GPUs: the custom all-reduce (minisgl/distributed/custom_allreduce.py)
sums like NCCL, one-shot and two-shot, eagerly and replayed from a CUDA graph with new inputs, and
all_reduce() picks it for small messages and NCCL for large ones. Each case in its own session.
Skipped without two GPUs (CI has none); benchmark/device/tp.sh runs it."""

from __future__ import annotations

import pytest
import torch

from tests.distributed.isolation import failures_of_ranks, run_isolated

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices")


def _rank(rank: int, world: int, addr: str, failures) -> None:
    import torch.distributed as dist

    from minisgl.distributed import DistributedInfo, all_reduce, comm, destroy, init_process_group

    try:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        init_process_group(DistributedInfo(rank, world), addr, device)
        custom = comm._CUSTOM
        assert custom is not None, "the custom all-reduce did not start on GPUs with peer access"
        for dtype in (torch.bfloat16, torch.float32):
            for rows in (1, 7, 64, 300):
                for method in (custom.one_shot, custom.two_shot, all_reduce):
                    g = torch.Generator(device=device).manual_seed(rows * 10 + rank)
                    x = torch.randn(rows, 512, generator=g, device=device).to(dtype)
                    want = x.clone()
                    dist.all_reduce(want)
                    torch.testing.assert_close(method(x), want, rtol=1e-2 if dtype != torch.float32 else 1e-5,
                                               atol=1e-2 if dtype != torch.float32 else 1e-5)
        # Captured once, replayed with new inputs in the static buffer: the decode graphs' use.
        static = torch.zeros(16, 1024, device=device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            all_reduce(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            all_reduce(static)
            all_reduce(static)
        for step in range(3):
            static.fill_(rank + step)
            graph.replay()
            torch.cuda.synchronize()
            # Two sums in a row: sum over ranks of (rank + step), times world.
            want = world * sum(r + step for r in range(world))
            assert torch.all(static == want), f"replay {step}: {static.flatten()[:4].tolist()} != {want}"
        big = torch.ones(custom.max_bytes // 4 + 1024, device=device)
        assert not custom.takes(big)
        assert torch.all(all_reduce(big) == world)  # NCCL above the custom all-reduce's size
    except BaseException as e:
        failures.put(f"rank {rank}: {e!r}")
        raise
    finally:
        destroy()


def test_custom_all_reduce_sums_like_nccl_eagerly_and_in_cuda_graphs():
    assert run_isolated(failures_of_ranks, _rank, 2, timeout=300) == []
