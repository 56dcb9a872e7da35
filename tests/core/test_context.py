"""The Context holds the batch being forwarded only inside `forward_batch`: layers that read it
outside a pass get a clear error, and a pass that fails leaves nothing behind for the next one."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.context import Context
from minisgl.distributed import DistributedInfo


def test_the_batch_is_current_only_inside_forward_batch():
    ctx = Context(device=torch.device("cpu"), tp=DistributedInfo())
    batch = object()
    with pytest.raises(RuntimeError, match="no batch is being forwarded"):
        ctx.current_batch()
    with ctx.forward_batch(batch) as current:
        assert current is batch and ctx.current_batch() is batch
    with pytest.raises(RuntimeError, match="no batch is being forwarded"):
        ctx.current_batch()


def test_a_failed_pass_clears_the_batch():
    ctx = Context(device=torch.device("cpu"), tp=DistributedInfo())
    with pytest.raises(ValueError):
        with ctx.forward_batch(object()):
            raise ValueError("the forward failed")
    assert ctx.batch is None
