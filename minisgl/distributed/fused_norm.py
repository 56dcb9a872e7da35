"""The all-reduce of a row-parallel layer's partial output fused with the residual add and RMSNorm
that follow it in a pre-norm decoder: FlashInfer's port of TensorRT-LLM's all-reduce fusion.

Why: a decoder layer all-reduces twice (after the attention's o_proj and after the MLP or MoE) and
each time adds the residual and normalizes next. Unfused that is two launches, and the custom
all-reduce's signal-pad barriers at its start and end cost, at one token under TP=4, about as much
over a Qwen3-30B-A3B step's 97 calls as its attention (benchmark/NOTES.md). TensorRT-LLM's
one-shot kernel needs no barrier between calls (each rank polls its peers' values out of a
triple-buffered "Lamport" buffer, cleared a call later) and normalizes in the same launch.

It takes batches of up to `max_tokens` rows (the decode graphs'); longer prefill chunks keep the
unfused path (the custom all-reduce or NCCL, then minisgl's add + RMSNorm). Every rank must make
the same fused calls in the same order, which the ranks' identical forward passes do.
Imported lazily, on CUDA with tensor parallelism and the custom all-reduce on.
"""

from __future__ import annotations

import contextlib
import io

import torch

from minisgl.kernels.device import pdl_supported
from minisgl.utils.logger import get_logger

logger = get_logger(__name__)


class AllReduceAddRMSNorm:
    def __init__(self, rank: int, world: int, max_tokens: int, hidden: int, dtype: torch.dtype,
                 device: torch.device):
        from flashinfer.comm import AllReduceFusionPattern, create_allreduce_fusion_workspace

        self.max_tokens, self.hidden, self.dtype = max_tokens, hidden, dtype
        self.pattern = AllReduceFusionPattern.kARResidualRMSNorm
        self.pdl = pdl_supported(device)
        # Collective: every rank maps every rank's buffers. FlashInfer prints each buffer's address
        # per rank (a dozen lines each) on stdout: kept out of the server's output.
        with contextlib.redirect_stdout(io.StringIO()):
            self.workspace = create_allreduce_fusion_workspace("trtllm", world_size=world, rank=rank,
                                                               max_token_num=max_tokens, hidden_dim=hidden,
                                                               dtype=dtype)

    def takes(self, x: torch.Tensor, residual: torch.Tensor) -> bool:
        return (x.dim() == 2 and 0 < x.shape[0] <= self.max_tokens and x.shape[1] == self.hidden
                and x.dtype == self.dtype and residual.shape == x.shape and residual.dtype == x.dtype
                and x.is_contiguous() and residual.is_contiguous())

    def __call__(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                 one_shot: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(RMSNorm(sum of x over the ranks + residual) * weight, that sum + residual); x must pass
        `takes`. New tensors: the kernel's blocks read x and write their outputs in no common order.
        `one_shot` None: FlashInfer's choice (one-shot up to a message size); the benchmark sets it."""
        from flashinfer.comm import allreduce_fusion

        normed, summed = torch.empty_like(x), torch.empty_like(x)
        allreduce_fusion(x, self.workspace, self.pattern, launch_with_pdl=self.pdl, residual_out=summed,
                         norm_out=normed, residual_in=residual, rms_gamma=weight, rms_eps=eps, fp32_acc=True,
                         use_oneshot=one_shot)
        return normed, summed

    def destroy(self) -> None:
        self.workspace.destroy()


def create(rank: int, world: int, max_tokens: int, hidden: int, dtype: torch.dtype, device: torch.device
           ) -> AllReduceAddRMSNorm | None:
    """The fused kernel for this group, or None (with the reason logged) on a GPU it is not built
    for or where FlashInfer's communication module is missing. Every rank reaches the same answer
    before the collective workspace set-up, and then loads the kernel (prebuilt in the image:
    minisgl/prebuild.py; else compiled on first use, ~150 s, and cached)."""
    from minisgl.prebuild import ALLREDUCE_FUSION_MAJORS

    major = torch.cuda.get_device_capability(device)[0]
    if major not in ALLREDUCE_FUSION_MAJORS:
        logger.info("all-reduce + RMSNorm fusion off: FlashInfer builds it for compute capability %s, not %d.x",
                    " and ".join(f"{m}.x" for m in ALLREDUCE_FUSION_MAJORS), major)
        return None
    try:
        import flashinfer.comm  # noqa: F401  (pulls in cuda-python and pynvml)
    except ImportError as e:
        logger.info("all-reduce + RMSNorm fusion off: %s", e)
        return None
    try:  # a GPU pair without peer mappings, say: the same on every rank, so all fall back together
        fused = AllReduceAddRMSNorm(rank, world, max_tokens, hidden, dtype, device)
        x = torch.zeros(1, hidden, dtype=dtype, device=device)
        fused(x, torch.zeros_like(x), torch.ones(hidden, dtype=dtype, device=device), 1e-6)
        torch.cuda.synchronize(device)
    except (RuntimeError, OSError) as e:
        logger.warning("all-reduce + RMSNorm fusion off: its set-up failed (%s)", e)
        return None
    logger.info("all-reduce + RMSNorm fused (FlashInfer, TensorRT-LLM kernel) up to %d tokens", max_tokens)
    return fused
