"""The vocabulary every other module speaks: requests, batches, sampling parameters (each request
field declared once, `request_fields`), the context, the attention backend's interface that the
context holds (`attn_backend`; the backends are minisgl.attention's), and the host-side arrays and
host-to-device copies that build a batch's inputs (`host`). It imports only the folders
below it: the grammar checks (constrained), the KV pool's type (kvcache), the TP identity
(distributed).

The package imports nothing itself, so the API process takes SamplingParams (params.py) without
torch, which batch.py and attn_backend.py import: a server start would pay seconds of CPU for it."""
