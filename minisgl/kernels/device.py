"""What the Triton kernels need to know of the GPU they run on: its SM count (grids are sized in
programs per SM), its model (tiles measured per model: gemv_tuned.py) and whether it takes
programmatic dependent launch."""

from __future__ import annotations

import functools

import torch
import triton.language as tl

from minisgl.utils import env

# Where no GPU runs the kernels (CPU tensors under Triton's interpreter, a build for Hopper on a
# machine without one): an H100's SMs, the GPU the tile tables were tuned on, so the same tiles
# are picked there.
DEFAULT_SMS = 132


def _cuda_index(device: torch.device | None) -> int | None:
    """The CUDA device `device` means (None: the current one, if any); None off a GPU."""
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda":
        return None
    return torch.cuda.current_device() if device.index is None else device.index


@functools.cache
def _cuda_properties(index: int):
    return torch.cuda.get_device_properties(index)


def sm_count(device: torch.device | None = None) -> int:
    """The streaming multiprocessors of `device` (None: the current CUDA device, if any), read
    once a GPU. Grids are sized against it by fixed tables: a CUDA graph capture must not
    autotune."""
    index = _cuda_index(device)
    return DEFAULT_SMS if index is None else _cuda_properties(index).multi_processor_count


def cuda_device_name(device: torch.device | None = None) -> str | None:
    """The GPU model of `device` (None: the current CUDA device, if any), e.g. "NVIDIA H200"; None
    off a GPU."""
    index = _cuda_index(device)
    return None if index is None else _cuda_properties(index).name


@functools.cache
def pdl_supported(device: torch.device) -> bool:
    """Programmatic dependent launch (a kernel launched before the one ahead of it is done, which
    it waits for in-kernel): Hopper and newer, with a Triton that has it. FlashInfer's kernels
    launch that way there too. Off with MINISGL_DISABLE_PDL=1 (read once a process)."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 9 or env.DISABLE_PDL.on():
        return False
    from triton.backends.nvidia.compiler import CUDAOptions

    return "launch_pdl" in CUDAOptions.__dataclass_fields__ and hasattr(tl.extra.cuda, "gdc_wait")


def pdl_launch(pdl: bool) -> dict:
    return {"launch_pdl": True} if pdl else {}  # (Triton's CPU interpreter takes no such option)
