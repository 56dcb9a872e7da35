"""The FP8 weight-streaming GEMV (minisgl.kernels.gemv.gemv) computes x @ (w * s)^T
as a float32 GEMM of the same e4m3 weights does, and its gated form silu(gate) * up, for 1 to 16
rows, N not a multiple of its tile and K not a multiple of its step, on both paths (CUDA cores or
tl.dot), over a strided weight view too; and every tile its table picks builds for Hopper streaming
the weight in pipelined 16-byte copies. On the CPU its kernel runs under Triton's interpreter (tests/conftest.py sets
TRITON_INTERPRET=1); the device runs this file on the GPU too.

    python -m pytest tests/kernels/test_gemv.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

import minisgl.kernels.gemv as gemv_module  # noqa: E402
from minisgl.kernels.gemv import GemvConfig, gemv, gemv_config  # noqa: E402
from minisgl.quantization.fp8 import quantize_rows  # noqa: E402
from tests.kernels.hopper_build import assert_builds_for_hopper  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def reference(x: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor, gated: bool) -> torch.Tensor:
    y = x.float().cpu() @ (wq.float().cpu() * ws.cpu()[:, None]).T
    if gated:
        gate, up = y.chunk(2, dim=-1)
        y = torch.nn.functional.silu(gate) * up
    return y


def check(rows: int, n: int, k: int, gated: bool, config: GemvConfig | None = None) -> None:
    torch.manual_seed(rows * 1000 + n + k)
    x = torch.randn(rows, k, dtype=torch.bfloat16, device=DEVICE)
    wq, ws = quantize_rows(torch.randn(2 * n if gated else n, k, device=DEVICE) * 0.05)
    got = gemv(x, wq, ws, gated=gated, config=config)
    assert got.dtype == torch.bfloat16 and got.shape == (rows, n)
    want = reference(x, wq, ws, gated)
    # Exact products, float32 sums: the bf16 output's rounding (2^-9 relative) is the error.
    assert torch.allclose(got.float().cpu(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item()), (
        (got.float().cpu() - want).abs().max())


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 16])
@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("k", [200, 208])
def test_gemv_equals_a_float32_gemm_of_the_fp8_weight(rows, gated, k):
    # N = 70: not a multiple of any tile width; K not a multiple of any K step (208: rows 16-byte
    # aligned; 200: not).
    check(rows, 70, k, gated)


@pytest.mark.parametrize("rows", [1, 5])
@pytest.mark.parametrize("gated", [False, True])
def test_every_path_agrees_with_the_reference_whatever_the_rows(rows, gated):
    for dot in (False, True):
        check(rows, 40, 96, gated, GemvConfig(block_n=16, block_k=64, num_warps=4, num_stages=2, dot=dot))


def test_configs_tile_output_features_only_and_fill_the_gpu():
    # Llama-3.1-8B's o_proj at batch 1: at least two programs per SM of an H100 (132), no K split,
    # on CUDA cores.
    cfg = gemv_config(1, 4096, 4096)
    assert 4096 // cfg.block_n >= 264 and not cfg.dot
    assert not gemv_config(2, 14336, 4096, gated=True).dot  # gated too, up to two rows
    assert not gemv_config(4, 4096, 14336).dot  # 4 rows: CUDA cores for the narrower weights, tl.dot for gate/up
    assert gemv_config(4, 14336, 4096, gated=True).dot and gemv_config(4, 28672, 4096).dot
    assert gemv_config(16, 28672, 4096).dot  # 16 rows: tl.dot over 16-row tiles
    narrow = gemv_config(1, 512, 4096)  # a tensor-parallel shard: narrower tiles, not a K split
    assert 512 // narrow.block_n >= 128


@pytest.mark.parametrize("rows", [1, 2, 5, 16])
def test_with_no_scale_a_bf16_weight_is_multiplied_as_it_is(rows):
    # The lm_head's form: the weight in x's dtype, no per-feature scales; written into `out`.
    torch.manual_seed(rows)
    x = torch.randn(rows, 208, dtype=torch.bfloat16, device=DEVICE)
    w = torch.randn(70, 208, dtype=torch.bfloat16, device=DEVICE)
    out = torch.full((rows, 70), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    assert gemv(x, w, out=out) is out
    want = x.float().cpu() @ w.float().cpu().T
    assert torch.allclose(out.float().cpu(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())


def test_a_bf16_weight_takes_the_tiles_of_a_gated_fp8_one(monkeypatch):
    # The same bytes an output feature per K step: Llama-3.1-8B's head, 4 features x 2 KB steps at
    # one row, 1 KB at two, tl.dot from three rows (each measured faster than cuBLAS on an H100).
    # The rules, not a GPU's measured table (an H200's has its own tiles for this head).
    monkeypatch.setattr(gemv_module, "cuda_device_name", lambda device=None: None)
    assert gemv_config(1, 128256, 4096, weight_bytes=2) == GemvConfig(4, 1024, 4, 6, False)
    assert gemv_config(2, 128256, 4096, weight_bytes=2) == GemvConfig(4, 512, 4, 6, False)
    assert gemv_config(3, 128256, 4096, weight_bytes=2).dot


@pytest.mark.parametrize("rows", [1, 4])
def test_a_strided_weight_view_is_read_by_its_row_stride(rows):
    # Rows 210 bytes apart (a slice of a wider weight): not 16-byte aligned.
    torch.manual_seed(rows)
    wq, ws = quantize_rows(torch.randn(48, 210, device=DEVICE) * 0.05)
    view = wq[:, :208]
    x = torch.randn(rows, 208, dtype=torch.bfloat16, device=DEVICE)
    want = reference(x, view, ws, gated=False)
    got = gemv(x, view, ws)
    assert torch.allclose(got.float().cpu(), want, rtol=1e-2, atol=1e-2 * want.abs().max().item())


def test_more_than_16_rows_is_refused_and_no_rows_give_an_empty_result():
    wq, ws = quantize_rows(torch.ones(16, 32, device=DEVICE))
    with pytest.raises(ValueError, match="at most 16 rows"):
        gemv(torch.zeros(17, 32, dtype=torch.bfloat16, device=DEVICE), wq, ws)
    assert gemv(torch.zeros(0, 32, dtype=torch.bfloat16, device=DEVICE), wq, ws).shape == (0, 16)


# Builds the kernel for Hopper with Triton's compiler (no GPU needed, outside the interpreter) with
# the tiles gemv_config picks for Llama-3.1-8B's linears and a tensor-parallel shard, and reads the
# PTX: the e4m3 weight must move in 16-byte asynchronous copies (cp.async: the loop pipelined, several
# tiles in flight), never byte by byte nor one tile at a time, or the kernel is far from the
# bandwidth it exists for; with programmatic dependent launch it waits for the kernel before it
# (griddepcontrol.wait) and lets the next one launch only after its last store.
HOPPER_BUILD = r"""
import inspect, re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from minisgl.kernels import gemv as tf

# (N, K, gated, bytes a weight element): Llama-3.1-8B's FP8 linears, a shard, its bf16 lm_head.
shapes = [(6144, 4096, False, 1), (4096, 4096, False, 1), (14336, 4096, True, 1), (4096, 14336, False, 1),
          (768, 4096, False, 1), (128256, 4096, False, 2)]
for n, k, gated, wbytes in shapes:
    for rows, pdl in ((1, True), (2, False), (4, True), (16, False)):
        cfg = tf.gemv_config(rows, n, k, gated, wbytes)
        kernel = tf._gemv_kernel
        names = list(inspect.signature(kernel.fn).parameters)
        types = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv" if wbytes == 1 else "*bf16", "s_ptr": "*fp32", "y_ptr": "*bf16"}
        consts = {"BLOCK_M": 16 if cfg.dot else triton.next_power_of_2(rows), "BLOCK_N": cfg.block_n,
                  "BLOCK_K": cfg.block_k, "DOT": cfg.dot, "GATED": gated, "IEEE": False, "PDL": pdl}
        consts.update({"STAGES": cfg.num_stages, "EVEN_K": k % cfg.block_k == 0, "SCALED": wbytes == 1})
        sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in names}
        # What Triton's launcher tells the compiler of these arguments: 16-byte aligned, multiples of 16.
        aligned = [a for a in ["x_ptr", "w_ptr", "s_ptr", "y_ptr", "N", "K", "stride_xm", "stride_wn", "stride_ym"]
                   if a in names]
        attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in aligned}
        ptx = triton.compile(ASTSource(fn=kernel, signature=sig, constexprs=consts, attrs=attrs),
                             target=GPUTarget("cuda", 90, 32),
                             options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}).asm["ptx"]
        byte_loads = re.findall(r"ld\.global(?:\.\w+)*\.[bsu]8\b", ptx)
        copies = [int(c, 0) for c in re.findall(r"cp\.async\.\w+\.shared\.global \[[^]]*\], \[[^]]*\], (\w+)", ptx)]
        # 16-byte copies (8: one bf16 row of x at one row), committed in groups: the loop pipelined.
        pipelined = 16 in copies and min(copies) >= 8 and ptx.count("cp.async.commit_group") >= cfg.num_stages - 1
        assert not byte_loads and pipelined, (n, k, gated, rows, cfg, byte_loads, sorted(set(copies)))
        assert ("griddepcontrol.wait" in ptx) == pdl, (n, k, gated, rows, pdl)
        if pdl:  # the next kernel may launch only once the weight is streamed and the output stored
            assert ptx.rfind("st.global") < ptx.find("griddepcontrol.launch_dependents"), (n, k, gated, rows)
print("built")
"""


@pytest.mark.slow
def test_table_tiles_build_for_hopper_with_16_byte_weight_loads():
    assert_builds_for_hopper(HOPPER_BUILD)
