"""The vocabulary every other module speaks: requests, batches, sampling parameters, context."""

from .attn_backend import AttnLayer, BaseAttnBackend
from .batch import BaseAttnMetadata, Batch, Phase, Req
from .context import Context, get_global_ctx, set_global_ctx
from .params import SamplingParams

__all__ = ["AttnLayer", "BaseAttnBackend", "BaseAttnMetadata", "Batch", "Phase", "Req", "Context", "get_global_ctx",
           "set_global_ctx", "SamplingParams"]
