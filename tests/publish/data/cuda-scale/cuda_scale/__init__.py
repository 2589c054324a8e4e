"""cuda_scale: `scale(x, alpha)` = alpha * x, a CUDA C++ kernel on the torch stable ABI with an eager reference.

CUDA tensors run the extension `_C.abi3.so` (only the CUDA variant ships it); anything else runs the reference.
"""

from __future__ import annotations

from pathlib import Path

import torch

from . import reference
from ._build_info import OPS_NAMESPACE

__all__ = ["scale"]

_LIBRARY = Path(__file__).parent / "_C.abi3.so"
_ops = None


def _cuda_ops():
    global _ops
    if _ops is None:
        torch.ops.load_library(str(_LIBRARY))
        _ops = getattr(torch.ops, OPS_NAMESPACE)
    return _ops


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return _cuda_ops().scale(x.contiguous(), float(alpha))

    @staticmethod
    def backward(ctx, grad):
        return _cuda_ops().scale(grad.contiguous(), float(ctx.alpha)), None


def scale(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    """alpha * x."""
    if x.is_cuda and _LIBRARY.is_file():
        return _Scale.apply(x, alpha)
    return reference.scale(x, alpha)
