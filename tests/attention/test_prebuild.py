"""minisgl.prebuild: the one list of FlashInfer kernels compiled ahead of time (the image's build
step and the GPU machines run it), checked against what the FlashInfer backend and the fused
layers can ask for. Compiling needs flashinfer and nvcc, which the CPU test machines lack; the
list and the command line are checked here.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from minisgl import prebuild
from minisgl.attention import FLASHINFER_PREFILL_KERNELS
from minisgl.attention.base import AttnShape
from minisgl.attention.flashinfer import SUPPORTED_DTYPES, SUPPORTED_FP8_KV_DTYPES, SUPPORTED_HEAD_DIMS, supports


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minisgl.prebuild", *args], capture_output=True, text=True, timeout=60)


def test_every_shape_the_flashinfer_backend_accepts_has_its_decode_and_prefill_kernels():
    listed = {(k.kind, k.dtype, k.head_dim) for k in prebuild.kernels(prebuild.DEFAULT_ARCHS)}
    for dtype in SUPPORTED_DTYPES:
        for head_dim in SUPPORTED_HEAD_DIMS:
            name = str(dtype).removeprefix("torch.")
            for kind in ("decode", "prefill-fa2", "prefill-fa3"):
                assert (kind, name, head_dim) in listed, (kind, name, head_dim)


def test_the_backend_refuses_what_is_not_prebuilt():
    """The CUDA image cannot compile: a shape outside the list must fall back to torch attention."""
    device = torch.device("cuda")
    assert "head_dim 96" in supports(AttnShape(num_qo_heads=8, num_kv_heads=8, head_dim=96, dtype=torch.bfloat16), device)
    assert "float32" in supports(AttnShape(num_qo_heads=8, num_kv_heads=8, head_dim=128, dtype=torch.float32), device)


def test_fa3_kernels_only_for_hopper():
    """FA3 runs on 9.x only: minisgl's `auto` picks it there, and nowhere else."""
    assert FLASHINFER_PREFILL_KERNELS["fa3"] == "fa3"
    for archs, has_fa3 in ((("8.0",), False), (("10.0a",), False), (("9.0a",), True), (prebuild.DEFAULT_ARCHS, True)):
        kinds = {k.kind for k in prebuild.kernels(archs)}
        assert ("prefill-fa3" in kinds) is has_fa3, archs


def test_the_fused_layer_and_sampling_kernels_are_always_listed():
    kinds = [k.kind for k in prebuild.kernels(("8.0",), dtypes=(), head_dims=())]
    assert kinds == ["norm", "silu_and_mul", "rope", "sampling"]


def test_the_all_reduce_fusion_is_listed_where_flashinfer_builds_it():
    """TensorRT-LLM's all-reduce + RMSNorm kernels exist for 9.x and 10.x, where fused_norm uses them."""
    for archs, listed in ((("8.0",), False), (("9.0a",), True), (("10.0a",), True), (prebuild.DEFAULT_ARCHS, True)):
        assert ("allreduce-fusion" in {k.kind for k in prebuild.kernels(archs)}) is listed, archs


def test_default_architectures_name_ampere_hopper_and_blackwell():
    assert prebuild.DEFAULT_ARCHS == ("8.0", "9.0a", "10.0a")


def test_list_prints_the_set_without_compiling():
    out = run_cli("--list", "--archs", "9.0a", "--dtypes", "bfloat16", "--head-dims", "128", "--fp8-kv-dtypes",
                  "float8_e4m3fn")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["norm", "silu_and_mul", "rope", "sampling", "allreduce-fusion",
                                       "decode bfloat16 head_dim=128",
                                       "prefill-fa2 bfloat16 head_dim=128", "prefill-fa3 bfloat16 head_dim=128",
                                       "decode bfloat16 kv=float8_e4m3fn head_dim=128",
                                       "prefill-fa2 bfloat16 kv=float8_e4m3fn head_dim=128"]


def test_every_fp8_kv_cache_the_backend_reads_has_decode_and_fa2_prefill_but_no_fa3():
    """FA3's templates take no bfloat16 queries over FP8 pages: FP8 KV prefills with FA2."""
    listed = {(k.kind, k.dtype, k.kv_dtype, k.head_dim) for k in prebuild.kernels(prebuild.DEFAULT_ARCHS)}
    for dtype in SUPPORTED_DTYPES:
        for kv in SUPPORTED_FP8_KV_DTYPES:
            for head_dim in SUPPORTED_HEAD_DIMS:
                names = (str(dtype).removeprefix("torch."), str(kv).removeprefix("torch."))
                assert ("decode", *names, head_dim) in listed and ("prefill-fa2", *names, head_dim) in listed
                assert ("prefill-fa3", *names, head_dim) not in listed


def test_fp8_kv_shapes_are_accepted_and_others_refused():
    device = torch.device("cuda")
    shape = dict(num_qo_heads=8, num_kv_heads=8, head_dim=128, dtype=torch.bfloat16)
    # supports() stops at the package check here (no flashinfer on the CPU machines): not at the dtype.
    for kv in SUPPORTED_FP8_KV_DTYPES:
        problem = supports(AttnShape(**shape, kv_dtype=kv), device)
        assert problem is None or "not installed" in problem, problem
    assert "KV cache" in supports(AttnShape(**shape, kv_dtype=torch.float16), device)


@pytest.mark.parametrize("args, message", [
    (("--archs", "9.0a", "--dtypes", "float32"), "never runs ['float32']"),
    (("--archs", "9.0a", "--head-dims", "96"), "never runs [96]"),
])
def test_variants_the_backend_never_runs_are_refused(args, message):
    out = run_cli(*args)
    assert out.returncode == 2 and message in out.stderr, out.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_without_a_gpu_the_architectures_must_be_named():
    out = run_cli("--prebuild")
    assert out.returncode == 2 and "name the architectures with --archs" in out.stderr, out.stderr
