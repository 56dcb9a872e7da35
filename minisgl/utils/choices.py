"""The allowed values of the settings whose flag and implementation both need the list: one
tuple or mapping each. Standard library only: the flags (minisgl/server/args.py) are read by the
operator, which installs minisgl without torch; the torch side imports the same names from here."""

from __future__ import annotations

# --kv-cache-dtype: each name and the torch dtype the KV pool stores for it (None: the model's).
KV_CACHE_DTYPES: dict[str, str | None] = {"auto": None, "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
FP8_KV_DTYPES: tuple[str, ...] = tuple(t for t in KV_CACHE_DTYPES.values() if t)  # torch names
# --dtype: weights and activations (torch names), and the aliases vLLM users know.
DTYPES: tuple[str, ...] = ("auto", "bfloat16", "float16", "float32")
DTYPE_ALIASES: dict[str, str] = {"half": "float16", "fp16": "float16", "float": "float32", "fp32": "float32",
                                 "bf16": "bfloat16"}
DEVICES: tuple[str, ...] = ("auto", "cuda", "cpu")
ONLINE_QUANTIZATION: tuple[str, ...] = ("fp8",)  # --quantization: weights quantized at load
# --cache: the prefix caches (minisgl.kvcache.PREFIX_CACHES maps each to its class).
PREFIX_CACHES: tuple[str, ...] = ("radix", "naive")
# --admission and --scheduling-policy (minisgl.scheduler).
ADMISSION_MODES: tuple[str, ...] = ("dynamic", "reserve")
SCHEDULING_POLICIES: tuple[str, ...] = ("fcfs", "priority")
# --speculative: the drafters of speculative decoding (minisgl.speculative).
SPECULATIVE_DRAFTERS: tuple[str, ...] = ("ngram", "eagle3")
# --tool-call-parser and --reasoning-parser (minisgl.server.parsers maps each to its parser).
TOOL_PARSERS: tuple[str, ...] = ("hermes", "qwen", "llama3_json", "qwen3_coder", "mistral")
REASONING_PARSERS: tuple[str, ...] = ("qwen3", "deepseek_r1")
# --attn: the attention backends' names (minisgl.attention.ATTN_BACKENDS maps each to its class),
# and --moe-backend's (minisgl.layers.moe): here, so a wrong one is refused before anything loads.
ATTN_BACKEND_NAMES: tuple[str, ...] = ("torch", "sgl-fa3", "fa2", "fa3", "fi", "flashinfer")
MOE_BACKENDS: tuple[str, ...] = ("loop", "grouped", "fused", "auto")
# --metrics-compat: other servers' metric names /metrics also exports (minisgl.server.http.metrics_vllm).
METRICS_COMPAT: tuple[str, ...] = ("vllm",)
