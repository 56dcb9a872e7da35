"""sgl-kernel's FA3 backend, the parts that run without the kernel: it refuses machines it cannot
run on, and its metadata (lengths, query offsets, the token-level page table over one-slot pages,
the padded graph buffers) drives a kernel with `flash_attn_with_kvcache`'s documented semantics to
the torch backend's result. tests/attention/test_sgl_fa3_cuda.py runs the real kernel on Hopper."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minisgl.attention import create_attention_backend
from minisgl.attention.base import AttnShape
from minisgl.attention.sgl_fa3 import SglFA3Backend
from minisgl.attention.torch_native import TorchNativeBackend
from minisgl.core.batch import Batch, Req
from minisgl.core.context import Context
from minisgl.core.params import SamplingParams
from minisgl.distributed import DistributedInfo
from minisgl.kvcache import MHAKVCache
from minisgl.layers import AttentionLayer

HEADS, KV_HEADS, DIM, PAGE, WIDTH, PAGES = 4, 2, 16, 8, 64, 48


def flash_attn_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, page_table, cu_seqlens_q, max_seqlen_q,
                            softmax_scale, causal):
    """The documented contract of sgl_kernel.flash_attn.flash_attn_with_kvcache for varlen queries
    over a paged cache, in plain torch: request i's queries q[cu[i]:cu[i+1]] attend its first
    cache_seqlens[i] positions, position j living in page page_table[i, j // page] at j % page;
    the causal mask is aligned to the bottom right."""
    assert causal and page_table.dtype == cache_seqlens.dtype == cu_seqlens_q.dtype == torch.int32
    page = k_cache.shape[1]
    out = torch.empty_like(q)
    for i in range(len(cache_seqlens)):
        lo, hi, n_k = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1]), int(cache_seqlens[i])
        assert hi - lo <= max_seqlen_q
        pos = torch.arange(n_k)
        pages = page_table[i, pos // page].long()
        k, v = k_cache[pages, pos % page], v_cache[pages, pos % page]  # [n_k, kv_heads, dim]
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        mask = torch.arange(n_k)[None, :] <= torch.arange(n_k - (hi - lo), n_k)[:, None]
        out[lo:hi] = F.scaled_dot_product_attention(q[lo:hi].transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                                    attn_mask=mask, scale=softmax_scale).transpose(0, 1)
    return out


def _paged_ctx(rows: int = 6) -> Context:
    """Random KV everywhere; each row on its own shuffled pages; the last row is the dummy row."""
    torch.manual_seed(0)
    ctx = Context(device=torch.device("cpu"), tp=DistributedInfo())
    ctx.kv_cache = MHAKVCache(1, PAGES, PAGE, KV_HEADS, DIM, torch.float32, torch.device("cpu"))
    ctx.kv_cache.k_buffer.normal_()
    ctx.kv_cache.v_buffer.normal_()
    ctx.page_table = torch.zeros(rows, WIDTH, dtype=torch.int32)
    perm, per_row = torch.randperm(PAGES - 1), WIDTH // PAGE
    for row in range(rows - 1):
        pages = perm[row * per_row : (row + 1) * per_row]
        ctx.page_table[row] = (pages.repeat_interleave(PAGE) * PAGE + torch.arange(PAGE).repeat(per_row)).int()
    ctx.page_table[rows - 1, :PAGE] = torch.arange((PAGES - 1) * PAGE, PAGES * PAGE, dtype=torch.int32)
    return ctx


def _run(backend, ctx, phase, cached, device, pad_to=None):
    """One batch through `backend` (eagerly, or through the graph buffers padded to `pad_to`)."""
    reqs = [Req(uid=i, prompt_ids=[0] * d, sampling_params=SamplingParams(), table_idx=i, cached_len=c, device_len=d)
            for i, (c, d) in enumerate(zip(cached, device))]
    torch.manual_seed(1)
    n = sum(d - c for c, d in zip(cached, device))
    q, k, v = torch.randn(n, HEADS, DIM), torch.randn(n, KV_HEADS, DIM), torch.randn(n, KV_HEADS, DIM)
    out_loc = torch.cat([ctx.page_table[i, c:d] for i, (c, d) in enumerate(zip(cached, device))]).long()
    batch = Batch(reqs=reqs, phase=phase, out_loc=out_loc)
    layer = AttentionLayer(0, HEADS, KV_HEADS, DIM)
    if pad_to is None:
        backend.prepare_metadata(batch)
        return backend.forward(q, k, v, layer, batch)
    pad = pad_to - len(reqs)
    dummy = ctx.page_table[-1, 0].long().repeat(pad)
    batch.out_loc = torch.cat([out_loc, dummy])
    backend.prepare_for_replay(batch, pad_to)
    q, k, v = (torch.cat([t, torch.zeros(pad, *t.shape[1:])]) for t in (q, k, v))
    return backend.forward(q, k, v, layer, batch)[: len(reqs)]


def _fa3(ctx):
    return SglFA3Backend(ctx, AttnShape(HEADS, KV_HEADS, DIM, torch.float32), flash_attn_with_kvcache)


def test_refuses_machines_it_cannot_run_on_with_the_reason():
    with pytest.raises(RuntimeError, match="sgl-kernel FA3 attention backend: it needs a CUDA device"):
        create_attention_backend("sgl-fa3", _paged_ctx(), AttnShape(HEADS, KV_HEADS, DIM, torch.bfloat16))


def test_refuses_an_fp8_kv_cache_with_the_reason():
    shape = AttnShape(HEADS, KV_HEADS, DIM, torch.bfloat16, kv_dtype=torch.float8_e4m3fn)
    with pytest.raises(RuntimeError, match="sgl-kernel FA3 attention backend: .*no FP8 KV cache"):
        create_attention_backend("sgl-fa3", _paged_ctx(), shape)


@pytest.mark.parametrize("phase,cached,device", [
    ("prefill", [0, 8, 13, 0, 40], [11, 30, 14, 1, 64]),  # fresh, behind page-aligned and odd prefixes
    ("decode", [0, 7, 16, 63, 30], [1, 8, 17, 64, 31]),
])
def test_metadata_drives_the_kernel_to_the_torch_backends_result(phase, cached, device):
    want = _run(TorchNativeBackend(_paged_ctx()), _paged_ctx(), phase, cached, device)
    got = _run(_fa3(ctx := _paged_ctx()), ctx, phase, cached, device)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_decode_through_padded_graph_buffers_matches_eager():
    cached, device = [3, 20, 63], [4, 21, 64]
    eager = _run(_fa3(ctx := _paged_ctx()), ctx, "decode", cached, device)
    backend = _fa3(ctx := _paged_ctx())
    backend.init_capture_graph(8, [1, 8])
    capture = Batch(reqs=[], phase="decode")
    backend.prepare_for_capture(capture, 8)
    assert capture.attn_metadata.page_table.shape == (8, WIDTH)  # the static buffer itself
    # Longer rows first (their stale columns stay behind), writing only where the next batch does not read.
    _run(backend, ctx, "decode", [60, 30], [61, 31], pad_to=8)
    padded = _run(backend, ctx, "decode", cached, device, pad_to=8)
    torch.testing.assert_close(padded, eager, rtol=1e-5, atol=1e-5)
