"""Every environment variable the minisgl server reads, in one place: its name, default and why.

User-facing settings are flags (minisgl/server/args.py). The environment carries what must reach
every worker process unchanged (they inherit it), what must stay out of `ps` (the API key), and
switches for debugging and measurement that are not worth a flag. Each is read when asked for,
not at import, so a test or benchmark can set it before starting what reads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvVar:
    name: str
    default: str
    help: str

    def get(self) -> str:
        return os.environ.get(self.name, self.default)

    def is_set(self) -> bool:
        return self.name in os.environ

    def on(self) -> bool:
        """A switch: on when set to 1."""
        return self.get() == "1"


API_KEY = EnvVar("MINISGL_API_KEY", "", "the key /v1 requires (--api-key's value, kept out of the command line)")
LOG_LEVEL = EnvVar("MINISGL_LOG_LEVEL", "INFO", "the log level of every process")
CACHE = EnvVar("MINISGL_CACHE", "~/.cache/minisgl", "where the built-in demo model is written")
PREBUILT_CACHE = EnvVar("MINISGL_PREBUILT_CACHE", "",
                        "a read-only cache searched before MINISGL_CACHE: the container image's, holding the demo "
                        "model trained when the image was built")
DISABLE_OVERLAP = EnvVar("MINISGL_DISABLE_OVERLAP", "0",
                         "1: read each step's tokens before launching the next (to measure what overlap saves)")
DISABLE_FUSED_KERNELS = EnvVar("MINISGL_DISABLE_FUSED_KERNELS", "0",
                               "1: the torch reference instead of the fused norm/rope kernels (to bisect a numeric difference)")
DISABLE_FLASHINFER_SAMPLING = EnvVar("MINISGL_DISABLE_FLASHINFER_SAMPLING", "0",
                                     "1: torch sampling on the GPU instead of FlashInfer's kernels")
DECODE_TENSOR_CORES = EnvVar("MINISGL_DECODE_TENSOR_CORES", "",
                             "1 or 0: force FlashInfer's tensor-core decode on or off (unset: on for >= 4 query heads per KV head)")
DISABLE_PDL = EnvVar("MINISGL_DISABLE_PDL", "0",
                     "1: launch minisgl's Triton kernels without programmatic dependent launch, and so use "
                     "FlashInfer's add + RMSNorm again (FlashInfer's kernels keep theirs), to measure what it saves")
TRITON_DECODE = EnvVar("MINISGL_TRITON_DECODE", "1",
                       "0: FlashInfer's decode kernels in the decode CUDA graphs, instead of minisgl's Triton "
                       "decode over chunks of even size (minisgl/kernels/decode_attention.py), to measure what it saves")
MODEL_FREE_STEP_MS = EnvVar("MINISGL_MODEL_FREE_STEP_MS", "0",
                            "the model-free benchmark engine's time per step, in ms (benchmark/online/model_free.py)")
# FlashInfer's own, which minisgl reads too: the image sets it (Dockerfile).
FLASHINFER_DISABLE_JIT = EnvVar("FLASHINFER_DISABLE_JIT", "",
                                "set: FlashInfer compiles nothing, a module not prebuilt is an error naming it "
                                "(and minisgl announces no compile, minisgl/kernels/jit_builds.py)")

ALL = (API_KEY, LOG_LEVEL, CACHE, PREBUILT_CACHE, DISABLE_OVERLAP, DISABLE_FUSED_KERNELS, DISABLE_FLASHINFER_SAMPLING,
       DECODE_TENSOR_CORES, DISABLE_PDL, TRITON_DECODE, MODEL_FREE_STEP_MS, FLASHINFER_DISABLE_JIT)
