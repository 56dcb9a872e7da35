"""Penalties, logit_bias and min_tokens change the logits exactly as the references define them:
HF transformers' own logits processors where it has one, OpenAI's published formula otherwise.
The batch mixes requests that use them with requests that do not, which stay untouched."""

from __future__ import annotations

from collections import Counter

import torch
from transformers import (
    MinNewTokensLengthLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    SequenceBiasLogitsProcessor,
)

from minisgl.core.batch import Req
from minisgl.core.params import SamplingParams
from minisgl.engine import BatchSamplingArgs, LogitsAdjustment, Sampler

VOCAB = 50
EOS = (7, 11)


def _req(row: int, prompt: list[int], output: list[int], params: SamplingParams, pool: torch.Tensor) -> Req:
    """A request mid-generation, its ids in the token pool as the engine keeps them."""
    req = Req(uid=row, prompt_ids=prompt, sampling_params=params, table_idx=row,
              seq_len=len(prompt) + len(output), output_ids=list(output))
    pool[row, : req.seq_len] = torch.tensor(prompt + output, dtype=torch.int32)
    pool[row, req.seq_len:] = 3  # stale ids of an earlier request in this row: must be ignored
    return req


def _batch(*cases: tuple[list[int], list[int], SamplingParams]):
    torch.manual_seed(0)
    pool = torch.zeros(len(cases) + 1, 64, dtype=torch.int32)
    reqs = [_req(i, p, o, params, pool) for i, (p, o, params) in enumerate(cases)]
    logits = torch.randn(len(cases), VOCAB) * 3
    return reqs, pool, logits


def _adjusted(reqs, pool, logits):
    adjust = LogitsAdjustment.from_reqs(reqs, torch.device("cpu"), EOS)
    out = adjust.apply(logits, pool)
    return out


PROMPT = [1, 2, 2, 5, 9]
OUTPUT = [9, 9, 4, 20, 5, 20, 20]


def test_nothing_to_adjust_costs_nothing():
    reqs, pool, logits = _batch((PROMPT, OUTPUT, SamplingParams()), (PROMPT, [], SamplingParams(temperature=0)))
    assert LogitsAdjustment.from_reqs(reqs, torch.device("cpu"), EOS) is None
    assert BatchSamplingArgs.from_reqs(reqs, torch.device("cpu"), EOS).adjust is None


def test_repetition_penalty_equals_hf_over_prompt_and_output():
    reqs, pool, logits = _batch((PROMPT, OUTPUT, SamplingParams(repetition_penalty=1.7)),
                                (PROMPT, OUTPUT, SamplingParams()),
                                ([30, 31], [40], SamplingParams(repetition_penalty=0.6)))
    out = _adjusted(reqs, pool, logits)
    for i, penalty in ((0, 1.7), (2, 0.6)):
        ids = torch.tensor([reqs[i].all_ids])
        want = RepetitionPenaltyLogitsProcessor(penalty)(ids, logits[i : i + 1].clone())
        torch.testing.assert_close(out[i : i + 1], want)
    assert torch.equal(out[1], logits[1])


def test_presence_and_frequency_penalties_follow_openai_formula_on_generated_tokens():
    params = SamplingParams(presence_penalty=0.8, frequency_penalty=-1.5)
    reqs, pool, logits = _batch((PROMPT, OUTPUT, params), (PROMPT, OUTPUT, SamplingParams(presence_penalty=2.0)))
    out = _adjusted(reqs, pool, logits)
    for i, (presence, frequency) in enumerate(((0.8, -1.5), (2.0, 0.0))):
        want = logits[i].clone()
        for token, count in Counter(OUTPUT).items():  # the prompt's tokens are not penalized
            want[token] -= frequency * count + presence
        torch.testing.assert_close(out[i], want)


def test_logit_bias_equals_hf_sequence_bias_and_decides_greedy_choice():
    reqs, pool, logits = _batch((PROMPT, OUTPUT, SamplingParams(temperature=0, logit_bias={3: 100, 8: -42.5})),
                                (PROMPT, OUTPUT, SamplingParams(temperature=0)))
    out = _adjusted(reqs, pool, logits)
    want = SequenceBiasLogitsProcessor({(3,): 100.0, (8,): -42.5})(torch.tensor([reqs[0].all_ids]), logits[:1].clone())
    torch.testing.assert_close(out[:1], want)
    args = BatchSamplingArgs.from_reqs(reqs, torch.device("cpu"), EOS)
    assert Sampler().sample(args.adjust.apply(logits, pool), args).tolist() == [3, logits[1].argmax().item()]
    # The greedy token banned with -100 is not emitted.
    top = logits[1].argmax().item()
    reqs, pool, _ = _batch((PROMPT, OUTPUT, SamplingParams(temperature=0, logit_bias={top: -100})))
    args = BatchSamplingArgs.from_reqs(reqs, torch.device("cpu"), EOS)
    assert Sampler().sample(args.adjust.apply(logits[1:], pool), args).item() != top


def test_min_tokens_masks_eos_and_stop_ids_like_hf_until_reached():
    stop_ids = (13,)
    for generated in (0, 3, 4, 6):
        params = SamplingParams(min_tokens=4, stop_token_ids=stop_ids)
        reqs, pool, logits = _batch((PROMPT, OUTPUT[:generated], params), (PROMPT, [], SamplingParams(stop_token_ids=(7,))))
        adjust = LogitsAdjustment.from_reqs(reqs, torch.device("cpu"), EOS)
        out = adjust.apply(logits, pool) if adjust else logits
        ids = torch.tensor([reqs[0].all_ids])
        want = MinNewTokensLengthLogitsProcessor(len(PROMPT), 4, list(EOS + stop_ids))(ids, logits[:1].clone())
        torch.testing.assert_close(out[:1], want)
        assert torch.equal(out[1], logits[1])


def test_all_together_in_vllm_order_and_the_models_logits_untouched():
    """logit_bias and min_tokens, then repetition, then frequency/presence (vLLM's and HF's order)."""
    params = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.5, presence_penalty=0.25,
                            logit_bias={9: 2.0, 7: 5.0}, min_tokens=10)
    reqs, pool, logits = _batch((PROMPT, OUTPUT, params))
    original = logits.clone()
    out = _adjusted(reqs, pool, logits)
    ids = torch.tensor([reqs[0].all_ids])
    want = SequenceBiasLogitsProcessor({(9,): 2.0, (7,): 5.0})(ids, logits.clone())
    want = MinNewTokensLengthLogitsProcessor(len(PROMPT), 10, list(EOS))(ids, want)
    want = RepetitionPenaltyLogitsProcessor(1.3)(ids, want)
    for token, count in Counter(OUTPUT).items():
        want[0, token] -= 0.5 * count + 0.25
    torch.testing.assert_close(out, want)
    assert torch.equal(logits, original)


def test_out_of_range_penalties_are_rejected():
    import pytest

    for bad in ({"presence_penalty": 2.5}, {"frequency_penalty": -3}, {"repetition_penalty": 0},
                {"logit_bias": {1: 101}}, {"min_tokens": 200, "max_tokens": 10}):
        with pytest.raises(ValueError, match=next(iter(bad)).split("_")[0]):
            SamplingParams(**bad)
