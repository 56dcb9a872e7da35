"""Each architecture's traits (models/registry.py) are what HF transformers builds for it: the same
attention projections carry biases, with `attention_bias` off and on, and the same ones normalize
q and k. An architecture not in the registry is refused by name, never served as a look-alike."""

from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM

from minisgl.models import ARCHITECTURES, ModelConfig, get_architecture, load_model_config
from minisgl.models.tiny import build_tiny_model, tiny_config


def hf_attention_traits(config) -> dict[str, bool]:
    """Read off the first layer of the model HF builds from `config`."""
    attn = AutoModelForCausalLM.from_config(config).model.layers[0].self_attn
    return {"qkv_bias": attn.q_proj.bias is not None, "o_bias": attn.o_proj.bias is not None,
            "qk_norm": hasattr(attn, "q_norm")}


@pytest.mark.parametrize("attention_bias", [False, True])
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_traits_match_what_hf_builds(architecture, attention_bias):
    config = tiny_config(architecture, vocab_size=64, eos_token_id=63, attention_bias=attention_bias)
    ours = ModelConfig.from_hf(config, get_architecture(architecture).traits)
    assert {"qkv_bias": ours.qkv_bias, "o_bias": ours.o_bias, "qk_norm": ours.qk_norm} == hf_attention_traits(config)


def test_an_unknown_architecture_is_refused_by_name(tmp_path):
    """A Qwen2-named architecture that is not Qwen2 must not get Qwen2's biases by its prefix."""
    path = build_tiny_model(str(tmp_path / "m"), "Qwen2ForCausalLM")
    config_file = tmp_path / "m" / "config.json"
    config_file.write_text(config_file.read_text().replace('"Qwen2ForCausalLM"', '"Qwen2VLForCausalLM"'))
    with pytest.raises(ValueError, match=r"unsupported model architecture 'Qwen2VLForCausalLM'; supported: Llama"):
        load_model_config(path)
