"""FlashInfer prefill (with a cached prefix) and decode, eager and through the fixed-buffer graph
wrappers, against a float32 torch reference on random paged data. Needs CUDA and flashinfer:
skipped elsewhere (CI has no GPU)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from minisgl.attention.torch_native import TorchNativeBackend
from minisgl.core import Batch, Context, Req, SamplingParams
from minisgl.distributed import DistributedInfo
from minisgl.kvcache import MHAKVCache
from minisgl.layers import AttentionLayer

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer"),
]

PAGE, WIDTH, PAGES, HEAD_DIM = 16, 1024, 600, 128


def _setup(heads: int, kv_heads: int, dtype=torch.bfloat16, rows: int = 9):
    """A context with random KV in every slot and each row mapped onto random pages."""
    from minisgl.attention.base import AttnShape

    dev = torch.device("cuda")
    ctx = Context(device=dev, tp=DistributedInfo())
    ctx.page_table = torch.zeros(rows, WIDTH, dtype=torch.int32, device=dev)
    ctx.kv_cache = MHAKVCache(1, PAGES, PAGE, kv_heads, HEAD_DIM, dtype, dev)
    ctx.kv_cache.k_buffer.normal_()
    ctx.kv_cache.v_buffer.normal_()
    perm = torch.randperm(PAGES - 1)  # the last page is the dummy row's
    per_row = WIDTH // PAGE
    for row in range(rows - 1):
        pages = perm[row * per_row : (row + 1) * per_row]  # disjoint rows
        ctx.page_table[row] = (pages.repeat_interleave(PAGE) * PAGE + torch.arange(PAGE).repeat(per_row)).to(
            torch.int32).to(dev)
    ctx.page_table[rows - 1, :PAGE] = torch.arange((PAGES - 1) * PAGE, PAGES * PAGE, dtype=torch.int32, device=dev)
    return ctx, AttnShape(heads, kv_heads, HEAD_DIM, dtype)


def _reference(ctx: Context, reqs, q, k, v, layer, out_loc):
    """The torch backend in float32 on a float32 copy of the cache."""
    ref_ctx = Context(device=ctx.device, tp=ctx.tp, page_table=ctx.page_table)
    kv = ctx.kv_cache
    ref_ctx.kv_cache = MHAKVCache(1, kv.num_pages, kv.page_size, kv.k_buffer.shape[2], HEAD_DIM, torch.float32,
                                  ctx.device)
    ref_ctx.kv_cache.k_buffer.copy_(kv.k_buffer)
    ref_ctx.kv_cache.v_buffer.copy_(kv.v_buffer)
    backend = TorchNativeBackend(ref_ctx)
    batch = Batch(reqs=reqs, phase="prefill", out_loc=out_loc)
    backend.prepare_metadata(batch)
    return backend.forward(q.float(), k.float(), v.float(), layer, batch)


def _reqs(cached: list[int], device: list[int]):
    return [Req(uid=i, prompt_ids=[0] * d, sampling_params=SamplingParams(), table_idx=i, cached_len=c, device_len=d)
            for i, (c, d) in enumerate(zip(cached, device))]


def _inputs(ctx, reqs, shape):
    tokens = sum(r.extend_len for r in reqs)
    q = torch.randn(tokens, shape.num_qo_heads, HEAD_DIM, device="cuda", dtype=shape.dtype)
    k = torch.randn(tokens, shape.num_kv_heads, HEAD_DIM, device="cuda", dtype=shape.dtype)
    v = torch.randn(tokens, shape.num_kv_heads, HEAD_DIM, device="cuda", dtype=shape.dtype)
    out_loc = torch.cat([ctx.page_table[r.table_idx, r.cached_len : r.device_len] for r in reqs]).long()
    return q, k, v, out_loc


def _rel_err(out, ref):
    assert not out.isnan().any()
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("heads,kv_heads", [(16, 8), (32, 8)])  # Qwen3-0.6B and Llama-3.1-8B groups
@pytest.mark.parametrize("kernel", ["fa2", "fa3"])
def test_prefill_with_cached_prefix_matches_float32_reference(heads, kv_heads, kernel):
    if kernel == "fa3" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("FA3 kernels need Hopper")
    from minisgl.attention.flashinfer import FlashInferBackend

    torch.manual_seed(1)
    ctx, shape = _setup(heads, kv_heads)
    # Fresh prompts, prompts behind a cached prefix (not page aligned too), single tokens, a long one.
    reqs = _reqs(cached=[0, 32, 37, 0, 100, 500, 7], device=[13, 80, 38, 1, 300, 1000, 200])
    q, k, v, out_loc = _inputs(ctx, reqs, shape)
    layer = AttentionLayer(0, heads, kv_heads, HEAD_DIM)
    backend = FlashInferBackend(ctx, shape, prefill_kernel=kernel)
    batch = Batch(reqs=reqs, phase="prefill", out_loc=out_loc)
    backend.prepare_metadata(batch)
    out = backend.forward(q, k, v, layer, batch)
    ref = _reference(ctx, reqs, q, k, v, layer, out_loc)  # after the store: same cache contents
    assert _rel_err(out, ref) < 1e-2


@pytest.mark.parametrize("heads,kv_heads", [(16, 8), (32, 8)])
@pytest.mark.parametrize("tensor_cores", [False, True])
def test_decode_eager_and_graph_wrappers_match_float32_reference(heads, kv_heads, tensor_cores):
    from minisgl.attention.flashinfer import FlashInferBackend
    from minisgl.engine.graph import ffi_stream

    torch.manual_seed(2)
    ctx, shape = _setup(heads, kv_heads)
    lens = [1, 16, 17, 200, 1024, 555]
    reqs = _reqs(cached=[n - 1 for n in lens], device=lens)
    q, k, v, out_loc = _inputs(ctx, reqs, shape)
    layer = AttentionLayer(0, heads, kv_heads, HEAD_DIM)
    backend = FlashInferBackend(ctx, shape, use_tensor_cores=tensor_cores)
    batch = Batch(reqs=reqs, phase="decode", out_loc=out_loc)
    backend.prepare_metadata(batch)
    eager = backend.forward(q, k, v, layer, batch)
    ref = _reference(ctx, reqs, q, k, v, layer, out_loc)
    assert _rel_err(eager, ref) < 1e-2

    # The graph wrappers, padded to 8 with dummy requests, run eagerly and inside a CUDA graph.
    backend.init_capture_graph(8, [1, 8])
    dummy = ctx.page_table[-1, 0].long().view(1)
    pq = torch.cat([q, torch.zeros(2, heads, HEAD_DIM, device="cuda", dtype=q.dtype)])
    pk = torch.cat([k, torch.zeros(2, kv_heads, HEAD_DIM, device="cuda", dtype=k.dtype)])
    pv = torch.cat([v, torch.zeros(2, kv_heads, HEAD_DIM, device="cuda", dtype=v.dtype)])
    batch.out_loc = torch.cat([out_loc, dummy, dummy])
    backend.prepare_for_replay(batch, 8)
    padded = backend.forward(pq, pk, pv, layer, batch)
    assert _rel_err(padded[: len(lens)], ref) < 1e-2

    static_q = pq.clone()
    graph = torch.cuda.CUDAGraph()
    capture = Batch(reqs=[], phase="decode", out_loc=batch.out_loc)
    backend.prepare_for_capture(capture, 8)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), ffi_stream():
        backend.forward(static_q, pk, pv, layer, capture)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph, stream=stream), ffi_stream():
        static_out = backend.forward(static_q, pk, pv, layer, capture)
    backend.prepare_for_replay(batch, 8)  # re-plan for the real lengths, then replay
    graph.replay()
    torch.cuda.synchronize()
    assert _rel_err(static_out[: len(lens)], ref) < 1e-2
