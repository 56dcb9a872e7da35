"""Prompt logprobs (vLLM's prompt_logprobs, what echo with logprobs reports) are the model's own:
each prompt token from the second and its top alternatives equal HF transformers' log-softmax of
the logits at the position before it, whether the prompt was computed in one piece or in chunks,
whether its prefix was in the prefix cache, and beside requests that ask nothing of the kind."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM


def _hf_log_softmax(model_dir: str, ids: list[int]) -> torch.Tensor:
    hf = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        return torch.log_softmax(hf(torch.tensor([ids])).logits[0].float(), dim=-1)


def _assert_equal_hf(got: list, prompt: list[int], ref: torch.Tensor, k: int) -> None:
    assert len(got) == len(prompt) and got[0] is None  # the first token has nothing before it
    for pos, entry in enumerate(got[1:], start=1):
        row = ref[pos - 1]
        assert entry["token_id"] == prompt[pos]
        assert entry["logprob"] == pytest.approx(row[prompt[pos]].item(), abs=1e-4)
        want_values, want_ids = row.topk(k)
        assert [lp for _, lp in entry["top_logprobs"]] == pytest.approx(want_values.tolist(), abs=1e-4)
        assert [t for t, _ in entry["top_logprobs"]][:1] == want_ids.tolist()[:1]


@pytest.mark.parametrize("limits", [{}, {"max_prefill_length": 7}, {"max_running_requests": 4}],
                         ids=["one-piece", "chunked", "four-scored-a-batch"])
def test_prompt_logprobs_equal_hf_log_softmax(tiny_model_dir, limits):
    """With max_running_requests 4 a prefill batch scores 4 prompt positions at most (the rows of
    logits the engine has room for), so the prompt is scored 4 positions a step."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    prompt = list(range(10, 40))
    other = [5, 17, 42, 99, 3, 8, 9]
    llm = LLM(model_dir, device="cpu", dtype=torch.float32, num_pages=256, page_size=4, **limits)
    widest = []  # per forward: the most logit rows one request got
    forward = llm.scheduler.engine.forward_batch
    llm.scheduler.engine.forward_batch = lambda batch, args: (widest.append(int(batch.logit_counts.max())),
                                                              forward(batch, args))[1]
    try:
        warm = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)[0]
        outs = llm.generate([prompt, other],
                            [SamplingParams(temperature=0, max_tokens=3, prompt_logprobs=2, logprobs=1),
                             SamplingParams(temperature=0, max_tokens=3)], use_tqdm=False)
    finally:
        llm.shutdown()
    assert warm["prompt_logprobs"] is None and outs[1]["prompt_logprobs"] is None  # only when asked
    # The first call left the prompt in the prefix cache: the second scored it all the same.
    _assert_equal_hf(outs[0]["prompt_logprobs"], prompt, _hf_log_softmax(model_dir, prompt), k=2)
    assert outs[0]["token_ids"] == warm["token_ids"] + outs[0]["token_ids"][2:]  # sampling as without it
    assert outs[1]["token_ids"] == llm_free_greedy(model_dir, other, 3)
    chunk = min(limits.get("max_prefill_length", 4096), limits.get("max_running_requests", 256), len(prompt))
    assert max(widest) == chunk


def llm_free_greedy(model_dir: str, prompt: list[int], n: int) -> list[int]:
    """HF's greedy continuation: the neighbour of a scoring request decodes as it would alone."""
    hf = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    out = hf.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, min_new_tokens=n)
    return out[0, len(prompt):].tolist()


def test_prompt_logprobs_out_of_range_are_refused():
    with pytest.raises(ValueError, match="prompt_logprobs must be in"):
        SamplingParams(prompt_logprobs=21)
