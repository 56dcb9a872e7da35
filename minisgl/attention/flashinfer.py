"""FlashInfer attention over the paged KV cache: paged prefill (FA2 or, on Hopper, FA3 kernels)
and batch decode (CUDA-core kernel, or the tensor-core one for wide grouped-query attention),
with fixed-buffer decode wrappers for CUDA graphs; the decode graphs run minisgl's Triton kernels
instead (minisgl/kernels/decode_attention.py says why). An FP8 KV cache is read by FA2 prefill and
the decode kernels with its per-layer scales (FA3's templates have no bf16-query/FP8-KV form).

flashinfer is imported when the backend is created, never at package import, so minisgl runs
where it is not installed. Lengths and index pointers are computed on the host from the
scheduler's bookkeeping; only the page ids are gathered from the page table on the device.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from minisgl.core.attn_backend import BaseAttnBackend
from minisgl.core.batch import BaseAttnMetadata, Batch
from minisgl.core.context import Context
from minisgl.core.host import indptr, pinned
from minisgl.prebuild import ATTENTION_DTYPES, ATTENTION_FP8_KV_DTYPES, ATTENTION_HEAD_DIMS
from minisgl.utils import env

from .base import AttnShape
from .paging import gather_pages, paged_layout, warm_up_gather_pages

WORKSPACE_BYTES = 256 << 20
INT_WORKSPACE_BYTES = 8 << 20
# What the backend serves is what minisgl.prebuild compiles ahead of time (the image has no nvcc).
SUPPORTED_HEAD_DIMS = ATTENTION_HEAD_DIMS
SUPPORTED_DTYPES = tuple(getattr(torch, name) for name in ATTENTION_DTYPES)
SUPPORTED_FP8_KV_DTYPES = tuple(getattr(torch, name) for name in ATTENTION_FP8_KV_DTYPES)


def flashinfer_available() -> bool:
    return importlib.util.find_spec("flashinfer") is not None


def supports(shape: AttnShape, device: torch.device) -> str | None:
    """Why FlashInfer cannot serve this model here, or None."""
    if device.type != "cuda":
        return "FlashInfer needs a CUDA device"
    if shape.dtype not in SUPPORTED_DTYPES:
        return f"FlashInfer attention needs one of {', '.join(ATTENTION_DTYPES)}, the model runs in {shape.dtype}"
    if shape.cache_dtype not in (shape.dtype, *SUPPORTED_FP8_KV_DTYPES):
        return f"FlashInfer attention reads a KV cache of the model's dtype or {', '.join(ATTENTION_FP8_KV_DTYPES)}"
    if shape.head_dim not in SUPPORTED_HEAD_DIMS:
        return f"head_dim {shape.head_dim} is not one of {SUPPORTED_HEAD_DIMS}"
    if not flashinfer_available():
        return "the flashinfer package is not installed"
    return None


@dataclass
class FlashInferMetadata(BaseAttnMetadata):
    wrapper: Any  # the planned flashinfer wrapper that runs this batch, or a TritonDecode


@dataclass(frozen=True)
class TritonDecode:
    """A decode graph of `bs` requests that runs minisgl.kernels.decode_attention over the page
    table (its rows and lengths in the backend's g_rows_lens)."""

    bs: int


class FlashInferBackend(BaseAttnBackend):
    """`prefill_kernel`: "fa2" or "fa3" (Hopper). `use_tensor_cores`: decode with the prefill
    kernel (pays for GQA groups of 4 and more); None picks by group size, env
    MINISGL_DECODE_TENSOR_CORES=0/1 overrides. `triton_decode`: the decode graphs run minisgl's
    Triton kernels, which even out the programs' work over requests of spread lengths from inside
    the graph (None: unless MINISGL_TRITON_DECODE=0); eager decode steps run FlashInfer's."""

    supports_cuda_graph = True
    supports_verify_graph = True
    accepts_stored_kv = True

    def __init__(self, ctx: Context, shape: AttnShape, prefill_kernel: str = "fa2",
                 use_tensor_cores: bool | None = None, triton_decode: bool | None = None):
        import flashinfer

        problem = supports(shape, ctx.device)
        if problem:
            raise RuntimeError(f"FlashInfer attention backend: {problem}")
        if prefill_kernel == "fa3" and shape.cache_dtype != shape.dtype:
            # FlashInfer's FA3 templates need q and KV of one dtype; FA2 reads FP8 pages with bf16 q.
            raise RuntimeError("FlashInfer's FA3 prefill kernels cannot read an FP8 KV cache with "
                               f"{str(shape.dtype).removeprefix('torch.')} queries; use --attn flashinfer (FA2 prefill)")
        self.fi = flashinfer
        self.ctx = ctx
        self.shape = shape
        kv = ctx.kv_cache
        self.page_size = kv.page_size
        self.table_width = ctx.page_table.shape[1]
        self.dummy_row = ctx.page_table.shape[0] - 1
        self.sm_scale = shape.head_dim**-0.5
        if env.DECODE_TENSOR_CORES.is_set():
            use_tensor_cores = env.DECODE_TENSOR_CORES.on()
        if use_tensor_cores is None:
            use_tensor_cores = shape.num_qo_heads // shape.num_kv_heads >= 4
        self.use_tensor_cores = use_tensor_cores
        self.prefill_kernel = prefill_kernel
        device = ctx.device
        # One float workspace, one int workspace and one pinned staging buffer serve every
        # wrapper: they run one at a time on one stream.
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.int_workspace = torch.zeros(INT_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.pinned_int_workspace = torch.zeros(INT_WORKSPACE_BYTES, dtype=torch.uint8, pin_memory=True)
        self._plan_copied: torch.cuda.Event | None = None
        self.prefill_wrapper = self._share(flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            self.workspace, "NHD", backend=prefill_kernel))
        self.decode_wrapper = self._share(self._decode_wrapper())
        # Per-layer paged views [pages, page_size, kv_heads, head_dim] of the KV buffers.
        shape4 = (-1, self.page_size, shape.num_kv_heads, shape.head_dim)
        self.kv_views = [(kv.k_cache(i).view(shape4), kv.v_cache(i).view(shape4))
                         for i in range(kv.k_buffer.shape[0])]
        self.graph_wrappers: dict[int, Any] = {}
        self.verify_wrappers: dict[tuple[int, int], Any] = {}
        self.triton_decode = env.TRITON_DECODE.on() if triton_decode is None else triton_decode
        if kv.is_fp8 and torch.cuda.get_device_capability(device) < (8, 9):
            self.triton_decode = False  # Triton converts e4m3 only from Ada/Hopper on
        # FP8 pages: FlashInfer folds k_scale into the softmax scale and multiplies the output by
        # v_scale; both are plain floats, so captured graphs replay them unchanged.
        self.kv_scales = [dict(k_scale=k, v_scale=v) if kv.is_fp8 else {} for k, v in zip(kv.k_scales, kv.v_scales)]
        warm_up_gather_pages(ctx.page_table, self.page_size)  # its kernels loaded now, not mid-decode

    @property
    def label(self) -> str:
        return f"FlashInfer ({self.prefill_kernel} prefill)"

    def _decode_wrapper(self, **graph_buffers):
        return self.fi.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_cuda_graph=bool(graph_buffers), use_tensor_cores=self.use_tensor_cores,
            backend="fa2" if self.use_tensor_cores else "auto", **graph_buffers)

    def _share(self, wrapper):
        wrapper._int_workspace_buffer = self.int_workspace
        wrapper._pin_memory_int_workspace_buffer = self.pinned_int_workspace
        return wrapper

    def _plan(self, wrapper, *args, **kwargs) -> None:
        # plan() fills the shared pinned buffer on the host, then copies it to the device
        # asynchronously: the previous plan's copy must have run before the host overwrites it.
        if self._plan_copied is not None:
            self._plan_copied.synchronize()
        wrapper.plan(*args, **kwargs)
        self._plan_copied = torch.cuda.Event()
        self._plan_copied.record()

    # -- eager batches ---------------------------------------------------------------------------

    def prepare_metadata(self, batch: Batch) -> None:
        rows, cached, device_lens = batch.host_arrays
        layout = paged_layout(rows, device_lens, self.page_size, self.table_width)
        pages = gather_pages(self.ctx.page_table, layout, self.page_size)
        s, dtype, kv_dtype = self.shape, self.shape.dtype, self.shape.cache_dtype
        if batch.is_decode:
            wrapper = self.decode_wrapper
            self._plan(wrapper, pinned(layout.kv_indptr), pages, pinned(layout.last_page_len), s.num_qo_heads,
                       s.num_kv_heads, s.head_dim, self.page_size, q_data_type=dtype, kv_data_type=kv_dtype,
                       sm_scale=self.sm_scale)
        else:
            wrapper = self.prefill_wrapper
            self._plan(wrapper, pinned(indptr(device_lens - cached)), pinned(layout.kv_indptr), pages,
                       pinned(layout.last_page_len), s.num_qo_heads, s.num_kv_heads, s.head_dim, self.page_size,
                       causal=True, sm_scale=self.sm_scale, q_data_type=dtype, kv_data_type=kv_dtype,
                       seq_lens=pinned(device_lens.astype(np.int32)))
        batch.attn_metadata = FlashInferMetadata(extend_lens=(device_lens - cached).tolist(),
                                                 seq_lens=device_lens.tolist(), wrapper=wrapper)

    def forward(self, q, k, v, layer, batch):
        if k is not None:
            self.ctx.kv_cache.store_kv(k, v, batch.out_loc, layer.layer_id)
        wrapper = batch.attn_metadata.wrapper
        i = layer.layer_id
        if isinstance(wrapper, TritonDecode):
            return self._triton_decode(q, i, wrapper.bs)
        if isinstance(wrapper, self.fi.BatchPrefillWithPagedKVCacheWrapper):  # it would zero-fill a fresh output otherwise
            return wrapper.run(q, self.kv_views[i], out=torch.empty_like(q, memory_format=torch.contiguous_format),
                               **self.kv_scales[i])
        return wrapper.run(q, self.kv_views[i], **self.kv_scales[i])

    def attend_into(self, q, layer, batch, out):
        wrapper = batch.attn_metadata.wrapper
        if not isinstance(wrapper, self.fi.BatchPrefillWithPagedKVCacheWrapper):
            return super().attend_into(q, layer, batch, out)
        i = layer.layer_id
        wrapper.run(q, self.kv_views[i], out=out, **self.kv_scales[i])

    # -- CUDA graphs (decode) --------------------------------------------------------------------

    def init_capture_graph(self, max_bs: int, batch_sizes: list[int]) -> None:
        device = self.ctx.device
        if self.triton_decode:
            # The Triton decode graphs' inputs: graph bs reads its requests' page-table rows at [:bs]
            # and lengths at [bs:2 bs], which the graph runner's first kernel writes (graph_rows_lens).
            self.g_rows_lens = torch.ones(2 * max_bs, dtype=torch.int32, device=device)
            most = max(self._chunk_shape(bs).max_items for bs in batch_sizes)
            self.g_items = torch.zeros((most, 4), dtype=torch.int32, device=device)  # the step's chunks (plan_chunks)
            self.graph_wrappers.update((bs, TritonDecode(bs)) for bs in batch_sizes)
            return
        # FlashInfer's graph wrappers: fixed buffers for the page lists their plan() fills each step.
        max_pages = max_bs * (self.table_width // self.page_size + 1)
        self.g_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=device)
        self.g_last_page_len = torch.ones(max_bs, dtype=torch.int32, device=device)
        self.g_indices = torch.zeros(max_pages, dtype=torch.int32, device=device)
        for bs in batch_sizes:
            self.graph_wrappers[bs] = self._share(self._decode_wrapper(
                paged_kv_indptr_buffer=self.g_indptr[: bs + 1], paged_kv_indices_buffer=self.g_indices,
                paged_kv_last_page_len_buffer=self.g_last_page_len[:bs]))

    def _plan_graph(self, batch: Batch, bs: int, rows: np.ndarray, seq_lens: np.ndarray) -> None:
        wrapper = self.graph_wrappers[bs]
        # Triton graphs: the kernels read the page table themselves, at the rows and lengths that
        # the graph's first kernel writes into g_rows_lens (and plan their chunks inside the graph).
        if not isinstance(wrapper, TritonDecode):
            layout = paged_layout(rows, seq_lens, self.page_size, self.table_width)
            pages = gather_pages(self.ctx.page_table, layout, self.page_size)
            s = self.shape
            self._plan(wrapper, pinned(layout.kv_indptr), pages, pinned(layout.last_page_len), s.num_qo_heads,
                       s.num_kv_heads, s.head_dim, self.page_size, q_data_type=s.dtype, kv_data_type=s.cache_dtype,
                       sm_scale=self.sm_scale)
        batch.attn_metadata = FlashInferMetadata(extend_lens=[1] * len(batch.reqs),
                                                 seq_lens=seq_lens[: len(batch.reqs)].tolist(), wrapper=wrapper)

    def graph_rows_lens(self, bs: int) -> torch.Tensor | None:
        return self.g_rows_lens[: 2 * bs] if isinstance(self.graph_wrappers.get(bs), TritonDecode) else None

    def _triton_decode(self, q: torch.Tensor, layer: int, bs: int) -> torch.Tensor:
        from minisgl.kernels.decode_attention import decode_attention, plan_chunks

        kv = self.ctx.kv_cache
        lengths = self.g_rows_lens[bs : 2 * bs]
        items = self.g_items[: self._chunk_shape(bs).max_items]
        if layer == 0:  # the lengths are the step's: one plan serves every layer
            plan_chunks(lengths, items, self.shape.num_kv_heads, kv.is_fp8)
        return decode_attention(q, kv.k_cache(layer), kv.v_cache(layer), self.ctx.page_table, self.g_rows_lens[:bs],
                                lengths, self.sm_scale, kv.k_scales[layer], kv.v_scales[layer], items=items,
                                fresh_items=layer == 0)

    def _chunk_shape(self, bs: int):
        from minisgl.kernels.decode_attention import chunk_shape

        return chunk_shape(bs, self.shape.num_kv_heads, self.ctx.device, self.ctx.kv_cache.is_fp8)

    def prepare_for_capture(self, batch: Batch, bs: int) -> None:
        self._plan_graph(batch, bs, np.full(bs, self.dummy_row, dtype=np.int64), np.ones(bs, dtype=np.int64))

    def prepare_for_replay(self, batch: Batch, bs: int) -> None:
        rows, _, device_lens = batch.host_arrays
        pad = bs - len(rows)
        rows = np.concatenate([rows, np.full(pad, self.dummy_row, dtype=np.int64)])
        seq_lens = np.concatenate([device_lens, np.ones(pad, dtype=np.int64)])
        self._plan_graph(batch, bs, rows, seq_lens)

    # -- CUDA graphs (verify): the prefill kernels over fixed buffers, planned before each replay --

    def init_verify_graph(self, max_bs: int, shapes: list[tuple[int, int]]) -> None:
        device = self.ctx.device
        max_pages = max_bs * (self.table_width // self.page_size + 1)
        self.v_qo_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=device)
        self.v_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=device)
        self.v_last_page_len = torch.ones(max_bs, dtype=torch.int32, device=device)
        self.v_indices = torch.zeros(max_pages, dtype=torch.int32, device=device)
        for bs, t in shapes:
            self.verify_wrappers[bs, t] = self._share(self.fi.BatchPrefillWithPagedKVCacheWrapper(
                self.workspace, "NHD", backend=self.prefill_kernel, use_cuda_graph=True,
                qo_indptr_buf=self.v_qo_indptr[: bs + 1], paged_kv_indptr_buf=self.v_indptr[: bs + 1],
                paged_kv_indices_buf=self.v_indices, paged_kv_last_page_len_buf=self.v_last_page_len[:bs]))

    def prepare_verify_graph(self, batch: Batch, bs: int, t: int, rows: np.ndarray, seq_lens: np.ndarray) -> None:
        wrapper = self.verify_wrappers[bs, t]
        layout = paged_layout(rows, seq_lens, self.page_size, self.table_width)
        pages = gather_pages(self.ctx.page_table, layout, self.page_size)
        s = self.shape
        qo_indptr = np.arange(bs + 1, dtype=np.int32) * t
        self._plan(wrapper, pinned(qo_indptr), pinned(layout.kv_indptr), pages, pinned(layout.last_page_len),
                   s.num_qo_heads, s.num_kv_heads, s.head_dim, self.page_size, causal=True, sm_scale=self.sm_scale,
                   q_data_type=s.dtype, kv_data_type=s.cache_dtype, seq_lens=pinned(seq_lens.astype(np.int32)))
        batch.attn_metadata = FlashInferMetadata(extend_lens=[t] * bs, seq_lens=seq_lens.tolist(), wrapper=wrapper)
