"""FP8 on the GPU: FlashInfer reads an FP8 KV cache (FA2 prefill, CUDA-core and tensor-core decode,
eagerly and inside CUDA graphs, with per-tensor scales) as a float32 reference over the same
rounded values does; the fused Triton store writes what the torch store writes; the FP8 GEMM
equals a float32 GEMM of its quantized operands, and with LoRA adapters attached it gains exactly
their deltas (peft's, in float32) at decode and prefill sizes; an engine with FP8 weights and FP8 KV runs with
CUDA graphs close to bf16. Needs CUDA (and flashinfer for attention): skipped elsewhere.

    python -m pytest tests/quantization/test_fp8_cuda.py -q
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from tests.attention.paged_data import decode_errors, prefill_error

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_flashinfer = pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs flashinfer")
FP8_KV = dict(kv_dtype=torch.float8_e4m3fn, kv_scales=(0.5, 2.0))
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


@needs_flashinfer
@pytest.mark.parametrize("heads,kv_heads", [(16, 8), (32, 8)])  # Qwen3-0.6B and Llama-3.1-8B groups
def test_fa2_prefill_reads_the_fp8_cache_like_the_float32_reference(heads, kv_heads):
    from minisgl.attention.flashinfer import FlashInferBackend

    err = prefill_error(lambda ctx, shape: FlashInferBackend(ctx, shape, prefill_kernel="fa2"), heads, kv_heads, **FP8_KV)
    assert err < 1e-2, err


@needs_flashinfer
@pytest.mark.parametrize("heads,kv_heads,tensor_cores", [(16, 8, False), (32, 8, True)])
@pytest.mark.parametrize("triton_decode", [False, True])  # graphs: FlashInfer's or minisgl's Triton decode
def test_decode_reads_the_fp8_cache_eagerly_padded_and_in_graphs(heads, kv_heads, tensor_cores, triton_decode):
    from minisgl.attention.flashinfer import FlashInferBackend

    errors = decode_errors(lambda ctx, shape: FlashInferBackend(ctx, shape, use_tensor_cores=tensor_cores,
                                                                triton_decode=triton_decode),
                           heads, kv_heads, **FP8_KV)
    assert max(errors.values()) < 1e-2, errors


@needs_flashinfer
def test_fa3_prefill_over_fp8_pages_is_refused_and_auto_picks_fa2():
    from minisgl.attention import default_backend
    from minisgl.attention.flashinfer import FlashInferBackend
    from tests.attention.paged_data import setup_paged

    ctx, shape = setup_paged(16, 8, **FP8_KV)
    with pytest.raises(RuntimeError, match="FA3 prefill kernels cannot read an FP8 KV cache"):
        FlashInferBackend(ctx, shape, prefill_kernel="fa3")
    assert default_backend(ctx, shape) == "flashinfer"


def test_fused_store_writes_what_the_torch_store_writes_into_an_fp8_cache():
    pytest.importorskip("triton")
    from minisgl.kernels.qk_norm_rope import qk_norm_rope_store
    from minisgl.kvcache.mha_pool import quantize
    from minisgl.layers import RotaryEmbedding

    torch.manual_seed(0)
    dev, dt, tokens, heads, kv_heads, dim = torch.device("cuda"), torch.bfloat16, 64, 16, 8, 128
    q = torch.randn(tokens, heads, dim, device=dev, dtype=dt)
    k = torch.randn(tokens, kv_heads, dim, device=dev, dtype=dt)
    v = torch.randn(tokens, kv_heads, dim, device=dev, dtype=dt)
    rope = RotaryEmbedding(1.0 / (1e6 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)), 4096).to(dev)
    pos = torch.randint(0, 4000, (tokens,), device=dev)
    loc = torch.randperm(256, device=dev)[:tokens]
    kc = torch.zeros(256, kv_heads, dim, device=dev, dtype=torch.float8_e4m3fn)
    vc = torch.zeros_like(kc)
    qk_norm_rope_store(q, k, v, pos, rope.cos_sin, loc, kc, vc, k_scale=0.5, v_scale=2.0)
    _, k_rot = rope(pos, q.clone(), k.clone())
    want_k = quantize(k_rot, 0.5, kc.dtype).float() * 0.5
    want_v = quantize(v, 2.0, vc.dtype).float() * 2.0
    got_k, got_v = kc[loc].float() * 0.5, vc[loc].float() * 2.0
    # One e4m3 step at most (3 mantissa bits: 1/8 relative) where the rotation rounds differently.
    assert ((got_k - want_k).abs() <= want_k.abs() / 8 + 1e-2).all()
    assert torch.equal(got_v, want_v)


@pytest.mark.skipif(not HOPPER, reason="row-wise FP8 GEMMs need Hopper")
def test_fp8_gemm_equals_a_float32_gemm_of_its_quantized_operands():
    from minisgl.quantization.fp8 import quantize_rows
    from minisgl.quantization.gemm import fp8_linear, quantize_per_token

    torch.manual_seed(0)
    for rows in (1, 7, 16, 17, 256):  # the weight-streaming kernel up to 16 rows, _scaled_mm above
        x = torch.randn(rows, 4096, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(1008, 4096, device="cuda", dtype=torch.bfloat16) * 0.02
        bias = torch.randn(1008, device="cuda", dtype=torch.bfloat16)
        wq, ws = quantize_rows(w)
        got = fp8_linear(x, wq, bias, weight_scale=ws.view(1, -1))
        xq, xs = quantize_per_token(x.cpu())  # the torch implementation, as the reference
        x_used = x.float().cpu() if rows <= 16 else xq.float() * xs  # bf16 activations below 17 rows
        want = x_used @ (wq.float().cpu() * ws.cpu()[:, None]).T + bias.float().cpu()
        err = ((got.float().cpu() - want).norm() / want.norm()).item()
        assert err < 1e-2, (rows, err)
        # The Triton quantizer agrees with the torch one (division rounding: one e4m3 step at most).
        gq, gs = quantize_per_token(x)
        assert torch.allclose(gs.cpu(), xs, rtol=1e-6)
        assert ((gq.float().cpu() - xq.float()).abs() <= xq.float().abs() / 8 + 1e-3).all()


@needs_flashinfer
def test_engine_with_fp8_weights_and_fp8_kv_runs_graphs_and_stays_close_to_bf16(tiny_model_dir):
    from minisgl.engine import Engine, EngineConfig
    from tests.helpers import EngineDriver

    model = tiny_model_dir("Qwen3ForCausalLM", head_dim=128, hidden_size=256, intermediate_size=512)
    prompts = [[5, 17, 42, 99, 3], list(range(10, 47)), [7] * 12 + [250, 251, 252]]

    def run(**config):
        e = Engine(EngineConfig(model, dtype=torch.bfloat16, page_size=16, max_running_requests=8,
                                num_pages=64, cuda_graph_max_bs=8, **config))
        try:
            driver = EngineDriver(e)
            reqs = [driver.add(p) for p in prompts]
            first = driver.step(reqs).float()
            for _ in range(8):  # decode steps: replayed CUDA graphs
                driver.step(reqs)
            fp8_gemms = sum(getattr(m, "weight_scale", None) is not None for m in e.model.modules())
            return first, e.graph_runner is not None, fp8_gemms, e.kv_cache.k_buffer.dtype
        finally:
            e.shutdown()

    ref, _, _, _ = run()
    got, graphs, fp8_gemms, kv_dtype = run(quantization="fp8", kv_cache_dtype="fp8_e4m3")
    assert graphs and kv_dtype == torch.float8_e4m3fn
    assert fp8_gemms == (4 * 2 if HOPPER else 0)  # qkv, o, gate_up, down in each of 2 layers on Hopper
    # e4m3 rounds each weight, activation and K/V element by up to 2^-4 of itself (rms about 3.6%);
    # through 2 layers of 4 GEMMs and attention that is a relative logit error of up to ~25% on this
    # tiny random model (its 0.2 init amplifies it), i.e. cos >= 1 - 0.25^2 / 2 = 0.97. Measured on
    # an H100: 0.983 to 0.992.
    cos = torch.nn.functional.cosine_similarity(got, ref, dim=-1)
    assert (cos > 0.97).all(), cos


@needs_flashinfer
@pytest.mark.skipif(not HOPPER, reason="FP8 GEMMs run on Hopper")
@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8_e4m3"])
def test_qkv_gemv_that_rotates_and_stores_decodes_as_the_separate_kernels_do(tiny_model_dir, monkeypatch,
                                                                              kv_cache_dtype):
    """Llama (no q/k norms) with FP8 weights: decode steps in CUDA graphs run the q/k/v GEMV that
    rotates and stores K/V (kernels/qkv_rope.py), and give the logits of the GEMV followed by the rope +
    store kernel (that path taken by making the fused one decline), up to the bf16 rounding of
    q/k/v that the fused kernel skips: compared at every step until a near-tie picks another
    token (the contexts differ from there on), the first step always. This tiny random model
    amplifies roundings: the separate path's own graphs against its eager run give cos 0.9998 to
    0.99996, fused against separate 0.9987 to 0.9997 (H100, bf16 and FP8 KV, up to 6 steps); the
    kernel's own outputs are checked element by element in tests/kernels/test_qkv_rope.py."""
    from torch.profiler import ProfilerActivity, profile

    from minisgl.engine import Engine, EngineConfig
    from minisgl.quantization import apply
    from tests.helpers import EngineDriver

    model = tiny_model_dir("LlamaForCausalLM", head_dim=128, hidden_size=256, intermediate_size=512)
    prompts = [[5, 17, 42, 99, 3], list(range(10, 47)), [7] * 12 + [250, 251, 252]]

    def run():
        e = Engine(EngineConfig(model, dtype=torch.bfloat16, page_size=16, max_running_requests=8, num_pages=64,
                                cuda_graph_max_bs=8, quantization="fp8", kv_cache_dtype=kv_cache_dtype))
        try:
            driver = EngineDriver(e)
            reqs = [driver.add(p) for p in prompts]
            driver.step(reqs)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                steps = []
                for _ in range(8):  # decode: graphs
                    logits = driver.step(reqs).float().clone()
                    steps.append((logits, [r.output_ids[-1] for r in reqs]))
                torch.cuda.synchronize()
            kernels = {evt.name for evt in prof.events() if evt.device_type == torch.autograd.DeviceType.CUDA}
            return steps, kernels
        finally:
            e.shutdown()

    fused, fused_kernels = run()
    monkeypatch.setattr(apply, "fp8_qkv_rope_store", lambda *args, **kwargs: None)
    separate, separate_kernels = run()
    assert any("qkv_rope" in k for k in fused_kernels), sorted(fused_kernels)
    assert not any("qk_norm_rope_store" in k for k in fused_kernels)
    assert any("qk_norm_rope_store" in k for k in separate_kernels)
    cos = []
    for (got, got_tokens), (want, want_tokens) in zip(fused, separate):
        cos.append(torch.nn.functional.cosine_similarity(got, want, dim=-1).min().item())
        if got_tokens != want_tokens:
            break
    assert min(cos) > 0.998, cos



@pytest.mark.skipif(not HOPPER, reason="FP8 GEMMs run on Hopper")
def test_lora_over_fp8_linears_adds_the_adapters_float32_deltas_to_the_fp8_output(tiny_model_dir, tmp_path):
    """Each FP8 linear of a Llama layer (q/k/v, o, gate/up with the activation, down) with the adapter
    pool attached: the rows of each adapter's tokens are the FP8 GEMM's output plus peft's delta for
    that adapter computed in float32, the base model's rows what they are with no adapter in the
    batch; at decode sizes (the weight-streaming GEMV and the gathered LoRA kernels, <= 16 rows) and
    prefill sizes (_scaled_mm and the masked dense LoRA GEMMs). The fused FP8 epilogues (silu(gate) *
    up, the q/k/v rotary + KV store) are off with a pool: the deltas must land before them."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from minisgl.engine import Engine, EngineConfig
    from tests.lora.peft_adapters import build_adapters

    model = tiny_model_dir("LlamaForCausalLM", head_dim=128, hidden_size=256, intermediate_size=512)
    adapters = build_adapters(model, tmp_path)
    peft_layers = {}  # adapter -> layer 0 of peft's model, whose LoRA modules give the reference deltas
    for name, path in adapters.items():
        hf = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
        peft_layers[name] = PeftModel.from_pretrained(hf, path).base_model.model.model.layers[0]

    def want(name: str, modules: str, base: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The FP8 output `base` plus peft's float32 deltas of `modules` (their outputs side by side)."""
        deltas = []
        for module in modules.split():
            lora = peft_layers[name].get_submodule(module)
            deltas.append(lora.lora_B["default"](lora.lora_A["default"](x)) * lora.scaling["default"])
        return base + torch.cat(deltas, dim=-1)

    def silu_and_mul(y: torch.Tensor) -> torch.Tensor:
        gate, up = y.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

    e = Engine(EngineConfig(model, dtype=torch.bfloat16, page_size=16, max_running_requests=8, num_pages=64,
                            cuda_graph_max_bs=0, attn="torch", quantization="fp8", lora_modules=adapters))
    try:
        pool, attn, mlp = e.lora, e.model.model.layers[0].self_attn, e.model.model.layers[0].mlp
        # (linear, peft's modules in its output, how the model runs it, what follows the sum)
        linears = [(attn.qkv_proj, "self_attn.q_proj self_attn.k_proj self_attn.v_proj", False),
                   (attn.o_proj, "self_attn.o_proj", False),
                   (mlp.gate_up_proj, "mlp.gate_proj mlp.up_proj", True),
                   (mlp.down_proj, "mlp.down_proj", False)]
        cycle = ["r4", "r8", "r16", None]  # one row alone uses r4; from 7 rows on all four take part
        torch.manual_seed(0)
        with torch.no_grad():
            for rows in (1, 7, 16, 17, 256):  # the GEMV and gathered LoRA up to 16 rows, the GEMMs above
                names = [cycle[i % 4] for i in range(rows)]
                for linear, modules, gated in linears:
                    assert linear.weight.dtype == torch.float8_e4m3fn and linear.lora is not None
                    run = linear.silu_and_mul if gated else linear
                    x = torch.randn(rows, linear.weight.shape[1], device="cuda", dtype=torch.bfloat16)
                    base = linear.gemm(x, linear.weight, linear.bias).float().cpu()  # the FP8 GEMM (GEMV) alone
                    pool.prepare([0] * rows, np.ones(rows, dtype=np.int64))  # no adapter in the batch
                    alone = run(x).float().cpu()
                    pool.prepare([0 if n is None else pool.slot(n) for n in names], np.ones(rows, dtype=np.int64))
                    got = run(x).float().cpu()
                    for name in set(names):
                        idx = [i for i, n in enumerate(names) if n == name]
                        if name is None:  # the base model's rows: as if no adapter were in the batch
                            assert torch.equal(got[idx], alone[idx]), (rows, modules)
                            continue
                        ref = want(name, modules, base[idx], x[idx].float().cpu())
                        ref = silu_and_mul(ref) if gated else ref
                        err = ((got[idx] - ref).norm() / ref.norm()).item()
                        without = ((alone[idx] - ref).norm() / ref.norm()).item()  # the delta left out
                        assert err < 1e-2 < without, (rows, modules, name, err, without)
            hidden = torch.randn(1, attn.qkv_proj.weight.shape[1], device="cuda", dtype=torch.bfloat16)
            assert attn.attn.project(attn.qkv_proj, hidden, None, attn.rotary) is None  # no rotary + store epilogue
    finally:
        e.shutdown()
