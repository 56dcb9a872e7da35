"""Decode attention over the paged KV cache in Triton, for the FlashInfer backend's CUDA graphs of
a few requests and for every decode graph over an FP8 cache: split-KV (the last slice of each
request and KV head merging the slices) while the batch leaves SMs idle, one program a request
and KV head once it fills the GPU.

Why, at small batch: at one request FlashInfer's decode is latency-bound, not bandwidth-bound. Its
tensor-core kernel walks a request's KV in 128-token chunks, one dependent load after another, and
in a CUDA graph it launches a grid padded for the largest batch. Here every program takes a slice
of a request's tokens for one KV head (its group of query heads on tensor cores), loads K and V
for it at once, and writes a partial output with its log-sum-exp; the slices shrink with the
context, so a short one costs one load round trip, and a long one is spread over the GPU. The
last program of a (request, KV head) to finish, counted by an atomic, merges its slices (a
separate merge kernel cost mostly the gap between two kernels).

Why, over FP8 at larger batch: FlashInfer's decode converts FP8 pages well under the copy rate.
Here FP8 goes through float16 dots, to which e4m3 and e5m2 convert exactly, on one-warp programs,
eight an SM (launch_shape), and `_whole_kernel` walks each request in one program once they fill
the GPU (no partials, no merge).
The measurements behind both: benchmark/NOTES.md (and benchmark/offline/decode_attention.py).

The KV cache is [slots, kv_heads, head_dim] per layer; a request's token t is at slot
page_table[row, t] (the engine's per-token slot table, read directly: no page list to gather
before each step). An FP8 cache holds k / k_scale and v / v_scale: k_scale folds into the softmax
scale, v_scale into the output.
Imported only on CUDA (and by the CPU tests, under Triton's interpreter).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from minisgl.utils.logger import get_logger

from .device import pdl_launch, pdl_supported, resident_programs, sm_count

logger = get_logger(__name__)

# Graphs of up to this many requests decode here over a bf16 cache, larger ones with FlashInfer:
# timed alone, these kernels matched or beat FlashInfer's at most batches from 32 to 256, but
# Qwen3-8B's offline run at TP=4 was 2.5% slower with them there (benchmark/NOTES.md).
MAX_BATCH = 8
# At most 32 slices: merging 64 spilled registers (batch-1 attention over one KV head, Qwen3-30B-A3B's
# TP=4 share: 11.6-23.8 us a layer at 64 slices, 5.1-14.5 at 32).
MAX_SPLITS = 32
MAX_ARRIVALS = 4096  # (request, KV head) pairs a launch: the arrival counts' buffer
WHOLE_BLOCK_N = 64  # tokens a loop step of _whole_kernel
WHOLE_STAGES = 3  # its loads in flight a program
BLOCK_N = 32  # tokens a loop step, a slice a multiple of it (16 as fast at 138 tokens, 64 slower; at 2,048 both close)


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
def _split_kernel(q_ptr, kc_ptr, vc_ptr, table_ptr, rows_ptr, lens_ptr, o_ptr, lse_ptr, out_ptr, arrivals_ptr,
                  stride_qt, stride_qh, table_width, qk_scale, v_scale, HK: tl.constexpr, G: tl.constexpr,
                  G_P: tl.constexpr, G_M: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr, BLOCK: tl.constexpr,
                  DOT: tl.constexpr, PRESCALE: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr):
    """Program (request b, KV head h, slice s): the G query heads of h over tokens
    [s * chunk, (s + 1) * chunk) of b, chunk = the request's length / SPLITS rounded up to BLOCK.
    Writes o (normalized, times v_scale) and lse (log2-sum-exp2 of the scaled scores; -inf for an
    empty slice) at [b, h * G + g, s], then counts itself in at arrivals[b, h]; the last of the
    SPLITS merges them into out[b, h * G + g] and sets the count back to 0 for the next launch.
    qk_scale = softmax scale * k_scale * log2(e); with PRESCALE, q is scaled by it in float32 before
    the cast to DOT (float16 dots, as _whole_kernel's), else the scores are."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
    length = tl.load(lens_ptr + b)
    slots_ptr = table_ptr + tl.load(rows_ptr + b).to(tl.int64) * table_width
    chunk = tl.cdiv(tl.cdiv(length, SPLITS), BLOCK) * BLOCK
    start = s * chunk
    end = tl.minimum(length, start + chunk)
    rg = tl.arange(0, G_P)
    rd = tl.arange(0, D)
    g_ok = rg < G
    if PDL:  # q comes from the kernel before; the rows and lengths were copied before the graph ran
        tl.extra.cuda.gdc_wait()
    q = _load_q(q_ptr, b, h, stride_qt, stride_qh, G, G_P, D)
    if PRESCALE:
        q = (q.to(tl.float32) * qk_scale).to(DOT)
        score_scale = 1.0
    else:
        q = q.to(DOT)
        score_scale = qk_scale
    acc, row_sum, m = _attend(q, kc_ptr, vc_ptr, slots_ptr, start, end, h, score_scale, HK, G_P, D, BLOCK, DOT, IEEE)
    filled = row_sum > 0
    o = tl.where(filled[:, None], acc / tl.where(filled, row_sum, 1.0)[:, None] * v_scale, 0.0)
    lse = tl.where(filled, m + tl.log2(tl.where(filled, row_sum, 1.0)), float("-inf"))
    row = b * (HK * G) + h * G + rg
    tl.store(lse_ptr + row * SPLITS + s, lse, mask=g_ok)
    tl.store(o_ptr + (row * SPLITS + s)[:, None] * D + rd[None, :], o, mask=g_ok[:, None])
    # Every thread's stores, then one release-acquire count: the last program in sees all slices.
    tl.debug_barrier()
    if tl.atomic_add(arrivals_ptr + b * HK + h, 1, sem="acq_rel", scope="gpu") == SPLITS - 1:
        tl.store(arrivals_ptr + b * HK + h, 0)
        _merge(o_ptr, lse_ptr, out_ptr, b * (HK * G) + h * G, G, G_M, D, SPLITS)
    if PDL:  # (at the end, as the GEMVs: a kernel launched at the start waits on the SMs meanwhile)
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _whole_kernel(q_ptr, kc_ptr, vc_ptr, table_ptr, rows_ptr, lens_ptr, out_ptr, stride_qt, stride_qh, table_width,
                  qk_scale, v_scale, HK: tl.constexpr, G: tl.constexpr, G_P: tl.constexpr, D: tl.constexpr,
                  BLOCK: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr, PDL: tl.constexpr):
    """Program (request b, KV head h): the G query heads of h over all of b's tokens, written to
    out[b, h * G + g]. q is scaled by qk_scale in float32 before it is cast to DOT (float16 keeps
    no exponent range to spare)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    length = tl.load(lens_ptr + b)
    slots_ptr = table_ptr + tl.load(rows_ptr + b).to(tl.int64) * table_width
    if PDL:
        tl.extra.cuda.gdc_wait()
    q = (_load_q(q_ptr, b, h, stride_qt, stride_qh, G, G_P, D).to(tl.float32) * qk_scale).to(DOT)
    acc, row_sum, _ = _attend(q, kc_ptr, vc_ptr, slots_ptr, 0, length, h, 1.0, HK, G_P, D, BLOCK, DOT, IEEE)
    rg = tl.arange(0, G_P)
    rd = tl.arange(0, D)
    o = acc / row_sum[:, None] * v_scale
    tl.store(out_ptr + (b * (HK * G) + h * G + rg)[:, None] * D + rd[None, :], o.to(out_ptr.dtype.element_ty),
             mask=(rg < G)[:, None])
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _merge(o_ptr, lse_ptr, out_ptr, first_row, G: tl.constexpr, G_M: tl.constexpr, D: tl.constexpr,
           SPLITS: tl.constexpr):
    """Rows first_row + [0, G) of out: the softmax-weighted sum of their slices' outputs, all loaded
    at once (a slice loop would wait on L2 once a slice). Through L2 (.cg): other SMs wrote them."""
    rows = first_row + tl.arange(0, G_M)
    rs = tl.arange(0, SPLITS)
    rd = tl.arange(0, D)
    ok = tl.arange(0, G_M) < G
    lse = tl.load(lse_ptr + rows[:, None] * SPLITS + rs[None, :], mask=ok[:, None], other=float("-inf"),
                  cache_modifier=".cg")
    filled = lse > float("-inf")
    w = tl.where(filled, tl.exp2(lse - tl.max(lse, 1)[:, None]), 0.0)
    parts = tl.load(o_ptr + (rows[:, None, None] * SPLITS + rs[None, :, None]) * D + rd[None, None, :],
                    mask=filled[:, :, None], other=0.0, cache_modifier=".cg")
    merged = tl.sum(w[:, :, None] * parts, 1) / tl.where(ok, tl.sum(w, 1), 1.0)[:, None]
    tl.store(out_ptr + rows[:, None] * D + rd[None, :], merged.to(out_ptr.dtype.element_ty), mask=ok[:, None])


@functools.cache
def _arrivals(device: torch.device) -> torch.Tensor:
    """The split kernels' counts a (request, KV head), zero between launches (the last program in
    resets its count); one buffer for every layer, whose kernels run one after another."""
    return torch.zeros(MAX_ARRIVALS, dtype=torch.int32, device=device)


def _fullest_waves(programs: int, device: torch.device, compiled, choices=(1, 2)) -> int:
    """Of the warps a program in `choices`, the one whose last wave of programs is the fullest, as
    the compiled kernels (`compiled(warps)`) fit on an SM (the first on a tie). Over FP8 pages a
    whole-request program's time is set by its conversions, so a part-empty last wave costs close
    to a full one: at 96 and 192 requests two warps a program (six an SM) beat one (eight an SM) by
    10-13%, at 128 one beats two by 15% (H100, Qwen3-0.6B; benchmark/NOTES.md). Where the
    compiled kernel's resources cannot be read (another Triton), the first choice."""
    def fill(warps: int) -> float:
        slots = resident_programs(compiled(warps), device) * sm_count(device)
        return programs / (math.ceil(programs / slots) * slots)

    try:
        return max(choices, key=fill)
    except (AttributeError, TypeError) as e:
        logger.warning("decode attention: %s; its whole-request programs keep %d warp(s)", e, choices[0])
        return choices[0]


def launch_shape(batch: int, kv_heads: int, device: torch.device | None = None, fp8: bool = False
                 ) -> tuple[int, int]:
    """(slices a request is cut into, warps a program) over the batch's KV heads on `device`.

    Slices: about two programs an SM, a power of two rounded down, at most MAX_SPLITS; a whole
    request (one slice) runs on two warps, a slice on four. Over FP8 pages from a few requests on,
    where that gives fewer than 8 slices, eight one-warp programs an SM instead (the power of two
    nearest): the conversions, not the loads, bound a warp there, and two programs an SM read
    Qwen3-0.6B's pages at 1.2-1.9 TB/s at 16-64 requests, eight at 1.9-2.6 from 16 to 256 requests
    (benchmark/NOTES.md). At 1-4 requests long four-warp slices stay faster. A whole request over
    FP8 takes one or two warps, as decode_attention's _fullest_waves picks."""
    pairs, sms = max(1, batch * kv_heads), sm_count(device)
    splits = min(MAX_SPLITS, 1 << int(math.log2(max(1, 2 * sms // pairs))))
    if fp8 and splits < 8:
        return min(MAX_SPLITS, 1 << max(0, round(math.log2(8 * sms / pairs)))), 1
    return splits, 2 if splits == 1 else 4


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
                     rows: torch.Tensor, lengths: torch.Tensor, sm_scale: float, k_scale: float = 1.0,
                     v_scale: float = 1.0, splits: int | None = None) -> torch.Tensor:
    """q [batch, qo_heads, D] (last dim contiguous) attending over each request's cached tokens:
    k_cache / v_cache [slots, kv_heads, D] (q's dtype, or FP8 holding k / k_scale, v / v_scale),
    request i's token t at slot page_table[rows[i], t] for t < lengths[i] (int32 [batch] each,
    every length at least 1; page_table int32 [table rows, width], rows contiguous). Returns
    [batch, qo_heads, D] in q's dtype."""
    batch, qo_heads, d = q.shape
    kv_heads = k_cache.shape[1]
    if q.stride(-1) != 1 or not k_cache.is_contiguous() or not v_cache.is_contiguous() or d & (d - 1):
        raise ValueError("decode_attention needs q's last dim contiguous, contiguous [slots, kv_heads, D] "
                         f"caches and a power-of-two head dim (got {d})")
    group = qo_heads // kv_heads
    fp8 = k_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    auto_splits, warps = launch_shape(batch, kv_heads, q.device, fp8)
    splits = splits or auto_splits
    out = torch.empty((batch, qo_heads, d), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    pdl = pdl_supported(q.device)
    g_p = max(16, triton.next_power_of_2(group))
    qk_scale = sm_scale * k_scale * math.log2(math.e)
    # FP8 pages through float16 dots: e4m3 and e5m2 convert to it exactly in one step (to bf16
    # they go through float32), q scaled first in float32 (float16 keeps no exponent to spare).
    prescale = fp8 and q.is_cuda
    dot = tl.bfloat16 if q.dtype == torch.bfloat16 and not prescale else tl.float16
    if not q.is_cuda:  # (Triton's CPU interpreter mishandles 16-bit dots)
        dot = tl.float32
    if splits == 1:
        args = (q, k_cache, v_cache, page_table, rows, lengths, out, q.stride(0), q.stride(1), page_table.stride(0),
                qk_scale, v_scale)
        kw = dict(HK=kv_heads, G=group, G_P=g_p, D=d, BLOCK=WHOLE_BLOCK_N, DOT=dot, IEEE=not q.is_cuda, PDL=pdl,
                  num_stages=WHOLE_STAGES, **pdl_launch(pdl))
        if fp8 and q.is_cuda and auto_splits == 1:
            warps = _fullest_waves(batch * kv_heads, q.device, lambda w: _whole_kernel.warmup(
                *args, grid=(batch, kv_heads), num_warps=w, **kw))
        _whole_kernel[(batch, kv_heads)](*args, num_warps=warps, **kw)
        return out
    if batch * kv_heads > MAX_ARRIVALS:
        raise ValueError(f"decode_attention takes at most {MAX_ARRIVALS} (request, KV head) pairs in slices, "
                         f"got {batch} x {kv_heads}")
    o = torch.empty((batch * qo_heads, splits, d), dtype=torch.float32, device=q.device)
    lse = torch.empty((batch * qo_heads, splits), dtype=torch.float32, device=q.device)
    _split_kernel[(batch, kv_heads, splits)](
        q, k_cache, v_cache, page_table, rows, lengths, o, lse, out, _arrivals(q.device), q.stride(0), q.stride(1),
        page_table.stride(0), qk_scale, v_scale, HK=kv_heads, G=group, G_P=g_p, G_M=triton.next_power_of_2(group),
        D=d, SPLITS=splits, BLOCK=BLOCK_N, DOT=dot, PRESCALE=prescale, IEEE=not q.is_cuda, PDL=pdl, num_warps=warps,
        **pdl_launch(pdl))
    return out
