"""Every supported architecture computes what HF transformers computes: the same greedy tokens
and logits within 1e-4 in float32, with requests at different positions sharing one batch."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import ARCHITECTURES
from tests.helpers import EngineDriver, cpu_engine, hf_greedy

NEW_TOKENS = 32
PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [7] * 12 + [250, 251, 252], [300]]


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_greedy_tokens_and_logits_match_hf(tiny_model_dir, architecture):
    model_dir = tiny_model_dir(architecture)
    with cpu_engine(model_dir, page_size=4, max_running_requests=8, num_pages=256) as engine:
        driver = EngineDriver(engine)
        reqs = [driver.add(p) for p in PROMPTS]
        logits = {r.uid: [] for r in reqs}
        # Staggered start: request i joins at step i, so prefills and decodes share batches.
        for step in range(NEW_TOKENS + len(reqs) - 1):
            active = [r for r in reqs[: step + 1] if len(r.output_ids) < NEW_TOKENS]
            step_logits = driver.step(active)
            for r, row in zip(active, step_logits):
                logits[r.uid].append(row)
        worst = 0.0
        for r, prompt in zip(reqs, PROMPTS):
            want_tokens, want_logits = hf_greedy(model_dir, prompt, NEW_TOKENS)
            assert r.output_ids == want_tokens, f"{architecture}: prompt {r.uid} diverged from HF"
            diff = (torch.stack(logits[r.uid]) - want_logits).abs().max().item()
            worst = max(worst, diff)
        print(f"{architecture}: max |logit diff| vs HF = {worst:.2e}")
        assert worst < 1e-4


@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "LlamaForCausalLM"])
def test_bfloat16_runs_and_starts_like_hf(tiny_model_dir, architecture):
    model_dir = tiny_model_dir(architecture)
    with cpu_engine(model_dir, dtype=torch.bfloat16, page_size=16, max_running_requests=4, num_pages=64) as engine:
        driver = EngineDriver(engine)
        reqs = [driver.add(p) for p in PROMPTS]
        logits = driver.step(reqs)
        for _ in range(15):
            driver.step(reqs)
        assert torch.isfinite(logits).all()
        for r, prompt in zip(reqs, PROMPTS):
            assert len(r.output_ids) == 16
            assert all(0 <= t < engine.model_config.vocab_size for t in r.output_ids)
            want, _ = hf_greedy(model_dir, prompt, 1, dtype=torch.bfloat16)
            assert r.output_ids[0] == want[0]
