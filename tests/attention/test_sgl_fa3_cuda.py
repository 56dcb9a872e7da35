"""sgl-kernel's FA3 backend: prefill with a cached prefix and decode (eager, padded, in a CUDA
graph) against the float32 torch reference, at a page size FA3's own paged layout would refuse.
Needs a Hopper GPU and sgl-kernel: skipped elsewhere (CI has no GPU; the lent GPUs lack the
package, see benchmark/NOTES.md)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.attention.paged_data import decode_errors, prefill_error

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9,
                       reason="needs a Hopper GPU"),
    pytest.mark.skipif(importlib.util.find_spec("sgl_kernel") is None, reason="needs sgl-kernel"),
]


def make(ctx, shape):
    from minisgl.attention.sgl_fa3 import create

    return create(ctx, shape)


@pytest.mark.parametrize("heads,kv_heads", [(16, 8), (32, 8)])
def test_prefill_with_cached_prefix_matches_float32_reference(heads, kv_heads):
    assert prefill_error(make, heads, kv_heads) < 1e-2


@pytest.mark.parametrize("heads,kv_heads", [(16, 8), (32, 8)])
def test_decode_eager_and_in_a_graph_matches_float32_reference(heads, kv_heads):
    errors = decode_errors(make, heads, kv_heads)
    assert max(errors.values()) < 1e-2, errors
