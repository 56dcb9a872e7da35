"""Loading a PEFT adapter checks it against the base model: a rank above max_lora_rank, a target
module outside q/k/v/o/gate/up/down_proj, shapes of another base model, and features that change
what the adapter computes (DoRA, trained biases, modules_to_save, LoRA on MoE experts) are refused
at load with the reason, never ignored; the scaling is peft's (alpha / r, alpha / sqrt(r) with
rsLoRA, per module under rank_pattern / alpha_pattern)."""

from __future__ import annotations

import json
import math

import pytest

from minisgl.lora import load_adapter
from minisgl.models import load_model_config
from tests.lora.peft_adapters import build_adapter


@pytest.fixture(scope="module")
def qwen3(tiny_model_dir):
    path = tiny_model_dir("Qwen3ForCausalLM")
    return path, load_model_config(path)


def test_a_peft_adapter_loads_with_its_scaling(qwen3, tmp_path):
    model_dir, cfg = qwen3
    adapter = load_adapter("a", build_adapter(model_dir, str(tmp_path / "a"), 8, 32), cfg, max_rank=16)
    assert adapter.rank == 8
    assert adapter.modules == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert len(adapter.weights) == 7 * cfg.num_layers
    a, b, scaling = adapter.weights[(0, "k_proj")]
    assert a.shape == (8, cfg.hidden_size) and b.shape == (cfg.num_kv_heads * cfg.head_dim, 8)
    assert scaling == 32 / 8 and b.abs().sum() > 0


def test_rslora_scales_by_the_square_root_of_the_rank(qwen3, tmp_path):
    model_dir, cfg = qwen3
    adapter = load_adapter("a", build_adapter(model_dir, str(tmp_path / "a"), 4, 8, rslora=True), cfg, 16)
    assert {s for _, _, s in adapter.weights.values()} == {8 / math.sqrt(4)}


def test_rank_and_alpha_patterns_apply_per_module(qwen3, tmp_path):
    model_dir, cfg = qwen3
    path = build_adapter(model_dir, str(tmp_path / "a"), 4, 8, rank_pattern={"q_proj": 8},
                         alpha_pattern={"down_proj": 2})
    adapter = load_adapter("a", path, cfg, max_rank=8)
    a, _, scaling = adapter.weights[(1, "q_proj")]
    assert a.shape[0] == 8 and scaling == 8 / 8
    assert adapter.weights[(1, "down_proj")][2] == 2 / 4 and adapter.weights[(1, "v_proj")][2] == 8 / 4
    assert adapter.rank == 8


def test_a_rank_above_max_lora_rank_is_refused(qwen3, tmp_path):
    model_dir, cfg = qwen3
    path = build_adapter(model_dir, str(tmp_path / "a"), 32, 32)
    with pytest.raises(ValueError, match=r"LoRA adapter 'big' .*rank 32 exceeds max_lora_rank 16 \(--max-lora-rank\)"):
        load_adapter("big", path, cfg, max_rank=16)


def test_a_target_module_outside_the_supported_ones_is_refused(qwen3, tmp_path):
    model_dir, cfg = qwen3
    path = build_adapter(model_dir, str(tmp_path / "a"), 4, 8, target_modules=["q_proj", "lm_head"])
    with pytest.raises(ValueError, match="target modules lm_head are not supported"):
        load_adapter("a", path, cfg, max_rank=16)


def test_an_adapter_of_another_base_model_is_refused(tiny_model_dir, qwen3, tmp_path):
    _, cfg = qwen3
    other = tiny_model_dir("Qwen3ForCausalLM", hidden_size=32)
    path = build_adapter(other, str(tmp_path / "a"), 4, 8)
    with pytest.raises(ValueError, match=r"has shape \(32, 4\), the base model needs \(64, 4\) \(base-model mismatch\)"
                                         f"; it was trained on {other}"):
        load_adapter("a", path, cfg, max_rank=16)


def test_an_adapter_for_more_layers_than_the_base_model_is_refused(tiny_model_dir, qwen3, tmp_path):
    _, cfg = qwen3
    path = build_adapter(tiny_model_dir("Qwen3ForCausalLM", num_hidden_layers=3), str(tmp_path / "a"), 4, 8)
    with pytest.raises(ValueError, match="is for layer 2, the base model has 2 \\(base-model mismatch\\)"):
        load_adapter("a", path, cfg, max_rank=16)


@pytest.mark.parametrize("config, reason", [
    ({"use_dora": True}, r"DoRA \(use_dora=True\) are not supported"),
    ({"bias": "lora_only"}, r"trained biases \(bias='lora_only'\) are not supported"),
    ({"modules_to_save": ["lm_head"]}, r"fully trained modules \(modules_to_save\)"),
])
def test_features_that_change_the_output_are_refused_not_ignored(qwen3, tmp_path, config, reason):
    model_dir, cfg = qwen3
    path = build_adapter(model_dir, str(tmp_path / "a"), 4, 8, **config)
    with pytest.raises(ValueError, match=reason):
        load_adapter("a", path, cfg, max_rank=16)


def test_lora_on_moe_experts_is_refused(tiny_model_dir, tmp_path):
    model_dir = tiny_model_dir("Qwen3MoeForCausalLM")
    # peft puts gate/up/down on the experts' fused parameters (target_parameters).
    path = build_adapter(model_dir, str(tmp_path / "a"), 4, 8, target_modules=["q_proj", "gate_proj", "up_proj"])
    with pytest.raises(ValueError, match="target_parameters"):
        load_adapter("a", path, load_model_config(model_dir), max_rank=16)


def test_a_directory_without_an_adapter_is_refused(qwen3, tmp_path):
    _, cfg = qwen3
    with pytest.raises(ValueError, match="adapter_config.json not found"):
        load_adapter("a", str(tmp_path), cfg, max_rank=16)


def test_a_missing_half_of_a_pair_is_refused(qwen3, tmp_path):
    from safetensors.torch import load_file, save_file

    model_dir, cfg = qwen3
    path = build_adapter(model_dir, str(tmp_path / "a"), 4, 8)
    tensors = load_file(f"{path}/adapter_model.safetensors")
    del tensors["base_model.model.model.layers.1.self_attn.o_proj.lora_B.weight"]
    save_file(tensors, f"{path}/adapter_model.safetensors")
    with pytest.raises(ValueError, match="layer 1 o_proj has no lora_B weight"):
        load_adapter("a", path, cfg, max_rank=16)


def test_another_peft_method_is_refused(qwen3, tmp_path):
    model_dir, cfg = qwen3
    path = build_adapter(model_dir, str(tmp_path / "a"), 4, 8)
    with open(f"{path}/adapter_config.json") as f:
        config = json.load(f)
    with open(f"{path}/adapter_config.json", "w") as f:
        json.dump({**config, "peft_type": "IA3"}, f)
    with pytest.raises(ValueError, match="peft_type 'IA3' is not supported"):
        load_adapter("a", path, cfg, max_rank=16)



def _with_patterns(path: str, **patterns) -> str:
    with open(f"{path}/adapter_config.json") as f:
        config = json.load(f)
    with open(f"{path}/adapter_config.json", "w") as f:
        json.dump({**config, **patterns}, f)
    return path


# In a subprocess with a ticker thread beside the load: prints the outcome, the load's seconds, and
# how many 10 ms sleeps the ticker finished meanwhile (none if the load held the GIL throughout).
_LOAD_BESIDE_A_TICKER = """
import sys, threading, time
from minisgl.lora import load_adapter
from minisgl.models import load_model_config
ticks, done = [0], threading.Event()
def tick():
    while not done.is_set():
        time.sleep(0.01)
        ticks[0] += 1
threading.Thread(target=tick, daemon=True).start()
start = time.monotonic()
try:
    outcome = "rank %d" % load_adapter("a", sys.argv[1], load_model_config(sys.argv[2]), max_rank=16).rank
except ValueError as e:
    outcome = str(e)
done.set()
print(repr((outcome, time.monotonic() - start, ticks[0])))
"""


def _load_in_a_subprocess(path: str, model_dir: str) -> tuple[str, float, int]:
    import ast
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _LOAD_BESIDE_A_TICKER, path, model_dir], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    return ast.literal_eval(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_backtracking_rank_pattern_is_matched_in_bounded_time(qwen3, tmp_path):
    """The pattern that backtracks exponentially under Python's re (hours on a 31-character module
    name, holding the GIL) is matched by a bounded engine: the adapter loads at once, with the
    default rank where the pattern does not match."""
    model_dir, _ = qwen3
    path = _with_patterns(build_adapter(model_dir, str(tmp_path / "a"), 4, 8), rank_pattern={r"((\w|\.)+)+X": 8})
    outcome, seconds, _ = _load_in_a_subprocess(path, model_dir)
    assert outcome == "rank 4" and seconds < 60


@pytest.mark.slow
def test_a_pattern_that_runs_past_its_budget_refuses_the_adapter_without_holding_the_gil(qwen3, tmp_path):
    """A pattern that even the bounded engine cannot settle quickly refuses the adapter with the
    pattern named, within the budget (plus the load itself), while other threads of the process run."""
    from minisgl.lora.adapter import PATTERN_BUDGET_S

    model_dir, _ = qwen3
    path = _with_patterns(build_adapter(model_dir, str(tmp_path / "a"), 4, 8),
                          alpha_pattern={r"(?:.*?){20}\d{20}": 16})
    outcome, seconds, ticks = _load_in_a_subprocess(path, model_dir)
    assert "alpha_pattern key '(?:.*?){20}\\\\d{20}' did not finish matching" in outcome, outcome
    assert PATTERN_BUDGET_S <= seconds < PATTERN_BUDGET_S + 30
    assert ticks >= 0.25 * PATTERN_BUDGET_S / 0.01, f"other threads ran only {ticks} ticks of 10 ms"


def test_a_pattern_that_is_not_a_regular_expression_is_refused_naming_it(qwen3, tmp_path):
    model_dir, cfg = qwen3
    path = _with_patterns(build_adapter(model_dir, str(tmp_path / "a"), 4, 8), rank_pattern={"q_proj(": 8})
    with pytest.raises(ValueError, match=r"LoRA adapter 'a' .*rank_pattern key 'q_proj\(' is not a regular expression"):
        load_adapter("a", path, cfg, max_rank=16)
