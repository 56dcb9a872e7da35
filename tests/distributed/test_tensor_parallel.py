"""Tensor parallelism on the CPU (gloo): --tp 2 (and --tp 4, replicating KV heads) produces TP=1's
greedy tokens for every architecture, offline (the same rank processes the server starts) and once
through the real server; bad splits fail at start; a failed multi-rank start or case leaves no ranks
or process group behind to break the next one."""

from __future__ import annotations

import multiprocessing as mp

import openai
import pytest
import torch
import torch.distributed as dist

from minisgl.core.params import SamplingParams
from minisgl.engine.config import validate_tp
from minisgl.llm import LLM
from minisgl.models import load_model_config
from tests.conftest import ARCHITECTURES
from tests.distributed.isolation import CaseFailed, run_isolated, session_members
from tests.server.serving import ServerProcess

pytestmark = pytest.mark.slow  # starts the server or worker processes: out of the fast loop (tests/test_tiers.py)

PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [300], [7] * 20]
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def single_rank_texts(model_dir: str, device: str = "cpu") -> list[str]:
    return offline_texts(model_dir, tp=1, device=device)


def offline_texts(model_dir: str, tp: int, device: str = "cpu") -> list[str]:
    llm = LLM(model_dir, tp=tp, device=device, dtype=torch.float32, num_pages=512, page_size=4)
    try:
        return [o["text"] for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]
    finally:
        llm.shutdown()


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_tp2_matches_tp1(tiny_model_dir, architecture):
    """Rank 0 alone computes logprobs (the followers skip them): greedy picks the most likely token."""
    model_dir = tiny_model_dir(architecture)
    llm = LLM(model_dir, tp=2, device="cpu", dtype=torch.float32, num_pages=512, page_size=4)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, logprobs=1),
                            use_tqdm=False)
    finally:
        llm.shutdown()
    assert [o["text"] for o in outs] == single_rank_texts(model_dir)
    for o in outs:
        assert [e["token_id"] for e in o["logprobs"]] == o["token_ids"]
        assert all(e["top_logprobs"][0][0] == e["token_id"] for e in o["logprobs"])
    assert not any(p.is_alive() for p in llm.followers)


def test_the_tp2_server_matches_tp1(tiny_model_dir):
    """The launcher's side of TP (its ranks, their rendezvous, rank 0 answering) end to end, once: the
    architectures differ only in the rank processes, checked offline above."""
    model_dir = tiny_model_dir("Qwen3MoeForCausalLM")
    srv = ServerProcess("--model", model_dir, "--tp", "2", "--dtype", "float32", "--page-size", "4",
                        "--num-pages", "512", "--served-model-name", "m").wait_ready(180)
    try:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="x")
        resp = client.completions.create(model="m", prompt=PROMPTS, max_tokens=16, temperature=0,
                                         extra_body={"ignore_eos": True})
        texts = [c.text for c in sorted(resp.choices, key=lambda c: c.index)]
    finally:
        assert srv.stop() == 0
    assert texts == single_rank_texts(model_dir)


def test_tp4_replicates_kv_heads(tiny_model_dir):
    model_dir = tiny_model_dir("LlamaForCausalLM")  # 4 attention heads, 2 KV heads
    assert offline_texts(model_dir, tp=4) == single_rank_texts(model_dir)


def test_impossible_splits_are_refused_with_the_reason(tiny_model_dir):
    cfg = load_model_config(tiny_model_dir("Qwen3ForCausalLM"))  # 4 heads, 2 KV heads
    cpu = torch.device("cpu")
    validate_tp(cfg, 2, cpu)
    with pytest.raises(ValueError, match="must divide the model's 4 attention heads"):
        validate_tp(cfg, 3, cpu)
    with pytest.raises(ValueError, match="must divide the model's 4 attention heads"):
        validate_tp(cfg, 8, cpu)


def test_constrained_requests_at_tp2_decode_like_tp1(tiny_model_dir):
    """Every rank follows the same grammars and fills the same masks, also while overlapping."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    prompts = [[5, 6, 7], [8, 9], [11, 3, 4]]
    params = [SamplingParams(temperature=0, max_tokens=12, constraint=("regex", "[a-f]{4,10}")),
              SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
              SamplingParams(temperature=1.0, seed=3, max_tokens=6, constraint=("choice", '["yes", "no"]'))]
    tokens = {}
    for tp in (2, 1):
        llm = LLM(model_dir, tp=tp, device="cpu", dtype=torch.float32, num_pages=512, page_size=4)
        try:
            tokens[tp] = [o["token_ids"] for o in llm.generate(prompts, params, use_tqdm=False)]
        finally:
            llm.shutdown()
    assert tokens[2] == tokens[1] and all(tokens[1])


def test_a_failed_tp_start_leaves_no_ranks_or_process_group(tiny_model_dir):
    """Both ranks fail after joining their group (an unknown attention backend): the error
    reaches the caller, the follower is gone, this process holds no group, and the next TP=2
    LLM in the same process works."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    with pytest.raises(ValueError, match="unknown attention backend"):
        LLM(model_dir, tp=2, device="cpu", dtype=torch.float32, num_pages=512, page_size=4,
            attn="no-such-backend")
    assert not dist.is_initialized()
    assert not mp.active_children()
    assert offline_texts(model_dir, tp=2) == single_rank_texts(model_dir)


def abandon_tp_llm(model_dir: str) -> None:
    """A case that dies mid-way: TP=2 ranks up, then an error with no shutdown."""
    LLM(model_dir, tp=2, device="cpu", dtype=torch.float32, num_pages=512, page_size=4)
    raise RuntimeError("deliberate failure with the follower rank still waiting")


def test_an_isolated_failing_case_is_reported_and_killed_then_the_next_case_passes(tiny_model_dir):
    """tests/distributed/isolation.py, which the CUDA TP tests run each case through: the failing
    case's error comes back, nothing of its session survives, and a good case runs after it."""
    model_dir = tiny_model_dir("Qwen3MoeForCausalLM")
    ctx = mp.get_context("spawn")
    with pytest.raises(CaseFailed, match="deliberate failure") as failed:
        run_isolated(abandon_tp_llm, model_dir, timeout=300)
    assert "RuntimeError" in str(failed.value)
    assert not ctx.active_children()
    assert run_isolated(offline_texts, model_dir, 2, timeout=300) == single_rank_texts(model_dir)


def test_isolated_cases_leave_no_process_in_their_session():
    sid = run_isolated(session_with_a_stray_sleeper)
    assert session_members(sid) == []


def session_with_a_stray_sleeper() -> int:
    """Starts a process that would outlive the case (as a blocked follower would) and returns
    the case's session id."""
    import os
    import subprocess

    subprocess.Popen(["sleep", "300"])
    return os.getsid(0)
