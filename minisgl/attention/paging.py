"""Host-side helpers shared by the GPU backends and the engine: per-batch lengths as numpy arrays,
the paged layout (indptr / page slots / last-page lengths) of a batch, and pinned H2D copies.

Everything here is computed on the CPU from what the scheduler already knows, so building a
batch's metadata never waits for the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from minisgl.core import Req


def req_arrays(reqs: list[Req]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(table rows, cached lengths, device lengths) of `reqs` as int64 arrays."""
    n = len(reqs)
    rows = np.fromiter((r.table_idx for r in reqs), dtype=np.int64, count=n)
    cached = np.fromiter((r.cached_len for r in reqs), dtype=np.int64, count=n)
    device = np.fromiter((r.device_len for r in reqs), dtype=np.int64, count=n)
    return rows, cached, device


def batch_arrays(batch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """req_arrays of the batch's requests, computed once per batch (the engine and the attention
    backend both need them; requests do not change while a batch is being launched)."""
    cached = batch.__dict__.get("_host_arrays")
    if cached is None:
        cached = req_arrays(batch.reqs)
        batch.__dict__["_host_arrays"] = cached
    return cached


def ragged_arange(counts: np.ndarray) -> np.ndarray:
    """concat(arange(c) for c in counts), vectorized."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def indptr(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=out[1:])
    return out


@dataclass
class PagedLayout:
    kv_indptr: np.ndarray  # int32 [n + 1]: request i's pages are entries kv_indptr[i]:kv_indptr[i+1]
    last_page_len: np.ndarray  # int32 [n]
    page_slots: np.ndarray  # int64 [total pages]: flat page-table index of each page's first slot
    num_pages: int


def paged_layout(rows: np.ndarray, seq_lens: np.ndarray, page_size: int, table_width: int) -> PagedLayout:
    npages = (seq_lens + page_size - 1) // page_size
    slots = np.repeat(rows * table_width, npages) + ragged_arange(npages) * page_size
    last = (seq_lens - (npages - 1) * page_size).astype(np.int32)
    return PagedLayout(indptr(npages), last, slots, int(npages.sum()))


def pinned(arr: np.ndarray) -> torch.Tensor:
    """A page-locked copy of `arr` (from torch's caching host allocator, so it is only reused once
    the asynchronous copies reading it have run)."""
    src = torch.from_numpy(np.ascontiguousarray(arr))
    out = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    return out.copy_(src)


def to_device(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    """`arr` on `device`: an asynchronous copy from pinned memory on CUDA, no copy on the CPU."""
    if device.type != "cuda":
        return torch.from_numpy(np.ascontiguousarray(arr))
    return pinned(arr).to(device, non_blocking=True)


def gather_pages(page_table: torch.Tensor, layout: PagedLayout, page_size: int) -> torch.Tensor:
    """Page ids (int32, on the table's device) of the layout's pages."""
    idx = to_device(layout.page_slots, page_table.device)
    return torch.div(page_table.view(-1)[idx], page_size, rounding_mode="floor")


def warm_up_gather_pages(page_table: torch.Tensor, page_size: int) -> None:
    """Gathers a 1-page and a 17-page layout once, so that the kernels a gather runs are loaded at
    start, not mid-decode (CUDA loads a kernel at its first launch, and a gather may run another kernel above 16 indices,
    as torch's index_select does: a first decode step that loads one stalls, benchmark/NOTES.md)."""
    for pages in (1, min(17, page_table.numel() // page_size)):
        layout = paged_layout(np.zeros(1, dtype=np.int64), np.array([pages * page_size]), page_size, 0)
        gather_pages(page_table, layout, page_size)
