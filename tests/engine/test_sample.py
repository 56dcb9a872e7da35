"""The sampler: greedy, per-request filters, seeds, and the distribution it draws from."""

from __future__ import annotations

import pytest
import torch

from minisgl.core.batch import Req
from minisgl.core.params import SamplingParams
from minisgl.engine import BatchSamplingArgs, Sampler

VOCAB = 12


def _args(*params: SamplingParams) -> BatchSamplingArgs:
    reqs = [Req(uid=i, prompt_ids=[0], sampling_params=p) for i, p in enumerate(params)]
    return BatchSamplingArgs.from_reqs(reqs, torch.device("cpu"))


def _logits(rows: int = 1) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(rows, VOCAB) * 2


def test_temperature_zero_and_top_k_one_are_greedy():
    logits = _logits(3)
    args = _args(SamplingParams(temperature=0), SamplingParams(temperature=1.5, top_k=1), SamplingParams(temperature=0))
    assert args.temperatures is None
    assert torch.equal(Sampler().sample(logits, args), logits.argmax(-1))


def test_mixed_batch_keeps_greedy_rows_greedy():
    logits = _logits(2)
    args = _args(SamplingParams(temperature=0), SamplingParams(temperature=5.0))
    for _ in range(20):
        assert Sampler().sample(logits, args)[0] == logits[0].argmax()


def test_fixed_seed_reproduces_regardless_of_batch():
    logits = _logits(1).repeat(3, 1)
    seeded = SamplingParams(temperature=1.0, seed=1234)
    alone = [Sampler().sample(logits[:1], _args(seeded)).item() for _ in range(5)]
    together = [Sampler().sample(logits, _args(seeded, SamplingParams(), SamplingParams())).tolist()[0]
                for _ in range(5)]
    assert alone == together == [alone[0]] * 5


def _reference(logits: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """softmax(logits/T), keep top_k, then the smallest set of mass >= top_p, renormalized."""
    probs = torch.softmax(logits / p.temperature, -1)
    order = probs.argsort(descending=True)
    keep = torch.zeros_like(probs, dtype=torch.bool)
    kept = order[: p.top_k] if p.top_k > 0 else order
    mass, total = 0.0, probs[kept].sum()
    for idx in kept:
        if mass >= p.top_p:
            break
        keep[idx] = True
        mass += (probs[idx] / total).item()
    probs = probs * keep
    return probs / probs.sum()


# Temperature alone, top-k, top-p, and both: the cases every sampler path must draw correctly.
FILTER_CASES = [
    SamplingParams(temperature=0.7),
    SamplingParams(temperature=1.3, top_k=4),
    SamplingParams(temperature=1.0, top_p=0.6),
    SamplingParams(temperature=0.9, top_k=6, top_p=0.8),
]


@pytest.mark.parametrize("params", FILTER_CASES)
def test_empirical_distribution_matches_filtered_softmax(params):
    logits = _logits(1)[0]
    draws = 40_000
    args = _args(*[params] * draws)
    samples = Sampler().sample(logits.repeat(draws, 1), args)
    empirical = torch.bincount(samples, minlength=VOCAB).float() / draws
    expected = _reference(logits, params)
    # Tokens the filters drop must never appear; the rest within a few standard errors.
    assert (empirical[expected == 0] == 0).all()
    stderr = (expected * (1 - expected) / draws).sqrt()
    assert ((empirical - expected).abs() <= 5 * stderr + 1e-3).all(), (empirical, expected)


def test_min_p_drops_unlikely_tokens():
    logits = torch.tensor([[4.0, 3.9, 0.0, -1.0]])
    args = _args(*[SamplingParams(temperature=1.0, min_p=0.5)] * 2000)
    samples = Sampler().sample(logits.repeat(2000, 1), args)
    assert set(samples.tolist()) == {0, 1}


def test_invalid_params_are_rejected_with_a_message():
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
