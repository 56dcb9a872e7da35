"""The vocabulary every other module speaks: requests, batches, sampling parameters, context."""

from .batch import Batch, Phase, Req
from .context import Context, get_global_ctx, set_global_ctx
from .params import SamplingParams

__all__ = ["Batch", "Phase", "Req", "Context", "get_global_ctx", "set_global_ctx", "SamplingParams"]
