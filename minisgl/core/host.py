"""Host-side helpers of a batch: per-request lengths as numpy arrays, ragged index arithmetic, and
host-to-device copies through pinned memory. The engine, the sampler, the logits processors, the
scheduler's page table and the attention backends all build their inputs with them.

Everything here is computed on the CPU from what the scheduler already knows, so building a
batch's inputs never waits for the GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from .batch import Req


def req_arrays(reqs: list[Req]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(table rows, cached lengths, device lengths) of `reqs` as int64 arrays."""
    n = len(reqs)
    rows = np.fromiter((r.table_idx for r in reqs), dtype=np.int64, count=n)
    cached = np.fromiter((r.cached_len for r in reqs), dtype=np.int64, count=n)
    device = np.fromiter((r.device_len for r in reqs), dtype=np.int64, count=n)
    return rows, cached, device


def ragged_arange(counts: np.ndarray) -> np.ndarray:
    """concat(arange(c) for c in counts), vectorized."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def token_positions(cached: np.ndarray, extend: np.ndarray) -> np.ndarray:
    """The positions a batch computes: request i's cached[i] .. cached[i] + extend[i] - 1, concatenated."""
    return np.repeat(cached, extend) + ragged_arange(extend)


def logit_rows(extend: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The rows among a batch's tokens (`extend` of them a request) of each request's last `counts`
    tokens (its extend's tail): the rows whose logits the LM head computes."""
    ends = np.cumsum(extend)
    if (counts == 1).all():
        return ends - 1
    return np.repeat(ends - counts, counts) + ragged_arange(counts)


def indptr(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return out


def pinned(arr: np.ndarray) -> torch.Tensor:
    """A page-locked copy of `arr` (from torch's caching host allocator, so it is only reused once
    the asynchronous copies reading it have run)."""
    src = torch.from_numpy(np.ascontiguousarray(arr))
    out = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    return out.copy_(src)


def copy_into(dst: torch.Tensor, arr: np.ndarray) -> None:
    """dst[:len(arr)] = arr: on CUDA an asynchronous copy from pinned memory (a static buffer that a
    CUDA graph reads), on the CPU a plain one."""
    src = pinned(arr) if dst.is_cuda else torch.from_numpy(np.ascontiguousarray(arr))
    dst[: len(arr)].copy_(src, non_blocking=True)


def to_device(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    """`arr` on `device`: an asynchronous copy from pinned memory on CUDA, no copy on the CPU."""
    if device.type != "cuda":
        return torch.from_numpy(np.ascontiguousarray(arr))
    return pinned(arr).to(device, non_blocking=True)
