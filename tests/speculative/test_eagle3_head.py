"""An EAGLE-3 head loads from the published format (safetensors, or the pytorch_model.bin some
heads ship) into exactly the tensors written; a checkpoint that does not fit its config.json or the
target is refused at start, naming --draft-model and what is wrong."""

from __future__ import annotations

import json

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from minisgl.models import load_model_config
from minisgl.speculative import load_eagle3_head
from tests.speculative.eagle3_heads import TINY_TARGET, build_eagle3_head, head_config, head_tensors


@pytest.fixture(scope="module")
def target_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM", **TINY_TARGET)


def load(path, target_dir):
    return load_eagle3_head(str(path), load_model_config(target_dir), 1024, torch.device("cpu"), torch.float32)


def test_the_head_holds_the_checkpoints_tensors(target_dir, tmp_path):
    tensors = head_tensors(head_config(target_dir), seed=3)
    head = load(build_eagle3_head(str(tmp_path), target_dir, tensors=tensors), target_dir)
    assert torch.equal(head.fc.weight, tensors["fc.weight"])
    assert torch.equal(head.q_proj.weight, tensors["midlayer.self_attn.q_proj.weight"])
    assert torch.equal(head.down_proj.weight, tensors["midlayer.mlp.down_proj.weight"])
    assert torch.equal(head.hidden_norm.weight, tensors["midlayer.hidden_norm.weight"])
    assert torch.equal(head.lm_head.weight, tensors["lm_head.weight"])
    # Draft id i is target id i + d2t[i]: exactly the target ids t2d marks.
    assert torch.equal(torch.arange(len(head.d2t)) + head.d2t, tensors["t2d"].nonzero().squeeze(1))
    assert head.embed_tokens is None  # the target's is used


def test_a_pytorch_model_bin_head_loads_alike(target_dir, tmp_path):
    tensors = head_tensors(head_config(target_dir), seed=3)
    build_eagle3_head(str(tmp_path), target_dir, tensors=tensors)
    (tmp_path / "model.safetensors").unlink()
    torch.save(tensors, tmp_path / "pytorch_model.bin")
    assert torch.equal(load(tmp_path, target_dir).fc.weight, tensors["fc.weight"])


def broken(target_dir, change):
    tensors = head_tensors(head_config(target_dir))
    change(tensors)
    return tensors


@pytest.mark.parametrize("change,message", [
    (lambda t: t.pop("midlayer.hidden_norm.weight"), "missing midlayer.hidden_norm.weight"),
    (lambda t: t.pop("d2t"), "missing d2t"),  # a draft vocabulary smaller than the target's needs its map
    (lambda t: t.update({"fc.weight": torch.zeros(64, 128)}), "fc.weight has shape (64, 128), the config.json's "
                                                              "sizes need (64, 192)"),
    (lambda t: t.update({"midlayer.self_attn.q_proj.weight": torch.zeros(64, 64)}),
     "midlayer.self_attn.q_proj.weight has shape (64, 64)"),
    (lambda t: t.update({"layers.0.mlp.up_proj.weight": torch.zeros(96, 64)}), "unexpected tensors layers.0.mlp"),
    (lambda t: t["d2t"].add_(1000), "d2t maps draft ids outside the target vocabulary"),
])
def test_a_checkpoint_that_does_not_fit_its_config_is_refused(target_dir, tmp_path, change, message):
    build_eagle3_head(str(tmp_path), target_dir, tensors=broken(target_dir, change))
    with pytest.raises(ValueError, match="--draft-model") as refused:
        load(tmp_path, target_dir)
    assert message in str(refused.value)


@pytest.mark.parametrize("overrides,message", [
    ({"vocab_size": 1000}, "vocab_size 1000, the target model's is"),
    ({"target_hidden_size": 32}, "drafts from hidden states of size 32, the target model's are 64"),
    ({"num_hidden_layers": 2}, "one decoder layer"),
])
def test_a_head_for_another_target_is_refused(target_dir, tmp_path, overrides, message):
    config = {**head_config(target_dir), **overrides}
    build_eagle3_head(str(tmp_path), target_dir, tensors=head_tensors(config), **overrides)
    with pytest.raises(ValueError, match="--draft-model") as refused:
        load(tmp_path, target_dir)
    assert message in str(refused.value)


def test_a_directory_without_a_head_is_refused(target_dir, tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        load(tmp_path, target_dir)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ValueError, match="config.json lacks intermediate_size, num_attention_heads, vocab_size"):
        load(tmp_path, target_dir)


def test_a_target_without_the_layers_eagle3_reads_is_refused_at_start(tiny_model_dir, tmp_path):
    """EAGLE-3 reads the inputs of layers 2, n // 2 and n - 3: a 2-layer target has no layer 2."""
    target = tiny_model_dir("Qwen3ForCausalLM")  # 2 layers
    head = build_eagle3_head(str(tmp_path), target)
    with pytest.raises(ValueError, match=r"--draft-model: EAGLE-3's default reads the inputs of layers \(2, 1, -1\)"):
        LLM(target, device="cpu", dtype=torch.float32, num_pages=64, speculative="eagle3", draft_model=head)


def test_the_head_serves_in_bfloat16(target_dir, tmp_path):
    """Weights cast to the engine's dtype, d2t kept as ids, the rotary table in float32 as the target's."""
    head = build_eagle3_head(str(tmp_path), target_dir)
    llm = LLM(target_dir, device="cpu", dtype=torch.bfloat16, num_pages=64, speculative="eagle3", draft_model=head,
              speculative_min_acceptance=0.0)
    try:
        drafter = llm.scheduler.speculator.drafter
        assert drafter.head.fc.weight.dtype == drafter.k.dtype == torch.bfloat16
        assert drafter.head.d2t.dtype == torch.int64 and drafter.head.rotary.cos_sin.dtype == torch.float32
        out = llm.generate([[5, 6, 7, 8, 9]], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
                           use_tqdm=False)
        assert len(out[0]["token_ids"]) == 8 and llm.scheduler.stats.draft_tokens > 0
    finally:
        llm.shutdown()
