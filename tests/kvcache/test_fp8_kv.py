"""The FP8 KV cache stores k / k_scale and v / v_scale rounded to FP8 and attends over them scaled
back: minisgl's logits with --kv-cache-dtype fp8_e4m3 / fp8_e5m2 equal HF transformers' with a
cache that rounds K and V the same way (to 1e-4, float32 noise), with the checkpoint's per-layer
k_scale/v_scale applied; and they stay within a precision budget of the exact (float32) cache."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from minisgl.engine import Engine, EngineConfig
from minisgl.kvcache import MHAKVCache
from tests.helpers import EngineDriver, cpu_engine
from tests.quantization.fp8_checkpoints import write_with_tensors

PROMPTS = [[5, 17, 42, 99, 3], list(range(10, 47)), [7] * 12 + [250, 251, 252]]
STEPS = 12
FORMATS = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
SCALES = {"k": [0.5, 2.0], "v": [0.25, 1.5]}  # per layer, written into the checkpoint


class RoundingCache(DynamicCache):
    """HF's cache, with K and V rounded to `dtype` (divided by the layer's scale, saturated,
    multiplied back) as they enter: what an FP8 cache holds."""

    def __init__(self, dtype: torch.dtype | None, k_scales, v_scales, config):
        super().__init__(config=config)
        self.round_to, self.k_scales, self.v_scales = dtype, k_scales, v_scales

    def _round(self, x: torch.Tensor, scale: float) -> torch.Tensor:
        limit = torch.finfo(self.round_to).max
        return (x / scale).clamp(-limit, limit).to(self.round_to).to(x.dtype) * scale

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if self.round_to is not None:
            key_states = self._round(key_states, self.k_scales[layer_idx])
            value_states = self._round(value_states, self.v_scales[layer_idx])
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


def hf_logits(model_dir: str, prompt: list[int], tokens: list[int], round_to, k_scales, v_scales) -> torch.Tensor:
    """HF's logits for each step of a given continuation (teacher-forced, one token at a time)."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cache = RoundingCache(round_to, k_scales, v_scales, model.config)
    out = []
    with torch.no_grad():
        ids = torch.tensor([prompt])
        for step in range(len(tokens)):
            logits = model(ids, past_key_values=cache, use_cache=True).logits[0, -1]
            out.append(logits.float())
            ids = torch.tensor([[tokens[step]]])
    return torch.stack(out)


def minisgl_run(model_dir: str, kv_cache_dtype: str) -> tuple[list[list[int]], list[torch.Tensor]]:
    with cpu_engine(model_dir, page_size=4, max_running_requests=4, num_pages=128,
                    kv_cache_dtype=kv_cache_dtype) as engine:
        driver = EngineDriver(engine)
        reqs = [driver.add(p) for p in PROMPTS]
        logits = [[] for _ in reqs]
        for _ in range(STEPS):
            for i, row in enumerate(driver.step(reqs)):
                logits[i].append(row)
        return [r.output_ids for r in reqs], [torch.stack(x) for x in logits]


@pytest.fixture(scope="module")
def scaled_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with per-layer k_scale / v_scale tensors, as FP8-KV checkpoints carry them."""
    base = tiny_model_dir("Qwen3ForCausalLM")
    extra = {f"model.layers.{i}.self_attn.{kv}_scale": torch.tensor(SCALES[kv][i]) for kv in "kv" for i in range(2)}
    return write_with_tensors(base, str(tmp_path_factory.mktemp("kv-scales") / "model"), extra)


@pytest.mark.slow
@pytest.mark.parametrize("kv_cache_dtype", list(FORMATS))
def test_fp8_kv_logits_equal_hf_with_an_fp8_rounded_cache(scaled_dir, kv_cache_dtype):
    tokens, logits = minisgl_run(scaled_dir, kv_cache_dtype)
    for prompt, toks, got in zip(PROMPTS, tokens, logits):
        want = hf_logits(scaled_dir, prompt, toks, FORMATS[kv_cache_dtype], SCALES["k"], SCALES["v"])
        assert (got - want).abs().max().item() < 1e-4


def test_the_checkpoint_kv_scales_are_used(scaled_dir):
    """The same cache rounded without the scales (1.0 everywhere) gives other logits: the match
    above depends on the checkpoint's scales."""
    tokens, logits = minisgl_run(scaled_dir, "fp8_e4m3")
    unscaled = hf_logits(scaled_dir, PROMPTS[1], tokens[1], torch.float8_e4m3fn, [1.0, 1.0], [1.0, 1.0])
    assert (logits[1] - unscaled).abs().max().item() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("kv_cache_dtype, mantissa_bits", [("fp8_e4m3", 3), ("fp8_e5m2", 2)])
def test_fp8_kv_logits_stay_within_the_precision_budget_of_an_exact_cache(tiny_model_dir, kv_cache_dtype,
                                                                        mantissa_bits):
    """Tolerance: rounding K and V to a format with m mantissa bits perturbs each element by at
    most 2^-(m+1) of itself, 2^(7-m) times what bfloat16 (7 bits) does; for perturbations this
    small the logits move linearly. So FP8 KV may move the logits (against an exact float32 cache,
    teacher-forced on the same tokens) at most 2^(7-m) times as far as a bfloat16 cache does,
    with a factor 2 of margin for the non-linearity of softmax."""
    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    tokens, logits = minisgl_run(model_dir, kv_cache_dtype)
    ones = [1.0, 1.0]
    worst_fp8 = worst_bf16 = 0.0
    for prompt, toks, got in zip(PROMPTS, tokens, logits):
        exact = hf_logits(model_dir, prompt, toks, None, ones, ones)
        bf16 = hf_logits(model_dir, prompt, toks, torch.bfloat16, ones, ones)
        worst_bf16 = max(worst_bf16, (bf16 - exact).abs().max().item())
        worst_fp8 = max(worst_fp8, (got - exact).abs().max().item())
    budget = 2 * 2 ** (7 - mantissa_bits) * worst_bf16
    print(f"{kv_cache_dtype}: max |logit diff| vs exact KV {worst_fp8:.3g}, bf16 KV {worst_bf16:.3g}, budget {budget:.3g}")
    assert 0 < worst_fp8 <= budget


def test_fp8_pages_take_half_the_bytes_of_bf16_pages():
    args = (28, 16, 8, 128)
    assert MHAKVCache.bytes_per_page(*args, torch.float8_e4m3fn) * 2 == MHAKVCache.bytes_per_page(*args, torch.bfloat16)


def test_the_fp8_store_saturates_instead_of_overflowing():
    cache = MHAKVCache(1, 2, 2, 1, 4, torch.float8_e4m3fn, torch.device("cpu"), [0.5], [1.0])
    big = torch.tensor([[[1e6, -1e6, 1.0, 0.0]]])
    cache.store_kv(big, big, torch.tensor([1]), 0)
    k, v = cache.read_kv(0, torch.tensor([1]), torch.float32)
    assert k.tolist() == [[[224.0, -224.0, 1.0, 0.0]]]  # 448 * 0.5
    assert v.tolist() == [[[448.0, -448.0, 1.0, 0.0]]]


def test_an_fp8_cache_gets_more_pages_from_the_same_memory_and_the_report_says_so(tiny_model_dir, monkeypatch):
    """Sized from memory, a float32 model's FP8 cache has 4x the pages (bf16: 2x), and the
    start-up line names the factor."""
    import minisgl.engine.engine as engine_module

    model_dir = tiny_model_dir("Qwen3ForCausalLM")
    per_page_f32 = MHAKVCache.bytes_per_page(2, 4, 2, 16, torch.float32)
    monkeypatch.setattr(engine_module, "_available_ram", lambda: 100 * per_page_f32)  # a fixed budget
    pages, notes = {}, {}
    for kv in ("auto", "fp8_e4m3"):
        e = Engine(EngineConfig(model_dir, dtype=torch.float32, device="cpu", page_size=4, max_running_requests=512,
                                memory_ratio=1.0, max_seq_len=16, kv_cache_dtype=kv))
        pages[kv], notes[kv] = e.num_pages, e._kv_dtype_note()
        e.shutdown()
    assert pages == {"auto": 100, "fp8_e4m3": 400}
    assert notes["fp8_e4m3"] == "float8_e4m3fn: 4x the pages of a float32 cache"
