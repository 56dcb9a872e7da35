"""Launching a Triton kernel with little host time: Triton's per-call argument binding and
specialization cost tens of microseconds a call, which adds up in eager prefill, so the compiled
kernel is kept per specialization key and launched directly."""

from __future__ import annotations

import torch

_COMPILED: dict = {}


def launch(kernel, grid, args, consts, **options) -> None:
    """kernel[grid](*args, **consts, **options), the compiled kernel kept per specialization key
    (dtypes, 16-byte alignment of pointers, integer values' ==1 and %16 classes, the constexprs)
    and launched directly from the second call on."""
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
