"""The LoRA weights of one parallel linear layer, for every adapter slot, and their batched apply.

A merged layer (qkv, gate/up) has one sub-projection per PEFT module; each has its A and B and
adds into its own slice of the layer's output. Slot 0 is the base model: all zeros.

The apply is two dense GEMMs over all slots at once, with the rows of other slots masked out in
between: for tokens x [T, in] and a one-hot slot mask M [T, slots],

    h = (x @ A_all^T) * M          A_all [subs * slots * r_max, in]
    y[:, sub] += h[:, sub] @ B_sub^T   B_sub [out, slots * r_max]

(A_all's rows are grouped by sub-projection, so each h[:, sub] is a strided view, not a copy, and
the expand accumulates into y's columns in place: one GEMM that reads and writes y once.)

The shapes do not depend on which adapters a batch uses, so the same kernels replay in a CUDA
graph with only the mask changed, and there is no host synchronisation or gather. The cost grows
with max_loras * max_lora_rank (the width of the skinny GEMMs), which is small beside the base
GEMM for a handful of rank-16 adapters. Kernels that read only each token's own adapter (gathered
per token, or segmented per request) were slower on an H100 (benchmark/NOTES.md, "Multi-LoRA"):
cuBLAS's skinny GEMMs beat them, and at a prefill's thousands of tokens the cost is y's traffic,
the same either way.

Under tensor parallelism the weights are sharded as the base layer: a column-parallel layer's B on
its output rows, a row-parallel layer's A on its input columns (its delta is a partial sum, added
before the layer's all-reduce).
"""

from __future__ import annotations

import torch


class LoraBatchState:
    """What every LoRA layer of the model reads in a forward pass: the one-hot slot mask of its
    tokens [T, slots] in the model dtype, or None when no token of the batch uses an adapter."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None


class LoraLinear:
    def __init__(self, in_features: int, subs: list[tuple[int, int]], slots: int, max_rank: int,
                 state: LoraBatchState, dtype: torch.dtype, device: torch.device):
        """`subs`: (offset, rows) of each sub-projection in this rank's output of the layer."""
        self.subs = subs
        self.slots, self.max_rank = slots, max_rank
        self.state = state
        self.a = torch.zeros(slots * len(subs) * max_rank, in_features, dtype=dtype, device=device)
        self.b = [torch.zeros(rows, slots * max_rank, dtype=dtype, device=device) for _, rows in subs]

    def write(self, slot: int, sub: int, a: torch.Tensor, b: torch.Tensor) -> None:
        """Slot `slot`'s sub-projection `sub`: A [r, in] and B [out, r] (this rank's shards, the
        scaling already in B), on the host or the device; the rows and columns beyond r stay zero.
        The copies are queued behind the forward pass in flight without waiting for it (from pinned
        host memory, LoraPool.read's), which never reads this slot: no request uses it yet."""
        r = a.shape[0]
        rows = self._a_rows(slot, sub)
        self.a[rows].zero_()
        self.a[rows][:r].copy_(a, non_blocking=True)
        cols = self._b_cols(slot)
        self.b[sub][:, cols].zero_()
        self.b[sub][:, cols][:, :r].copy_(b, non_blocking=True)

    def clear(self, slot: int) -> None:
        for sub in range(len(self.subs)):
            self.a[self._a_rows(slot, sub)].zero_()
            self.b[sub][:, self._b_cols(slot)].zero_()

    def _a_rows(self, slot: int, sub: int) -> slice:
        start = (sub * self.slots + slot) * self.max_rank
        return slice(start, start + self.max_rank)

    def _b_cols(self, slot: int) -> slice:
        return slice(slot * self.max_rank, (slot + 1) * self.max_rank)

    def add(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y (the base layer's output for x) plus each token's adapter delta, in place."""
        mask = self.state.mask
        if mask is None:
            return y
        t = x.shape[0]
        h = (x @ self.a.t()).view(t, len(self.subs), self.slots, self.max_rank) * mask[:t, None, :, None]
        for i, (offset, rows) in enumerate(self.subs):
            y[:, offset : offset + rows].addmm_(h[:, i].reshape(t, -1), self.b[i].t())
        return y
