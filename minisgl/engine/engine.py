"""The engine: one per tensor-parallel rank. It owns the model, the KV pool, the page table, the
attention backend and the sampler, and runs one forward pass per `forward_batch` call."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from minisgl.attention import AttnShape, create_attention_backend
from minisgl.core.batch import Batch
from minisgl.core.context import Context, set_global_ctx
from minisgl.core.host import logit_rows, to_device, token_positions
from minisgl.distributed import all_reduce_min, destroy, enable_fused_norm, init_process_group
from minisgl.kernels.jit_builds import report_builds
from minisgl.kvcache import MHAKVCache, kv_storage_dtype
from minisgl.lora import LoraPool, parse_lora_modules
from minisgl.models import create_model, init_dummy_weights, load_model_config, load_weights
from minisgl.models.decoder import DecoderForCausalLM, hidden_recorder, record_hidden
from minisgl.quantization import check_online_quantization, quantize_model
from minisgl.utils.logger import get_logger

from .config import EngineConfig, check_moe_backend_dtype, resolve_device, resolve_moe_backend
from .graph import GraphRunner, graph_batch_sizes
from .prefill_graph import PrefillGraphRunner, token_counts
from .prompt_logprobs import PromptScores, last_rows, score_prompts
from .sample import BatchSamplingArgs, Sampler, TokenLogprobs, TokenOutputs, token_logprobs
from .verify_graph import VerifyGraphRunner

logger = get_logger(__name__)


class _DoneEvent:
    """Stands in for a CUDA event on the CPU, where the copy is already done."""

    def synchronize(self) -> None:
        pass


class ForwardOutput(NamedTuple):
    next_tokens_gpu: torch.Tensor
    next_tokens_cpu: torch.Tensor
    copy_done_event: torch.cuda.Event | _DoneEvent
    logprobs_cpu: TokenLogprobs | None = None  # when a request asked (rank 0 only); ready with copy_done_event
    prompt_scores: PromptScores | None = None  # prompt logprobs this step computed (rank 0 only); likewise


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
        t_start = time.perf_counter()
        self.config = config
        self.graph_runner: GraphRunner | None = None
        self.prefill_graphs: PrefillGraphRunner | None = None
        self.verify_graphs: VerifyGraphRunner | None = None
        self.verify_steps = {"graph": 0, "eager": 0}  # verify batches run in a CUDA graph / eagerly
        self.device = resolve_device(config.device)
        self.tp = config.tp_info
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.set_device(self.tp.rank % torch.cuda.device_count())
            self.device = torch.device("cuda", torch.cuda.current_device())
            # FlashInfer's first-use compiles, logged by the rank that builds (the others wait on
            # its file lock, then find the module built and say nothing).
            report_builds()
        self.ctx = Context(device=self.device, tp=self.tp,
                           moe_backend=resolve_moe_backend(config.moe_backend, self.device))
        set_global_ctx(self.ctx)
        init_process_group(self.tp, config.distributed_addr, self.device,
                           custom_all_reduce=not config.disable_custom_all_reduce)
        # With TP, the wait for the other ranks to start and join (their imports, NCCL, the custom
        # all-reduce's rendezvous): start-up reports it apart from this rank's own work.
        self.timings = {"process_group_s": time.perf_counter() - t_start}
        try:
            self._build(config, time.perf_counter(), t_start)
        except BaseException:
            # Leave nothing behind for the next engine in this process (a test's next case, a
            # retry): the process group's peers are gone with this engine.
            self.shutdown()
            raise

    def _build(self, config: EngineConfig, t_load: float, t_start: float) -> None:
        cuda = self.device.type == "cuda"
        # Same seed on every rank: unseeded sampling then draws the same tokens everywhere.
        torch.manual_seed(0)

        self.model_config = load_model_config(config.model_path)
        check_online_quantization(config.quantization)
        self.dtype = config.dtype or self.model_config.torch_dtype
        if self.dtype not in (torch.float32, torch.float16, torch.bfloat16):  # e.g. an FP8 checkpoint's own
            self.dtype = torch.bfloat16
        check_moe_backend_dtype(self.ctx.moe_backend, self.device, self.dtype)
        self.kv_dtype = kv_storage_dtype(config.kv_cache_dtype, self.dtype)
        with torch.device(self.device), _default_dtype(self.dtype):
            self.model = create_model(self.model_config)
        self.model.eval()
        if config.record_hidden_layers:
            record_hidden(self.model, config.record_hidden_layers)
        fp8_weights = None
        if config.dummy_weight:
            init_dummy_weights(self.model)
        else:
            fp8_weights = load_weights(self.model, _local_path(config.model_path), self.device, self.dtype)
        weights = quantize_model(self.model, self.model_config.quantization, config.quantization, fp8_weights,
                                 self.device, self.dtype)
        if weights:
            logger.info("%s", weights)
        # Before the KV cache is sized: the adapter pool's memory is not the cache's.
        self.lora = self._lora_pool(config)
        self.weight_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        self.timings["load_s"] = time.perf_counter() - t_load
        if cuda:
            self._warm_up_layers()

        cfg = self.model_config
        self.max_seq_len = min(cfg.max_position_embeddings, config.max_seq_len or cfg.max_position_embeddings)
        self.page_size = config.page_size
        attn = self.model.model.layers[0].self_attn
        self.num_kv_heads = attn.kv_heads
        # Every rank runs the same schedule, so every rank must have the same number of pages.
        self.num_pages = all_reduce_min(self._num_pages())
        # On CUDA one more page than the scheduler hands out: the dummy page that padding requests
        # of CUDA-graph batches write to.
        self.kv_cache = MHAKVCache(cfg.num_layers, self.num_pages + (1 if cuda else 0), self.page_size,
                                   self.num_kv_heads, cfg.head_dim, self.kv_dtype, self.device,
                                   *self._kv_scales())
        # One row per running request plus a dummy row (padding for CUDA graphs); the page table
        # maps (row, position) to a KV slot, the token pool holds each row's token ids.
        table_width = -(-self.max_seq_len // self.page_size) * self.page_size
        table_shape = (config.max_running_requests + 1, table_width)
        self.page_table = torch.zeros(table_shape, dtype=torch.int32, device=self.device)
        self.token_pool = torch.zeros(table_shape, dtype=torch.int32, device=self.device)
        if cuda:
            dummy = self.num_pages * self.page_size + torch.arange(self.page_size, dtype=torch.int32)
            self.page_table[config.max_running_requests, : self.page_size] = dummy.to(self.device)
        self.ctx.page_table, self.ctx.kv_cache = self.page_table, self.kv_cache
        shape = AttnShape(attn.heads, attn.kv_heads, cfg.head_dim, self.dtype, self.kv_dtype)
        self.attn_backend = create_attention_backend(config.attn, self.ctx, shape)
        self.ctx.attn_backend = self.attn_backend
        self.sampler = Sampler()
        # The MoE backend's name (the seed design's attribute); None for a dense model.
        self.moe_backend = self.ctx.moe_backend if cfg.num_experts else None
        logger.info("engine: %s on %s (%s), %s attention, %d KV pages of %d tokens (%s), max_seq_len %d",
                    cfg.architecture, self.device, _dtype_name(self.dtype), self.attn_backend.label,
                    self.num_pages, self.page_size, self._kv_dtype_note(), self.max_seq_len)

        sizes = graph_batch_sizes(config.cuda_graph_max_bs, _graph_rows(config), config.cuda_graph_bs) if cuda else []
        if sizes and not self.attn_backend.supports_cuda_graph:
            logger.info("CUDA graphs off: the %s attention backend cannot be captured", self.attn_backend.label)
            sizes = []
        if sizes:
            # Decode batches' all-reduces fused with the add + RMSNorm after them (under tensor
            # parallelism where the custom all-reduce runs; enable_fused_norm decides).
            enable_fused_norm(cfg.hidden_size, max(sizes), self.dtype, self.device)
            self.graph_runner = GraphRunner(self, sizes)
            self.timings["graph_capture_s"] = self.graph_runner.capture_seconds
            self.verify_graphs = self._verify_graphs(config, max(sizes))
        if cuda:
            self.prefill_graphs = self._prefill_graphs(config)
        self.timings["init_s"] = time.perf_counter() - t_start
        if cuda:
            self._report_memory()

    @property
    def verify_in_graphs(self) -> bool:
        """Whether verify batches (up to a cap) replay CUDA graphs: the decode graphs or their own."""
        return self.verify_graphs is not None or (self.graph_runner is not None and self.graph_runner.rides_decode_graphs)

    def _verify_graphs(self, config: EngineConfig, decode_cap: int) -> VerifyGraphRunner | None:
        """Graphs for speculative decoding's verify batches (minisgl.engine.verify_graph), with
        --speculative only, up to its --speculative-max-batch (a config without those fields: an
        engine with no speculation)."""
        if not getattr(config, "speculative", None):
            return None
        if self.graph_runner is not None and self.graph_runner.rides_decode_graphs:
            return None  # verify batches replay the decode graphs, a row per token
        if self.lora is not None or not self.attn_backend.supports_verify_graph:
            logger.info("verify batches run eagerly: %s", "LoRA" if self.lora is not None
                        else f"the {self.attn_backend.label} attention backend cannot capture them")
            return None
        cap = min(decode_cap, config.speculative_max_batch)
        sizes = graph_batch_sizes(cap, config.max_running_requests, config.cuda_graph_bs)
        if not sizes or config.speculative_num_tokens < 1:
            return None
        try:
            runner = VerifyGraphRunner(self, sizes, config.speculative_num_tokens + 1)
        except (RuntimeError, ValueError) as err:  # (FlashInfer's plan raises ValueError)
            # A kernel that cannot be captured costs the verify steps their graphs, not the server
            # its start (Engine.verify_steps and benchmark/offline/speculative.py show it).
            logger.warning("verify batches run eagerly: their CUDA graphs failed to capture (%s)", err)
            torch.cuda.synchronize(self.device)
            return None
        self.timings["verify_graph_capture_s"] = runner.capture_seconds
        return runner

    def _prefill_graphs(self, config: EngineConfig) -> PrefillGraphRunner | None:
        """Piecewise graphs for prefill batches (minisgl.engine.prefill_graph), up to
        --piecewise-cuda-graph-max-tokens tokens (0, the default: none), at most --max-prefill-length.
        Off by default: capturing them slowed every later decode step (benchmark/NOTES.md)."""
        # No prefill batch is longer than max_prefill_length, and the KV budget kept activations
        # of that many tokens out (_runtime_reserve): the pieces' pool is no larger.
        most = config.piecewise_cuda_graph_max_tokens
        longest = getattr(config, "max_prefill_length", most)  # (a field of the scheduler's config)
        counts, why = token_counts(min(longest, most)), self._why_no_prefill_graphs(config)
        if why and counts:
            logger.info("prefill batches run eagerly: no piecewise CUDA graphs with %s", why)
        if why or not counts:
            return None
        try:
            runner = PrefillGraphRunner(self, counts)
        except Exception as err:  # noqa: BLE001 - a failed capture costs the prefills their graphs, not the server its start
            logger.warning("prefill batches run eagerly: their piecewise CUDA graphs failed to capture (%s: %s)",
                           type(err).__name__, err)
            torch.cuda.synchronize(self.device)
            return None
        self.timings["prefill_graph_capture_s"] = runner.capture_seconds
        return runner

    def _why_no_prefill_graphs(self, config: EngineConfig) -> str | None:
        if config.cuda_graph_max_bs == 0:
            return "--cuda-graph-max-bs 0 (CUDA graphs off)"
        if self.ctx.moe_backend == "loop" and self.model_config.num_experts:
            return "the loop MoE backend (it reads the routing back to the host)"
        if self.tp.size > 1:  # (their all-reduces inside pieces are untested on more than one GPU)
            return "tensor parallelism"
        if self.lora is not None:
            return "LoRA (its per-token adapter slots are not in static buffers)"
        if hidden_recorder(self.model) is not None:
            return "an EAGLE-3 drafter (the hidden states it reads are not kept from the pieces yet)"
        if not isinstance(self.model, DecoderForCausalLM):
            return f"{type(self.model).__name__} (not the shared decoder)"
        if not self.attn_backend.accepts_stored_kv:  # (the pieces store K/V; the attention between them reads it)
            return f"the {self.attn_backend.label} attention backend"
        return None

    def _lora_pool(self, config: EngineConfig) -> LoraPool | None:
        """The adapter pool, with the adapters named at start loaded; None when LoRA is off."""
        modules = parse_lora_modules(config.lora_modules)
        if not modules and not config.max_loras:
            return None
        max_loras = config.max_loras or len(modules)
        if len(modules) > max_loras:
            raise ValueError(f"--lora-modules names {len(modules)} adapters but --max-loras is {max_loras}")
        pool = LoraPool(self.model, self.model_config, max_loras, config.max_lora_rank, self.tp, self.dtype,
                        self.device)
        for name, path in modules.items():
            pool.load(name, path)
        logger.info("LoRA: %d adapter slots of rank %d; loaded %s", max_loras, config.max_lora_rank,
                    ", ".join(f"{n} (rank {pool.adapters[pool.slot(n)].rank})" for n in modules) or "none")
        return pool

    def _warm_up_layers(self) -> None:
        """Layers with a `warm_up` (the fused MoE) build their kernels now, before the graphs are
        captured and before the first request, not during it. Kernels are built once per shape,
        so this costs one build plus a few launches per layer."""
        start = time.perf_counter()
        with torch.inference_mode():
            for module in self.model.modules():
                if hasattr(module, "warm_up"):
                    module.warm_up()
        torch.cuda.synchronize(self.device)
        self.timings["kernel_warm_up_s"] = time.perf_counter() - start

    # -- sizing -------------------------------------------------------------------------------

    def _kv_scales(self) -> tuple[list[float], list[float]] | tuple[()]:
        """Per-layer (k, v) scales of an FP8 cache: the checkpoint's, 1.0 for layers without."""
        layers = [layer.self_attn.attn for layer in self.model.model.layers]
        found = sum(a.k_scale is not None for a in layers)
        if self.kv_dtype == self.dtype:
            if found:
                logger.info("the checkpoint's k_scale/v_scale apply to an FP8 KV cache (--kv-cache-dtype fp8_e4m3); "
                            "unused with a %s cache", _dtype_name(self.kv_dtype))
            return ()
        logger.info("KV cache %s: per-tensor k/v scales %s", self.config.kv_cache_dtype,
                    f"from the checkpoint ({found} of {len(layers)} layers, 1.0 for the rest)" if found
                    else "1.0 (the checkpoint has no k_scale/v_scale)")
        return [a.k_scale or 1.0 for a in layers], [a.v_scale or 1.0 for a in layers]

    def _kv_dtype_note(self) -> str:
        kv = _dtype_name(self.kv_dtype)
        if self.kv_dtype.itemsize == self.dtype.itemsize:
            return kv
        return f"{kv}: {self.dtype.itemsize // self.kv_dtype.itemsize}x the pages of a {_dtype_name(self.dtype)} cache"

    def _num_pages(self) -> int:
        cfg, config = self.model_config, self.config
        if config.num_pages:
            return config.num_pages
        per_page = MHAKVCache.bytes_per_page(cfg.num_layers, self.page_size, self.num_kv_heads, cfg.head_dim,
                                             self.kv_dtype)
        pages_per_req = -(-self.max_seq_len // self.page_size)
        if self.device.type == "cuda":
            # memory_ratio of the device is for weights (already loaded), KV cache, CUDA graphs and
            # activations; the last two are estimated and kept out of the KV budget.
            free, total = torch.cuda.mem_get_info(self.device)
            self.runtime_reserve = self._runtime_reserve()
            budget = free - total * (1 - config.memory_ratio) - self.runtime_reserve
            pages = int(budget // per_page)
        else:
            # On the CPU take what running every request at full length needs, within the budget.
            budget = _available_ram() * config.memory_ratio
            pages = min(int(budget // per_page), pages_per_req * config.max_running_requests)
        if pages < pages_per_req:
            raise RuntimeError(
                f"KV cache too small: {pages} pages of {self.page_size} tokens fit in memory, one request of "
                f"{self.max_seq_len} tokens needs {pages_per_req}; lower max_seq_len or raise memory_ratio"
            )
        return pages

    def _runtime_reserve(self) -> int:
        """Bytes for what runs beside the KV cache: activations of the largest prefill chunk, the
        decode graphs' pool and static logits, sampling temporaries, attention workspaces."""
        cfg, config = self.model_config, self.config
        tokens = getattr(config, "max_prefill_length", 8192)
        attn = self.model.model.layers[0].self_attn
        width = (4 * cfg.hidden_size + 3 * max(cfg.intermediate_size, cfg.moe_intermediate_size * cfg.num_experts_per_tok)
                 + (attn.heads + 2 * attn.kv_heads) * cfg.head_dim)
        activations = 2 * tokens * width * self.dtype.itemsize
        rows = max(config.max_running_requests, 1)
        logits = 4 * rows * cfg.vocab_size * 4  # static graph logits + sampling temporaries (float32)
        return activations + logits + (512 << 20)

    def _report_memory(self) -> None:
        free, total = torch.cuda.mem_get_info(self.device)
        kv = 2 * self.kv_cache.k_buffer.numel() * self.kv_cache.k_buffer.element_size()
        graphs = sum(r.memory_bytes for r in (self.graph_runner, self.verify_graphs, self.prefill_graphs)
                     if r is not None)
        self.memory = {"total": total, "weights": self.weight_bytes, "kv_cache": kv, "graphs": graphs, "free": free,
                       "kv_tokens": self.num_pages * self.page_size, "kv_dtype": _dtype_name(self.kv_dtype)}
        gib = 2**30
        logger.info("memory: %.1f GiB device, weights %.2f GiB, KV cache %.2f GiB (%d pages, %d tokens; %s), "
                    "CUDA graphs %.2f GiB, free %.2f GiB (memory_ratio %.2f); start-up %.1f s",
                    total / gib, self.weight_bytes / gib, kv / gib, self.num_pages, self.num_pages * self.page_size,
                    self._kv_dtype_note(), graphs / gib, free / gib, self.config.memory_ratio, self.timings["init_s"])

    # -- forward ------------------------------------------------------------------------------

    def _check(self, batch: Batch, device_lens: np.ndarray, extend_lens: np.ndarray) -> None:
        if (device_lens > self.max_seq_len).any() or (extend_lens < 1).any():
            for r in batch.reqs:
                if r.device_len > self.max_seq_len:
                    raise ValueError(f"request {r.uid} needs {r.device_len} tokens, beyond max_seq_len {self.max_seq_len}")
                if r.extend_len < 1:
                    raise ValueError(f"request {r.uid} has nothing to compute (cached {r.cached_len}, device {r.device_len})")

    def prepare(self, batch: Batch) -> None:
        """Fill the batch's input tensors from the token pool and page table (one host-to-device
        copy of positions and table indices; the gathers run on the device)."""
        rows, cached, device_lens = batch.host_arrays
        extend = device_lens - cached
        self._check(batch, device_lens, extend)
        if (extend == 1).all():
            positions = cached
            flat = rows * self.page_table.shape[1] + positions
        else:
            positions = token_positions(cached, extend)
            flat = np.repeat(rows * self.page_table.shape[1], extend) + positions
        if self.lora is not None:
            self.lora.prepare([r.lora_slot for r in batch.reqs], extend)
        n_tok = len(positions)
        dev = to_device(np.concatenate([positions, flat, logit_rows(extend, batch.logit_counts)]), self.device)
        batch.positions = dev[:n_tok]
        flat_d = dev[n_tok : 2 * n_tok]
        batch.input_ids = self.token_pool.view(-1)[flat_d]
        batch.out_loc = self.page_table.view(-1)[flat_d].long()
        batch.logit_indices = dev[2 * n_tok :]
        self.attn_backend.prepare_metadata(batch)

    @torch.inference_mode()
    def forward_batch(self, batch: Batch,
                      args: BatchSamplingArgs | Callable[[], BatchSamplingArgs]) -> ForwardOutput:
        """Run the batch and sample its next tokens. `args` may be a callable, called once the
        forward pass is launched: host work the sampling waits for (the scheduler's grammar
        masks) then runs beside the GPU's."""
        store_at = None
        runner = next((r for r in (self.graph_runner, self.verify_graphs, self.prefill_graphs)
                       if r is not None and r.can_run(batch)), None)
        if runner is not None:  # decode (or verify riding them), verify or prefill graphs
            _, cached, device_lens = batch.host_arrays
            self._check(batch, device_lens, device_lens - cached)
            logits = runner.replay(batch)
            self.verify_steps["graph"] += batch.phase == "verify"
            if runner is self.graph_runner and batch.is_decode:
                store_at = self.graph_runner.inputs.next_token_index[: batch.size]
        else:
            self.verify_steps["eager"] += batch.phase == "verify"
            self.prepare(batch)
            with self.ctx.forward_batch(batch):
                logits = self.model.forward()
        prompt_scores = None
        if batch.phase == "prefill" and len(logits) > batch.size:  # some request scores its prompt
            if self.tp.is_primary:
                prompt_scores = score_prompts(batch, logits, self.token_pool)
            logits = logits[to_device(last_rows(batch), self.device)]
        if callable(args):
            args = args()
        # Penalties, biases and grammar masks change a copy: logprobs report the model's own distribution.
        adjusted = args.adjust.apply(logits, self.token_pool) if args.adjust is not None else logits
        store_rows, store_flat = self._next_token_slots(batch)
        outputs = None
        if self.device.type == "cuda":  # the sampling kernel may write the tokens where they go
            outputs = TokenOutputs(self.token_pool.view(-1), store_at if len(store_rows) == len(logits) else None)
        next_tokens = self.sampler.sample(adjusted, args, outputs).to(torch.int32)
        if outputs is None or not outputs.written or outputs.pool_index is None:
            self._store_next_tokens(next_tokens, store_rows, store_flat, store_at)
        batch.logits = logits
        # Only rank 0's outputs reach anyone: the other ranks skip the log-softmax over the vocabulary.
        wanted = args.logprobs_k is not None and self.tp.is_primary
        logprobs = token_logprobs(logits, next_tokens, args.logprobs_k) if wanted else None
        if self.device.type == "cuda":
            cpu = outputs.host if outputs.written else _to_host(next_tokens)
            logprobs = logprobs and TokenLogprobs(*map(_to_host, logprobs))
            if prompt_scores is not None:
                prompt_scores = prompt_scores._replace(logprobs=TokenLogprobs(*map(_to_host, prompt_scores.logprobs)))
            event = torch.cuda.Event()
            event.record()
            return ForwardOutput(next_tokens, cpu, event, logprobs, prompt_scores)
        return ForwardOutput(next_tokens, next_tokens.clone(), _DoneEvent(), logprobs, prompt_scores)

    def _next_token_slots(self, batch: Batch) -> tuple[np.ndarray, np.ndarray]:
        """(the batch rows whose sampled token goes into the token pool: finished prefills and
        decodes with room left; their flat pool indices)."""
        rows, cached, device_lens = batch.host_arrays
        width = self.token_pool.shape[1]
        if batch.phase == "verify":  # every row: the token after each computed position
            extend = device_lens - cached
            after = token_positions(cached, extend) + 1
            idx = np.flatnonzero(after < width)
            return idx, (np.repeat(rows, extend) * width + after)[idx]
        seq_lens = np.fromiter((r.seq_len for r in batch.reqs), dtype=np.int64, count=len(batch.reqs))
        idx = np.flatnonzero((device_lens == seq_lens) & (device_lens < width))
        return idx, rows[idx] * width + device_lens[idx]

    def _store_next_tokens(self, next_tokens: torch.Tensor, idx: np.ndarray, flat: np.ndarray,
                           store_at: torch.Tensor | None) -> None:
        """Write the new tokens of rows `idx` into the token pool at `flat` on the device, so the
        next step reads them without a round trip through the CPU. `store_at`: the flat indices
        of every row, already on the device (a decode graph's)."""
        if len(idx) == 0:
            return
        if len(idx) == len(next_tokens):
            self.token_pool.view(-1)[store_at if store_at is not None else to_device(flat, self.device)] = next_tokens
            return
        dev = to_device(np.concatenate([idx, flat]), self.device)
        self.token_pool.view(-1)[dev[len(idx):]] = next_tokens[dev[: len(idx)]]

    def shutdown(self) -> None:
        for runner in (self.graph_runner, self.verify_graphs, self.prefill_graphs):
            if runner is not None:
                runner.shutdown()
        self.graph_runner = self.verify_graphs = self.prefill_graphs = None
        destroy()
        set_global_ctx(None)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """An asynchronous copy into pinned memory; read it after the step's copy_done_event."""
    return torch.empty(t.shape, dtype=t.dtype, pin_memory=True).copy_(t, non_blocking=True)


def _available_ram() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _graph_rows(config: EngineConfig) -> int:
    """The most rows a decode graph may be asked for: a decode batch's requests or, with
    speculation, a verify batch's tokens (they ride the decode graphs where the attention allows:
    minisgl.engine.graph)."""
    rows = config.max_running_requests
    if getattr(config, "speculative", None):  # (fields of the scheduler's config)
        rows = max(rows, min(rows, config.speculative_max_batch) * (config.speculative_num_tokens + 1))
    return rows


def _local_path(model_path: str) -> str:
    if os.path.isdir(model_path):
        return model_path
    from huggingface_hub import snapshot_download

    return snapshot_download(model_path, allow_patterns=["*.json", "*.safetensors", "tokenizer*"])
