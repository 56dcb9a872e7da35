"""The vocabulary every other module speaks: requests, batches, sampling parameters (each request
field declared once, `request_fields`), the context, the attention backend's interface that the
context holds (`attn_backend`; the backends are minisgl.attention's), and the host-side arrays and
host-to-device copies that build a batch's inputs (`host`). It imports only the folders
below it: the grammar checks (constrained), the KV pool's type (kvcache), the TP identity
(distributed)."""

from .attn_backend import AttnLayer, BaseAttnBackend
from .batch import BaseAttnMetadata, Batch, Phase, Req
from .context import Context, get_global_ctx, set_global_ctx
from .params import SamplingParams

__all__ = ["AttnLayer", "BaseAttnBackend", "BaseAttnMetadata", "Batch", "Context", "Phase", "Req", "SamplingParams",
           "get_global_ctx", "set_global_ctx"]
