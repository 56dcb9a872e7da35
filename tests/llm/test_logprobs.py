"""Logprobs from LLM.generate are the model's own log-probabilities: each generated token's and
its top alternatives equal HF transformers' log-softmax of the logits at that position (teacher
forced over prompt + output), for greedy and sampled requests in one batch."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM


def test_logprobs_equal_hf_log_softmax(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    prompts = [[5, 17, 42, 99, 3], list(range(10, 30))]
    params = [SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, logprobs=3),
              SamplingParams(temperature=1.0, top_k=5, seed=3, max_tokens=8, ignore_eos=True, logprobs=0)]
    llm = LLM(model_dir, device="cpu", dtype=torch.float32, num_pages=256, page_size=4)
    try:
        outs = llm.generate(prompts, params, use_tqdm=False)
        plain = llm.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=4), use_tqdm=False)[0]
    finally:
        llm.shutdown()
    assert plain["logprobs"] is None  # only when asked

    hf = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    for prompt, param, out in zip(prompts, params, outs):
        ids = prompt + out["token_ids"]
        with torch.no_grad():
            ref = torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)
        got = out["logprobs"]
        assert [e["token_id"] for e in got] == out["token_ids"]
        for step, entry in enumerate(got):
            row = ref[len(prompt) - 1 + step]
            assert entry["logprob"] == pytest.approx(row[entry["token_id"]].item(), abs=1e-4)
            assert len(entry["top_logprobs"]) == param.logprobs
            want_values, want_ids = row.topk(param.logprobs) if param.logprobs else (row[:0], row[:0])
            assert [lp for _, lp in entry["top_logprobs"]] == pytest.approx(want_values.tolist(), abs=1e-4)
            if param.logprobs:
                assert entry["top_logprobs"][0][0] == want_ids[0].item()
        if param.temperature == 0:  # greedy: the sampled token is the most likely one
            assert all(e["logprob"] == pytest.approx(e["top_logprobs"][0][1], abs=1e-6) for e in got)


def test_logprobs_out_of_range_are_refused():
    with pytest.raises(ValueError, match="logprobs must be in"):
        SamplingParams(logprobs=21)
