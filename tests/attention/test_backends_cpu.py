"""CPU-visible logic of the attention backends: registry names, paged layout, the torch
backend's graph-decode path against its per-request path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minisgl.attention import HybridBackend, create_attention_backend
from minisgl.attention.paging import gather_pages, paged_layout, warm_up_gather_pages
from minisgl.attention.torch_native import TorchGraphMetadata, TorchNativeBackend
from minisgl.core.batch import Batch, Req
from minisgl.core.context import Context
from minisgl.core.host import indptr, ragged_arange
from minisgl.core.params import SamplingParams
from minisgl.distributed import DistributedInfo
from minisgl.kvcache import MHAKVCache
from minisgl.layers import AttentionLayer


def _ctx(rows=5, width=64, pages=40, page_size=8, kv_heads=2, head_dim=16) -> Context:
    ctx = Context(device=torch.device("cpu"), tp=DistributedInfo())
    ctx.page_table = torch.zeros(rows, width, dtype=torch.int32)
    ctx.kv_cache = MHAKVCache(1, pages, page_size, kv_heads, head_dim, torch.float32, torch.device("cpu"))
    return ctx


def test_registry_names_and_hybrid_parsing():
    ctx = _ctx()
    assert isinstance(create_attention_backend("auto", ctx), TorchNativeBackend)
    assert isinstance(create_attention_backend("torch,torch", ctx), TorchNativeBackend)
    with pytest.raises(ValueError, match="unknown attention backend 'nope'"):
        create_attention_backend("nope", ctx)
    with pytest.raises(ValueError, match="prefill,decode"):
        create_attention_backend("torch,torch,torch", ctx)
    with pytest.raises(ValueError, match="unknown attention backend 'nope'"):
        create_attention_backend("torch,nope", ctx)


def test_hybrid_dispatches_on_phase():
    calls = []

    class Recorder(TorchNativeBackend):
        def __init__(self, ctx, tag):
            super().__init__(ctx)
            self.tag = tag

        def prepare_metadata(self, batch):
            calls.append(self.tag)

    hybrid = HybridBackend(Recorder(_ctx(), "p"), Recorder(_ctx(), "d"))
    hybrid.prepare_metadata(Batch(reqs=[], phase="prefill"))
    hybrid.prepare_metadata(Batch(reqs=[], phase="decode"))
    assert calls == ["p", "d"]
    assert hybrid.supports_cuda_graph is False  # torch on the CPU
    assert hybrid.label == "Recorder prefill + Recorder decode"  # as the start-up log and /metrics name it


def test_paged_layout_matches_a_python_loop():
    rng = np.random.default_rng(0)
    page_size, width = 4, 32
    rows = rng.permutation(6)[:5].astype(np.int64)
    lens = rng.integers(1, width + 1, size=5).astype(np.int64)
    layout = paged_layout(rows, lens, page_size, width)
    slots, ptr, last = [], [0], []
    for r, n in zip(rows, lens):
        pages = -(-n // page_size)
        slots += [r * width + j * page_size for j in range(pages)]
        ptr.append(ptr[-1] + pages)
        last.append(n - (pages - 1) * page_size)
    assert layout.page_slots.tolist() == slots
    assert layout.kv_indptr.tolist() == ptr
    assert layout.last_page_len.tolist() == last
    assert layout.num_pages == ptr[-1]
    assert ragged_arange(np.array([3, 0, 2])).tolist() == [0, 1, 2, 0, 1]
    assert indptr(np.array([3, 0, 2])).tolist() == [0, 3, 3, 5]


@pytest.mark.parametrize("rows, width", [(1, 12), (3, 80)])
def test_warming_up_the_page_gather_stays_inside_the_table(rows, width):
    # It gathers 1 and 17 pages of row 0 (so that the gather's kernels load at start) and fewer
    # where the table holds fewer: a gather past its end would raise here.
    page_size = 4
    table = torch.arange(rows * width, dtype=torch.int32).view(rows, width) * 3
    before = table.clone()
    warm_up_gather_pages(table, page_size)
    assert torch.equal(table, before)
    pages = min(17, rows * width // page_size)
    layout = paged_layout(np.zeros(1, dtype=np.int64), np.array([pages * page_size]), page_size, width)
    assert gather_pages(table, layout, page_size).tolist() == [3 * j for j in range(pages)]


def test_torch_graph_decode_path_matches_per_request_path():
    """The dense path the torch backend captures in CUDA graphs (whole page-table rows, masked,
    padded with dummy rows) computes what the per-request path does."""
    torch.manual_seed(0)
    ctx = _ctx(rows=5, width=64, pages=40, page_size=8, kv_heads=2, head_dim=16)
    kv = ctx.kv_cache
    kv.k_buffer.normal_()
    kv.v_buffer.normal_()
    perm = torch.randperm(39)  # page 39 stays free: the dummy page
    lens = [5, 17, 64, 1]
    for row, n in enumerate(lens):
        pages = perm[row * 8 : row * 8 + 8]
        ctx.page_table[row] = (pages.repeat_interleave(8) * 8 + torch.arange(8).repeat(8)).to(torch.int32)
    ctx.page_table[4, :8] = torch.arange(39 * 8, 40 * 8, dtype=torch.int32)  # the dummy row
    reqs = [Req(uid=i, prompt_ids=[0], sampling_params=SamplingParams(), table_idx=i, cached_len=n - 1, device_len=n)
            for i, n in enumerate(lens)]
    layer = AttentionLayer(0, 4, 2, 16)
    q = torch.randn(4, 4, 16)
    k, v = torch.randn(4, 2, 16), torch.randn(4, 2, 16)
    out_loc = torch.stack([ctx.page_table[i, n - 1] for i, n in enumerate(lens)]).long()

    backend = TorchNativeBackend(ctx)
    batch = Batch(reqs=reqs, phase="decode", out_loc=out_loc)
    backend.prepare_metadata(batch)
    ref = backend.forward(q, k, v, layer, batch)

    padded = 6  # two dummy requests on the last row, length 1
    rows = torch.tensor([0, 1, 2, 3, 4, 4])
    plens = torch.tensor(lens + [1, 1])
    dummy_slot = ctx.page_table[4, 0].long().view(1)
    batch.out_loc = torch.cat([out_loc, dummy_slot, dummy_slot])
    batch.attn_metadata = TorchGraphMetadata([1] * padded, plens.tolist(), rows, plens)
    pq = torch.cat([q, torch.randn(2, 4, 16)])
    out = backend.forward(pq, torch.cat([k, torch.randn(2, 2, 16)]), torch.cat([v, torch.randn(2, 2, 16)]), layer, batch)
    torch.testing.assert_close(out[:4], ref, rtol=1e-5, atol=1e-5)
