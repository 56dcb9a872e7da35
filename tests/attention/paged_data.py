"""Random paged attention problems on the GPU and their float32 torch reference: what every GPU
attention backend's test checks against."""

from __future__ import annotations

import torch

from minisgl.attention.base import AttnShape
from minisgl.attention.torch_native import TorchNativeBackend
from minisgl.core.batch import Batch, Req
from minisgl.core.context import Context
from minisgl.core.params import SamplingParams
from minisgl.distributed import DistributedInfo
from minisgl.kvcache import MHAKVCache
from minisgl.kvcache.mha_pool import quantize
from minisgl.layers import AttentionLayer

PAGE, WIDTH, PAGES, HEAD_DIM = 16, 1024, 600, 128


def setup_paged(heads: int, kv_heads: int, dtype=torch.bfloat16, rows: int = 9, kv_dtype=None,
                kv_scales=(1.0, 1.0)):
    """A context with random KV in every slot and each row mapped onto random pages (an FP8 cache
    of `kv_dtype` with per-tensor (k, v) scales when given)."""
    dev = torch.device("cuda")
    ctx = Context(device=dev, tp=DistributedInfo())
    ctx.page_table = torch.zeros(rows, WIDTH, dtype=torch.int32, device=dev)
    scales = ([kv_scales[0]], [kv_scales[1]]) if kv_dtype is not None else ()
    ctx.kv_cache = MHAKVCache(1, PAGES, PAGE, kv_heads, HEAD_DIM, kv_dtype or dtype, dev, *scales)
    for buf in (ctx.kv_cache.k_buffer, ctx.kv_cache.v_buffer):
        buf.copy_(torch.randn(buf.shape, device=dev).to(buf.dtype))
    perm = torch.randperm(PAGES - 1)  # the last page is the dummy row's
    per_row = WIDTH // PAGE
    for row in range(rows - 1):
        pages = perm[row * per_row : (row + 1) * per_row]  # disjoint rows
        ctx.page_table[row] = (pages.repeat_interleave(PAGE) * PAGE + torch.arange(PAGE).repeat(per_row)).to(
            torch.int32).to(dev)
    ctx.page_table[rows - 1, :PAGE] = torch.arange((PAGES - 1) * PAGE, PAGES * PAGE, dtype=torch.int32, device=dev)
    return ctx, AttnShape(heads, kv_heads, HEAD_DIM, dtype, kv_dtype)


def reference(ctx: Context, reqs, q, k, v, layer, out_loc):
    """The torch backend in float32 on a float32 copy of the cache (dequantized, with the new k
    and v rounded as the cache stores them, when it is FP8)."""
    ref_ctx = Context(device=ctx.device, tp=ctx.tp, page_table=ctx.page_table)
    kv = ctx.kv_cache
    ref_ctx.kv_cache = MHAKVCache(1, kv.num_pages, kv.page_size, kv.k_buffer.shape[2], HEAD_DIM, torch.float32,
                                  ctx.device)
    ref_ctx.kv_cache.k_buffer.copy_(kv.k_buffer.float() * kv.k_scales[0])
    ref_ctx.kv_cache.v_buffer.copy_(kv.v_buffer.float() * kv.v_scales[0])
    if kv.is_fp8:
        k = quantize(k, kv.k_scales[0], kv.dtype).float() * kv.k_scales[0]
        v = quantize(v, kv.v_scales[0], kv.dtype).float() * kv.v_scales[0]
    backend = TorchNativeBackend(ref_ctx)
    batch = Batch(reqs=reqs, phase="prefill", out_loc=out_loc)
    backend.prepare_metadata(batch)
    return backend.forward(q.float(), k.float(), v.float(), layer, batch)


def make_reqs(cached: list[int], device: list[int]):
    return [Req(uid=i, prompt_ids=[0] * d, sampling_params=SamplingParams(), table_idx=i, cached_len=c, device_len=d)
            for i, (c, d) in enumerate(zip(cached, device))]


def make_inputs(ctx, reqs, shape):
    tokens = sum(r.extend_len for r in reqs)
    q = torch.randn(tokens, shape.num_qo_heads, HEAD_DIM, device="cuda", dtype=shape.dtype)
    k = torch.randn(tokens, shape.num_kv_heads, HEAD_DIM, device="cuda", dtype=shape.dtype)
    v = torch.randn(tokens, shape.num_kv_heads, HEAD_DIM, device="cuda", dtype=shape.dtype)
    out_loc = torch.cat([ctx.page_table[r.table_idx, r.cached_len : r.device_len] for r in reqs]).long()
    return q, k, v, out_loc


def rel_err(out, ref):
    assert not out.isnan().any()
    return ((out.float() - ref).norm() / ref.norm()).item()


def prefill_error(make_backend, heads: int, kv_heads: int, **cache) -> float:
    """Relative error of a prefill batch (fresh prompts, prompts behind a cached prefix, page
    aligned or not, single tokens, a long one) against the float32 reference."""
    torch.manual_seed(1)
    ctx, shape = setup_paged(heads, kv_heads, **cache)
    reqs = make_reqs(cached=[0, 32, 37, 0, 100, 500, 7], device=[13, 80, 38, 1, 300, 1000, 200])
    q, k, v, out_loc = make_inputs(ctx, reqs, shape)
    layer = AttentionLayer(0, heads, kv_heads, HEAD_DIM)
    backend = make_backend(ctx, shape)
    batch = Batch(reqs=reqs, phase="prefill", out_loc=out_loc)
    backend.prepare_metadata(batch)
    out = backend.forward(q, k, v, layer, batch)
    return rel_err(out, reference(ctx, reqs, q, k, v, layer, out_loc))  # after the store: same cache


def replay_inputs(backend, batch: Batch, bs: int) -> None:
    """prepare_for_replay, then what the graph runner's first kernel writes for a backend whose
    graph reads each request's page-table row and length (padding: the dummy row, length 1)."""
    backend.prepare_for_replay(batch, bs)
    rows_lens = backend.graph_rows_lens(bs)
    if rows_lens is not None:
        pad = bs - len(batch.reqs)
        rows = [r.table_idx for r in batch.reqs] + [backend.ctx.page_table.shape[0] - 1] * pad
        rows_lens.copy_(torch.tensor(rows + [r.device_len for r in batch.reqs] + [1] * pad, dtype=torch.int32))


def decode_errors(make_backend, heads: int, kv_heads: int, **cache) -> dict[str, float]:
    """Relative errors of one decode batch run eagerly, through the graph buffers padded to 8
    with dummy requests, and inside a captured CUDA graph, against the float32 reference."""
    from minisgl.engine.graph import ffi_stream

    torch.manual_seed(2)
    ctx, shape = setup_paged(heads, kv_heads, **cache)
    lens = [1, 16, 17, 200, 1024, 555]
    n = len(lens)
    reqs = make_reqs(cached=[x - 1 for x in lens], device=lens)
    q, k, v, out_loc = make_inputs(ctx, reqs, shape)
    layer = AttentionLayer(0, heads, kv_heads, HEAD_DIM)
    backend = make_backend(ctx, shape)
    batch = Batch(reqs=reqs, phase="decode", out_loc=out_loc)
    backend.prepare_metadata(batch)
    eager = backend.forward(q, k, v, layer, batch)
    ref = reference(ctx, reqs, q, k, v, layer, out_loc)

    backend.init_capture_graph(8, [1, 8])
    dummy = ctx.page_table[-1, 0].long().view(1)
    pq, pk, pv = (torch.cat([t, torch.zeros(2, *t.shape[1:], device="cuda", dtype=t.dtype)]) for t in (q, k, v))
    batch.out_loc = torch.cat([out_loc, dummy, dummy])
    replay_inputs(backend, batch, 8)
    padded = backend.forward(pq, pk, pv, layer, batch)

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
    replay_inputs(backend, batch, 8)  # the real lengths, then replay
    graph.replay()
    torch.cuda.synchronize()
    return {"eager": rel_err(eager, ref), "padded": rel_err(padded[:n], ref), "graph": rel_err(static_out[:n], ref)}


def verify_graph_error(make_backend, heads: int, kv_heads: int, bs: int = 8, t: int = 5) -> float:
    """Relative error of a ragged verify batch (1 to t tokens a request, behind short and long
    prefixes) replayed from a verify CUDA graph (bs, t), padded as minisgl.engine.verify_graph pads
    it, on its real tokens, against the float32 reference."""
    import numpy as np

    from minisgl.engine.graph import ffi_stream
    from minisgl.engine.verify_graph import verify_layout

    torch.manual_seed(3)
    ctx, shape = setup_paged(heads, kv_heads)
    cached = [16, 37, 500, WIDTH - t, 3]
    extend = [t, 1, 3, t, 2]
    reqs = make_reqs(cached=cached, device=[c + e for c, e in zip(cached, extend)])
    q, k, v, out_loc = make_inputs(ctx, reqs, shape)
    layer = AttentionLayer(0, heads, kv_heads, HEAD_DIM)
    backend = make_backend(ctx, shape)
    backend.init_verify_graph(bs, [(bs, t)])
    dummy_row, width = ctx.page_table.shape[0] - 1, ctx.page_table.shape[1]
    table = ctx.page_table.view(-1)

    def layout_of(rs):
        arrays = [np.array([getattr(r, f) for r in rs], dtype=np.int64) for f in ("table_idx", "cached_len", "device_len")]
        return verify_layout(*arrays, bs, t, dummy_row, width)

    static = [torch.zeros(bs * t, *x.shape[1:], device="cuda", dtype=x.dtype) for x in (q, k, v)]
    capture = Batch(reqs=[], phase="verify")
    empty = layout_of([])
    capture.out_loc = table[torch.from_numpy(empty.table_index).cuda()].long()
    backend.prepare_verify_graph(capture, bs, t, empty.rows, empty.seq_lens)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), ffi_stream():
        backend.forward(*static, layer, capture)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream), ffi_stream():
        static_out = backend.forward(*static, layer, capture)

    layout = layout_of(reqs)
    sel = torch.from_numpy(layout.logit_rows).cuda()
    for s, x in zip(static, (q, k, v)):
        s.normal_().index_copy_(0, sel, x)
    capture.out_loc.copy_(table[torch.from_numpy(layout.table_index).cuda()].long())
    backend.prepare_verify_graph(capture, bs, t, layout.rows, layout.seq_lens)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(capture.out_loc[sel], out_loc)  # the real tokens' KV went where an eager pass puts it
    return rel_err(static_out[sel], reference(ctx, reqs, q, k, v, layer, out_loc))  # after the store: same cache
