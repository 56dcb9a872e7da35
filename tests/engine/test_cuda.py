"""The engine on a GPU: CUDA graphs, overlap scheduling, FlashInfer and fused kernels, sampling
kernels and memory sizing. Every test needs CUDA and is skipped without it (CI has no GPU);
run them on the device machine:  python -m pytest tests/attention tests/engine/test_cuda.py"""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

from minisgl.core.params import SamplingParams
from minisgl.llm import LLM
from tests.engine.test_sample import FILTER_CASES

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_flashinfer = pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer")


def _workload(n=20, seed=0):
    rng = random.Random(seed)
    prompts = [[rng.randint(3, 380) for _ in range(rng.randint(1, 120))] for _ in range(n)]
    # Different lengths, so the decode batch shrinks through many sizes (graph padding).
    params = [SamplingParams(temperature=0, max_tokens=rng.randint(4, 24), ignore_eos=True) for _ in range(n)]
    return prompts, params


def _run(model_dir, prompts, params, **kwargs):
    kwargs = {"max_running_requests": 32, "num_pages": 1024, "page_size": 16, **kwargs}
    llm = LLM(model_dir, **kwargs)
    e = llm.scheduler.engine
    facts = {"backend": type(e.attn_backend).__name__, "graphs": e.graph_runner is not None,
             "memory": getattr(e, "memory", None)}
    try:
        return [o["token_ids"] for o in llm.generate(prompts, params, use_tqdm=False)], facts
    finally:
        llm.shutdown()


def test_gpu_greedy_equals_cpu_torch_backend_in_float32(tiny_model_dir):
    """float32 on the GPU: torch attention (decode in CUDA graphs, padded), same tokens as the CPU."""
    model = tiny_model_dir("Qwen3ForCausalLM")
    prompts, params = _workload()
    common = {"dtype": torch.float32, "page_size": 4, "max_prefill_length": 64}
    cpu, _ = _run(model, prompts, params, device="cpu", **common)
    gpu, facts = _run(model, prompts, params, device="cuda", cuda_graph_max_bs=16, **common)
    assert facts["backend"] == "TorchNativeBackend" and facts["graphs"]
    assert gpu == cpu


def _hf_greedy_cuda(model_dir, prompts, new_tokens, dtype):
    """HF transformers' greedy tokens on the GPU, and the top-2 margin of each first step."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
    tokens, margins = [], []
    for prompt in prompts:
        ids = torch.tensor([prompt], device="cuda")
        out = model.generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0, eos_token_id=None,
                             attention_mask=torch.ones_like(ids), output_logits=True, return_dict_in_generate=True)
        tokens.append(out.sequences[0, len(prompt):].tolist())
        top = out.logits[0][0].float().topk(2).values
        margins.append((top[0] - top[1]).item())
    return tokens, margins


def _fused(monkeypatch, on: bool):
    from minisgl.kernels import dispatch as fused

    monkeypatch.setenv("MINISGL_DISABLE_FUSED_KERNELS", "0" if on else "1")
    fused.flashinfer_ops.cache_clear()
    fused.triton_ops.cache_clear()


@needs_flashinfer
@pytest.mark.parametrize("architecture", ["Qwen3ForCausalLM", "LlamaForCausalLM"])
def test_bfloat16_flashinfer_starts_like_hf_on_gpu(tiny_model_dir, architecture, monkeypatch):
    """FlashInfer attention in CUDA graphs with the torch layers gives HF's bf16 tokens; with the
    fused kernels (rounding once in float32, where HF rounds each op to bf16) the first token is
    HF's wherever HF's bf16 and fp32 runs agree on it by a clear margin (tiny random models have
    near-ties that bf16 rounding decides either way). FlashInfer's decode kernels, not minisgl's
    small-batch Triton ones: HF's exact tokens on those near-ties hang on the kernel's order of
    roundings (the Triton kernels' error against float32 is FlashInfer's, test_flashinfer_cuda)."""
    monkeypatch.setenv("MINISGL_TRITON_DECODE", "0")
    model = tiny_model_dir(architecture, head_dim=128)  # a head size FlashInfer serves
    prompts, _ = _workload(n=8, seed=1)
    params = [SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)] * len(prompts)
    hf_bf16, _ = _hf_greedy_cuda(model, prompts, 6, torch.bfloat16)
    hf_fp32, margins = _hf_greedy_cuda(model, prompts, 6, torch.float32)
    try:
        _fused(monkeypatch, False)
        plain, facts = _run(model, prompts, params, device="cuda", dtype=torch.bfloat16)
        _fused(monkeypatch, True)
        fused, _ = _run(model, prompts, params, device="cuda", dtype=torch.bfloat16)
    finally:
        _fused(monkeypatch, True)
    assert facts["backend"] == "FlashInferBackend" and facts["graphs"]
    print(f"{architecture}: HF fp32 first-step margins {[round(m, 3) for m in margins]}")
    assert all(p[:4] == h[:4] for p, h in zip(plain, hf_bf16)), (plain, hf_bf16)
    clear = [i for i, m in enumerate(margins) if m > 0.1 and hf_bf16[i][0] == hf_fp32[i][0]]
    assert len(clear) >= len(prompts) // 2
    assert all(fused[i][0] == hf_bf16[i][0] for i in clear), (fused, hf_bf16)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), -1)


@needs_flashinfer
def test_fused_qk_norm_rope_store_matches_the_layers():
    """The Triton kernel against RMSNorm + RotaryEmbedding + the cache store, in bf16, on q/k/v
    views of one qkv tensor (as the model passes them), with and without q/k norms."""
    from minisgl.kernels.qk_norm_rope import qk_norm_rope_store
    from minisgl.layers import RMSNorm, RotaryEmbedding

    torch.manual_seed(0)
    dev, dt = torch.device("cuda"), torch.bfloat16
    for heads, kv_heads, norm in [(16, 8, True), (32, 8, False), (28, 4, True)]:
        tokens, dim = 77, 128
        qkv = torch.randn(tokens, (heads + 2 * kv_heads) * dim, device=dev, dtype=dt)
        q, k, v = qkv.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
        q, k, v = q.view(tokens, heads, dim), k.view(tokens, kv_heads, dim), v.view(tokens, kv_heads, dim)
        inv_freq = 1.0 / (1e6 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=dev) / dim))
        with torch.device(dev):
            rotary = RotaryEmbedding(inv_freq, 4096)
            q_norm, k_norm = RMSNorm(dim, 1e-6).to(dt), RMSNorm(dim, 1e-6).to(dt)
        q_norm.weight.data.uniform_(0.5, 1.5)
        k_norm.weight.data.uniform_(0.5, 1.5)
        positions = torch.randint(0, 4096, (tokens,), device=dev)
        loc = torch.randperm(500, device=dev)[:tokens]
        k_cache = torch.zeros(500, kv_heads, dim, device=dev, dtype=dt)
        v_cache = torch.zeros_like(k_cache)
        q_out = qk_norm_rope_store(q, k, v, positions, rotary.cos_sin, loc, k_cache, v_cache,
                                   q_norm.weight if norm else None, k_norm.weight if norm else None, 1e-6)
        # float32 reference of the same math
        rq, rk = q.float(), k.float()
        if norm:
            rq = rq * torch.rsqrt(rq.pow(2).mean(-1, keepdim=True) + 1e-6) * q_norm.weight.float()
            rk = rk * torch.rsqrt(rk.pow(2).mean(-1, keepdim=True) + 1e-6) * k_norm.weight.float()
        cos, sin = rotary.cos_sin[positions].unsqueeze(1).chunk(2, dim=-1)
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
        rq, rk = rq * cos + _rotate_half(rq) * sin, rk * cos + _rotate_half(rk) * sin
        torch.testing.assert_close(q_out.float(), rq, rtol=1e-2, atol=2e-2)
        torch.testing.assert_close(k_cache[loc].float(), rk, rtol=1e-2, atol=2e-2)
        assert torch.equal(v_cache[loc], v)


@needs_flashinfer
def test_graphs_and_overlap_do_not_change_tokens(tiny_model_dir, monkeypatch):
    """bf16 with FlashInfer: overlap scheduling on/off gives identical tokens (greedy and seeded
    sampling); CUDA graphs on/off the same start, with FlashInfer's decode kernels in both (the
    graphs' own Triton decode rounds in another order, which decides a tiny random model's
    near-ties either way: its error against float32 is FlashInfer's, test_flashinfer_cuda)."""
    model = tiny_model_dir("Qwen3ForCausalLM", head_dim=128)
    prompts, params = _workload(n=24, seed=2)
    params = [p if i % 2 else SamplingParams(temperature=0.8, top_p=0.9, seed=i, max_tokens=p.max_tokens,
                                             ignore_eos=True) for i, p in enumerate(params)]
    common = {"device": "cuda", "dtype": torch.bfloat16}
    graphs, facts = _run(model, prompts, params, **common)
    assert facts["graphs"]
    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP", "1")
    no_overlap, _ = _run(model, prompts, params, **common)
    assert graphs == no_overlap  # the same kernels in the same order: bit-identical
    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP", "0")
    monkeypatch.setenv("MINISGL_TRITON_DECODE", "0")
    graphs, _ = _run(model, prompts, params, **common)
    eager, facts = _run(model, prompts, params, cuda_graph_max_bs=0, **common)
    assert not facts["graphs"]
    # Graph and eager decode may split the KV differently (summation order), so bf16 tokens can
    # part late in a sequence; they must agree at the start.
    same = sum(a == b for g, e in zip(graphs, eager) for a, b in zip(g, e))
    print(f"graph vs eager: {same} of {sum(map(len, graphs))} tokens agree")
    assert all(g[:4] == e[:4] for g, e in zip(graphs, eager))


@needs_flashinfer
@pytest.mark.parametrize("params", FILTER_CASES)
def test_gpu_sampling_kernels_draw_the_filtered_distribution(params):
    from minisgl.core.batch import Req
    from minisgl.engine import BatchSamplingArgs, Sampler
    from tests.engine.test_sample import VOCAB, _logits, _reference

    logits = _logits(1)[0]
    draws = 40_000
    reqs = [Req(uid=i, prompt_ids=[0], sampling_params=params) for i in range(draws)]
    args = BatchSamplingArgs.from_reqs(reqs, torch.device("cuda"))
    samples = Sampler().sample(logits.cuda().repeat(draws, 1), args).cpu()
    empirical = torch.bincount(samples.long(), minlength=VOCAB).float() / draws
    expected = _reference(logits, params)
    assert (empirical[expected == 0] == 0).all()
    stderr = (expected * (1 - expected) / draws).sqrt()
    assert ((empirical - expected).abs() <= 5 * stderr + 1e-3).all(), (empirical, expected)


def test_kv_pool_sized_from_free_memory_and_reported(tiny_model_dir):
    from minisgl.engine import Engine, EngineConfig

    torch.cuda.empty_cache()  # what earlier tests cached would otherwise count as used
    e = Engine(EngineConfig(tiny_model_dir("Qwen3ForCausalLM", head_dim=128), device="cuda", dtype=torch.bfloat16,
                            memory_ratio=0.3, max_running_requests=16, max_seq_len=512))
    try:
        m = e.memory
        assert m["kv_cache"] > 0 and m["weights"] > 0 and m["kv_tokens"] == e.num_pages * e.page_size
        # The pool takes what the ratio leaves after weights and the runtime reserve, not more.
        assert m["weights"] + m["kv_cache"] + m["graphs"] <= 0.3 * m["total"] + (64 << 20)
        # ... less the CUDA context and what the test process holds besides (2 GiB is plenty).
        assert m["kv_cache"] >= 0.3 * m["total"] - m["weights"] - e.runtime_reserve - (2 << 30)
        assert e.kv_cache.k_buffer.shape[1] == (e.num_pages + 1) * e.page_size  # + the dummy page
    finally:
        e.shutdown()


def test_gumbel_sampler_over_a_large_vocabulary():
    """The one-pass Triton sampler on Qwen3's vocabulary (many blocks and splits per row): tokens
    in range, greedy rows (T = 0) exact, and draws that follow softmax(logits / T)."""
    from minisgl.kernels.sampling import sample_gumbel_max

    torch.manual_seed(0)
    vocab = 151936
    for dtype in (torch.bfloat16, torch.float32):
        logits = (torch.randn(64, vocab, device="cuda") * 3).to(dtype)
        temps = torch.full((64,), 0.6, device="cuda")
        temps[::4] = 0
        for seed in range(20):
            tokens = sample_gumbel_max(logits, temps, seed * 7919 + 13).long()
            assert ((tokens >= 0) & (tokens < vocab)).all()
            assert torch.equal(tokens[::4], logits[::4].float().argmax(-1))
    row = torch.randn(5000, device="cuda") * 4  # peaked: the top tokens get measurable mass
    draws = 40_000
    tokens = sample_gumbel_max(row.expand(draws, -1).contiguous(), torch.full((draws,), 0.8, device="cuda"), 7)
    empirical = torch.bincount(tokens.long(), minlength=5000).float() / draws
    expected = torch.softmax(row / 0.8, -1)
    stderr = (expected * (1 - expected) / draws).sqrt()
    assert ((empirical - expected).abs() <= 5 * stderr + 1e-3).all()
