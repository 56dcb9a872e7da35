"""The batched LoRA apply: for a batch whose tokens use different slots (slot 0 the base model),
each token gets its own adapter's delta, scale folded into B, in its sub-projection's output slice,
exactly as one matmul pair per token would give; a batch without adapters is left untouched."""

from __future__ import annotations

import torch

from minisgl.lora import LoraBatchState, LoraLinear

IN, R = 12, 4
SUBS = [(0, 8), (8, 4), (12, 4)]  # a merged q/k/v-like layer: (offset, rows) of each sub-projection


def make(slots: int = 4) -> tuple[LoraLinear, dict]:
    gen = torch.Generator().manual_seed(0)
    lora = LoraLinear(IN, SUBS, slots, R, LoraBatchState(), torch.float32, torch.device("cpu"))
    weights = {}
    for slot in range(1, slots):
        rank = slot  # ranks 1..3, all below R: the padding must stay zero
        for sub, (_, rows) in enumerate(SUBS):
            a, b = torch.randn(rank, IN, generator=gen), torch.randn(rows, rank, generator=gen)
            lora.write(slot, sub, a, b)
            weights[slot, sub] = (a, b)
    return lora, weights


def reference(x, y, token_slots, weights):
    want = y.clone()
    for t, slot in enumerate(token_slots):
        for sub, (offset, rows) in enumerate(SUBS):
            if slot:
                a, b = weights[slot, sub]
                want[t, offset : offset + rows] += b @ (a @ x[t])
    return want


def mask(token_slots, slots=4):
    return (torch.tensor(token_slots)[:, None] == torch.arange(slots)).float()


def test_each_token_gets_its_own_adapters_delta():
    lora, weights = make()
    token_slots = [2, 2, 0, 1, 3, 3, 3, 0]
    x, y = torch.randn(8, IN), torch.randn(8, 16)
    lora.state.mask = mask(token_slots)
    want = reference(x, y, token_slots, weights)
    assert torch.allclose(lora.add(x, y.clone()), want, atol=1e-5)


def test_a_batch_without_adapters_is_untouched():
    lora, _ = make()
    x, y = torch.randn(3, IN), torch.randn(3, 16)
    lora.state.mask = None
    assert torch.equal(lora.add(x, y.clone()), y)
    lora.state.mask = mask([0, 0, 0])  # in a CUDA graph the base rows still run: their delta is zero
    assert torch.equal(lora.add(x, y.clone()), y)


def test_a_cleared_slot_adds_nothing_and_a_rewrite_replaces_the_old_rank():
    lora, weights = make()
    lora.clear(3)
    x, y = torch.randn(2, IN), torch.randn(2, 16)
    lora.state.mask = mask([3, 1])
    assert torch.allclose(lora.add(x, y.clone()), reference(x, y, [0, 1], weights), atol=1e-5)
    # Slot 2 held a rank-2 adapter; a rank-1 one written over it leaves nothing of the old second rank.
    small = {(2, sub): (torch.randn(1, IN), torch.randn(rows, 1)) for sub, (_, rows) in enumerate(SUBS)}
    for (slot, sub), (a, b) in small.items():
        lora.write(slot, sub, a, b)
    lora.state.mask = mask([2, 2])
    assert torch.allclose(lora.add(x, y.clone()), reference(x, y, [2, 2], small), atol=1e-5)
