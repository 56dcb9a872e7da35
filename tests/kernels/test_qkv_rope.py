"""The q/k/v FP8 GEMV with rotary and the KV store in its epilogue
(minisgl.kernels.qkv_rope) writes what the float32 GEMM of the same e4m3 weight, HF's
rotate-half rotary and a store into the cache slots write: q returned, k and v at each token's
slot (divided by an FP8 cache's scales), no other slot touched; on both GEMV paths (CUDA cores,
tl.dot), for head dims 64 and 128. On the CPU under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1; the FP8 cache only on the GPU); the device runs this file on the GPU too.

    python -m pytest tests/kernels/test_qkv_rope.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.qkv_rope import fused_tile  # noqa: E402
from minisgl.quantization.fp8 import quantize_rows  # noqa: E402
from minisgl.quantization.gemm import fp8_qkv_rope_store  # noqa: E402
from tests.kernels.hopper_build import assert_builds_for_hopper  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SLOTS = 40


def cos_sin_cache(head_dim: int, positions: int = 300) -> torch.Tensor:
    inv_freq = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    freqs = torch.outer(torch.arange(positions, dtype=torch.float64), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).float()


def rotate(x: torch.Tensor, cos_sin: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """HF's rotary: x * cos + rotate_half(x) * sin, x [tokens, heads, D], in float64."""
    cos, sin = cos_sin.double()[positions].unsqueeze(1).chunk(2, dim=-1)
    cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def run(rows: int, heads: int, kv_heads: int, head_dim: int, cache_dtype: torch.dtype, k_scale: float = 1.0,
        v_scale: float = 1.0):
    torch.manual_seed(rows * 100 + heads + head_dim)
    hidden = 192
    x = torch.randn(rows, hidden, dtype=torch.bfloat16, device=DEVICE)
    wq, ws = quantize_rows(torch.randn((heads + 2 * kv_heads) * head_dim, hidden, device=DEVICE) * 0.05)
    positions = torch.randint(0, 300, (rows,), device=DEVICE)
    out_loc = torch.randperm(SLOTS - 1, device=DEVICE)[:rows] + 1  # slot 0 stays empty
    cos_sin = cos_sin_cache(head_dim).to(DEVICE)
    k_cache = torch.zeros(SLOTS, kv_heads, head_dim, device=DEVICE).to(cache_dtype)
    v_cache = torch.zeros_like(k_cache)
    q = fp8_qkv_rope_store(x, wq, None, weight_scale=ws.view(1, -1), heads=heads, kv_heads=kv_heads,
                           positions=positions, cos_sin=cos_sin, out_loc=out_loc, k_cache=k_cache, v_cache=v_cache,
                           k_scale=k_scale, v_scale=v_scale)
    y = x.double().cpu() @ (wq.double().cpu() * ws.double().cpu()[:, None]).T
    want_q, want_k, want_v = y.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    pos = positions.cpu()
    want_q = rotate(want_q.view(rows, heads, head_dim), cos_sin.cpu(), pos)
    want_k = rotate(want_k.view(rows, kv_heads, head_dim), cos_sin.cpu(), pos) / k_scale
    want_v = want_v.view(rows, kv_heads, head_dim) / v_scale
    return q, k_cache.double().cpu(), v_cache.double().cpu(), out_loc.cpu(), (want_q, want_k, want_v)


def close(got: torch.Tensor, want: torch.Tensor, rel: float) -> bool:
    return bool(((got - want).abs() <= rel * want.abs() + rel * 0.05 * want.abs().max()).all())


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 2, 5, 16])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_q_is_returned_and_k_v_are_stored_rotated_as_hf_rotates_them(rows, head_dim):
    q, k_cache, v_cache, loc, (want_q, want_k, want_v) = run(rows, heads=4, kv_heads=2, head_dim=head_dim,
                                                             cache_dtype=torch.bfloat16)
    assert q.shape == (rows, 4, head_dim) and q.dtype == torch.bfloat16
    # Rotated in float32 from float32 sums: the bf16 outputs' own rounding (2^-9 relative) is the
    # error on the GPU; Triton's interpreter converts more coarsely (gemv's test allows 1e-2 too).
    assert close(q.double().cpu(), want_q, 1e-2), (q.double().cpu() - want_q).abs().max()
    assert close(k_cache[loc], want_k, 1e-2) and close(v_cache[loc], want_v, 1e-2)
    others = torch.ones(SLOTS, dtype=torch.bool)
    others[loc] = False
    assert not k_cache[others].any() and not v_cache[others].any()


@pytest.mark.skipif(DEVICE.type != "cuda", reason="Triton's interpreter converts float32 to e4m3 wrongly near the "
                    "top of a binade (1.97 -> 1.0): the FP8 store is checked on the GPU")
@pytest.mark.parametrize("rows", [1, 5])
def test_an_fp8_cache_holds_k_and_v_divided_by_their_scales(rows):
    q, k_cache, v_cache, loc, (want_q, want_k, want_v) = run(rows, heads=8, kv_heads=2, head_dim=128,
                                                             cache_dtype=torch.float8_e4m3fn, k_scale=0.25, v_scale=2.0)
    assert close(q.double().cpu(), want_q, 1e-2)
    # e4m3 keeps 3 mantissa bits: a stored element is within 2^-4 of itself (plus subnormal steps).
    assert close(k_cache[loc], want_k, 2**-4 + 1e-2) and close(v_cache[loc], want_v, 2**-4 + 1e-2)


def test_where_the_kernel_does_not_run_the_caller_gets_none():
    x = torch.randn(17, 64, dtype=torch.bfloat16, device=DEVICE)
    wq, ws = quantize_rows(torch.randn(3 * 128, 64, device=DEVICE))
    cache = torch.zeros(4, 1, 128, dtype=torch.bfloat16, device=DEVICE)
    kw = dict(weight_scale=ws.view(1, -1), heads=1, kv_heads=1, positions=torch.zeros(17, dtype=torch.long),
              cos_sin=cos_sin_cache(128), out_loc=torch.zeros(17, dtype=torch.long), k_cache=cache, v_cache=cache)
    assert fp8_qkv_rope_store(x, wq, None, **kw) is None  # above the GEMV's 16 rows
    bias = torch.zeros(3 * 128, dtype=torch.bfloat16, device=DEVICE)
    assert fp8_qkv_rope_store(x[:1], wq, bias, **kw) is None  # a bias (Qwen2) is added after the GEMM
    assert fused_tile(1, 6144, 4096, 128) is not None and fused_tile(1, 6144, 4096, 2) is None


# Built for Hopper outside the interpreter (no GPU needed), Llama-3.1-8B's q/k/v shapes: the weight
# still streams in pipelined 16-byte copies, and the next kernel launches only after the stores.
HOPPER_BUILD = r"""
import inspect, re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from minisgl.kernels import qkv_rope as tq

for rows, cache in ((1, "*bf16"), (2, "*fp8e4nv"), (8, "*bf16")):
    cfg = tq.fused_tile(rows, 6144, 4096, 128)
    kernel = tq._fp8_qkv_rope_kernel
    names = list(inspect.signature(kernel.fn).parameters)
    types = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "q_ptr": "*bf16", "kc_ptr": cache,
             "vc_ptr": cache, "cos_sin_ptr": "*fp32", "pos_ptr": "*i64", "loc_ptr": "*i64", "k_inv_scale": "fp32",
             "v_inv_scale": "fp32"}
    consts = {"HQ": 32, "HK": 8, "D": 128, "BLOCK_M": 16 if cfg.dot else triton.next_power_of_2(rows),
              "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "DOT": cfg.dot, "IEEE": False, "PDL": True,
              "STAGES": cfg.num_stages, "EVEN_K": True}
    sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in names}
    attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in names if a.endswith("_ptr") or a in ("K", "stride_wn")}
    ptx = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                         target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}).asm["ptx"]
    copies = [int(c, 0) for c in re.findall(r"cp\.async\.\w+\.shared\.global \[[^]]*\], \[[^]]*\], (\w+)", ptx)]
    assert 16 in copies and ptx.count("cp.async.commit_group") >= cfg.num_stages - 1, (rows, sorted(set(copies)))
    assert not re.findall(r"ld\.global(?:\.\w+)*\.[bsu]8\b", ptx), rows
    assert ptx.find("griddepcontrol.wait") >= 0
    assert ptx.rfind("st.global") < ptx.find("griddepcontrol.launch_dependents"), rows
print("built")
"""


@pytest.mark.slow
def test_hopper_build_streams_the_weight_and_triggers_the_next_kernel_after_its_stores():
    assert_builds_for_hopper(HOPPER_BUILD)
