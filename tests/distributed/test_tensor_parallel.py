"""Tensor parallelism on the CPU (gloo): the real server with --tp 2 (and --tp 4, replicating KV
heads) produces TP=1's greedy tokens for every architecture; bad splits fail at start."""

from __future__ import annotations

import openai
import pytest
import torch

from minisgl.core import SamplingParams
from minisgl.engine.config import validate_tp
from minisgl.llm import LLM
from minisgl.models import load_model_config
from tests.conftest import ARCHITECTURES
from tests.server.serving import ServerProcess

PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [300], [7] * 20]


def single_rank_texts(model_dir: str, device: str = "cpu") -> list[str]:
    llm = LLM(model_dir, device=device, dtype=torch.float32, num_page_override=512, page_size=4)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)
        return [o["text"] for o in outs]
    finally:
        llm.shutdown()


def served_texts(model_dir: str, tp: int) -> list[str]:
    srv = ServerProcess("--model", model_dir, "--tp", str(tp), "--dtype", "float32", "--page-size", "4",
                        "--num-pages", "512", "--served-model-name", "m").wait_ready(180)
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
        resp = client.completions.create(model="m", prompt=PROMPTS, max_tokens=16, temperature=0,
                                         extra_body={"ignore_eos": True})
        return [c.text for c in sorted(resp.choices, key=lambda c: c.index)]
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_tp2_server_matches_tp1(tiny_model_dir, architecture):
    model_dir = tiny_model_dir(architecture)
    assert served_texts(model_dir, tp=2) == single_rank_texts(model_dir)


def test_tp4_replicates_kv_heads(tiny_model_dir):
    model_dir = tiny_model_dir("LlamaForCausalLM")  # 4 attention heads, 2 KV heads
    assert served_texts(model_dir, tp=4) == single_rank_texts(model_dir)


def test_impossible_splits_are_refused_with_the_reason(tiny_model_dir):
    cfg = load_model_config(tiny_model_dir("Qwen3ForCausalLM"))  # 4 heads, 2 KV heads
    cpu = torch.device("cpu")
    validate_tp(cfg, 2, cpu)
    with pytest.raises(ValueError, match="must divide the model's 4 attention heads"):
        validate_tp(cfg, 3, cpu)
    with pytest.raises(ValueError, match="must divide the model's 4 attention heads"):
        validate_tp(cfg, 8, cpu)


def test_offline_llm_with_tp2_matches_tp1(tiny_model_dir):
    model_dir = tiny_model_dir("Qwen3MoeForCausalLM")
    llm = LLM(model_dir, tp=2, device="cpu", dtype=torch.float32, num_page_override=512, page_size=4)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, logprobs=1),
                            use_tqdm=False)
    finally:
        llm.shutdown()
    assert [o["text"] for o in outs] == single_rank_texts(model_dir)
    # Rank 0 alone computes logprobs (the followers skip them): greedy picks the most likely token.
    for o in outs:
        assert [e["token_id"] for e in o["logprobs"]] == o["token_ids"]
        assert all(e["top_logprobs"][0][0] == e["token_id"] for e in o["logprobs"])
    assert not any(p.is_alive() for p in llm.followers)
