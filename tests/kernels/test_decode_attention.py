"""minisgl.kernels.decode_attention (decode attention in the CUDA graphs: a step's requests cut
into chunks of about one size by one planning program, longest request first; one program a (KV
head, chunk); the last chunk of a request in merging them) equals float32 softmax attention over
each request's cached tokens, gathered page by page (the kernel reads each token's slot from the
per-token page table, rows in any order): for lengths inside one page, on page edges and over
many chunks, grouped and plain multi-head attention, pages out of order, and an FP8 cache with
per-tensor scales; the plan tiles every request exactly; the arrival counts are back at zero
after every launch. On the CPU its kernels run under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1); the device runs this file on the GPU too.

    python -m pytest tests/kernels/test_decode_attention.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.decode_attention import (  # noqa: E402
    MAX_ARRIVALS,
    MAX_CHUNKS,
    WHOLE_BLOCK_N,
    _arrivals,
    chunk_shape,
    decode_attention,
    launch_shape,
    plan_chunks,
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
    width = max(width, max(lengths))
    """The engine's page table for these requests: row i + 1 holds request i's token slots (row 0
    unused, so that rows must be looked up), the rest of each row zeros."""
    table = torch.zeros(len(lengths) + 1, width, dtype=torch.int32)
    for i, n in enumerate(lengths):
        pages = indices[indptr[i] : indptr[i + 1]].long()
        table[i + 1, :n] = (pages[:, None] * PAGE + torch.arange(PAGE)).flatten()[:n].to(torch.int32)
    return table


def run(lengths, heads=8, kv_heads=2, dim=64, cache_dtype=torch.bfloat16, scales=(1.0, 1.0)):
    """The kernel's output against the float32 reference; returns it."""
    q, kc, vc, indptr, indices, _ = paged_problem(lengths, heads, kv_heads, dim, cache_dtype)
    sm_scale = dim**-0.5
    table = slot_table(indptr, indices, lengths)
    rows = torch.arange(1, len(lengths) + 1, dtype=torch.int32)
    lens = torch.tensor(lengths, dtype=torch.int32)
    got = decode_attention(q.to(DEVICE), kc.to(DEVICE), vc.to(DEVICE), table.to(DEVICE), rows.to(DEVICE),
                           lens.to(DEVICE), sm_scale, *scales)
    assert got.dtype == torch.bfloat16 and got.shape == q.shape
    want = reference(q, kc, vc, indptr, indices, lengths, sm_scale, *scales)
    # float32 softmax and sums; the bf16 output's rounding (2^-9 relative) and, on the GPU, bf16
    # probabilities into the P @ V product (2^-9 each) bound the error.
    torch.testing.assert_close(got.float().cpu(), want, rtol=2e-2, atol=2e-2)
    return got


@pytest.mark.parametrize("lengths", [[1], [5, 16, 17], [138], [33, 1, 64, 300]])
def test_grouped_query_attention_over_scattered_pages(lengths):
    run(lengths)


def plan(lengths: list[int], kv_heads: int) -> tuple[list[tuple[int, int, int, int, int]], int]:
    """plan_chunks' list for these lengths: (request, start, end, chunks of the request, chunk)
    for each chunk, in the order listed; and how many rows the list has."""
    shape = chunk_shape(len(lengths), kv_heads, DEVICE)
    items = torch.full((shape.max_items, 4), -1, dtype=torch.int32, device=DEVICE)
    plan_chunks(torch.tensor(lengths, dtype=torch.int32, device=DEVICE), items, kv_heads)
    rows = items.cpu().tolist()
    assert all(end >= 0 for _, _, end, _ in rows)  # every row written (each began at -1)
    return [(b, start, end, ns // 65536, ns % 65536) for b, start, end, ns in rows if end > start], shape.max_items


def assert_tiles(chunks, lengths: list[int]) -> None:
    """Each request's chunks, numbered 0..n-1 and each knowing n, cover its tokens back to back in
    even chunks (the remainder last); the requests listed longest first."""
    order = [b for b, *_ in chunks]
    assert order == sorted(order, key=lambda b: -lengths[b])  # the GPU starts programs in this order
    for b, length in enumerate(lengths):
        mine = [(start, end, n, s) for r, start, end, n, s in chunks if r == b]
        assert [s for *_, s in mine] == list(range(len(mine))) and all(n == len(mine) for _, _, n, _ in mine)
        assert [start for start, *_ in mine] == [0] + [end for _, end, *_ in mine[:-1]]  # back to back
        assert mine[-1][1] == length  # to the last token
        sizes = [end - start for start, end, *_ in mine]
        assert all(size == sizes[0] for size in sizes[:-1]) and sizes[-1] <= sizes[0]  # even, the rest last


def test_the_plan_tiles_each_request_in_even_chunks_longest_request_first():
    lengths = [5, 2000, 17, 300, 1]
    chunks, _ = plan(lengths, kv_heads=2)
    assert_tiles(chunks, lengths)
    assert len([c for c in chunks if c[0] == 1]) > 1  # the long request spread over several programs


def test_the_plan_counts_billions_of_token_heads_without_overflow():
    """256 requests of 262,144 tokens over 32 KV heads: 2^31 token-heads (int32 would wrap, and
    the list would drop chunks)."""
    lengths = [262144] * 256
    chunks, rows = plan(lengths, kv_heads=32)
    assert len(chunks) <= rows
    assert_tiles(chunks, lengths)


def test_a_full_batch_keeps_each_request_whole_and_its_list_bounded():
    """256 requests of 100-1,100 tokens over 8 KV heads fill the GPU: most in one chunk, and the list
    stays within the rows chunk_shape sized it for."""
    lengths = [100 + (389 * i) % 1000 for i in range(256)]
    chunks, rows = plan(lengths, kv_heads=8)
    assert len(chunks) <= rows and len({b for b, *_ in chunks}) == 256
    assert sum(n == 1 for *_, n, _ in chunks) > 128


@pytest.mark.slow
def test_a_long_request_among_short_ones():
    run([5, 2000, 17, 300, 1])
    assert not _arrivals(DEVICE).any()


def first_whole_batch(kv_heads: int, fp8: bool) -> int:
    """The fewest requests over `kv_heads` KV heads at which whole requests take the long loop
    steps on DEVICE (17 over 8 KV heads of a 16-bit cache for 132 SMs, 94 over FP8, whose one-warp
    programs fill an SM eight at a time)."""
    return next(b for b in range(1, MAX_ARRIVALS) if chunk_shape(b, kv_heads, DEVICE, fp8=fp8).block == WHOLE_BLOCK_N)


@pytest.mark.slow
@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2])
def test_a_batch_that_fills_the_gpu(cache_dtype):
    """A batch just large enough that whole requests take the long loop steps, over 8 KV heads
    (FP8 through float16 dots on the GPU); lengths of 1-90 tokens, one or two steps each. The
    CPU's interpreter runs every program, so the batch is no larger than that."""
    fp8 = cache_dtype != torch.bfloat16
    lengths = [1 + (37 * i) % 90 for i in range(first_whole_batch(8, fp8))]
    assert max(lengths) > WHOLE_BLOCK_N  # some requests take two steps
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
    assert launch_shape(1, 1) == (MAX_CHUNKS, 4)
    assert launch_shape(64, 8) == (1, 2)  # a whole request a program


def test_over_fp8_a_few_requests_keep_long_slices_and_more_get_eight_one_warp_programs_an_sm():
    assert launch_shape(1, 8, fp8=True) == (32, 4)
    assert launch_shape(4, 8, fp8=True) == (8, 4)
    # 8 x 8 x 16 = 1,024 one-warp programs for 132 SMs (two an SM would be 4 slices of four warps)
    assert launch_shape(8, 8, fp8=True) == (16, 1)
    assert launch_shape(64, 8, fp8=True) == (2, 1)  # the nearer power of two to 8 x 132 / 512
    assert launch_shape(96, 8, fp8=True) == (1, 1)
    assert launch_shape(256, 8, fp8=True) == (1, 1)


def test_each_launch_leaves_the_arrival_counts_at_zero_for_the_next():
    first = run([33, 1, 64, 300])
    assert not _arrivals(DEVICE).any()
    again = run([33, 1, 64, 300])  # (a count left over would make a program merge too early)
    assert torch.equal(first, again) and not _arrivals(DEVICE).any()


def test_more_request_and_head_pairs_than_counts_are_refused():
    q = torch.zeros(MAX_ARRIVALS // 8 + 1, 8, 16, dtype=torch.bfloat16, device=DEVICE)
    cache = torch.zeros(16, 8, 16, dtype=torch.bfloat16, device=DEVICE)
    rows = torch.zeros(q.shape[0], dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match=f"at most {MAX_ARRIVALS}"):
        decode_attention(q, cache, cache, torch.zeros(1, 16, dtype=torch.int32, device=DEVICE), rows, rows + 1, 0.1)
