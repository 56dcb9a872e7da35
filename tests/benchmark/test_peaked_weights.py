"""Greedy-peaked dummy weights (minisgl/benchmark/peaked_weights.py): the greedy continuation repeats
the prompt's last token, by a margin no rounding closes; the speculative benchmark run on them
replays the continuation both paths produce."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from minisgl.benchmark.peaked_weights import make_greedy_peaked
from minisgl.core.params import SamplingParams
from minisgl.llm import LLM

SETTINGS = {"device": "cpu", "max_running_requests": 4, "num_pages": 256, "page_size": 4, "dummy_weight": True}
PROMPTS = [[5, 17, 200, 31], [9, 8, 7, 301, 44, 12]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_greedy_continuation_repeats_the_last_token(tiny_model_dir, dtype):
    llm = LLM(tiny_model_dir("Qwen3ForCausalLM"), dtype=dtype, **SETTINGS)
    try:
        model = llm.scheduler.engine.model
        make_greedy_peaked(model)
        outputs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True), use_tqdm=False)
        assert [o["token_ids"] for o in outputs] == [[p[-1]] * 12 for p in PROMPTS]
        # The margin: the winner's logit against the runner-up's, over what bf16 rounds away.
        embed = model.model.embed_tokens.weight.float()
        for token in (5, 301):
            e = embed[token]
            logits = embed @ (e / e.pow(2).mean().sqrt())
            top2 = logits.topk(2).values
            assert logits.argmax().item() == token
            assert (top2[0] - top2[1]).item() > 0.25 * top2[0].item()
    finally:
        llm.shutdown()


def test_a_mixture_of_experts_model_is_refused(tiny_model_dir):
    llm = LLM(tiny_model_dir("Qwen3MoeForCausalLM"), dtype=torch.float32, **SETTINGS)
    try:
        with pytest.raises(ValueError, match="dense decoder"):
            make_greedy_peaked(llm.scheduler.engine.model)
    finally:
        llm.shutdown()


def test_the_speculative_benchmark_replays_what_both_paths_produce(tiny_model_dir, tmp_path):
    out = tmp_path / "speculative.json"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "benchmark/offline/speculative.py"), "--model",
         tiny_model_dir("Qwen3ForCausalLM"), "--dummy-weight", "--device", "cpu", "--dtype", "bfloat16",
         "--batches", "1,2", "--rates", "1.0,0", "--prompt-len", "16", "--decode-steps", "24",
         "--speculative-num-tokens", "4", "--profile", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    runs = json.loads(out.read_text())["runs"]
    assert [(r["batch"], r["rate"]) for r in runs] == [(1, 1.0), (1, 0.0), (2, 1.0), (2, 0.0)]
    assert all(r["same_tokens"] for r in runs)
    full = [r for r in runs if r["rate"] == 1.0]
    assert all(r["drafted"] > 0 and r["accepted"] == r["drafted"] for r in full)
    assert all(r["accepted"] == 0 for r in runs if r["rate"] == 0.0)
    assert (tmp_path / "speculative.png").stat().st_size > 0
    # --profile: each batch-1 run's steps, kernels and the host's busiest functions
    assert done.stdout.count("scheduler turns") == 3 and "host, per turn" in done.stdout
