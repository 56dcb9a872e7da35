"""Checkpoint loading: sharded equals single-file, tied embeddings, and clear errors."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from minisgl.engine import Engine, EngineConfig
from tests.helpers import EngineDriver, cpu_engine

PROMPT = [11, 22, 33, 44, 55, 66]


def _greedy(model_dir: str, steps: int = 8) -> tuple[list[int], torch.Tensor]:
    with cpu_engine(model_dir, page_size=4, max_running_requests=2, num_pages=32) as engine:
        driver = EngineDriver(engine)
        req = driver.add(PROMPT)
        first_logits = driver.step([req])
        for _ in range(steps - 1):
            driver.step([req])
        return req.output_ids, first_logits


def test_sharded_checkpoint_loads_like_a_single_file(tiny_model_dir):
    single = tiny_model_dir("Qwen3ForCausalLM")
    sharded = tiny_model_dir("Qwen3ForCausalLM", max_shard_size="20KB")
    assert os.path.exists(os.path.join(sharded, "model.safetensors.index.json"))
    assert len([f for f in os.listdir(sharded) if f.endswith(".safetensors")]) > 2
    tokens_a, logits_a = _greedy(single)
    tokens_b, logits_b = _greedy(sharded)
    assert tokens_a == tokens_b
    assert torch.equal(logits_a, logits_b)


@pytest.mark.parametrize("tied", [True, False])
def test_tied_and_untied_embeddings(tiny_model_dir, tied):
    model_dir = tiny_model_dir("Qwen2ForCausalLM", tie_word_embeddings=tied)
    keys = load_file(os.path.join(model_dir, "model.safetensors")).keys()
    assert ("lm_head.weight" in keys) != tied
    with cpu_engine(model_dir, num_pages=16, max_running_requests=2) as engine:
        same = engine.model.lm_head.weight.data_ptr() == engine.model.model.embed_tokens.weight.data_ptr()
        assert same == tied


def _copy_with_state(src: str, dst: str, edit) -> str:
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    state = load_file(path)
    edit(state)
    save_file(state, path)
    return dst


def test_missing_weight_names_the_tensor(tiny_model_dir, tmp_path):
    bad = _copy_with_state(tiny_model_dir("LlamaForCausalLM"), str(tmp_path / "m"),
                           lambda s: s.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(ValueError, match=r"lacks 1 tensor.*model\.layers\.1\.mlp\.gate_up_proj\.weight#1"):
        Engine(EngineConfig(bad, device="cpu", num_pages=16, max_running_requests=2))


def test_mismatched_weight_names_the_tensor_and_shapes(tiny_model_dir, tmp_path):
    def shrink(state):
        state["model.layers.0.self_attn.o_proj.weight"] = state["model.layers.0.self_attn.o_proj.weight"][:, :32].contiguous()

    bad = _copy_with_state(tiny_model_dir("MistralForCausalLM"), str(tmp_path / "m"), shrink)
    with pytest.raises(ValueError, match=r"o_proj\.weight.*\(64, 32\).*\(64, 64\)"):
        Engine(EngineConfig(bad, device="cpu", num_pages=16, max_running_requests=2))


def test_unknown_architecture_lists_the_supported_ones(tiny_model_dir, tmp_path):
    bad = str(tmp_path / "m")
    shutil.copytree(tiny_model_dir("LlamaForCausalLM"), bad)
    cfg_path = os.path.join(bad, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["architectures"] = ["FalconForCausalLM"]
    json.dump(cfg, open(cfg_path, "w"))
    with pytest.raises(ValueError, match=r"unsupported model architecture 'FalconForCausalLM'.*LlamaForCausalLM.*Qwen3MoeForCausalLM"):
        Engine(EngineConfig(bad, device="cpu", num_pages=16, max_running_requests=2))


def test_dummy_weights_need_no_checkpoint(tiny_model_dir, tmp_path):
    only_config = str(tmp_path / "cfg")
    os.makedirs(only_config)
    shutil.copy(os.path.join(tiny_model_dir("Qwen3MoeForCausalLM"), "config.json"), only_config)
    with cpu_engine(only_config, dtype=None, dummy_weight=True, num_pages=16, max_running_requests=2) as engine:
        driver = EngineDriver(engine)
        req = driver.add([1, 2, 3])
        logits = driver.step([req])
        assert torch.isfinite(logits).all()
