"""CUDA graphs for verify batches (speculative decoding).

A verify batch computes each request's last token and its drafts, with logits at every one. At
batch 1 its kernels are a decode step's with k + 1 tokens, and eager launches cost more than they
do, so the runner captures one graph per (batch size, tokens per request t), t = 2 .. k + 1 and
batch sizes up to the smaller of the decode graphs' cap and --speculative-max-batch (above it
nobody drafts). A batch replays graph (next captured size, its longest request's tokens): each
request is padded to t tokens and the batch to the size with padding requests. Attention sees a
request as t queries at the end of its length (cached + t), causal, so a real token never sees the
padding after it; padding tokens read the dummy row's token, write their KV to the dummy page and
their logits are dropped. Batches above the cap, or a request whose t tokens would pass its
page-table row, run eagerly. Each replay plans the attention on the host first (FlashInfer's
prefill plan), so these graphs serve only backends whose decode graphs cannot take a verify batch
themselves (minisgl.engine.graph: with the Triton decode kernels they do, with no plan).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from tqdm import tqdm

from minisgl.core.batch import Batch
from minisgl.core.host import copy_into, to_device
from minisgl.utils.logger import get_logger

from .graph import Capture, StaticHidden, graph_logits, padded_batch_size, split_model

if TYPE_CHECKING:
    from .engine import Engine

logger = get_logger(__name__)


@dataclass
class VerifyLayout:
    """A verify batch padded to graph (bs, t), token by token (bs * t of them, request-major)."""

    positions: np.ndarray  # int64: real tokens' positions, 0 for padding
    # int64: each token's flat index into the token pool (its input id) and the page table (its
    # KV slot), which share a shape; padding: the dummy row's first (on CUDA, the dummy page)
    table_index: np.ndarray
    logit_rows: np.ndarray  # int64: the real tokens among the bs * t, in the batch's order
    rows: np.ndarray  # int64 [bs]: page-table rows (padding requests: the dummy row)
    seq_lens: np.ndarray  # int64 [bs]: lengths after the step, cached + t


def verify_layout(rows: np.ndarray, cached: np.ndarray, device_lens: np.ndarray, bs: int, t: int,
                  dummy_row: int, width: int) -> VerifyLayout:
    """`rows`, `cached`, `device_lens`: the batch's requests (Batch.host_arrays), at most bs of
    them, each computing at most t tokens, cached + t <= width."""
    n = len(rows)
    pad = bs - n
    extend = device_lens - cached
    j = np.arange(t)
    real = j[None, :] < extend[:, None]  # [n, t]
    pos = cached[:, None] + j[None, :]
    flat = rows[:, None] * width + pos
    dummy = dummy_row * width
    table_index = np.full((bs, t), dummy, dtype=np.int64)
    table_index[:n] = np.where(real, flat, dummy)
    positions = np.zeros((bs, t), dtype=np.int64)
    positions[:n] = np.where(real, pos, 0)
    return VerifyLayout(
        positions=positions.reshape(-1), table_index=table_index.reshape(-1),
        logit_rows=np.flatnonzero(real.reshape(-1)),
        rows=np.concatenate([rows, np.full(pad, dummy_row, dtype=np.int64)]),
        seq_lens=np.concatenate([cached + t, np.full(pad, t, dtype=np.int64)]))


def verify_shapes(batch_sizes: list[int], max_tokens: int) -> list[tuple[int, int]]:
    """(bs, t) of every verify graph: each size with 2 .. max_tokens tokens a request."""
    return [(bs, t) for bs in batch_sizes for t in range(2, max_tokens + 1)]


class VerifyGraphRunner:
    def __init__(self, engine: Engine, batch_sizes: list[int], max_tokens: int):
        self.engine = e = engine
        self.batch_sizes = sorted(batch_sizes)
        self.max_bs, self.max_t = self.batch_sizes[-1], max_tokens
        self.dummy_row = e.page_table.shape[0] - 1
        self.width = e.page_table.shape[1]
        most = self.max_bs * max_tokens
        # What replay() copies in for graph (bs, t), n = bs * t: positions [:n] and table indices
        # [n:2n] (VerifyLayout); the graph gathers the token ids and KV slots from them.
        self.step_inputs = torch.zeros(2 * most, dtype=torch.int64, device=e.device)
        self.logits = torch.zeros(most, e.model_config.vocab_size, device=e.device,
                                  dtype=e.dtype if split_model(e.model) else torch.float32)
        self.hidden = StaticHidden(e, most)
        self.graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self.capture_seconds = 0.0
        self.memory_bytes = 0
        self._capture()

    @torch.inference_mode()
    def _capture(self) -> None:
        e = self.engine
        backend = e.attn_backend
        shapes = sorted(verify_shapes(self.batch_sizes, self.max_t), key=lambda s: -s[0] * s[1])  # largest first
        backend.init_verify_graph(self.max_bs, shapes)
        capture = Capture(e.device)
        empty = np.zeros(0, dtype=np.int64)
        for bs, t in tqdm(shapes, desc="Capturing verify CUDA graphs", unit="graph", disable=len(shapes) < 2):
            batch = Batch(reqs=[], phase="verify")
            layout = verify_layout(empty, empty, empty, bs, t, self.dummy_row, self.width)
            self._fill(layout, bs * t)
            backend.prepare_verify_graph(batch, bs, t, layout.rows, layout.seq_lens)
            with e.ctx.forward_batch(batch):
                self.graphs[bs, t] = capture.graph(functools.partial(self._forward, batch, bs * t))
        self.capture_seconds, self.memory_bytes = capture.finish()
        logger.info("captured %d verify CUDA graphs (batch sizes %s x %s tokens a request) in %.1f s, using %.2f GiB",
                    len(shapes), self.batch_sizes, f"2..{self.max_t}", self.capture_seconds, self.memory_bytes / 2**30)

    def _fill(self, layout: VerifyLayout, n: int) -> None:
        copy_into(self.step_inputs, np.concatenate([layout.positions, layout.table_index]))

    def _forward(self, batch: Batch, n: int) -> None:
        e = self.engine
        batch.positions = self.step_inputs[:n]
        index = self.step_inputs[n : 2 * n]
        batch.input_ids = e.token_pool.view(-1)[index]
        batch.out_loc = e.page_table.view(-1)[index].long()
        batch.logit_indices = torch.arange(n, device=e.device)
        graph_logits(e, batch, self.logits[:n])
        self.hidden.keep(n)

    def can_run(self, batch: Batch) -> bool:
        if batch.phase != "verify" or batch.size > self.max_bs:
            return False
        _, cached, device_lens = batch.host_arrays
        t = int((device_lens - cached).max())
        return 2 <= t <= self.max_t and bool((cached + t <= self.width).all())

    def replay(self, batch: Batch) -> torch.Tensor:
        """Run verify `batch` in its graph; returns the logits of its tokens in order (each
        request's, its last token's first), valid until the next replay."""
        rows, cached, device_lens = batch.host_arrays
        bs = padded_batch_size(batch.size, self.batch_sizes)
        assert bs is not None, "replay() of a batch can_run() refused"
        t = int((device_lens - cached).max())
        n = bs * t
        layout = verify_layout(rows, cached, device_lens, bs, t, self.dummy_row, self.width)
        self._fill(layout, n)
        self.engine.attn_backend.prepare_verify_graph(batch, bs, t, layout.rows, layout.seq_lens)
        self.graphs[bs, t].replay()
        real = slice(0, n) if len(layout.logit_rows) == n else to_device(layout.logit_rows, self.logits.device)
        if self.hidden.recorder is not None:  # an EAGLE-3 head runs over this pass next: its tokens as an eager pass has them
            batch.positions = self.step_inputs[:n][real]
            batch.out_loc = self.engine.page_table.view(-1)[self.step_inputs[n : 2 * n][real]].long()
            self.hidden.show(real)
        return self.logits[:n][real]

    def shutdown(self) -> None:
        self.graphs.clear()
