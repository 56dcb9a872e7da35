"""CUDA graphs for decode batches.

A decode step runs the same kernels for every batch of a given size, so the runner captures one
graph per size in `batch_sizes` (largest first, all in one memory pool) and replays it: a batch
is padded to the next captured size with dummy requests that use the page table's last row
(a reserved page, length 1), and batches above the largest size run eagerly. Inputs, attention
metadata and logits live in static buffers that each replay refills / overwrites.

Where the decode attention reads each row's page-table row and length inside the graph (the
Triton decode kernels: `rides_decode_graphs`), a speculative verify batch replays these graphs
too: each of its tokens is a row of its own (its request's table row, its position, the length up
to it), so a token sees the KV stored before it in the same pass, as a causal extend would, and
no attention plan runs on the host between steps (minisgl.engine.verify_graph's graphs, planned
before each replay, serve the other backends).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from minisgl.core.batch import Batch, Phase
from minisgl.core.host import copy_into, token_positions
from minisgl.models.decoder import hidden_recorder
from minisgl.utils.logger import get_logger

if TYPE_CHECKING:
    from .engine import Engine

logger = get_logger(__name__)

DEFAULT_MAX_BS = 256


def ffi_stream():
    """Point TVM-FFI libraries (FlashInfer) at torch's current stream, in case their tensors'
    DLPack exchange does not carry it: kernels must land on the capturing stream."""
    try:
        import tvm_ffi
    except ImportError:
        return contextlib.nullcontext()
    return tvm_ffi.use_torch_stream()



class Capture:
    """What the decode, verify and prefill runners' captures share: one side stream and one memory
    pool for all of a runner's graphs (each runner captures its largest first, so the later ones
    reuse its memory), the time the capture took and the GPU memory it kept."""

    def __init__(self, device: torch.device):
        self.device = device
        self.start = time.perf_counter()
        torch.cuda.synchronize(device)
        self.free_before = torch.cuda.mem_get_info(device)[0]
        self.pool = torch.cuda.graph_pool_handle()
        self.stream = torch.cuda.Stream(device)

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[None]:
        """The block on the capture stream, after the current stream's work; the current stream
        waits for it after."""
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream), ffi_stream():
            yield
        current.wait_stream(self.stream)

    def graph(self, forward: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """forward() warmed up (library handles, lazy kernels, JIT builds), then captured, both on
        the capture stream: with the warm-ups on the current stream, every later decode step ran
        slower (benchmark/NOTES.md)."""
        with self.on_stream():
            for _ in range(2):
                forward()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=self.stream), ffi_stream():
            forward()
        return graph

    def finish(self) -> tuple[float, int]:
        """(seconds the capture took, GPU memory bytes it kept), once its work is done."""
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - self.start, max(0, self.free_before - torch.cuda.mem_get_info(self.device)[0])


def graph_batch_sizes(max_bs: int | None, max_running_requests: int,
                      explicit: tuple[int, ...] | list[int] | None = None) -> list[int]:
    """Decode batch sizes to capture: `explicit` if given, else 1, 2, 4 and every multiple of 8,
    up to min(max_bs, max_running_requests) (max_bs None: 256; 0: no graphs). The cap itself is
    always captured, so every batch up to it has a graph."""
    cap = min(DEFAULT_MAX_BS if max_bs is None else max_bs, max_running_requests)
    if cap <= 0:
        return []
    if explicit:
        sizes = {b for b in explicit if 1 <= b <= cap}
    else:
        sizes = {b for b in (1, 2, 4) if b <= cap} | set(range(8, cap + 1, 8))
    sizes.add(cap)
    return sorted(sizes)


def padded_batch_size(bs: int, sizes: list[int]) -> int | None:
    """The smallest captured size >= bs, or None when bs is above them all (run eagerly)."""
    i = bisect.bisect_left(sizes, bs)
    return sizes[i] if i < len(sizes) else None


def split_model(model: torch.nn.Module) -> bool:
    """Whether graphs keep logits in the model dtype (the sampler reads them once): a model with
    the usual .model / .lm_head split; another falls back to forward()'s float32 logits."""
    return hasattr(model, "model") and hasattr(model, "lm_head")


def graph_logits(engine: Engine, batch: Batch, out: torch.Tensor) -> None:
    """Inside a graph: the batch's forward pass, logits of every token into `out` (static)."""
    model = engine.model
    if not split_model(model):
        out.copy_(model.forward())
        return
    hidden = model.model(batch.input_ids, batch.positions)
    head = model.lm_head
    if engine.tp.size == 1 and head.weight.shape[0] == out.shape[1]:
        head.project(hidden, out=out)  # straight into the static buffer
    else:
        out.copy_(head(hidden))


class StaticHidden:
    """The hidden states a model records (minisgl.models.decoder.record_hidden), for a graph's
    passes: its pass leaves them in the graph's pool, so the graph copies them into this static
    buffer (`keep`) and each replay points the model's `aux_hidden` at its tokens' rows (`show`).
    Nothing when the model records none."""

    def __init__(self, engine: Engine, max_tokens: int):
        self.recorder = hidden_recorder(engine.model)
        self.buffer = None
        if self.recorder is not None:
            width = len(self.recorder.aux_layers) * engine.model_config.hidden_size
            self.buffer = torch.zeros(max_tokens, width, dtype=engine.dtype, device=engine.device)

    def keep(self, n: int) -> None:
        """Inside a graph, after its forward pass of n tokens."""
        if self.recorder is not None and self.buffer is not None:
            assert self.recorder.aux_hidden is not None
            self.buffer[:n].copy_(self.recorder.aux_hidden)

    def show(self, rows: slice | torch.Tensor) -> None:
        """After a replay: the model's recorded hidden states are these rows of the buffer."""
        if self.recorder is not None and self.buffer is not None:
            self.recorder.aux_hidden = self.buffer[rows]


class StaticInputs:
    """A graph's token inputs in static buffers, for up to `rows` tokens; padding tokens sit at
    position 0 of the page table's dummy row (its dummy page takes their KV). What a replay copies
    in is `step`: a graph of n rows reads their positions at [:n] and their token-table indices
    (row * width + position) at [n:2 n], and `extra` more values may follow for the caller; the
    graph's first kernel (`gather`) writes the rest from them."""

    def __init__(self, engine: Engine, rows: int, extra: int = 0):
        self.engine = engine
        device = engine.device
        self.dummy_row = engine.page_table.shape[0] - 1
        self.table_width = engine.page_table.shape[1]
        self.step = torch.zeros(2 * rows + extra, dtype=torch.int64, device=device)
        self.positions = torch.zeros(rows, dtype=torch.int64, device=device)
        self.input_ids = torch.zeros(rows, dtype=torch.int32, device=device)
        self.out_loc = torch.zeros(rows, dtype=torch.int64, device=device)
        # Where each token's sampled successor goes in the flattened token pool: the engine stores
        # a decode step's tokens there with no host copy of indices.
        self.next_token_index = torch.zeros(rows, dtype=torch.int64, device=device)

    def padding_batch(self, n: int, phase: Phase) -> Batch:
        """The batch a graph of n rows is captured with: n padding tokens."""
        self.step[:n] = 0
        self.step[n : 2 * n] = self.dummy_row * self.table_width
        batch = Batch(reqs=[], phase=phase)
        batch.input_ids, batch.positions, batch.out_loc = self.input_ids[:n], self.positions[:n], self.out_loc[:n]
        return batch

    def gather(self, n: int, rows_lens: torch.Tensor | None = None) -> None:
        """Inside a graph of n rows, its first kernel: ids, positions, KV slots and next-token indices
        from `step` (and the attention's rows and lengths into `rows_lens`, where it reads them)."""
        from minisgl.kernels.decode_inputs import gather_decode_inputs  # (CUDA graphs imply triton)

        e = self.engine
        gather_decode_inputs(self.step[: 2 * n], e.token_pool, e.page_table, self.positions[:n], self.input_ids[:n],
                             self.out_loc[:n], self.next_token_index[:n], rows_lens)

    def copy_in(self, batch: Batch, rows: np.ndarray, extend: np.ndarray, positions: np.ndarray, padded: int,
                tail: np.ndarray | None = None) -> None:
        """Before a replay of the graph of `padded` rows: `step` for the batch's tokens (`extend` a
        request, of table rows `rows`, at `positions`), padding, then `tail`; the batch's inputs are
        the static buffers' first rows."""
        n, pad = len(positions), padded - len(positions)
        parts = [positions, np.zeros(pad, dtype=np.int64), np.repeat(rows, extend) * self.table_width + positions,
                 np.full(pad, self.dummy_row * self.table_width, dtype=np.int64)]
        copy_into(self.step, np.concatenate(parts if tail is None else [*parts, tail]))
        batch.input_ids, batch.positions, batch.out_loc = self.input_ids[:n], self.positions[:n], self.out_loc[:n]


class GraphRunner:
    def __init__(self, engine: Engine, batch_sizes: list[int]):
        self.engine = engine
        self.batch_sizes = sorted(batch_sizes)
        self.max_bs = self.batch_sizes[-1]
        e = engine
        device = e.device
        self.inputs = StaticInputs(e, self.max_bs)
        self.logit_indices = torch.arange(self.max_bs, dtype=torch.int64, device=device)
        self.logits = torch.zeros(self.max_bs, e.model_config.vocab_size, device=device,
                                  dtype=e.dtype if split_model(e.model) else torch.float32)
        if e.lora is not None:
            e.lora.graph_buffers(self.max_bs)
        self.hidden = StaticHidden(e, self.max_bs)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.capture_seconds = 0.0
        self.memory_bytes = 0
        self._capture()

    def _static_batch(self, bs: int) -> Batch:
        """The batch a graph is captured with: bs padding requests (the dummy row, position 0)."""
        batch = self.inputs.padding_batch(bs, "decode")
        batch.logit_indices = self.logit_indices[:bs]
        return batch

    @torch.inference_mode()
    def _capture(self) -> None:
        e = self.engine
        backend = e.attn_backend
        backend.init_capture_graph(self.max_bs, self.batch_sizes)
        capture = Capture(e.device)
        sizes = sorted(self.batch_sizes, reverse=True)
        for bs in tqdm(sizes, desc="Capturing CUDA graphs", unit="graph", disable=len(sizes) < 2):
            batch = self._static_batch(bs)
            backend.prepare_for_capture(batch, bs)
            with e.ctx.forward_batch(batch):
                self.graphs[bs] = capture.graph(functools.partial(self._forward, batch, bs))
        self.capture_seconds, self.memory_bytes = capture.finish()
        logger.info("captured %d CUDA graphs for decode batch sizes %s in %.1f s, using %.2f GiB",
                    len(sizes), sizes_text(self.batch_sizes), self.capture_seconds, self.memory_bytes / 2**30)

    def _forward(self, batch: Batch, bs: int) -> None:
        e = self.engine
        # Inside the graph, so one launch of it replaces four small ops and two host copies between
        # steps (a copy, two gathers, a cast; the store's indices, the attention's rows and
        # lengths), each a launch or copy a batch-1 step waited for (benchmark/NOTES.md).
        self.inputs.gather(bs, e.attn_backend.graph_rows_lens(bs))
        if e.lora is not None:  # the adapters' slot mask, from the slots replay() copied in
            e.lora.graph_mask(bs)
        graph_logits(e, batch, self.logits[:bs])
        self.hidden.keep(bs)

    @property
    def rides_decode_graphs(self) -> bool:
        """Whether verify batches replay these graphs, a row per token (the module's docstring).
        Not with LoRA: its verify batches run eagerly, as they did before (not measured on a GPU)."""
        return self.engine.lora is None and self.engine.attn_backend.graph_rows_lens(self.max_bs) is not None

    def can_run(self, batch: Batch) -> bool:
        if batch.is_decode:
            return batch.size <= self.max_bs
        return batch.phase == "verify" and self.rides_decode_graphs and batch.num_tokens <= self.max_bs

    def replay(self, batch: Batch) -> torch.Tensor:
        """Run decode (or verify) `batch` through the graph of the next captured size; returns the
        logits of its requests (of its tokens, in order), a view of the static buffer in the model
        dtype, valid until the next replay."""
        e = self.engine
        rows, cached, device_lens = batch.host_arrays
        extend = np.ones_like(rows) if batch.is_decode else device_lens - cached  # (tokens a request)
        positions = device_lens - 1 if batch.is_decode else token_positions(cached, extend)
        n = len(positions)
        padded = padded_batch_size(n, self.batch_sizes)
        assert padded is not None, "replay() of a batch can_run() refused"
        self.inputs.copy_in(batch, rows, extend, positions, padded)
        batch.logit_indices = self.logit_indices[:n]
        if e.lora is not None:
            slots = np.zeros(padded, dtype=np.int64)
            slots[:n] = np.repeat([r.lora_slot for r in batch.reqs], extend)
            copy_into(e.lora.graph_slots, slots)
        if batch.is_decode:  # (a verify batch's rows and lengths: the graph's first kernel, from inputs.step)
            e.attn_backend.prepare_for_replay(batch, padded)
        self.graphs[padded].replay()
        self.hidden.show(slice(0, n))
        return self.logits[:n]

    def shutdown(self) -> None:
        self.graphs.clear()


def sizes_text(sizes: list[int]) -> str:
    if len(sizes) <= 6:
        return str(sizes)
    return f"[{', '.join(map(str, sizes[:4]))}, ..., {sizes[-1]}]"
