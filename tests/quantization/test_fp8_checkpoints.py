"""FP8 checkpoints serve the model their scaled weights define: minisgl's greedy tokens on each
published FP8 layout (quant_method fp8 with 128x128 block scales; compressed-tensors with
per-tensor or per-channel scales, static or dynamic activations) equal HF transformers' on the
same model with the dequantized weights in float32, also split over two tensor-parallel ranks,
and with LoRA adapters (one batch mixing three ranks and the base model) peft's tokens on those
weights; `--quantization fp8` equals HF with per-channel FP8-rounded weights; unknown quantization
methods are refused at start, naming the supported ones."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.engine import Engine, EngineConfig
from minisgl.llm import LLM
from minisgl.quantization import QUANT_METHODS
from minisgl.server.args import parse_args
from tests.helpers import EngineDriver, cpu_engine, hf_greedy
from tests.lora.peft_adapters import build_adapters, peft_greedy
from tests.quantization.fp8_checkpoints import (
    LINEAR,
    QUANT_CONFIGS,
    round_trip_rows,
    write_fp8_checkpoint,
    write_with_tensors,
)

NEW_TOKENS = 16
PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [300]]
# Dimensions that exercise the 128x128 grid: q 256 rows (2 blocks), k/v 128 (1), MLP 320 (2.5: a
# partial block at the edge), and a TP=2 split that cuts k/v blocks in half.
SHAPE = dict(hidden_size=256, intermediate_size=320, num_attention_heads=4, num_key_value_heads=2, head_dim=64)


@pytest.fixture(scope="module")
def base_dir(tiny_model_dir):
    return tiny_model_dir("Qwen3ForCausalLM", **SHAPE)


def minisgl_greedy(model_dir: str, **config) -> list[list[int]]:
    with cpu_engine(model_dir, page_size=4, max_running_requests=4, num_pages=128, **config) as engine:
        driver = EngineDriver(engine)
        reqs = [driver.add(p) for p in PROMPTS]
        for _ in range(NEW_TOKENS):
            driver.step(reqs)
        return [r.output_ids for r in reqs]


@pytest.mark.parametrize("layout", list(QUANT_CONFIGS))
def test_fp8_checkpoint_greedy_tokens_equal_hf_on_the_dequantized_weights(base_dir, tmp_path, layout):
    fp8_dir, ref_dir = write_fp8_checkpoint(base_dir, str(tmp_path), layout)
    got = minisgl_greedy(fp8_dir)
    want = [hf_greedy(ref_dir, p, NEW_TOKENS)[0] for p in PROMPTS]
    assert got == want
    # The quantization is real: the plain model's tokens differ somewhere.
    assert [hf_greedy(base_dir, p, NEW_TOKENS)[0] for p in PROMPTS] != want


@pytest.mark.slow  # two ranks: worker processes
def test_fp8_block_checkpoint_split_over_two_ranks_gives_the_same_tokens(base_dir, tmp_path):
    """Tensor parallelism shards the weights with their block scales (applied as they are read),
    including k/v tiles that the split cuts in half."""
    fp8_dir, ref_dir = write_fp8_checkpoint(base_dir, str(tmp_path), "fp8-block")
    llm = LLM(fp8_dir, tp=2, device="cpu", dtype=torch.float32, num_pages=256, page_size=4)
    try:
        outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True),
                            use_tqdm=False)
    finally:
        llm.shutdown()
    assert [o["token_ids"] for o in outs] == [hf_greedy(ref_dir, p, NEW_TOKENS)[0] for p in PROMPTS]


@pytest.mark.slow  # PEFT's reference and two ranks: tens of seconds on 2 cores
@pytest.mark.parametrize("tp", [1, 2])
def test_lora_adapters_over_an_fp8_checkpoint_give_peft_tokens_on_the_dequantized_weights(base_dir, tmp_path, tp):
    """The adapters add to the FP8 layers' output as to any other: peft on HF's model of the
    dequantized weights (weight * scale) is the reference, for a batch mixing three adapters of
    different ranks and the base model, chunked (max_prefill_length 8); with two ranks the block
    scales and the adapters' A and B are sharded as their layers."""
    fp8_dir, ref_dir = write_fp8_checkpoint(base_dir, str(tmp_path), "fp8-block")
    adapters = build_adapters(ref_dir, tmp_path / "lora")
    names = ["r4", "r8", None, "r16"]
    prompts = [*PROMPTS, [7] * 12 + [250, 251]]
    llm = LLM(fp8_dir, tp=tp, device="cpu", dtype=torch.float32, page_size=4, num_pages=256, max_prefill_length=8,
              lora_modules=adapters, max_lora_rank=16)
    try:
        outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True),
                            use_tqdm=False, lora=names)
    finally:
        llm.shutdown()
    for prompt, name, out in zip(prompts, names, outs):
        assert out["token_ids"] == peft_greedy(ref_dir, adapters.get(name), prompt, NEW_TOKENS), name
    # The adapters and the quantization are both real: peft over the plain weights differs somewhere.
    assert [out["token_ids"] for out in outs] != [peft_greedy(base_dir, adapters.get(name), prompt, NEW_TOKENS)
                                                  for prompt, name in zip(prompts, names)]


def test_quantization_fp8_flag_rounds_plain_weights_per_channel(base_dir, tmp_path):
    ref_dir = write_with_tensors(base_dir, str(tmp_path / "ref"), {},
                                 lambda name, t: round_trip_rows(t) if name.endswith(LINEAR) else t)
    got = minisgl_greedy(base_dir, quantization="fp8")
    assert got == [hf_greedy(ref_dir, p, NEW_TOKENS)[0] for p in PROMPTS]
    assert got != minisgl_greedy(base_dir)


def _with_quantization(base_dir: str, out: str, quantization_config: dict) -> str:
    return write_with_tensors(base_dir, out, {}, quantization_config=quantization_config)


@pytest.mark.parametrize("config, message", [
    ({"quant_method": "awq", "bits": 4}, "unsupported quantization method 'awq'"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "only the e4m3 format"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}}, "float-quantized"),
    ({**QUANT_CONFIGS["ct-channel-dynamic"], "config_groups": {"group_0": {"weights": {
        "num_bits": 8, "type": "float", "strategy": "group", "group_size": 128}}}}, "weight strategy 'group'"),
    ({**QUANT_CONFIGS["ct-channel-dynamic"], "config_groups": {"group_0": {"weights": {
        "num_bits": 4, "type": "int", "strategy": "channel"}}}}, "weights must be static 8-bit floats"),
])
def test_unsupported_quantization_is_refused_when_the_engine_starts(base_dir, tmp_path, config, message):
    model_dir = _with_quantization(base_dir, str(tmp_path / "m"), config)
    with pytest.raises(ValueError, match=message):
        Engine(EngineConfig(model_dir, dtype=torch.float32, device="cpu", num_pages=16))


@pytest.mark.slow
def test_the_cli_refuses_an_unknown_method_in_one_line_listing_the_supported(base_dir, tmp_path):
    model_dir = _with_quantization(base_dir, str(tmp_path / "m"), {"quant_method": "gptq", "bits": 4})
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-m", "minisgl", "--model", model_dir, "--device", "cpu"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("minisgl: error: unsupported quantization method 'gptq'"), out.stderr
    assert f"supported: {', '.join(QUANT_METHODS)}" in lines[-1]


@pytest.mark.parametrize("flag, value", [("--quantization", "awq"), ("--kv-cache-dtype", "int8")])
def test_the_cli_refuses_unknown_flag_values(base_dir, flag, value, capsys):
    """In this process: `python -m minisgl` parses its flags with this same function first."""
    with pytest.raises(SystemExit) as exited:
        parse_args(["--model", base_dir, flag, value])
    stderr = capsys.readouterr().err
    assert exited.value.code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert flag in stderr and value in stderr


def test_an_fp8_weight_without_its_scale_is_refused(base_dir, tmp_path):
    fp8_dir, _ = write_fp8_checkpoint(base_dir, str(tmp_path), "fp8-block")
    from safetensors.torch import load_file, save_file

    path = os.path.join(fp8_dir, "model.safetensors")
    state = load_file(path)
    del state["model.layers.0.self_attn.q_proj.weight_scale_inv"]
    save_file(state, path)
    with pytest.raises(ValueError, match="q_proj.weight.*has no weight_scale_inv"):
        Engine(EngineConfig(fp8_dir, dtype=torch.float32, device="cpu", num_pages=16))


def test_flag_choices_are_the_supported_sets():
    from dataclasses import fields

    from minisgl.kvcache import KV_CACHE_DTYPES
    from minisgl.quantization import ONLINE_QUANTIZATION
    from minisgl.server.args import ServerArgs

    meta = {f.name: f.metadata for f in fields(ServerArgs)}
    assert tuple(meta["kv_cache_dtype"]["choices"]) == tuple(KV_CACHE_DTYPES)
    assert tuple(meta["quantization"]["choices"]) == ONLINE_QUANTIZATION
