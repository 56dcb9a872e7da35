from __future__ import annotations

from collections.abc import Sequence

import torch

from minisgl.utils import choices

# --kv-cache-dtype names and what the pool stores for each ("auto": the model's dtype), from the
# one list the flag's choices come from too.
KV_CACHE_DTYPES: dict[str, torch.dtype | None] = {name: getattr(torch, t) if t else None
                                                  for name, t in choices.KV_CACHE_DTYPES.items()}
FP8_DTYPES = tuple(getattr(torch, t) for t in choices.FP8_KV_DTYPES)


def kv_storage_dtype(name: str, model_dtype: torch.dtype) -> torch.dtype:
    if name not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown KV cache dtype {name!r}; choose from {', '.join(KV_CACHE_DTYPES)}")
    return KV_CACHE_DTYPES[name] or model_dtype


class MHAKVCache:
    """Paged K/V storage for every layer.

    Slots are token-granular ([layers, num_pages * page_size, kv_heads, head_dim]); pages are the
    unit of allocation, so a page's `page_size` slots are contiguous. The page table translates
    (request row, position) into a slot.

    With an FP8 `dtype` the pool stores k / k_scale and v / v_scale (per layer, per tensor),
    saturated to the format's largest finite value, and readers multiply the scale back: the
    layout and slots are the same, each element takes one byte.
    """

    def __init__(self, num_layers: int, num_pages: int, page_size: int, num_kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device, k_scales: Sequence[float] | None = None,
                 v_scales: Sequence[float] | None = None):
        self.num_pages = num_pages
        self.page_size = page_size
        self.dtype = dtype
        self.is_fp8 = dtype in FP8_DTYPES
        self.k_scales = list(k_scales or [1.0] * num_layers)
        self.v_scales = list(v_scales or [1.0] * num_layers)
        if len(self.k_scales) != num_layers or len(self.v_scales) != num_layers:
            raise ValueError(f"need one k and one v scale per layer ({num_layers})")
        if not self.is_fp8 and any(s != 1.0 for s in self.k_scales + self.v_scales):
            raise ValueError("KV scales other than 1.0 need an FP8 KV cache")
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
        if not self.is_fp8:
            self.k_buffer[layer].index_copy_(0, out_loc, k)
            self.v_buffer[layer].index_copy_(0, out_loc, v)
            return
        # Byte views: index_copy_ has no FP8 kernels on the CPU, and a byte is a byte.
        for buf, x, scale in ((self.k_buffer, k, self.k_scales[layer]), (self.v_buffer, v, self.v_scales[layer])):
            buf[layer].view(torch.uint8).index_copy_(0, out_loc, quantize(x, scale, self.dtype).view(torch.uint8))

    def read_kv(self, layer: int, slots: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V at `slots` (any index shape), in `dtype` with the scales applied."""
        k, v = self.k_buffer[layer][slots], self.v_buffer[layer][slots]
        if not self.is_fp8:
            return k, v
        return k.to(dtype) * self.k_scales[layer], v.to(dtype) * self.v_scales[layer]


def quantize(x: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """x / scale in the FP8 `dtype`, saturated (a plain cast turns overflow into NaN or inf)."""
    limit = torch.finfo(dtype).max
    return (x.float() / scale).clamp_(-limit, limit).to(dtype)
