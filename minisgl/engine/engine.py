"""The engine: one per tensor-parallel rank. It owns the model, the KV pool, the page table, the
attention backend and the sampler, and runs one forward pass per `forward_batch` call."""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

import torch

from minisgl.attention import create_attention_backend
from minisgl.core import Batch, Context, set_global_ctx
from minisgl.distributed import destroy, init_process_group
from minisgl.kvcache import MHAKVCache
from minisgl.models import create_model, init_dummy_weights, load_model_config, load_weights
from minisgl.utils.logger import get_logger

from .config import EngineConfig, resolve_device
from .sample import BatchSamplingArgs, Sampler

logger = get_logger(__name__)


class _DoneEvent:
    """Stands in for a CUDA event on the CPU, where the copy is already done."""

    def synchronize(self) -> None:
        pass


class ForwardOutput(NamedTuple):
    next_tokens_gpu: torch.Tensor
    next_tokens_cpu: torch.Tensor
    copy_done_event: torch.cuda.Event | _DoneEvent


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


class Engine:
    def __init__(self, config: EngineConfig):
        self.config = config
        self.device = resolve_device(config.device)
        self.tp = config.tp_info
        if self.device.type == "cuda":
            torch.cuda.set_device(self.tp.rank % torch.cuda.device_count())
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.ctx = Context(device=self.device, tp=self.tp)
        set_global_ctx(self.ctx)
        init_process_group(self.tp, config.distributed_addr, self.device)

        self.model_config = load_model_config(config.model_path)
        self.dtype = config.dtype or self.model_config.torch_dtype
        with torch.device(self.device), _default_dtype(self.dtype):
            self.model = create_model(self.model_config)
        self.model.eval()
        if config.use_dummy_weight:
            init_dummy_weights(self.model)
        else:
            load_weights(self.model, _local_path(config.model_path), self.device, self.dtype)

        cfg = self.model_config
        self.max_seq_len = min(cfg.max_position_embeddings, config.max_seq_len_override or cfg.max_position_embeddings)
        self.page_size = config.page_size
        self.num_kv_heads = self.model.model.layers[0].self_attn.kv_heads
        self.num_pages = self._num_pages()
        self.kv_cache = MHAKVCache(cfg.num_layers, self.num_pages, self.page_size, self.num_kv_heads,
                                   cfg.head_dim, self.dtype, self.device)
        # One row per running request plus a dummy row (padding for CUDA graphs); the page table
        # maps (row, position) to a KV slot, the token pool holds each row's token ids.
        table_width = -(-self.max_seq_len // self.page_size) * self.page_size
        table_shape = (config.max_running_req + 1, table_width)
        self.page_table = torch.zeros(table_shape, dtype=torch.int32, device=self.device)
        self.token_pool = torch.zeros(table_shape, dtype=torch.int32, device=self.device)
        self.ctx.page_table, self.ctx.kv_cache = self.page_table, self.kv_cache
        self.attn_backend = create_attention_backend(config.attention_backend, self.ctx)
        self.ctx.attn_backend = self.attn_backend
        self.sampler = Sampler()
        logger.info("engine ready: %s on %s (%s), %d KV pages of %d tokens, max_seq_len %d",
                    cfg.architecture, self.device, str(self.dtype).removeprefix("torch."),
                    self.num_pages, self.page_size, self.max_seq_len)

    # -- sizing -------------------------------------------------------------------------------

    def _num_pages(self) -> int:
        cfg, config = self.model_config, self.config
        if config.num_page_override:
            return config.num_page_override
        per_page = MHAKVCache.bytes_per_page(cfg.num_layers, self.page_size, self.num_kv_heads, cfg.head_dim, self.dtype)
        pages_per_req = -(-self.max_seq_len // self.page_size)
        if self.device.type == "cuda":
            free, total = torch.cuda.mem_get_info(self.device)
            budget = free - total * (1 - config.memory_ratio)
            pages = int(budget // per_page)
        else:
            # On the CPU take what running every request at full length needs, within the budget.
            budget = _available_ram() * config.memory_ratio
            pages = min(int(budget // per_page), pages_per_req * config.max_running_req)
        if pages < pages_per_req:
            raise RuntimeError(
                f"KV cache too small: {pages} pages of {self.page_size} tokens fit in memory, one request of "
                f"{self.max_seq_len} tokens needs {pages_per_req}; lower max_seq_len or raise memory_ratio"
            )
        return pages

    # -- forward ------------------------------------------------------------------------------

    def prepare(self, batch: Batch) -> None:
        """Fill the batch's input tensors from the token pool and page table."""
        for r in batch.reqs:
            if r.device_len > self.max_seq_len:
                raise ValueError(f"request {r.uid} needs {r.device_len} tokens, beyond max_seq_len {self.max_seq_len}")
            if r.extend_len < 1:
                raise ValueError(f"request {r.uid} has nothing to compute (cached {r.cached_len}, device {r.device_len})")
        positions = torch.cat([torch.arange(r.cached_len, r.device_len, dtype=torch.int64) for r in batch.reqs])
        rows = torch.cat([torch.full((r.extend_len,), r.table_idx, dtype=torch.int64) for r in batch.reqs])
        ends = torch.tensor([r.extend_len for r in batch.reqs], dtype=torch.int64).cumsum(0) - 1
        positions, rows, ends = (t.to(self.device, non_blocking=True) for t in (positions, rows, ends))
        batch.positions = positions
        batch.input_ids = self.token_pool[rows, positions]
        batch.out_loc = self.page_table[rows, positions].long()
        batch.last_token_idx = ends
        self.attn_backend.prepare_metadata(batch)

    @torch.inference_mode()
    def forward_batch(self, batch: Batch, args: BatchSamplingArgs) -> ForwardOutput:
        self.prepare(batch)
        self.ctx.batch = batch
        try:
            logits = self.model.forward()
        finally:
            self.ctx.batch = None
        next_tokens = self.sampler.sample(logits, args).to(torch.int32)
        self._store_next_tokens(batch, next_tokens)
        batch.logits = logits
        if self.device.type == "cuda":
            cpu = torch.empty(next_tokens.shape, dtype=torch.int32, pin_memory=True)
            cpu.copy_(next_tokens, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            return ForwardOutput(next_tokens, cpu, event)
        return ForwardOutput(next_tokens, next_tokens.clone(), _DoneEvent())

    def _store_next_tokens(self, batch: Batch, next_tokens: torch.Tensor) -> None:
        """Write each finished-prefill or decode request's new token into the token pool on the
        device, so the next step reads it without a round trip through the CPU."""
        done = [(i, r.table_idx, r.device_len) for i, r in enumerate(batch.reqs)
                if r.samples_this_step and r.device_len < self.token_pool.shape[1]]
        if not done:
            return
        idx, rows, cols = (torch.tensor(c, dtype=torch.int64).to(self.device, non_blocking=True) for c in zip(*done))
        self.token_pool[rows, cols] = next_tokens[idx]

    def shutdown(self) -> None:
        destroy()
        set_global_ctx(None)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _available_ram() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _local_path(model_path: str) -> str:
    if os.path.isdir(model_path):
        return model_path
    from huggingface_hub import snapshot_download

    return snapshot_download(model_path, allow_patterns=["*.json", "*.safetensors", "tokenizer*"])
