"""Activation codes and their Triton forms (value and derivative), shared by every kernel epilogue.

All math is fp32, exp-based so the CPU interpreter and every GPU arch agree. The tanh GELU is
z * sigmoid(2 * inner) with one fast divide (the CUDA kernels' form, csrc/common.cuh): it made the
memory-bound act_and_mul faster than 0.5 z (1 + tanh) with tanh's exact divide (bench/BENCHMARKS.md).
"""

from __future__ import annotations

import triton
import triton.language as tl

# Kernel constexpr code per public activation name.
ACT_CODES = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}

_SQRT1_2 = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)
_TANH_K = tl.constexpr(0.7978845608028654)  # sqrt(2/pi)
_TANH_C = tl.constexpr(0.044715)


@triton.jit
def _gelu_tanh_sigmoid(x):
    """(s, e): s = sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)) = 0.5 * (1 + tanh(...)), e = exp(-2 * inner).
    e = inf (x far below zero) gives s = 0, the limit."""
    e = tl.exp(-2.0 * _TANH_K * (x + _TANH_C * x * x * x))
    return tl.fdiv(1.0, 1.0 + e, ieee_rounding=False), e


@triton.jit
def activate(x, ACT: tl.constexpr):
    """act(x) for the constexpr activation code ACT (see ACT_CODES)."""
    if ACT == 1:
        x = tl.maximum(x, 0.0)
    elif ACT == 2:
        x = 0.5 * x * (1.0 + tl.erf(x * _SQRT1_2))
    elif ACT == 3:
        s, _ = _gelu_tanh_sigmoid(x)
        x = x * s
    elif ACT == 4:
        x = x / (1.0 + tl.exp(-x))
    return x


@triton.jit
def activate_grad(x, ACT: tl.constexpr):
    """d act(x) / dx for the constexpr activation code ACT."""
    if ACT == 0:
        d = tl.full(x.shape, 1.0, tl.float32)
    elif ACT == 1:
        d = tl.where(x > 0.0, 1.0, 0.0)
    elif ACT == 2:
        d = 0.5 * (1.0 + tl.erf(x * _SQRT1_2)) + x * _INV_SQRT_2PI * tl.exp(-0.5 * x * x)
    elif ACT == 3:
        # 0.5 (1 + tanh) = s and 0.5 (1 - tanh^2) = 2 s (1 - s); 1 - s = e s without cancellation, or 1 where s
        # underflowed to 0 (e = inf would make e s NaN)
        s, e = _gelu_tanh_sigmoid(x)
        d = s * (1.0 + 2.0 * x * tl.where(s > 0.0, e * s, 1.0) * _TANH_K * (1.0 + 3.0 * _TANH_C * x * x))
    else:
        s = 1.0 / (1.0 + tl.exp(-x))
        d = s * (1.0 + x * (1.0 - s))
    return d
