from __future__ import annotations

import torch


class MHAKVCache:
    """Paged K/V storage for every layer.

    Slots are token-granular ([layers, num_pages * page_size, kv_heads, head_dim]); pages are the
    unit of allocation, so a page's `page_size` slots are contiguous. The page table translates
    (request row, position) into a slot.
    """

    def __init__(self, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        self.num_pages = num_pages
        self.page_size = page_size
        shape = (num_layers, num_pages * page_size, num_kv_heads, head_dim)
        self.k_buffer = torch.zeros(shape, dtype=dtype, device=device)
        self.v_buffer = torch.zeros(shape, dtype=dtype, device=device)

    @staticmethod
    def bytes_per_page(num_layers: int, page_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
        return 2 * num_layers * page_size * num_kv_heads * head_dim * dtype.itemsize

    def k_cache(self, layer: int) -> torch.Tensor:
        return self.k_buffer[layer]

    def v_cache(self, layer: int) -> torch.Tensor:
        return self.v_buffer[layer]

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, out_loc: torch.Tensor, layer: int) -> None:
        self.k_buffer[layer].index_copy_(0, out_loc, k)
        self.v_buffer[layer].index_copy_(0, out_loc, v)
