"""minisgl.kernels.device: the kernels' grids are sized against the SM count of the GPU they run
on, read from it; where no GPU runs them (CPU tensors under Triton's interpreter) against an
H100's, the GPU the tile tables were tuned on.

    python -m pytest tests/kernels/test_device.py -q
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from minisgl.kernels.decode_attention import MAX_CHUNKS, launch_shape  # noqa: E402
from minisgl.kernels.device import DEFAULT_SMS, sm_count  # noqa: E402

CPU = torch.device("cpu")


def test_cpu_tensors_are_sized_for_an_h100():
    assert sm_count(CPU) == DEFAULT_SMS == 132
    assert launch_shape(1, 8, CPU)[0] == 32  # two programs an SM: 256 programs for 8 KV heads


@pytest.mark.skipif(not torch.cuda.is_available(), reason="reads a GPU's SM count")
def test_a_gpu_is_sized_by_its_own_sm_count():
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert sm_count(torch.device("cuda", 0)) == sms
    assert sm_count(torch.device("cuda")) == sm_count() == sms  # the current device
    want = min(MAX_CHUNKS, 1 << (2 * sms // 8).bit_length() - 1)  # a power of two
    assert launch_shape(1, 8, torch.device("cuda", 0))[0] == want
