"""FP8 weights: reading FP8 checkpoints (fp8 block-wise, compressed-tensors per-tensor and
per-channel), quantizing plain ones at load (`--quantization fp8`), and the FP8 GEMMs on Hopper.
The FP8 KV cache lives with the pool (minisgl.kvcache)."""

from .apply import check_online_quantization, quantize_model
from .checkpoint import dequantized
from .config import ONLINE_QUANTIZATION, QUANT_METHODS, CheckpointQuant, checkpoint_quant

__all__ = ["CheckpointQuant", "ONLINE_QUANTIZATION", "QUANT_METHODS", "check_online_quantization", "checkpoint_quant",
           "dequantized", "quantize_model"]
