"""Piecewise CUDA graphs for prefill batches.

An eager prefill launches each of the model's few hundred kernels from Python, and up to a few
thousand tokens the host takes longer to launch them than the GPU takes to run them
(benchmark/NOTES.md). Prefill attention cannot sit in a graph (its plan follows every request's
length), but everything between two attention calls can. So for each token count in
`token_counts` this runner captures the model's forward pass as pieces that end where a layer
attends, and replays them around eager attention calls: one piece before the first layer's
attention, one between each two, one after the last.

A batch is padded to the next captured count. The padding tokens sit at position 0 of the page
table's dummy row, so their K/V go to the dummy page; their rows are computed and never read.
While the pieces are captured, `_Breaks` stands in for the attention backend: a layer's call puts
its queries in a static buffer, ends the piece and starts the next, which reads the attention
output from another static buffer. At replay the real backend's attention fills that buffer
from the queries between two pieces.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from minisgl.core.attn_backend import BaseAttnBackend
from minisgl.core.batch import Batch
from minisgl.core.host import logit_rows, token_positions
from minisgl.models.decoder import DecoderForCausalLM, DecoderLayer
from minisgl.utils.logger import get_logger

from .graph import Capture, StaticInputs, padded_batch_size, sizes_text

if TYPE_CHECKING:
    from .engine import Engine

logger = get_logger(__name__)

# Captured counts: 64 and 128, then every 256 up to 2,048, then every 512: up to a few thousand
# tokens a step's GPU time is below its launch time, and padding costs little; above, it costs more.
SMALL_COUNTS = (64, 128)
SMALL_STEP, SMALL_STEP_UNTIL, LARGE_STEP = 256, 2048, 512


def token_counts(max_tokens: int) -> list[int]:
    """Prefill sizes (tokens) to capture, up to `max_tokens`, which is always captured (0: none)."""
    if max_tokens <= 0:
        return []
    counts = {*SMALL_COUNTS, *range(SMALL_STEP, SMALL_STEP_UNTIL + 1, SMALL_STEP),
              *range(SMALL_STEP_UNTIL + LARGE_STEP, max_tokens + 1, LARGE_STEP), max_tokens}
    return sorted(c for c in counts if c <= max_tokens)


class _Breaks(BaseAttnBackend):
    """The attention backend while pieces are captured (the module's docstring): each call stores
    the layer's k/v if the layer has not, copies q into the static query buffer, ends the piece
    being captured and begins the next (with `pool` None: a warm-up pass, nothing captured), and
    returns the static output buffer."""

    accepts_stored_kv = True

    def __init__(self, runner: PrefillGraphRunner, pool=None):
        self.runner, self.pool = runner, pool
        self.pieces: list[torch.cuda.CUDAGraph] = []
        self.layers: list = []
        self.graph: torch.cuda.CUDAGraph | None = None

    def prepare_metadata(self, batch: Batch) -> None:
        pass

    def begin(self) -> None:
        if self.pool is not None:
            self.graph = torch.cuda.CUDAGraph()
            self.graph.capture_begin(pool=self.pool)

    def end(self) -> None:
        if self.graph is not None:
            self.graph.capture_end()
            self.pieces.append(self.graph)
            self.graph = None

    def forward(self, q, k, v, layer, batch):
        if k is not None:
            self.runner.engine.kv_cache.store_kv(k, v, batch.out_loc, layer.layer_id)
        n = q.shape[0]
        self.runner.query[:n].copy_(q)
        self.layers.append(layer)
        self.end()
        self.begin()
        return self.runner.attn_out[:n]


@contextlib.contextmanager
def _backend(engine: Engine, backend: BaseAttnBackend):
    ctx, real = engine.ctx, engine.ctx.attn_backend
    ctx.attn_backend = backend
    try:
        yield
    finally:
        ctx.attn_backend = real


class PrefillGraphRunner:
    def __init__(self, engine: Engine, counts: list[int]):
        self.engine = e = engine
        self.counts = sorted(counts)
        self.max_tokens = self.counts[-1]
        device = e.device
        # The logit rows follow the tokens' positions and table indices in what replay() copies in.
        self.inputs = StaticInputs(e, self.max_tokens, extra=self.max_tokens)
        model = e.model
        assert isinstance(model, DecoderForCausalLM)  # (the engine checked)
        layer = model.model.layers[0]
        assert isinstance(layer, DecoderLayer)
        self.model, attn = model, layer.self_attn
        shape = (self.max_tokens, attn.heads, attn.head_dim)
        self.query = torch.zeros(shape, dtype=e.dtype, device=device)
        self.attn_out = torch.zeros(shape, dtype=e.dtype, device=device)
        self.hidden_out = torch.zeros(self.max_tokens, e.model_config.hidden_size, dtype=e.dtype, device=device)
        self.pieces: dict[int, list[torch.cuda.CUDAGraph]] = {}
        self.layers: list = []
        self.capture_seconds = 0.0
        self.memory_bytes = 0
        self.replays = 0  # prefill batches run through the pieces
        self._capture()

    def _forward(self, tokens: int) -> None:
        inputs = self.inputs
        inputs.gather(tokens)
        hidden = self.model.model(inputs.input_ids[:tokens], inputs.positions[:tokens])
        self.hidden_out[:tokens].copy_(hidden)

    @torch.inference_mode()
    def _capture(self) -> None:
        e = self.engine
        capture = Capture(e.device)
        counts = sorted(self.counts, reverse=True)
        for tokens in tqdm(counts, desc="Capturing prefill CUDA graphs", unit="size", disable=len(counts) < 2):
            batch = self.inputs.padding_batch(tokens, "prefill")
            with e.ctx.forward_batch(batch), capture.on_stream():
                with _backend(e, _Breaks(self)):  # warm up: library handles, lazy kernels, JIT builds
                    self._forward(tokens)
                breaks = _Breaks(self, capture.pool)
                with _backend(e, breaks):
                    breaks.begin()
                    try:
                        self._forward(tokens)
                    finally:  # (a failed capture must not leave the stream capturing)
                        breaks.end()
            self.pieces[tokens], self.layers = breaks.pieces, breaks.layers
        torch.cuda.synchronize(e.device)
        # The warm-up passes' activations stay cached on the capture stream, where nothing else
        # allocates: hand them back (torch.cuda.graph would, at each capture) before measuring.
        torch.cuda.empty_cache()
        self.capture_seconds, self.memory_bytes = capture.finish()
        logger.info("captured piecewise CUDA graphs for prefill batches of %s tokens (%d pieces each) in %.1f s, "
                    "using %.2f GiB", sizes_text(self.counts), len(self.layers) + 1, self.capture_seconds,
                    self.memory_bytes / 2**30)

    def can_run(self, batch: Batch) -> bool:
        return batch.phase == "prefill" and batch.num_tokens <= self.max_tokens

    def replay(self, batch: Batch) -> torch.Tensor:
        """Run prefill `batch` through the pieces of the next captured count and its attention
        between them; returns float32 logits of its logit rows, as the model's forward() does."""
        e = self.engine
        rows, cached, device_lens = batch.host_arrays
        extend = device_lens - cached
        positions = token_positions(cached, extend)
        n = len(positions)
        padded = padded_batch_size(n, self.counts)  # (the next captured count: the decode graphs' rule)
        assert padded is not None, "replay() of a batch can_run() refused"
        logits_at = logit_rows(extend, batch.logit_counts)
        self.inputs.copy_in(batch, rows, extend, positions, padded, tail=logits_at)
        batch.logit_indices = self.inputs.step[2 * padded : 2 * padded + len(logits_at)]
        backend = e.attn_backend
        backend.prepare_metadata(batch)
        pieces = self.pieces[padded]
        query, attn_out = self.query[:n], self.attn_out[:n]
        for piece, layer in zip(pieces, self.layers):
            piece.replay()
            backend.attend_into(query, layer, batch, attn_out)
        pieces[-1].replay()
        self.replays += 1
        return self.model.lm_head(self.hidden_out[:n][batch.logit_indices]).float()

    def shutdown(self) -> None:
        self.pieces.clear()
