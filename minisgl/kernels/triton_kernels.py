"""Triton kernels for the CUDA hot path. Imported only when a CUDA tensor needs them, so the
package runs where triton is missing (the callers fall back to torch / FlashInfer).

- `qk_norm_rope_store`: per-head RMSNorm of q and k (Qwen3; optional), rotary embedding, and the
  store of k and v into this layer's KV cache, in one pass over each token's q/k/v (instead of
  five kernels: two norms, rope, two index copies).
- `add_rmsnorm`: the pre-norm layer's residual add + RMSNorm, on Hopper in place of FlashInfer's:
  it lets the kernel after it (the next GEMM) launch while it runs (programmatic dependent launch).
- `gather_decode_inputs`: a decode graph's positions, token ids, KV slots (and where its next
  tokens go, and the attention's rows and lengths) from its one copied buffer of positions and
  token-table indices, inside the graph (one kernel, not four ops and two copies outside).
- `sample_gumbel_max`: temperature sampling straight from (bf16 or fp32) logits in one pass:
  argmax(logits / T + Gumbel noise), greedy argmax where T == 0 (or for every row).
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from minisgl.utils import env

# An H100's (and H200's) SMs. The Triton kernels' grids are sized against it (programs per SM), as
# fixed tables: a CUDA graph capture must not autotune.
N_SMS = 132


@triton.jit
def _qk_norm_rope_store_kernel(
    q_ptr, k_ptr, v_ptr, q_out_ptr, qw_ptr, kw_ptr, cos_sin_ptr, pos_ptr, loc_ptr, kc_ptr, vc_ptr,
    q_st, q_sh, k_st, k_sh, v_st, v_sh, eps, k_inv_scale, v_inv_scale,
    HQ: tl.constexpr, HK: tl.constexpr, HQ_P: tl.constexpr, HK_P: tl.constexpr, D: tl.constexpr,
    NORM: tl.constexpr, PDL: tl.constexpr,
):
    HALF: tl.constexpr = D // 2
    if PDL:  # wait for the qkv GEMM, then let the attention kernel after this one launch at once
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    t = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + t).to(tl.int64)
    loc = tl.load(loc_ptr + t).to(tl.int64)
    offs = tl.arange(0, HALF)
    cos = tl.load(cos_sin_ptr + pos * D + offs)[None, :]
    sin = tl.load(cos_sin_ptr + pos * D + HALF + offs)[None, :]

    # q heads -> q_out [T, HQ, D] (contiguous)
    hq = tl.arange(0, HQ_P)[:, None]
    mq = hq < HQ
    src = q_ptr + t * q_st + hq * q_sh + offs[None, :]
    x1 = tl.load(src, mask=mq, other=0.0).to(tl.float32)
    x2 = tl.load(src + HALF, mask=mq, other=0.0).to(tl.float32)
    if NORM:
        r = tl.rsqrt((tl.sum(x1 * x1, 1) + tl.sum(x2 * x2, 1)) / D + eps)[:, None]
        x1 = x1 * r * tl.load(qw_ptr + offs).to(tl.float32)[None, :]
        x2 = x2 * r * tl.load(qw_ptr + HALF + offs).to(tl.float32)[None, :]
    dst = q_out_ptr + t * (HQ * D) + hq * D + offs[None, :]
    tl.store(dst, (x1 * cos - x2 * sin).to(q_out_ptr.dtype.element_ty), mask=mq)
    tl.store(dst + HALF, (x2 * cos + x1 * sin).to(q_out_ptr.dtype.element_ty), mask=mq)

    # k heads -> the cache slot `loc`
    hk = tl.arange(0, HK_P)[:, None]
    mk = hk < HK
    src = k_ptr + t * k_st + hk * k_sh + offs[None, :]
    y1 = tl.load(src, mask=mk, other=0.0).to(tl.float32)
    y2 = tl.load(src + HALF, mask=mk, other=0.0).to(tl.float32)
    if NORM:
        r = tl.rsqrt((tl.sum(y1 * y1, 1) + tl.sum(y2 * y2, 1)) / D + eps)[:, None]
        y1 = y1 * r * tl.load(kw_ptr + offs).to(tl.float32)[None, :]
        y2 = y2 * r * tl.load(kw_ptr + HALF + offs).to(tl.float32)[None, :]
    dst = kc_ptr + loc * (HK * D) + hk * D + offs[None, :]
    # An FP8 cache holds k / k_scale; the conversion saturates (satfinite) on Hopper.
    tl.store(dst, ((y1 * cos - y2 * sin) * k_inv_scale).to(kc_ptr.dtype.element_ty), mask=mk)
    tl.store(dst + HALF, ((y2 * cos + y1 * sin) * k_inv_scale).to(kc_ptr.dtype.element_ty), mask=mk)

    # v -> the cache slot `loc` (times 1 / v_scale: exact for a cache of v's own dtype and scale 1)
    full = tl.arange(0, D)[None, :]
    vals = tl.load(v_ptr + t * v_st + hk * v_sh + full, mask=mk).to(tl.float32)
    tl.store(vc_ptr + loc * (HK * D) + hk * D + full, (vals * v_inv_scale).to(vc_ptr.dtype.element_ty), mask=mk)


def qk_norm_rope_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor,
                       cos_sin: torch.Tensor, out_loc: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       q_weight: torch.Tensor | None = None, k_weight: torch.Tensor | None = None,
                       eps: float = 1e-6, k_scale: float = 1.0, v_scale: float = 1.0) -> torch.Tensor:
    """q [T, HQ, D], k/v [T, HK, D] (last dim contiguous, any token/head strides); cos_sin float32
    [positions, D] (cos half, sin half); k_cache/v_cache [slots, HK, D] contiguous (of q's dtype or
    FP8, which stores k / k_scale and v / v_scale). Writes the normed, rotated k and v at
    `out_loc`; returns the normed, rotated q as a new [T, HQ, D] tensor."""
    tokens, hq, d = q.shape
    hk = k.shape[1]
    q_out = torch.empty((tokens, hq, d), dtype=q.dtype, device=q.device)
    if tokens == 0:
        return q_out
    norm = q_weight is not None
    args = (q, k, v, q_out, q_weight if norm else q, k_weight if norm else k, cos_sin, positions, out_loc, k_cache,
            v_cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), eps,
            1.0 / k_scale, 1.0 / v_scale)
    pdl = pdl_supported(q.device)
    consts = {"HQ": hq, "HK": hk, "HQ_P": triton.next_power_of_2(hq), "HK_P": triton.next_power_of_2(hk), "D": d,
              "NORM": norm, "PDL": pdl}
    _launch(_qk_norm_rope_store_kernel, (tokens, 1, 1), args, consts, num_warps=4, **pdl_launch(pdl))
    return q_out


@functools.cache
def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch (a kernel launched before the one ahead of it is done, which
    it waits for in-kernel): Hopper and newer, with a Triton that has it. FlashInfer's kernels
    launch that way there too. Off with MINISGL_DISABLE_PDL=1 (read once a process)."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 9 or env.DISABLE_PDL.on():
        return False
    from triton.backends.nvidia.compiler import CUDAOptions

    return "launch_pdl" in CUDAOptions.__dataclass_fields__ and hasattr(tl.extra.cuda, "gdc_wait")


def pdl_launch(pdl: bool) -> dict:
    return {"launch_pdl": True} if pdl else {}  # (Triton's CPU interpreter takes no such option)


@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, stride_x, stride_r, D, eps, BLOCK: tl.constexpr, PDL: tl.constexpr):
    """Row t: r[t] = x[t] + r[t] (rounded to the model dtype, as HF adds), x[t] = rmsnorm(r[t]) * w.
    PDL: wait for the kernel before (it wrote x), then at once let the kernel after launch: it
    waits for this one to finish, but is launched and placed on the SMs meanwhile, where a
    trigger at the end (FlashInfer's norms) adds its launch to every layer's critical path
    (Llama-3.1-8B, FP8, batch 1, the step's GEMMs and 64 norms: 3.375 ms against 3.434)."""
    t = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    x = tl.load(x_ptr + t * stride_x + offs, mask=mask, other=0.0)
    dtype = x.dtype  # float32 math, rounded to it where torch's half-precision ops round
    h = (x.to(tl.float32) + tl.load(r_ptr + t * stride_r + offs, mask=mask, other=0.0).to(tl.float32)).to(dtype)
    tl.store(r_ptr + t * stride_r + offs, h, mask=mask)
    hf = h.to(tl.float32)
    normed = (hf * tl.rsqrt(tl.sum(hf * hf, 0) / D + eps)).to(dtype)
    tl.store(x_ptr + t * stride_x + offs, (normed.to(tl.float32) * w.to(tl.float32)).to(dtype), mask=mask)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, pdl: bool) -> None:
    """In place, x and residual [rows, D] (last dim contiguous): residual += x, then x =
    RMSNorm(residual) * weight, as minisgl.layers.RMSNorm computes it in torch."""
    rows, d = x.shape
    if rows:
        _launch(_add_rmsnorm_kernel, (rows, 1, 1), (x, residual, weight, x.stride(0), residual.stride(0), d, eps),
                {"BLOCK": triton.next_power_of_2(d), "PDL": pdl}, num_warps=8, **pdl_launch(pdl))


@triton.jit
def _decode_inputs_kernel(step_ptr, tokens_ptr, table_ptr, pos_ptr, ids_ptr, loc_ptr, next_ptr, rows_lens_ptr, bs,
                          width, BLOCK: tl.constexpr, ROWS_LENS: tl.constexpr):
    i = tl.arange(0, BLOCK)
    ok = i < bs
    pos = tl.load(step_ptr + i, mask=ok)
    flat = tl.load(step_ptr + bs + i, mask=ok)
    tl.store(pos_ptr + i, pos, mask=ok)
    tl.store(ids_ptr + i, tl.load(tokens_ptr + flat, mask=ok), mask=ok)
    tl.store(loc_ptr + i, tl.load(table_ptr + flat, mask=ok).to(loc_ptr.dtype.element_ty), mask=ok)
    tl.store(next_ptr + i, flat + 1, mask=ok)
    if ROWS_LENS:
        tl.store(rows_lens_ptr + i, (flat // width).to(tl.int32), mask=ok)
        tl.store(rows_lens_ptr + bs + i, (pos + 1).to(tl.int32), mask=ok)


def gather_decode_inputs(step: torch.Tensor, token_pool: torch.Tensor, page_table: torch.Tensor,
                         positions: torch.Tensor, input_ids: torch.Tensor, out_loc: torch.Tensor,
                         next_index: torch.Tensor, rows_lens: torch.Tensor | None = None) -> None:
    """For bs = len(positions) decode requests, `step` (int64 [2 bs]) holds each one's position
    and then its index into the flattened token pool / page table (row * width + position):
    writes positions, input_ids = token_pool[index], out_loc = page_table[index] (the slot its
    new KV goes to), next_index = index + 1 (where its sampled token goes) and, if given,
    rows_lens (int32 [2 bs]) = each one's table row, then its length (position + 1). Token pool
    and page table have the same [rows, width] shape."""
    bs = positions.shape[0]
    if bs:
        args = (step, token_pool, page_table, positions, input_ids, out_loc, next_index,
                positions if rows_lens is None else rows_lens, bs, page_table.shape[1])
        _launch(_decode_inputs_kernel, (1, 1, 1), args,
                {"BLOCK": triton.next_power_of_2(bs), "ROWS_LENS": rows_lens is not None},
                num_warps=1 if bs <= 32 else 4)


_COMPILED: dict = {}


def _launch(kernel, grid, args, consts, **options) -> None:
    """kernel[grid](*args, **consts), minus Triton's per-call argument binding and specialization
    (tens of microseconds of host time, which adds up in eager prefill): the compiled kernel is
    kept per specialization key (dtypes, 16-byte alignment of pointers, integer values' ==1 and
    %16 classes, the constexprs) and launched directly."""
    key = (kernel, tuple(_spec(a) for a in args), tuple(consts.items()))
    compiled = _COMPILED.get(key)
    if compiled is None:
        _COMPILED[key] = kernel[grid[:1] if grid[1:] == (1, 1) else grid](*args, **consts, **options)
        return
    compiled[grid](*args, *consts.values())


def _spec(a):
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    if isinstance(a, bool) or not isinstance(a, int):
        return type(a)
    return int, a == 1, a % 16 == 0


@triton.jit(do_not_specialize=["seed"])  # a new seed every call: no recompiles on its value
def _gumbel_max_kernel(logits_ptr, stride_row, temps_ptr, val_ptr, idx_ptr, seed, vocab: tl.constexpr,
                       CHUNK: tl.constexpr, SPLITS: tl.constexpr, BLOCK: tl.constexpr, GREEDY: tl.constexpr):
    """Program (row, split) finds the best score in vocab[split * CHUNK : (split + 1) * CHUNK].
    GREEDY: every row's argmax (no temperatures, no noise)."""
    B4: tl.constexpr = BLOCK // 4
    row = tl.program_id(0)
    split = tl.program_id(1)
    if not GREEDY:
        temp = tl.load(temps_ptr + row).to(tl.float32)
        greedy = temp <= 0.0
        inv_t = 1.0 / tl.where(greedy, 1.0, temp)
    row_ptr = logits_ptr + row.to(tl.int64) * stride_row
    r = tl.arange(0, B4)[:, None]
    c = tl.arange(0, 4)[None, :]
    best_val = tl.full((), float("-inf"), tl.float32)
    best_idx = tl.full((), 0, tl.int32)
    for start in range(0, CHUNK, BLOCK):
        base = split * CHUNK + start
        offs = base + r * 4 + c  # [BLOCK / 4, 4]: one Philox draw gives the 4 uniforms of a row
        mask = offs < vocab
        x = tl.load(row_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32)
        if GREEDY:
            score = x
        else:
            u0, u1, u2, u3 = tl.rand4x(seed, row * (vocab // 4 + 1) + base // 4 + tl.arange(0, B4))
            u = tl.where(c == 0, u0[:, None], tl.where(c == 1, u1[:, None], tl.where(c == 2, u2[:, None], u3[:, None])))
            # Exponential race / Gumbel max: argmax(x / T - log(E)), E = -log(U) ~ Exp(1).
            score = tl.where(greedy, x, x * inv_t - tl.log(-tl.log(u)))
        score = tl.where(mask, score, float("-inf"))
        m = tl.max(tl.max(score, 1), 0)
        # The first offset reaching the maximum (no reshape: it may reorder elements).
        i = tl.min(tl.min(tl.where(score == m, offs, 2147483647), 1), 0).to(tl.int32)
        take = m > best_val
        best_idx = tl.where(take, i, best_idx)
        best_val = tl.where(take, m, best_val)
    tl.store(val_ptr + row * SPLITS + split, best_val)
    tl.store(idx_ptr + row * SPLITS + split, best_idx)


@triton.jit
def _best_of_splits_kernel(val_ptr, idx_ptr, out_ptr, host_ptr, pool_ptr, pool_index_ptr, SPLITS: tl.constexpr,
                           HOST: tl.constexpr, POOL: tl.constexpr):
    """Program (row): the winner of its splits' best scores, the lowest token index on a tie;
    also into pinned host memory (HOST) and the token pool at the row's index (POOL)."""
    row = tl.program_id(0)
    r = tl.arange(0, SPLITS)
    val = tl.load(val_ptr + row * SPLITS + r)
    idx = tl.load(idx_ptr + row * SPLITS + r)
    token = tl.min(tl.where(val == tl.max(val, 0), idx, 2147483647), 0)
    tl.store(out_ptr + row, token)
    if HOST:
        tl.store(host_ptr + row, token)
    if POOL:
        tl.store(pool_ptr + tl.load(pool_index_ptr + row), token)


# Up to WIDE_ROWS rows, a row is cut into slices of one 1,024-token block each, read at once
# (Llama-3's 128,256 tokens: 128 programs at batch 1, where torch's argmax walks the row in one
# program, 37 us of a 3.4 ms step on an H100). More rows fill the GPU by themselves: GUMBEL_SPLITS
# slices a row, and greedy rows take torch's argmax (benchmark/NOTES.md, issue 16).
GUMBEL_BLOCK, GUMBEL_SPLITS, WIDE_ROWS = 1024, 16, 16


def sample_gumbel_max(logits: torch.Tensor, temperatures: torch.Tensor | None, seed: int = 0,
                      host: torch.Tensor | None = None, pool: torch.Tensor | None = None,
                      pool_index: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row of `logits` [rows, vocab] (last dim contiguous), int32: a draw from
    softmax(logits / T) where T > 0, the argmax where T <= 0 (every row's where `temperatures` is
    None). Same seed, same draws. Each row is split over several programs, then one program a
    row picks the winner and writes it, also into `host` (int32 [rows], pinned: read it after an
    event recorded behind this) and `pool` (flat int32) at `pool_index` (int64 [rows]) if given:
    no copy op and no index kernel after it (a few us each of a ~3.3 ms batch-1 step)."""
    rows, vocab = logits.shape
    block = GUMBEL_BLOCK
    splits = triton.next_power_of_2(-(-vocab // block)) if rows <= WIDE_ROWS else GUMBEL_SPLITS
    chunk = triton.cdiv(triton.cdiv(vocab, splits), block) * block  # (one block up to WIDE_ROWS rows)
    vals = torch.empty(rows, splits, dtype=torch.float32, device=logits.device)
    idxs = torch.empty(rows, splits, dtype=torch.int32, device=logits.device)
    out = torch.empty(rows, dtype=torch.int32, device=logits.device)
    if rows == 0:
        return out
    greedy = temperatures is None
    # `seed` is not specialized on (do_not_specialize): the key ignores its value.
    _launch(_gumbel_max_kernel, (rows, splits, 1),
            (logits, logits.stride(0), logits if greedy else temperatures, vals, idxs, seed),
            {"vocab": vocab, "CHUNK": chunk, "SPLITS": splits, "BLOCK": block, "GREEDY": greedy}, num_warps=4)
    args = (vals, idxs, out, out if host is None else host, out if pool is None else pool,
            out if pool_index is None else pool_index)
    _launch(_best_of_splits_kernel, (rows, 1, 1), args,
            {"SPLITS": splits, "HOST": host is not None, "POOL": pool is not None}, num_warps=4)
    return out
