"""The paged layout of a batch (indptr / page slots / last-page lengths) that the GPU backends hand
their kernels, and the gather of its page ids. Computed on the CPU from what the scheduler already
knows (minisgl.core.host has the array helpers), so building a batch's metadata never waits for the
GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from minisgl.core.host import indptr, ragged_arange, to_device


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


def gather_pages(page_table: torch.Tensor, layout: PagedLayout, page_size: int) -> torch.Tensor:
    """Page ids (int32, on the table's device) of the layout's pages."""
    idx = to_device(layout.page_slots, page_table.device)
    return torch.div(page_table.view(-1)[idx], page_size, rounding_mode="floor")


def warm_up_gather_pages(page_table: torch.Tensor, page_size: int) -> None:
    """Gathers a 1-page and a 17-page layout once, so that the kernels a gather runs are loaded at
    start, not mid-decode (CUDA loads a kernel at its first launch, and a gather may run another
    kernel above 16 indices, as torch's index_select does: a first decode step that loads one
    stalls, benchmark/NOTES.md)."""
    for pages in (1, min(17, page_table.numel() // page_size)):
        layout = paged_layout(np.zeros(1, dtype=np.int64), np.array([pages * page_size]), page_size, 0)
        gather_pages(page_table, layout, page_size)
