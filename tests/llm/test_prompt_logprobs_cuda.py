"""Prompt logprobs on a GPU: the scoring rows' logits, their log-softmax and the copy to the host
(pinned, read after the step's event) give HF's values, beside decode steps in CUDA graphs and with
the prompt scored a few positions a step. Needs CUDA; skipped without it (CI has no GPU); on the
device machine: python -m pytest tests/llm/test_prompt_logprobs_cuda.py"""

from __future__ import annotations

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.llm.test_prompt_logprobs import _assert_equal_hf, _hf_log_softmax

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("max_running_requests", [32, 4])
def test_prompt_logprobs_on_cuda_equal_hf(tiny_model_dir, max_running_requests):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    prompt = list(range(10, 70))
    llm = LLM(model_dir, dtype=torch.float32, page_size=4, num_pages=1024, max_prefill_length=512,
              max_running_requests=max_running_requests)
    try:
        outs = llm.generate([prompt, prompt[:9]], [SamplingParams(temperature=0, max_tokens=8, prompt_logprobs=3),
                                                   SamplingParams(temperature=0, max_tokens=8)], use_tqdm=False)
    finally:
        llm.shutdown()
    _assert_equal_hf(outs[0]["prompt_logprobs"], prompt, _hf_log_softmax(model_dir, prompt), k=3)
    assert outs[1]["prompt_logprobs"] is None
