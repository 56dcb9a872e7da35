"""Where the custom all-reduce cannot run (here: no GPUs, so no peer access), every rank of a real
two-process group agrees to go without it and the group still sums through torch.distributed.
The GPU cases are in test_custom_allreduce_cuda.py."""

from __future__ import annotations

import pytest

from tests.distributed.isolation import run_isolated

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)


def _rank(rank: int, world: int, addr: str, results) -> None:
    import torch
    import torch.distributed as dist

    from minisgl.distributed import custom_allreduce

    dist.init_process_group("gloo", init_method=addr, rank=rank, world_size=world)
    try:
        custom = custom_allreduce.create(dist.group.WORLD, torch.device("cpu"))
        x = torch.full((3,), float(rank + 1))
        dist.all_reduce(x)
        results.put((rank, custom is None, x.tolist()))
    finally:
        dist.destroy_process_group()


def decide_on_every_rank(world: int) -> list[tuple]:
    import torch.multiprocessing as mp

    from minisgl.utils.net import rendezvous_addr

    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_rank, args=(world, rendezvous_addr(), results), nprocs=world)
    return sorted(results.get() for _ in range(world))


def test_without_peer_access_every_rank_falls_back_and_still_sums():
    assert run_isolated(decide_on_every_rank, 2, timeout=120) == [(0, True, [3.0] * 3), (1, True, [3.0] * 3)]
