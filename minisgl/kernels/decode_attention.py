"""Decode attention over the paged KV cache in Triton, for the FlashInfer backend's decode CUDA
graphs: each step's requests cut into chunks of about one size (`plan_chunks`, once a step, on the
GPU), one program a (KV head, chunk), the last chunk of a request in merging its chunks.

Why chunks of one size: a live batch's requests differ in length (the field's workload: prompts
and outputs spread from 1 to 1,024 tokens). One program a request, or each request cut into the
same number of slices, leaves the GPU waiting on the longest request's programs: with lengths
spread over 0.1-1.9x their mean, that cost FP8 pages 22% at 256 requests. The chunks are listed
longest request first, since the GPU starts programs in order: the short ones fill the last wave.
FlashInfer's decode balances its work the same way, from a plan made on the host each step; here
the plan is a one-program kernel inside the graph, over the lengths its first kernel wrote.

Why at small batch: at one request FlashInfer's decode is latency-bound, not bandwidth-bound (its
tensor-core kernel walks a request's KV in 128-token chunks, one dependent load after another, in
a grid padded for the largest batch). Here the chunks shrink with the context, so a short request
costs one load round trip and a long one is spread over the GPU. The last program of a (request,
KV head) to finish, counted by an atomic, merges its chunks (a separate merge kernel cost mostly
the gap between two kernels).

Why over FP8: FlashInfer's decode converts FP8 pages well under the copy rate. Here FP8 goes through
float16 dots, to which e4m3 and e5m2 convert exactly, on one-warp programs, eight an SM.
The measurements behind all three: benchmark/NOTES.md (and benchmark/offline/decode_attention.py).

The KV cache is [slots, kv_heads, head_dim] per layer; a request's token t is at slot
page_table[row, t] (the engine's per-token slot table, read directly: no page list to gather
before each step). An FP8 cache holds k / k_scale and v / v_scale: k_scale folds into the softmax
scale, v_scale into the output.
Imported only on CUDA (and by the CPU tests, under Triton's interpreter).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .device import pdl_launch, pdl_supported, sm_count

# At most 32 chunks a request: merging 64 spilled registers and ran slower (batch-1 attention over
# one KV head, Qwen3-30B-A3B's TP=4 share; benchmark/NOTES.md).
MAX_CHUNKS = 32
MAX_ARRIVALS = 1 << 20  # (request, KV head) pairs a launch: the arrival counts' buffer (4 MB)
WHOLE_BLOCK_N = 64  # tokens a loop step once the batch fills the GPU
WHOLE_STAGES = 3  # its loads in flight a program
BLOCK_N = 32  # tokens a loop step below that (16 as fast at 138 tokens, 64 slower; at 2,048 both close)
# The chunks' programs, in waves of those an SM holds (0: one wave, two over FP8 pages while the
# batch's (request, KV head) pairs leave SMs idle; benchmark/offline/decode_attention.py --waves).
BALANCE_WAVES = 0


@triton.jit
def _attend(q, kc_ptr, vc_ptr, slots_ptr, start, end, h, scale, HK: tl.constexpr, G_P: tl.constexpr,
            D: tl.constexpr, BLOCK: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr):
    """Online softmax of q's G_P rows (DOT, the dots' input type) over tokens [start, end) of one
    request (its slots at slots_ptr) and KV head h, scores times `scale` (log2 domain). Returns the
    unnormalized output [G_P, D], the row sums and the row maxima, in float32."""
    rd = tl.arange(0, D)
    m = tl.full([G_P], float("-inf"), tl.float32)
    row_sum = tl.zeros([G_P], tl.float32)
    acc = tl.zeros([G_P, D], tl.float32)
    for t0 in range(start, end, BLOCK):
        t = t0 + tl.arange(0, BLOCK)
        ok = t < end
        slot = tl.load(slots_ptr + t, mask=ok, other=0).to(tl.int64)
        offs = slot[:, None] * (HK * D) + h * D + rd[None, :]
        k = tl.load(kc_ptr + offs, mask=ok[:, None], other=0.0).to(DOT)  # e4m3 / e5m2 -> bf16 or f16 is exact
        v = tl.load(vc_ptr + offs, mask=ok[:, None], other=0.0).to(DOT)
        if IEEE:  # (Triton's CPU interpreter mishandles 16-bit dots: DOT is float32 there)
            scores = tl.dot(q, tl.trans(k), input_precision="ieee")
        else:
            scores = tl.dot(q, tl.trans(k))
        scores = tl.where(ok[None, :], scores * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        p = tl.exp2(scores - m_new[:, None])
        alpha = tl.exp2(m - m_new)
        row_sum = row_sum * alpha + tl.sum(p, 1)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(DOT), v)
        m = m_new
    return acc, row_sum, m


@triton.jit
def _load_q(q_ptr, b, h, stride_qt, stride_qh, G: tl.constexpr, G_P: tl.constexpr, D: tl.constexpr):
    """The G query heads of KV head h for request b, padded to G_P rows with zeros."""
    rg = tl.arange(0, G_P)
    return tl.load(q_ptr + b * stride_qt + (h * G + rg)[:, None] * stride_qh + tl.arange(0, D)[None, :],
                   mask=(rg < G)[:, None], other=0.0)


@triton.jit
def _plan_kernel(lens_ptr, items_ptr, batch, max_items, HK: tl.constexpr, TARGET: tl.constexpr,
                 CHUNKS: tl.constexpr, BATCH_P: tl.constexpr, BLOCK: tl.constexpr, EMPTY_BLOCK: tl.constexpr):
    """One program, once a step: cuts the batch's requests into chunks of about one size, so that
    the attention programs' work is even whatever the requests' lengths, and lists the chunks longest
    request first (the GPU starts programs in order: the short ones fill the last wave). Chunk
    size: the batch's tokens x HK over TARGET programs, a multiple of BLOCK, at least the longest
    request / CHUNKS; a request's chunks are even. items[k] = (request, start, end, chunks of the
    request * 65536 + this chunk), k < max_items; the rest empty (all zeros)."""
    rb = tl.arange(0, BATCH_P)
    lens = tl.load(lens_ptr + rb, mask=rb < batch, other=0)
    size = tl.maximum(tl.cdiv(tl.sum(lens.to(tl.int64)) * HK, TARGET), tl.cdiv(tl.max(lens), CHUNKS))  # (int64)
    size = (tl.cdiv(tl.maximum(size, 1), BLOCK) * BLOCK).to(tl.int32)
    key = tl.sort(lens.to(tl.int64) * BATCH_P + rb, descending=True)  # by length, then request
    length = (key // BATCH_P).to(tl.int32)
    req = (key % BATCH_P).to(tl.int32)
    n = tl.cdiv(length, size)
    chunk = tl.cdiv(tl.cdiv(length, tl.maximum(n, 1)), BLOCK) * BLOCK
    firsts = tl.cumsum(n, 0) - n
    # Chunk j of every request at once: a loop over the longest request's chunks, not a search of
    # each list row for its request (a [rows, batch] matrix, quadratic in the batch; NOTES).
    for j in range(0, tl.max(n)):
        k = firsts + j
        ok = (j < n) & (k < max_items)
        start = j * chunk
        base = items_ptr + k * 4
        tl.store(base, req, mask=ok)
        tl.store(base + 1, start, mask=ok)
        tl.store(base + 2, tl.minimum(length, start + chunk), mask=ok)
        tl.store(base + 3, n * 65536 + j, mask=ok)
    for k0 in range(tl.sum(n), max_items, EMPTY_BLOCK):  # the rest of the list: empty
        k = k0 + tl.arange(0, EMPTY_BLOCK)
        row = items_ptr + k[:, None] * 4 + tl.arange(0, 4)[None, :]
        tl.store(row, tl.zeros([EMPTY_BLOCK, 4], tl.int32), mask=(k < max_items)[:, None])


@triton.jit
def _chunk_kernel(q_ptr, kc_ptr, vc_ptr, table_ptr, rows_ptr, items_ptr, o_ptr, lse_ptr, out_ptr, arrivals_ptr,
                  stride_qt, stride_qh, table_width, qk_scale, v_scale, HK: tl.constexpr, G: tl.constexpr,
                  G_P: tl.constexpr, G_M: tl.constexpr, D: tl.constexpr, CHUNKS: tl.constexpr, BLOCK: tl.constexpr,
                  DOT: tl.constexpr, PRESCALE: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr,
                  FRESH: tl.constexpr):
    """Program (KV head h, item k of _plan_kernel's list): the G query heads of h over the item's
    tokens. A request of one chunk is written out directly; of more, the last of its chunks in
    merges them. FRESH: the list comes from the kernel just before (the step's first layer), so
    it is read after the wait."""
    h = tl.program_id(0)
    k = tl.program_id(1)
    if PDL and FRESH:
        tl.extra.cuda.gdc_wait()
    b = tl.load(items_ptr + k * 4)
    start = tl.load(items_ptr + k * 4 + 1)
    end = tl.load(items_ptr + k * 4 + 2)
    if PDL and not FRESH:  # q comes from the kernel before
        tl.extra.cuda.gdc_wait()
    if start < end:
        ns = tl.load(items_ptr + k * 4 + 3)
        n = ns // 65536
        s = ns % 65536
        slots_ptr = table_ptr + tl.load(rows_ptr + b).to(tl.int64) * table_width
        rg = tl.arange(0, G_P)
        rd = tl.arange(0, D)
        g_ok = rg < G
        q = _load_q(q_ptr, b, h, stride_qt, stride_qh, G, G_P, D)
        if PRESCALE:
            q = (q.to(tl.float32) * qk_scale).to(DOT)
            score_scale = 1.0
        else:
            q = q.to(DOT)
            score_scale = qk_scale
        acc, row_sum, m = _attend(q, kc_ptr, vc_ptr, slots_ptr, start, end, h, score_scale, HK, G_P, D, BLOCK, DOT,
                                  IEEE)
        row = b * (HK * G) + h * G + rg
        o = acc / row_sum[:, None] * v_scale
        if n == 1:
            tl.store(out_ptr + row[:, None] * D + rd[None, :], o.to(out_ptr.dtype.element_ty), mask=g_ok[:, None])
        else:
            tl.store(lse_ptr + row * CHUNKS + s, m + tl.log2(row_sum), mask=g_ok)
            tl.store(o_ptr + (row * CHUNKS + s)[:, None] * D + rd[None, :], o, mask=g_ok[:, None])
            tl.debug_barrier()
            if tl.atomic_add(arrivals_ptr + b * HK + h, 1, sem="acq_rel", scope="gpu") == n - 1:
                tl.store(arrivals_ptr + b * HK + h, 0)
                _merge(o_ptr, lse_ptr, out_ptr, b * (HK * G) + h * G, G, G_M, D, CHUNKS, n)
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _merge(o_ptr, lse_ptr, out_ptr, first_row, G: tl.constexpr, G_M: tl.constexpr, D: tl.constexpr,
           CHUNKS: tl.constexpr, n):
    """Rows first_row + [0, G) of out: the softmax-weighted sum of their chunks' outputs, all loaded
    at once (a loop would wait on L2 once a chunk). Through L2 (.cg): other SMs wrote them."""
    rows = first_row + tl.arange(0, G_M)
    rs = tl.arange(0, CHUNKS)
    rd = tl.arange(0, D)
    ok = tl.arange(0, G_M) < G
    lse = tl.load(lse_ptr + rows[:, None] * CHUNKS + rs[None, :], mask=ok[:, None] & (rs < n)[None, :],
                  other=float("-inf"), cache_modifier=".cg")
    filled = lse > float("-inf")
    w = tl.where(filled, tl.exp2(lse - tl.max(lse, 1)[:, None]), 0.0)
    parts = tl.load(o_ptr + (rows[:, None, None] * CHUNKS + rs[None, :, None]) * D + rd[None, None, :],
                    mask=filled[:, :, None], other=0.0, cache_modifier=".cg")
    merged = tl.sum(w[:, :, None] * parts, 1) / tl.where(ok, tl.sum(w, 1), 1.0)[:, None]
    tl.store(out_ptr + rows[:, None] * D + rd[None, :], merged.to(out_ptr.dtype.element_ty), mask=ok[:, None])


@functools.cache
def _arrivals(device: torch.device) -> torch.Tensor:
    """The chunks' counts a (request, KV head), zero between launches (the last program in resets
    its count); one buffer for every layer, whose kernels run one after another."""
    return torch.zeros(MAX_ARRIVALS, dtype=torch.int32, device=device)


def launch_shape(batch: int, kv_heads: int, device: torch.device | None = None, fp8: bool = False
                 ) -> tuple[int, int]:
    """(slices a request would be cut into at about two programs an SM, warps a program) over the
    batch's KV heads on `device`: a power of two rounded down, at most MAX_CHUNKS; a whole request
    (one slice: the batch fills the GPU) runs on two warps, a slice on four. Over FP8 pages from a
    few requests on, where that gives fewer than 8 slices, eight one-warp programs an SM instead
    (the power of two nearest): the conversions, not the loads, bound a warp there, and eight
    programs an SM read the pages faster than two from 16 to 256 requests (benchmark/NOTES.md). At 1-4 requests long
    four-warp slices stay faster."""
    pairs, sms = max(1, batch * kv_heads), sm_count(device)
    splits = min(MAX_CHUNKS, 1 << int(math.log2(max(1, 2 * sms // pairs))))
    if fp8 and splits < 8:
        return min(MAX_CHUNKS, 1 << max(0, round(math.log2(8 * sms / pairs)))), 1
    return splits, 2 if splits == 1 else 4


@dataclass(frozen=True)
class ChunkShape:
    """How a batch's decode attention is cut and launched (`chunk_shape`)."""

    max_items: int  # chunks a KV head at most: the grid's second dimension, and the plan's rows
    chunks: int  # chunks a request at most (the partial outputs' width)
    target: int  # programs the batch's tokens are spread over
    block: int  # tokens a loop step
    warps: int
    stages: int


def chunk_shape(batch: int, kv_heads: int, device: torch.device | None = None, fp8: bool = False) -> ChunkShape:
    """The chunks for `batch` requests over `kv_heads` KV heads: spread over a wave of the programs
    an SM holds (two over FP8 while the pairs leave SMs idle), warps and loop step as launch_shape's
    (long steps once whole requests fill the GPU). A request of n tokens takes at most n / size + 1
    chunks and size >= tokens x kv_heads / target, so the chunks a KV head stay under
    target / kv_heads + batch. A request takes at most four times its even share of the programs
    (size >= the longest / chunks), which bounds the partial outputs a full batch keeps."""
    splits, warps = launch_shape(batch, kv_heads, device, fp8)
    per_sm, sms = 8 if warps == 1 else 2, sm_count(device)
    pairs = max(1, batch * kv_heads)
    waves = BALANCE_WAVES or (2 if fp8 and pairs < per_sm * sms else 1)
    target = waves * per_sm * sms
    chunks = min(MAX_CHUNKS, max(4, triton.next_power_of_2(-(-4 * target // pairs))))
    whole = splits == 1
    return ChunkShape(max_items=min(batch * chunks, -(-target // kv_heads) + batch), chunks=chunks, target=target,
                      block=WHOLE_BLOCK_N if whole else BLOCK_N, warps=warps, stages=WHOLE_STAGES if whole else 3)


def plan_chunks(lengths: torch.Tensor, items: torch.Tensor, kv_heads: int, fp8: bool = False) -> None:
    """Fills `items` (int32 [chunk_shape(...).max_items, 4]) with the chunks of requests of these
    lengths (int32 [batch], each at least 1): once a step, before its layers' decode_attention."""
    batch = lengths.shape[0]
    shape = chunk_shape(batch, kv_heads, lengths.device, fp8)
    _plan_kernel[(1,)](lengths, items, batch, shape.max_items, HK=kv_heads, TARGET=shape.target, CHUNKS=shape.chunks,
                       BATCH_P=max(16, triton.next_power_of_2(batch)), BLOCK=shape.block, EMPTY_BLOCK=64, num_warps=4)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
                     rows: torch.Tensor, lengths: torch.Tensor, sm_scale: float, k_scale: float = 1.0,
                     v_scale: float = 1.0, items: torch.Tensor | None = None, fresh_items: bool = True
                     ) -> torch.Tensor:
    """q [batch, qo_heads, D] (last dim contiguous) attending over each request's cached tokens:
    k_cache / v_cache [slots, kv_heads, D] (q's dtype, or FP8 holding k / k_scale, v / v_scale),
    request i's token t at slot page_table[rows[i], t] for t < lengths[i] (int32 [batch] each,
    every length at least 1; page_table int32 [table rows, width], rows contiguous). `items`: the
    step's plan_chunks (None: planned here); `fresh_items`: written by the kernel just before this
    one (a step's first layer). Returns [batch, qo_heads, D] in q's dtype."""
    batch, qo_heads, d = q.shape
    kv_heads = k_cache.shape[1]
    if q.stride(-1) != 1 or not k_cache.is_contiguous() or not v_cache.is_contiguous() or d & (d - 1):
        raise ValueError("decode_attention needs q's last dim contiguous, contiguous [slots, kv_heads, D] "
                         f"caches and a power-of-two head dim (got {d})")
    if batch * kv_heads > MAX_ARRIVALS:
        raise ValueError(f"decode_attention takes at most {MAX_ARRIVALS} (request, KV head) pairs, "
                         f"got {batch} x {kv_heads}")
    out = torch.empty((batch, qo_heads, d), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    fp8 = k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    shape = chunk_shape(batch, kv_heads, q.device, fp8)
    if items is None:
        items = torch.empty((shape.max_items, 4), dtype=torch.int32, device=q.device)
        plan_chunks(lengths, items, kv_heads, fp8)
        fresh_items = True
    pdl = pdl_supported(q.device)
    group = qo_heads // kv_heads
    # FP8 pages through float16 dots: e4m3 and e5m2 convert to it exactly in one step (to bf16
    # they go through float32), q scaled first in float32 (float16 keeps no exponent to spare).
    prescale = fp8 and q.is_cuda
    dot = tl.bfloat16 if q.dtype == torch.bfloat16 and not prescale else tl.float16
    if not q.is_cuda:  # (Triton's CPU interpreter mishandles 16-bit dots)
        dot = tl.float32
    o = torch.empty((batch * qo_heads, shape.chunks, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((batch * qo_heads, shape.chunks), dtype=torch.float32, device=q.device)
    _chunk_kernel[(kv_heads, shape.max_items)](
        q, k_cache, v_cache, page_table, rows, items, o, lse, out, _arrivals(q.device), q.stride(0), q.stride(1),
        page_table.stride(0), sm_scale * k_scale * math.log2(math.e), v_scale, HK=kv_heads, G=group,
        G_P=max(16, triton.next_power_of_2(group)), G_M=triton.next_power_of_2(group), D=d, CHUNKS=shape.chunks,
        BLOCK=shape.block, DOT=dot, PRESCALE=prescale, IEEE=not q.is_cuda, PDL=pdl, FRESH=fresh_items,
        num_warps=shape.warps, num_stages=shape.stages, **pdl_launch(pdl))
    return out
