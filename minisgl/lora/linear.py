"""The LoRA weights of one parallel linear layer, for every adapter slot, and their batched apply.

A merged layer (qkv, gate/up) has one sub-projection per PEFT module; each has its A and B and
adds into its own slice of the layer's output. Slot 0 is the base model: all zeros.

The apply is two dense GEMMs over all slots at once, with the rows of other slots masked out in
between: for tokens x [T, in] and a one-hot slot mask M [T, slots],

    h = (x @ A_all^T) * M          A_all [subs * slots * r_max, in]
    y[:, sub] += h[:, sub] @ B_sub^T   B_sub [out, slots * r_max]

(A_all's rows are grouped by sub-projection, so each h[:, sub] is a strided view, not a copy.)
That is the CPU's apply: shapes that do not depend on which adapters a batch uses. On the GPU,
minisgl.kernels.lora multiplies each run of one adapter's tokens with that adapter alone (a
prefill's requests, or a decode graph's tokens sorted by slot), two launches a layer.

Under tensor parallelism the weights are sharded as the base layer: a column-parallel layer's B on
its output rows, a row-parallel layer's A on its input columns (its delta is a partial sum, added
before the layer's all-reduce).
"""

from __future__ import annotations

import torch


class LoraBatchState:
    """What every LoRA layer of the model reads in a forward pass: the one-hot slot mask of its
    tokens [T, slots] in the model dtype, or None when no token of the batch uses an adapter (the
    CPU's apply); on the GPU the runs of one adapter's tokens, minisgl.kernels.lora.add_lora's
    (segments, longest, tokens)."""

    def __init__(self) -> None:
        self.mask: torch.Tensor | None = None
        self.runs: tuple[torch.Tensor, int, torch.Tensor | None] | None = None


class LoraLinear:
    def __init__(self, in_features: int, subs: list[tuple[int, int]], slots: int, max_rank: int,
                 state: LoraBatchState, dtype: torch.dtype, device: torch.device):
        """`subs`: (offset, rows) of each sub-projection in this rank's output of the layer."""
        self.subs = subs
        self.slots, self.max_rank = slots, max_rank
        self.state = state
        self.a = torch.zeros(slots * len(subs) * max_rank, in_features, dtype=dtype, device=device)
        # Every sub-projection's B in one buffer, rows at the sub-projection's offset in the output
        # (the GPU's expand covers them all in one launch); self.b[sub] are views of it.
        self.b_all = torch.zeros(max(o + rows for o, rows in subs), slots * max_rank, dtype=dtype, device=device)
        self.b = [self.b_all[offset : offset + rows] for offset, rows in subs]

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
        if self.state.runs is not None:  # the GPU's
            from minisgl.kernels.lora import add_lora

            return add_lora(x.contiguous(), y, self.a, self.b_all, self.subs, self.slots, self.max_rank,
                            *self.state.runs)
        mask = self.state.mask
        if mask is None:
            return y
        t = x.shape[0]
        h = (x @ self.a.t()).view(t, len(self.subs), self.slots, self.max_rank) * mask[:t, None, :, None]
        for i, (offset, rows) in enumerate(self.subs):
            y[:, offset : offset + rows] += h[:, i].reshape(t, -1) @ self.b[i].t()
        return y
