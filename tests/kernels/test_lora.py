"""minisgl.kernels.lora.add_lora (each token's adapter delta gathered by its slot, the GPU's decode
path) adds x @ A^T @ B^T of each token's own adapter to its rows, reading the buffers
minisgl.lora.LoraLinear writes; the reference is that sum, token by token. On the CPU
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


@pytest.mark.parametrize("dtype, subs, rank", [
    (torch.float32, [(0, 96), (96, 32), (128, 32)], 16),  # a q/k/v layer
    (torch.bfloat16, [(0, 80), (80, 80)], 8),  # gate/up
    (torch.float32, [(0, 200)], 4),  # o or down
])
def test_the_gathered_kernels_add_each_tokens_own_adapter_delta(dtype, subs, rank):
    torch.manual_seed(rank)
    slots, k, t = 4, 72, 7
    lora = LoraLinear(k, subs, slots, rank, LoraBatchState(), dtype, DEVICE)
    written = {}  # (slot, sub) -> (A [r, in], B [out, r])
    for slot in range(1, slots):
        for sub, (_, rows) in enumerate(subs):
            r = rank - slot + 1  # ranks below the pool's: the padding stays zero
            written[slot, sub] = (torch.randn(r, k) / k**0.5, torch.randn(rows, r))
            lora.write(slot, sub, *written[slot, sub])
    token_slots = torch.tensor([0, 2, 1, 3, 3, 0, 2], device=DEVICE)
    x = torch.randn(t, k, dtype=dtype, device=DEVICE)
    y = torch.randn(t, sum(rows for _, rows in subs), dtype=dtype, device=DEVICE)
    want = y.double().cpu()
    for i, slot in enumerate(token_slots.tolist()):
        for sub, (offset, rows) in enumerate(subs):
            if slot:
                a, b = (w.to(dtype).double() for w in written[slot, sub])
                want[i, offset : offset + rows] += x[i].double().cpu() @ a.t() @ b.t()
    got = add_lora(x, y.clone(), lora.a, lora.b, subs, slots, rank, token_slots)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert torch.allclose(got.double().cpu(), want, atol=tol, rtol=tol)
    assert torch.equal(got[token_slots == 0], y[token_slots == 0])  # the base model's rows are untouched
