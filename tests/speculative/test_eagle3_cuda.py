"""EAGLE-3 on the GPU (skipped without one), with the target's decode and verify steps in CUDA
graphs: the graphs record the hidden states the head reads (EngineConfig.record_hidden_layers),
so its drafts are still exactly the published head's over the whole sequence, and a head that
predicts the target still has its drafts accepted with the tokens unchanged; also where verify
batches ride the decode graphs (FlashInfer with the Triton decode kernels, bf16)."""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from tests.speculative.eagle3_heads import TINY_TARGET, build_eagle3_head, head_config
from tests.speculative.test_eagle3 import bigram, oracle_head, plain, reference_drafts, serve_recording

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# float32 and torch attention: graphs for decode and verify steps, and no bf16 near-ties.
GPU = {"device": "cuda", "attn": "torch", "max_seq_len": 512}


@pytest.fixture(scope="module")
def prompts():
    rng = random.Random(5)
    return [[rng.randint(3, 380) for _ in range(rng.randint(6, 30))] for _ in range(4)]


def test_drafts_from_graph_steps_are_the_heads_own(tiny_model_dir, tmp_path, prompts):
    target_dir = tiny_model_dir("Qwen3ForCausalLM", **TINY_TARGET)
    head_dir = build_eagle3_head(str(tmp_path / "head"), target_dir, rope_scaling=None)
    _, proposals, stats, steps = serve_recording(target_dir, head_dir, prompts, **GPU)
    assert steps["graph"] > 0, steps  # verify steps replayed from graphs (decode steps too: no eager pass left)
    assert stats.draft_tokens > 0 and len(proposals) > 20
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    w, cfg = load_file(f"{head_dir}/model.safetensors"), head_config(target_dir)
    for ids, drafts in proposals:
        assert drafts == reference_drafts(target, w, cfg, ids, len(drafts)), f"after {len(ids)} tokens"


def test_a_head_that_predicts_the_target_keeps_its_drafts_accepted_in_graphs(tiny_model_dir, tmp_path, prompts):
    target_dir = bigram(tiny_model_dir("LlamaForCausalLM", **TINY_TARGET), str(tmp_path / "target"))
    head_dir = oracle_head(str(tmp_path / "head"), target_dir)
    got, _, stats, steps = serve_recording(target_dir, head_dir, prompts, **GPU)
    assert steps["graph"] > 0, steps
    assert got == plain(target_dir, prompts, **GPU)
    assert stats.accepted_tokens > 0.9 * stats.draft_tokens > 0


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer")
def test_verify_batches_riding_the_decode_graphs_keep_the_heads_drafts_accepted(tiny_model_dir, tmp_path, prompts):
    target_dir = bigram(tiny_model_dir("LlamaForCausalLM", head_dim=128, **TINY_TARGET), str(tmp_path / "target"))
    head_dir = oracle_head(str(tmp_path / "head"), target_dir)
    got, _, stats, steps = serve_recording(target_dir, head_dir, prompts, device="cuda", dtype=torch.bfloat16,
                                           attn="flashinfer", max_seq_len=512)
    assert steps["graph"] > 0 and steps["eager"] == 0, steps
    assert stats.accepted_tokens > 0.8 * stats.draft_tokens > 0
    expected = plain(target_dir, prompts, device="cuda", dtype=torch.bfloat16, attn="flashinfer", max_seq_len=512)
    same = sum(a == b for g, e in zip(got, expected) for a, b in zip(g, e))
    assert same >= 0.9 * sum(map(len, expected))  # bf16: k + 1 rows' GEMMs may part a near-tie from decoding's
