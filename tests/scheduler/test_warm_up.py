"""Scheduler.warm_up, what the server runs on a GPU before it says ready: bursts through every
sampling path that leave nothing behind (no page held or cached, no count, no request), and a
scheduler that then computes HF transformers' tokens."""

from __future__ import annotations

import torch

from minisgl.core.params import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig
from tests.helpers import hf_greedy


def test_warm_up_leaves_nothing_behind_and_changes_no_output(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    s = Scheduler(SchedulerConfig(model_path=model_dir, device="cpu", dtype=torch.float32, num_pages=512, page_size=4,
                                  max_running_requests=8, max_prefill_length=64))
    try:
        s.warm_up()
        assert not s.reqs and not s.has_work and s.arrivals == 0
        assert s.cache.used_pages == 0 and s.cache.reserved == 0 and s.prefix_cache.cached_pages == 0
        assert s.stats.prompt_tokens == 0 and s.stats.generated_tokens == 0 and not s.stats.finished
        prompt = [5, 17, 42, 99, 3, 250]
        s.add_request(0, prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
        tokens = []
        while s.has_work:
            tokens += [o.token_id for o in s.step() if o.token_id is not None]
        assert tokens == hf_greedy(model_dir, prompt, 12)[0]
    finally:
        s.shutdown()
