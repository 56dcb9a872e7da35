"""Turning logits into next tokens, with each request's own sampling parameters.

Everything is batched tensor work; only requests with a fixed seed draw their noise from their
own generator (seeded by seed and position, so a draw does not depend on the rest of the batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.core import Req


@dataclass
class BatchSamplingArgs:
    temperatures: torch.Tensor | None  # None: every request is greedy
    top_k: torch.Tensor | None = None  # None: no request filters by top-k
    top_p: torch.Tensor | None = None
    min_p: torch.Tensor | None = None
    greedy_rows: torch.Tensor | None = None  # rows sampled greedily in a mixed batch
    seeded: tuple[tuple[int, int], ...] = ()  # (row, seed for this step)

    @classmethod
    def from_reqs(cls, reqs: list[Req], device: torch.device) -> BatchSamplingArgs:
        params = [r.sampling_params for r in reqs]
        if all(p.is_greedy for p in params):
            return cls(temperatures=None)

        def column(values, dtype):
            return torch.tensor(values, dtype=dtype).to(device, non_blocking=True)

        vocab_wide = [p.top_k if p.top_k > 0 else 1 << 30 for p in params]
        return cls(
            temperatures=column([p.temperature if not p.is_greedy else 1.0 for p in params], torch.float32),
            top_k=column(vocab_wide, torch.int64) if any(p.top_k > 0 for p in params) else None,
            top_p=column([p.top_p for p in params], torch.float32) if any(p.top_p < 1 for p in params) else None,
            min_p=column([p.min_p for p in params], torch.float32) if any(p.min_p > 0 for p in params) else None,
            greedy_rows=column([p.is_greedy for p in params], torch.bool),
            seeded=tuple((i, _step_seed(p.seed, r.seq_len)) for i, (p, r) in enumerate(zip(params, reqs))
                         if p.seed is not None and not p.is_greedy),
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


class Sampler:
    def sample(self, logits: torch.Tensor, args: BatchSamplingArgs) -> torch.Tensor:
        greedy = logits.argmax(dim=-1)
        if args.temperatures is None:
            return greedy
        probs = filtered_probs(logits, args)
        # Exponential race: argmax(p / E) with E ~ Exp(1) draws index i with probability p_i.
        noise = torch.empty_like(probs).exponential_()
        for row, seed in args.seeded:
            gen = torch.Generator(device=probs.device).manual_seed(seed)
            noise[row] = torch.empty(probs.shape[-1], device=probs.device).exponential_(generator=gen)
        sampled = (probs / noise).argmax(dim=-1)
        return torch.where(args.greedy_rows, greedy, sampled)
