"""Activation codes and their Triton forms (value and derivative), shared by every kernel epilogue.

All math is fp32. tanh is written through exp so the CPU interpreter and every GPU arch agree.
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
def _tanh(x):
    e = tl.exp(-2.0 * tl.abs(x))  # in (0, 1]: never overflows
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0.0, -t, t)


@triton.jit
def activate(x, ACT: tl.constexpr):
    """act(x) for the constexpr activation code ACT (see ACT_CODES)."""
    if ACT == 1:
        x = tl.maximum(x, 0.0)
    elif ACT == 2:
        x = 0.5 * x * (1.0 + tl.erf(x * _SQRT1_2))
    elif ACT == 3:
        x = 0.5 * x * (1.0 + _tanh(_TANH_K * (x + _TANH_C * x * x * x)))
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
        t = _tanh(_TANH_K * (x + _TANH_C * x * x * x))
        d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _TANH_K * (1.0 + 3.0 * _TANH_C * x * x)
    else:
        s = 1.0 / (1.0 + tl.exp(-x))
        d = s * (1.0 + x * (1.0 - s))
    return d
