"""Reading an FP8 checkpoint: each FP8 weight is scaled up to float32 with its scale tensor (which
may sit in another shard file) as it is read, so the layers' loaders take it like any weight and
shard it for tensor parallelism with its scales already applied (a block scale covers exactly
its 128 x 128 tile, whichever rank the tile lands on)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch

from minisgl.kvcache import FP8_DTYPES

from .config import CheckpointQuant
from .fp8 import dequantize

# Tensors that only scale other tensors: consumed with the weight they scale, or (activation
# scales) not needed: minisgl quantizes activations per token at run time, see gemm.py.
SCALE_SUFFIXES = (".weight_scale_inv", ".weight_scale", ".input_scale")


def dequantized(names: Iterable[str], read: Callable[[str], torch.Tensor], quant: CheckpointQuant | None,
                device: torch.device) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """(name, tensor, was_fp8) for every tensor a model loads: FP8 weights in float32 on `device`
    with their scales applied, scale tensors left out, everything else as stored."""
    names = list(names)
    present = set(names)
    for name in names:
        if quant is not None and name.endswith(SCALE_SUFFIXES):
            continue
        tensor = read(name)
        if tensor.dtype not in FP8_DTYPES or not name.endswith(".weight"):
            yield name, tensor, False
            continue
        if quant is None:
            raise ValueError(f"checkpoint tensor {name!r} is FP8 but config.json has no quantization_config")
        scale_name = name.removesuffix("weight") + quant.scale_name
        if scale_name not in present:
            raise ValueError(f"FP8 weight {name!r} has no {quant.scale_name} tensor ({scale_name}) in the checkpoint")
        yield name, dequantize(tensor.to(device), read(scale_name).to(device), quant, name), True
