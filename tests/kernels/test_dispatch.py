"""minisgl.kernels.dispatch offers a tensor the kernels that can run on it, and None where they
cannot (the caller's torch code runs then): no FlashInfer or Triton layer kernel for CPU or
float32 tensors, the weight-streaming GEMV for up to 16 bf16 rows (wherever triton is: under
Triton's interpreter on the CPU, as tests/conftest.py sets), the lm_head's GEMV only on Hopper.
Importing it (or the layers, the quantization and the engine) loads neither triton nor FlashInfer.

    python -m pytest tests/kernels/test_dispatch.py -q
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from minisgl.kernels.dispatch import dense_gemv, fused_ops, gemv_for, triton_for


def test_no_fused_kernel_is_offered_to_cpu_or_float32_tensors():
    for x in (torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(2, 8)):
        assert fused_ops(x) is None and triton_for(x) is None
    assert dense_gemv(torch.zeros(2, 8, dtype=torch.bfloat16), torch.zeros(4, 8, dtype=torch.bfloat16)) is None


def test_the_gemv_takes_up_to_16_bf16_rows():
    pytest.importorskip("triton")
    assert gemv_for(torch.zeros(16, 8, dtype=torch.bfloat16)) is not None
    assert gemv_for(torch.zeros(17, 8, dtype=torch.bfloat16)) is None
    assert gemv_for(torch.zeros(1, 8, dtype=torch.float16)) is None


@pytest.mark.slow
def test_importing_the_package_loads_no_kernel_library():
    code = ("import sys, minisgl.kernels.dispatch, minisgl.layers, minisgl.quantization, minisgl.engine; "
            "print(sorted({'triton', 'flashinfer'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr[-2000:]
