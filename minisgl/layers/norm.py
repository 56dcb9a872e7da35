from __future__ import annotations

import torch
from torch import nn

from minisgl.distributed import all_reduce, all_reduce_add_rmsnorm
from minisgl.kernels.dispatch import fused_ops, triton_for


class RMSNorm(nn.Module):
    """RMSNorm computed in float32 and cast back, as HF transformers does.

    With `residual`, it first adds the residual (in the model dtype) and returns
    (normed, new_residual): the pre-norm transformer's add-then-norm in one call. On CUDA in
    half precision both are one kernel that works in place on `x` and `residual`: minisgl's
    Triton one where programmatic dependent launch exists (Hopper; it lets the next GEMM launch
    while it runs, see minisgl.kernels.rmsnorm), FlashInfer's elsewhere.

    With `reduce`, x is this rank's partial sum of a row-parallel layer's output (the layer left the
    all-reduce to the norm): under tensor parallelism the all-reduce, the add and the norm are one
    fused kernel where it takes the batch (minisgl.distributed.fused_norm), else the all-reduce runs
    first. Without tensor parallelism the all-reduce is nothing.
    """

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim), requires_grad=False)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None, reduce: bool = False):
        if reduce:
            fused = all_reduce_add_rmsnorm(x, residual, self.weight, self.eps) if residual is not None else None
            if fused is not None:
                return fused
            x = all_reduce(x)
        ops = fused_ops(x)
        if ops is not None and x.dim() in (2, 3) and x.stride(-1) == 1:
            if residual is None:
                return ops.rmsnorm(x, self.weight, self.eps)
            if x.dim() == 2 and residual.shape == x.shape and residual.stride(-1) == 1:
                kernels = triton_for(x)
                if kernels is not None and kernels.pdl_supported(x.device):
                    kernels.add_rmsnorm(x, residual, self.weight, self.eps, pdl=True)
                else:
                    ops.fused_add_rmsnorm(x, residual, self.weight, self.eps)
                return x, residual
        if residual is None:
            return self._norm(x)
        x = x + residual
        return self._norm(x), x
