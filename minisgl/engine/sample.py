"""Turning logits into next tokens, with each request's own sampling parameters.

Everything is batched tensor work; only requests with a fixed seed draw their noise from their
own generator (seeded by seed and position, so a draw does not depend on the rest of the batch).
On CUDA, plain temperature sampling (no seed, no top-k/top-p/min-p) is one Triton kernel over
the logits (Gumbel max); top-k / top-p without seeds use FlashInfer's rejection-sampling kernels
(no sort of the vocabulary) when the package is importable. MINISGL_DISABLE_FUSED_KERNELS=1 and
MINISGL_DISABLE_FLASHINFER_SAMPLING=1 turn those off.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from minisgl.core.batch import Req
from minisgl.core.host import to_device
from minisgl.kernels.dispatch import triton_ops
from minisgl.utils import env

from .logits import LogitsAdjustment

if TYPE_CHECKING:
    from minisgl.constrained.grammar import BatchMasks


@dataclass
class BatchSamplingArgs:
    temperatures: torch.Tensor | None  # None: every request is greedy
    top_k: torch.Tensor | None = None  # None: no request filters by top-k
    top_p: torch.Tensor | None = None
    min_p: torch.Tensor | None = None
    greedy_rows: torch.Tensor | None = None  # rows sampled greedily in a mixed batch
    seeded: tuple[tuple[int, int], ...] = ()  # (row, seed for this step)
    logprobs_k: int | None = None  # None: no request wants logprobs; else the most alternatives any asks for
    # Penalties, logit_bias, min_tokens, grammar masks: applied to the logits before sampling
    # (Engine.forward_batch); None when no request of the batch uses any.
    adjust: LogitsAdjustment | None = None

    @classmethod
    def from_reqs(cls, reqs: list[Req], device: torch.device, eos_token_ids: tuple[int, ...] = (),
                  grammar_masks: BatchMasks | None = None) -> BatchSamplingArgs:
        """`eos_token_ids`: what min_tokens holds back; `grammar_masks`: the masks of the batch's
        constrained rows (minisgl.constrained), None when no request is constrained."""
        params = [r.sampling_params for r in reqs]
        asked = [p.logprobs for p in params if p.logprobs is not None]
        logprobs_k = max(asked) if asked else None
        adjust = LogitsAdjustment.from_reqs(reqs, device, eos_token_ids, grammar_masks)
        if all(p.is_greedy for p in params):
            return cls(temperatures=None, logprobs_k=logprobs_k, adjust=adjust)

        def column(values, dtype):
            # From pinned memory on CUDA: the copy is asynchronous and never waits for the GPU.
            return to_device(np.array(values, dtype=dtype), device)

        vocab_wide = [min(p.top_k, 1 << 30) if p.top_k > 0 else 1 << 30 for p in params]  # int64-safe
        any_greedy = any(p.is_greedy for p in params)
        return cls(
            temperatures=column([p.temperature if not p.is_greedy else 1.0 for p in params], np.float32),
            top_k=column(vocab_wide, np.int64) if any(p.top_k > 0 for p in params) else None,
            top_p=column([p.top_p for p in params], np.float32) if any(p.top_p < 1 for p in params) else None,
            min_p=column([p.min_p for p in params], np.float32) if any(p.min_p > 0 for p in params) else None,
            greedy_rows=column([p.is_greedy for p in params], np.bool_) if any_greedy else None,
            seeded=tuple((i, _step_seed(p.seed, r.seq_len)) for i, (p, r) in enumerate(zip(params, reqs))
                         if p.seed is not None and not p.is_greedy),
            logprobs_k=logprobs_k,
            adjust=adjust,
        )


def _step_seed(seed: int, position: int) -> int:
    return (seed * 1_000_003 + position) % (1 << 63)


def filtered_probs(logits: torch.Tensor, args: BatchSamplingArgs) -> torch.Tensor:
    """softmax(logits / T) restricted by top-k, then top-p, then min-p (not renormalized)."""
    probs = torch.softmax(logits / args.temperatures.unsqueeze(1), dim=-1)
    if args.top_k is not None or args.top_p is not None:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        if args.top_k is not None:
            ranks = torch.arange(probs.shape[-1], device=probs.device)
            sorted_probs = sorted_probs.masked_fill(ranks >= args.top_k.unsqueeze(1), 0.0)
        if args.top_p is not None:
            renorm = sorted_probs / sorted_probs.sum(dim=-1, keepdim=True)
            mass_before = renorm.cumsum(dim=-1) - renorm
            sorted_probs = sorted_probs.masked_fill(mass_before >= args.top_p.unsqueeze(1), 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    if args.min_p is not None:
        peak = probs.max(dim=-1, keepdim=True).values
        probs = probs.masked_fill(probs < args.min_p.unsqueeze(1) * peak, 0.0)
    return probs


@dataclass
class TokenOutputs:
    """Where a step's tokens go besides the device tensor that Sampler.sample returns: with
    `pool_index` (int64 [rows], on the device), the flattened token pool `pool` at those indices,
    and `host` (int32 [rows], pinned, allocated only by the path that writes it). The Triton
    sampling kernel writes them as it picks each token and sets `written`; otherwise the engine
    copies and stores the returned tokens itself."""

    pool: torch.Tensor
    pool_index: torch.Tensor | None
    host: torch.Tensor | None = None
    written: bool = False


class TokenLogprobs(NamedTuple):
    chosen: torch.Tensor  # float32 [rows]: log-probability of each row's sampled token
    top_values: torch.Tensor  # float32 [rows, k], descending
    top_ids: torch.Tensor  # int64 [rows, k]


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, k: int) -> TokenLogprobs:
    """Log-probabilities under the model's own distribution (log-softmax of the raw logits, as
    vLLM and OpenAI report them): the sampled tokens' and the k most likely per row."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    chosen = lp.gather(1, tokens.view(-1, 1).long()).squeeze(1)
    top_values, top_ids = lp.topk(k, dim=-1) if k else (lp[:, :0], torch.zeros_like(lp[:, :0], dtype=torch.int64))
    return TokenLogprobs(chosen, top_values, top_ids)


@functools.cache
def _flashinfer_sampling():
    if env.DISABLE_FLASHINFER_SAMPLING.on():
        return None
    try:
        import flashinfer.sampling
    except ImportError:
        return None
    return flashinfer.sampling


class Sampler:
    def sample(self, logits: torch.Tensor, args: BatchSamplingArgs, outputs: TokenOutputs | None = None) -> torch.Tensor:
        """logits [rows, vocab]: float32, or the model dtype (CUDA graphs) on CUDA. `outputs`:
        where the Triton kernels also write the tokens, if they run."""
        if args.temperatures is None:  # every row greedy
            # At a few rows torch's argmax is one program a row, latency-bound over a 128K-token
            # row (benchmark/NOTES.md): the Triton kernel spreads each row over many.
            kernels = triton_ops() if logits.is_cuda else None
            if kernels is not None and logits.shape[0] <= kernels.WIDE_ROWS:
                return _gumbel_max(kernels, logits, None, 0, outputs)
            return logits.argmax(dim=-1)
        plain = not args.seeded and args.top_k is None and args.top_p is None and args.min_p is None
        kernels = triton_ops() if logits.is_cuda and plain else None
        if kernels is not None:
            # One pass over the logits: temperature, Gumbel noise and argmax in a Triton kernel.
            temps = args.temperatures
            if args.greedy_rows is not None:
                temps = temps.masked_fill(args.greedy_rows, 0.0)
            seed = int(torch.randint(0, 2**31 - 1, ()))  # the CPU generator: no device sync
            return _gumbel_max(kernels, logits, temps, seed, outputs)
        logits = logits.float()
        fi = _flashinfer_sampling() if logits.is_cuda and not args.seeded and args.min_p is None else None
        if fi is not None:
            sampled = self._sample_flashinfer(fi, logits, args)
        else:
            probs = filtered_probs(logits, args)
            # Exponential race: argmax(p / E) with E ~ Exp(1) draws index i with probability p_i.
            noise = torch.empty_like(probs).exponential_()
            for row, seed in args.seeded:
                gen = torch.Generator(device=probs.device).manual_seed(seed)
                noise[row] = torch.empty(probs.shape[-1], device=probs.device).exponential_(generator=gen)
            sampled = probs.div_(noise).argmax(dim=-1)
        if args.greedy_rows is None:
            return sampled
        return torch.where(args.greedy_rows, logits.argmax(dim=-1), sampled.to(torch.int64))

    @staticmethod
    def _sample_flashinfer(fi, logits: torch.Tensor, args: BatchSamplingArgs) -> torch.Tensor:
        scaled = logits / args.temperatures.unsqueeze(1)
        if args.top_k is None and args.top_p is None:
            return fi.sampling_from_logits(scaled)
        vocab = logits.shape[-1]
        top_k = args.top_k.clamp(max=vocab).to(torch.int32) if args.top_k is not None else vocab
        top_p = args.top_p if args.top_p is not None else 1.0
        return fi.top_k_top_p_sampling_from_logits(scaled, top_k, top_p)


def _gumbel_max(kernels, logits: torch.Tensor, temperatures: torch.Tensor | None, seed: int,
                outputs: TokenOutputs | None) -> torch.Tensor:
    if outputs is None:
        return kernels.sample_gumbel_max(logits, temperatures, seed)
    outputs.written = True
    outputs.host = torch.empty(logits.shape[0], dtype=torch.int32, pin_memory=True)
    return kernels.sample_gumbel_max(logits, temperatures, seed, host=outputs.host,
                                     pool=outputs.pool if outputs.pool_index is not None else None,
                                     pool_index=outputs.pool_index)
