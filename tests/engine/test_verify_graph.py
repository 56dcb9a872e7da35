"""Verify graphs' fixed shapes, on the CPU: a ragged verify batch padded to graph (bs, t) puts its
real tokens where the eager pass does (positions, token ids, KV slots), its padding on the dummy
row, and the attention backends' verify-graph paths give the eager outputs on the real tokens.
tests/scheduler/test_speculation_cuda.py replays the graphs on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minisgl.attention.torch_native import TorchNativeBackend
from minisgl.core.batch import Batch, Req
from minisgl.core.host import ragged_arange
from minisgl.core.params import SamplingParams
from minisgl.engine.verify_graph import verify_layout, verify_shapes
from minisgl.layers import AttentionLayer
from tests.attention.test_sgl_fa3 import DIM, HEADS, KV_HEADS, WIDTH, _fa3, _paged_ctx

# Requests on rows 3, 0, 2 with 5, 1 (no drafts) and 3 tokens: one at a page boundary, one near its row's end.
ROWS, CACHED, DEVICE = [3, 0, 2], [7, 30, 55], [12, 31, 58]


def _arrays():
    return tuple(np.array(x, dtype=np.int64) for x in (ROWS, CACHED, DEVICE))


def test_real_tokens_sit_where_the_eager_pass_puts_them_and_padding_on_the_dummy_row():
    rows, cached, device = _arrays()
    bs, t, dummy, width = 4, 5, 5, WIDTH
    layout = verify_layout(rows, cached, device, bs, t, dummy, width)
    extend = device - cached
    # What Engine.prepare computes for the eager pass, token by token.
    positions = np.repeat(cached, extend) + ragged_arange(extend)
    flat = np.repeat(rows * width, extend) + positions
    assert len(layout.positions) == len(layout.table_index) == bs * t
    assert layout.positions[layout.logit_rows].tolist() == positions.tolist()
    assert layout.table_index[layout.logit_rows].tolist() == flat.tolist()
    assert layout.logit_rows.tolist() == [0, 1, 2, 3, 4, 5, 10, 11, 12]  # row-major, t apart
    padding = np.setdiff1d(np.arange(bs * t), layout.logit_rows)
    assert (layout.table_index[padding] == dummy * width).all() and (layout.positions[padding] == 0).all()
    assert layout.rows.tolist() == ROWS + [dummy]
    assert layout.seq_lens.tolist() == [c + t for c in CACHED] + [t]  # each request's t queries end there


def test_shapes_cover_every_size_with_two_to_k_plus_one_tokens():
    assert verify_shapes([1, 2], 3) == [(1, 2), (1, 3), (2, 2), (2, 3)]


def _eager(backend, ctx, q, k, v):
    reqs = [Req(uid=i, prompt_ids=[0] * d, sampling_params=SamplingParams(), table_idx=r, cached_len=c, device_len=d)
            for i, (r, c, d) in enumerate(zip(ROWS, CACHED, DEVICE))]
    out_loc = torch.cat([ctx.page_table[r, c:d] for r, c, d in zip(ROWS, CACHED, DEVICE)]).long()
    batch = Batch(reqs=reqs, phase="verify", out_loc=out_loc)
    backend.prepare_metadata(batch)
    return backend.forward(q, k, v, AttentionLayer(0, HEADS, KV_HEADS, DIM), batch)


def _graph_shaped(backend, ctx, q, k, v, bs, t):
    """The same tokens through the backend's verify-graph buffers, padded to (bs, t) as the
    runner pads them (padding tokens get random q/k/v and write to the dummy page)."""
    rows, cached, device = _arrays()
    layout = verify_layout(rows, cached, device, bs, t, ctx.page_table.shape[0] - 1, ctx.page_table.shape[1])
    sel = torch.from_numpy(layout.logit_rows)
    pq, pk, pv = (torch.randn(bs * t, *x.shape[1:]).index_copy_(0, sel, x) for x in (q, k, v))
    batch = Batch(reqs=[], phase="verify", out_loc=ctx.page_table.view(-1)[torch.from_numpy(layout.table_index)].long())
    backend.init_verify_graph(8, verify_shapes([bs], t))
    backend.prepare_verify_graph(batch, bs, t, layout.rows, layout.seq_lens)
    return backend.forward(pq, pk, pv, AttentionLayer(0, HEADS, KV_HEADS, DIM), batch)[sel]


@pytest.mark.parametrize("name, make", [
    ("torch", lambda ctx: TorchNativeBackend(ctx)),
    ("sgl-fa3", _fa3),  # its metadata driving a kernel of flash_attn_with_kvcache's contract
])
@pytest.mark.parametrize("bs, t", [(3, 5), (4, 5), (8, 6)])
def test_verify_graph_path_gives_the_eager_outputs_on_the_real_tokens(name, make, bs, t):
    torch.manual_seed(4)
    n = sum(d - c for c, d in zip(CACHED, DEVICE))
    q, k, v = torch.randn(n, HEADS, DIM), torch.randn(n, KV_HEADS, DIM), torch.randn(n, KV_HEADS, DIM)
    want = _eager(make(ctx := _paged_ctx()), ctx, q, k, v)
    backend = make(ctx := _paged_ctx())
    got = _graph_shaped(backend, ctx, q, k, v, bs, t)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
