"""Structured output on a GPU: the grammar's mask holds through CUDA graphs, FlashInfer and the
Triton sampler, as on the CPU. Run on the device machine; skipped without CUDA.

(An H100 run of benchmark/offline/sampling_cost.py had every constrained request end after one
token, even under a grammar that cannot end before 5,000 characters: these pin that down.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
LONG = ("regex", "[a-z ]{500,}")  # cannot finish within the tests' max_tokens


def test_xgrammar_applies_a_mask_on_cuda_as_its_bits_say():
    import xgrammar

    vocab = 1000
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, vocab, generator=gen)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (3, -(-vocab // 32)), dtype=torch.int32, generator=gen)
    allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little").reshape(3, -1)[:, :vocab].astype(bool)
    expected = torch.where(torch.from_numpy(allowed), logits, float("-inf"))
    on_gpu = logits.cuda()
    xgrammar.apply_token_bitmask_inplace(on_gpu, bitmask.cuda())
    assert torch.equal(on_gpu.cpu(), expected)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_constrained_requests_decode_to_their_limit_under_cuda_graphs(tiny_model_dir, temperature):
    s = Scheduler(SchedulerConfig(model_path=tiny_model_dir("Qwen3ForCausalLM"), device="cuda", dtype=torch.bfloat16,
                                  num_pages=256, page_size=16, max_running_requests=8, cuda_graph_max_bs=8))
    try:
        for uid in range(4):
            s.add_request(uid, [5 + uid, 6, 7], SamplingParams(temperature=temperature, max_tokens=24, ignore_eos=True,
                                                               constraint=LONG))
        s.add_request(9, [8, 9], SamplingParams(temperature=temperature, max_tokens=24, ignore_eos=True))
        outputs = []
        # Until every request ends, however long the grammar takes to compile in its worker process
        # (the GPU steps the plain request through in well under a second; pytest's timeout is the
        # hang guard).
        while s.has_work:
            outputs += s.step()
        ends = {o.uid: o.finish_reason for o in outputs if o.finish_reason}
        counts = {uid: sum(o.uid == uid and o.token_id is not None for o in outputs) for uid in ends}
        assert ends == {0: "length", 1: "length", 2: "length", 3: "length", 9: "length"}
        assert set(counts.values()) == {24}
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(s.config.model_path)
        for uid in range(4):
            text = tok.decode([o.token_id for o in outputs if o.uid == uid and o.token_id is not None])
            assert set(text) <= set("abcdefghijklmnopqrstuvwxyz "), text
    finally:
        s.shutdown()
