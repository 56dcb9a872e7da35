"""minisgl.kernels.lora.add_lora adds x @ A^T @ B^T of each token's own adapter to its rows, reading
the buffers minisgl.lora.LoraLinear writes, for tokens in runs of one adapter: a prefill's (each
request's tokens in place) and a decode graph's (the rows sorted by slot); the reference is that
sum, token by token. On the CPU
the kernels run under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1).

    python -m pytest tests/kernels/test_lora.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.lora import add_lora  # noqa: E402
from minisgl.lora import LoraBatchState, LoraLinear  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# The models' half precision; float16 under Triton's interpreter, which multiplies bfloat16 tiles
# (tl.dot) wrongly.
HALF = torch.bfloat16 if DEVICE.type == "cuda" else torch.float16


CASES = [
    (torch.float32, [(0, 96), (96, 32), (128, 32)], 16),  # a q/k/v layer
    (HALF, [(0, 80), (80, 80)], 8),  # gate/up
    (torch.float32, [(0, 200)], 4),  # o or down
]


def _pool(dtype, subs, rank, k, slots=4):
    """A layer's LoRA buffers with adapters of ranks below the pool's in slots 1.. (the padding
    stays zero), and what was written: (slot, sub) -> (A [r, in], B [out, r])."""
    torch.manual_seed(rank)
    lora = LoraLinear(k, subs, slots, rank, LoraBatchState(), dtype, DEVICE)
    written = {}
    for slot in range(1, slots):
        for sub, (_, rows) in enumerate(subs):
            r = rank - slot + 1
            written[slot, sub] = (torch.randn(r, k) / k**0.5, torch.randn(rows, r) / r**0.5)
            lora.write(slot, sub, *written[slot, sub])
    return lora, written


def _check(lora, written, subs, token_slots, dtype, runs):
    x = torch.randn(len(token_slots), lora.a.shape[1], dtype=dtype, device=DEVICE)
    y = torch.randn(len(token_slots), sum(rows for _, rows in subs), dtype=dtype, device=DEVICE)
    want = y.double().cpu()
    for i, slot in enumerate(token_slots):
        for sub, (offset, rows) in enumerate(subs):
            if slot:
                a, b = (w.to(dtype).double() for w in written[slot, sub])
                want[i, offset : offset + rows] += x[i].double().cpu() @ a.t() @ b.t()
    got = add_lora(x, y.clone(), lora.a, lora.b_all, subs, lora.slots, lora.max_rank, *runs)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert torch.allclose(got.double().cpu(), want, atol=tol, rtol=tol)
    base = torch.tensor(token_slots, device=DEVICE) == 0
    assert torch.equal(got[base], y[base])  # the base model's rows are untouched


@pytest.mark.parametrize("dtype, subs, rank", CASES)
def test_a_prefills_runs_add_their_adapters_delta(dtype, subs, rank):
    """Each request's tokens in place: runs longer than a tile (300 > 64 tokens), two runs of one
    adapter, and base-model runs, which are not passed; the inputs' width shared by two programs
    (2,100 > 2,048)."""
    lora, written = _pool(dtype, subs, rank, k=2100)
    requests = [(5, 0), (300, 2), (3, 1), (9, 0), (1, 3), (20, 2)]  # (tokens, slot) in batch order
    token_slots = [slot for n, slot in requests for _ in range(n)]
    starts = [sum(n for n, _ in requests[:i]) for i in range(len(requests))]
    segments = torch.tensor([(start, n, slot) for start, (n, slot) in zip(starts, requests) if slot],
                            dtype=torch.int32, device=DEVICE)
    _check(lora, written, subs, token_slots, dtype, (segments, 300, None))


@pytest.mark.parametrize("dtype, subs, rank", CASES)
def test_a_decode_batchs_rows_sorted_by_slot_add_their_adapters_delta(dtype, subs, rank):
    """Mixed rows, sorted by slot: a run per adapter slot, one of them longer than a tile (20 > 16),
    one empty (slot 3 unused), bounded by the batch size; the inputs' width shared by three programs
    (1,100 > 2 x 512)."""
    lora, written = _pool(dtype, subs, rank, k=1100)
    token_slots = [0, 2, 1, 2, 0, 2] * 4 + [1, 2, 2, 2, 2, 0, 0, 2]
    order = sorted(range(len(token_slots)), key=lambda i: token_slots[i])
    counts = [token_slots.count(s) for s in range(4)]
    segments = [(sum(counts[:s]), counts[s], s) for s in range(1, 4)]
    assert counts[3] == 0 and counts[2] > 16
    _check(lora, written, subs, token_slots, dtype,
           (torch.tensor(segments, dtype=torch.int32, device=DEVICE), len(token_slots),
            torch.tensor(order, device=DEVICE)))
