"""minisgl.kernels.decode_attention (small-batch decode attention: split-KV slices, the last one of
each request and KV head merging them; one program a request and KV head once the batch fills the
GPU) equals float32 softmax attention over each request's cached
tokens, gathered page by page (the kernel reads each token's slot from the per-token page table,
rows in any order): for lengths inside one page, on page edges and over many slices, grouped and
plain multi-head attention, pages out of order, and an FP8 cache with per-tensor scales; the
arrival counts are back at zero after every launch. On the CPU its kernels run
under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1); the device runs this file
on the GPU too.

    python -m pytest tests/kernels/test_decode_attention.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.decode_attention import (  # noqa: E402
    MAX_ARRIVALS,
    MAX_SPLITS,
    _arrivals,
    _fullest_waves,
    decode_attention,
    launch_shape,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
PAGE = 16


def paged_problem(lengths: list[int], heads: int, kv_heads: int, dim: int, cache_dtype=torch.bfloat16):
    """Random q and a random cache with each request's pages scattered over it."""
    torch.manual_seed(sum(lengths) + heads + kv_heads)
    pages_each = [-(-n // PAGE) for n in lengths]
    total_pages = sum(pages_each) + 3
    order = torch.randperm(total_pages)[: sum(pages_each)]
    k_cache = torch.randn(total_pages * PAGE, kv_heads, dim).to(cache_dtype)
    v_cache = torch.randn(total_pages * PAGE, kv_heads, dim).to(cache_dtype)
    indptr = torch.tensor([0] + list(torch.tensor(pages_each).cumsum(0)), dtype=torch.int32)
    last = torch.tensor([n - (p - 1) * PAGE for n, p in zip(lengths, pages_each)], dtype=torch.int32)
    q = torch.randn(len(lengths), heads, dim).to(torch.bfloat16)
    return q, k_cache, v_cache, indptr, order.to(torch.int32), last


def reference(q, k_cache, v_cache, indptr, indices, lengths, sm_scale, k_scale=1.0, v_scale=1.0):
    group = q.shape[1] // k_cache.shape[1]
    out = []
    for i, n in enumerate(lengths):
        pages = indices[indptr[i] : indptr[i + 1]].long()
        slots = (pages[:, None] * PAGE + torch.arange(PAGE)).flatten()[:n]
        k = k_cache[slots].float().repeat_interleave(group, dim=1) * k_scale  # [n, heads, dim]
        v = v_cache[slots].float().repeat_interleave(group, dim=1) * v_scale
        scores = torch.einsum("hd,nhd->hn", q[i].float(), k) * sm_scale
        out.append(torch.einsum("hn,nhd->hd", scores.softmax(-1), v))
    return torch.stack(out)


def slot_table(indptr, indices, lengths, width=1024):
    """The engine's page table for these requests: row i + 1 holds request i's token slots (row 0
    unused, so that rows must be looked up), the rest of each row zeros."""
    table = torch.zeros(len(lengths) + 1, width, dtype=torch.int32)
    for i, n in enumerate(lengths):
        pages = indices[indptr[i] : indptr[i + 1]].long()
        table[i + 1, :n] = (pages[:, None] * PAGE + torch.arange(PAGE)).flatten()[:n].to(torch.int32)
    return table


def run(lengths, heads=8, kv_heads=2, dim=64, cache_dtype=torch.bfloat16, scales=(1.0, 1.0), splits=None):
    """The kernel's output against the float32 reference; returns it."""
    q, kc, vc, indptr, indices, _ = paged_problem(lengths, heads, kv_heads, dim, cache_dtype)
    sm_scale = dim**-0.5
    table = slot_table(indptr, indices, lengths)
    rows = torch.arange(1, len(lengths) + 1, dtype=torch.int32)
    lens = torch.tensor(lengths, dtype=torch.int32)
    got = decode_attention(q.to(DEVICE), kc.to(DEVICE), vc.to(DEVICE), table.to(DEVICE), rows.to(DEVICE),
                           lens.to(DEVICE), sm_scale, *scales, splits=splits)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    want = reference(q, kc, vc, indptr, indices, lengths, sm_scale, *scales)
    # float32 softmax and sums; the bf16 output's rounding (2^-9 relative) and, on the GPU, bf16
    # probabilities into the P @ V product (2^-9 each) bound the error.
    torch.testing.assert_close(got.float().cpu(), want, rtol=2e-2, atol=2e-2)
    return got


@pytest.mark.parametrize("lengths", [[1], [5, 16, 17], [138], [33, 1, 64, 300]])
def test_grouped_query_attention_over_scattered_pages(lengths):
    run(lengths)


def test_more_slices_than_tokens_leave_empty_slices_out_of_the_merge():
    run([3, 40], splits=16)  # 16 slices of 32 tokens: at most two hold any


def test_one_slice_walks_the_whole_request():
    run([200], splits=1)


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_a_batch_that_fills_the_gpu_walks_each_request_in_one_program(cache_dtype):
    """128 requests x 8 KV heads: one slice each, so no partials and no merge (FP8 through float16
    dots on the GPU)."""
    lengths = [1 + (37 * i) % 90 for i in range(128)]
    assert launch_shape(len(lengths), 8, fp8=cache_dtype != torch.bfloat16)[0] == 1
    run(lengths, heads=16, kv_heads=8, dim=64, cache_dtype=cache_dtype, scales=(0.5, 2.0))
    assert not _arrivals(DEVICE).any()


def test_plain_multi_head_attention():
    run([20, 70], heads=4, kv_heads=4)


@pytest.mark.parametrize("cache_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_an_fp8_cache_is_read_with_its_scales(cache_dtype):
    run([50, 129], cache_dtype=cache_dtype, scales=(0.5, 2.0))


def test_slices_fill_the_gpu_and_stay_bounded():
    assert launch_shape(1, 8) == (32, 4)  # Llama-3.1-8B at one request: 256 four-warp programs for 132 SMs
    assert launch_shape(8, 8) == (4, 4)
    assert launch_shape(1, 1) == (MAX_SPLITS, 4)
    assert launch_shape(64, 8) == (1, 2)  # a whole request a program


def test_over_fp8_a_few_requests_keep_long_slices_and_more_get_eight_one_warp_programs_an_sm():
    assert launch_shape(1, 8, fp8=True) == (32, 4)
    assert launch_shape(4, 8, fp8=True) == (8, 4)
    # 8 x 8 x 16 = 1,024 one-warp programs for 132 SMs (two an SM would be 4 slices of four warps)
    assert launch_shape(8, 8, fp8=True) == (16, 1)
    assert launch_shape(64, 8, fp8=True) == (2, 1)  # the nearer power of two to 8 x 132 / 512
    assert launch_shape(96, 8, fp8=True) == (1, 1)
    assert launch_shape(256, 8, fp8=True) == (1, 1)


def test_whole_request_warps_fall_back_to_one_where_the_compiled_kernel_cannot_be_read():
    """The warps are picked by how the compiled kernels fit an SM; a kernel object without that
    information (another Triton's) leaves one warp, not an error in the middle of a graph capture."""
    assert _fullest_waves(1024, DEVICE, lambda warps: object()) == 1


def test_each_launch_leaves_the_arrival_counts_at_zero_for_the_next():
    first = run([33, 1, 64, 300])
    assert not _arrivals(DEVICE).any()
    again = run([33, 1, 64, 300])  # (a count left over would make a program merge too early)
    assert torch.equal(first, again) and not _arrivals(DEVICE).any()


def test_more_request_and_head_pairs_than_counts_are_refused():
    q = torch.zeros(MAX_ARRIVALS // 8 + 1, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    cache = torch.zeros(16, 8, 64, dtype=torch.bfloat16, device=DEVICE)
    rows = torch.zeros(q.shape[0], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="at most 4096"):  # (one slice each needs no counts)
        decode_attention(q, cache, cache, torch.zeros(1, 16, dtype=torch.int32, device=DEVICE), rows, rows + 1, 0.1,
                         splits=2)
