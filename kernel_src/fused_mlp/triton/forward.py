"""Kernel compositions on plain tensors: check arguments, pick the arch's config, allocate, launch.

No autograd and no dispatch here: `ops` decides when these run directly, inside a cached CUDA graph,
or inside the registered custom ops.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import triton

from ..reference import check_activation
from .act_and_mul import ACT_AND_MUL, ACT_AND_MUL_BACKWARD
from .activations import ACT_CODES
from .configs import GATE_UP, LINEAR, GemmConfig, arch_of, elementwise_config, gemm_config, uses_pdl
from .gated import GATE_UP as GATE_UP_KERNEL
from .launch import launch
from .linear import ACTIVATION_BACKWARD
from .linear import LINEAR as LINEAR_KERNEL

_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_ARCHS: dict[int, str] = {}


def device_arch(t: torch.Tensor) -> str:
    """Arch name of t's device (cached per device), "interpreter" for CPU tensors."""
    if not t.is_cuda:
        return "interpreter"
    index = t.device.index if t.device.index is not None else torch.cuda.current_device()
    if index not in _ARCHS:
        _ARCHS[index] = arch_of(torch.cuda.get_device_capability(index))
    return _ARCHS[index]


def _dot_flags(t: torch.Tensor) -> tuple[bool, str]:
    """(upcast operands to fp32, tl.dot input precision) for t's dtype and device."""
    upcast = (not t.is_cuda) and t.dtype == torch.bfloat16
    exact = t.dtype == torch.float32 and not (t.is_cuda and torch.backends.cuda.matmul.allow_tf32)
    return upcast, "ieee" if exact else "tf32"


def check_tensors(op: str, **tensors: torch.Tensor | None) -> None:
    """All given tensors share one supported dtype and one device, and run where Triton can run them."""
    present = {k: v for k, v in tensors.items() if v is not None}
    first_name, first = next(iter(present.items()))
    if first.dtype not in _DTYPES:
        raise TypeError(f"{op}: {first_name} has dtype {first.dtype}; use float16, bfloat16 or float32")
    for name, t in present.items():
        if t.dtype != first.dtype or t.device != first.device:
            raise TypeError(
                f"{op}: {name} is {t.dtype} on {t.device} but {first_name} is {first.dtype} on {first.device}; "
                "pass all tensors in one dtype on one device"
            )
    if not first.is_cuda and not _INTERPRET:
        raise RuntimeError(f"{op}: Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors)")


def rows(x: torch.Tensor) -> torch.Tensor:
    """x as a 2-D [rows, features] tensor with unit stride along features (a view when possible)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def unit_stride(w: torch.Tensor) -> torch.Tensor:
    return w if w.stride(-1) == 1 else w.contiguous()


def check_linear_shapes(op: str, in_features: int, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    if weight.dim() != 2 or weight.shape[1] != in_features:
        raise ValueError(
            f"{op}: weight has shape {tuple(weight.shape)} but the input has {in_features} features; "
            "weight must be [out_features, in_features]"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{op}: bias has shape {tuple(bias.shape)}, expected ({weight.shape[0]},)")


def linear_rows(
    x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, activation: str, out: torch.Tensor,
    cfg: GemmConfig | None = None,
) -> torch.Tensor:  # fmt: skip
    """out[M, N] = act(x2 @ w.T + b) with one GEMM launch; x2 rows, w and out unit-stride.
    `cfg` overrides the arch table (bench/bench_mlp.py --tune measures candidates this way)."""
    M, K = x2.shape
    N = w.shape[0]
    if M == 0 or N == 0:
        return out
    if K == 0:
        raise ValueError("linear: in_features is 0; nothing to multiply")
    cfg = cfg or gemm_config(LINEAR, device_arch(x2), M, x2.element_size())
    upcast, precision = _dot_flags(x2)
    grid = (triton.cdiv(M, cfg.BM) * triton.cdiv(N, cfg.BN),)
    args = (x2, w, x2 if b is None else b, out, M, N, K, x2.stride(0), w.stride(0), out.stride(0))
    pdl = uses_pdl(device_arch(x2), M)
    consts = (b is not None, ACT_CODES[activation], K % cfg.BK == 0, upcast, precision, pdl, cfg.BM, cfg.BN, cfg.BK,
              cfg.GROUP_M)  # fmt: skip
    launch(LINEAR_KERNEL, grid, args, consts, cfg.num_warps, cfg.num_stages)
    return out


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """act(x @ weight.T + bias) for any leading batch dims."""
    check_activation(activation)
    check_tensors("linear", x=x, weight=weight, bias=bias)
    check_linear_shapes("linear", x.shape[-1], weight, bias)
    x2 = rows(x)
    out = torch.empty((x2.shape[0], weight.shape[0]), device=x.device, dtype=x.dtype)
    linear_rows(x2, unit_stride(weight), bias, activation, out)
    return out.view(*x.shape[:-1], weight.shape[0])


def check_mlp(
    x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None]
) -> None:
    if len(weights) == 0:
        raise ValueError("mlp needs at least one weight")
    features = x.shape[-1]
    for i, (w, b) in enumerate(zip(weights, biases)):
        check_tensors(f"mlp layer {i}", x=x, weight=w, bias=b)
        check_linear_shapes(f"mlp layer {i}", features, w, b)
        features = w.shape[0]


def mlp_rows(
    x2: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None], activation: str,
    out: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """The layer chain on 2-D rows, the last layer writing into `out`; one GEMM launch per layer."""
    h = x2
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases)):
        dst = out if i == last else torch.empty((x2.shape[0], w.shape[0]), device=x2.device, dtype=x2.dtype)
        h = linear_rows(h, unit_stride(w), b, activation if i < last else "none", dst)
    return out


def check_gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> None:
    check_tensors("gated_mlp", x=x, w_gate=w_gate, w_up=w_up, w_down=w_down)
    check_linear_shapes("gated_mlp gate", x.shape[-1], w_gate, None)
    if w_up.shape != w_gate.shape:
        raise ValueError(f"gated_mlp: w_up has shape {tuple(w_up.shape)} but w_gate {tuple(w_gate.shape)}")
    check_linear_shapes("gated_mlp down", w_gate.shape[0], w_down, None)


def gate_up_rows(
    x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, activation: str, h: torch.Tensor,
    cfg: GemmConfig | None = None,
) -> torch.Tensor:  # fmt: skip
    """h[M, I] = act(x2 @ w_gate.T) * (x2 @ w_up.T) with one GEMM launch."""
    M, K = x2.shape
    N = w_gate.shape[0]
    if M == 0 or N == 0:
        return h
    cfg = cfg or gemm_config(GATE_UP, device_arch(x2), M, x2.element_size())
    upcast, precision = _dot_flags(x2)
    grid = (triton.cdiv(M, cfg.BM) * triton.cdiv(N, cfg.BN),)
    args = (x2, w_gate, w_up, h, M, N, K, x2.stride(0), w_gate.stride(0), w_up.stride(0), h.stride(0))
    pdl = uses_pdl(device_arch(x2), M)
    consts = (
        ACT_CODES[activation],
        K % cfg.BK == 0,
        upcast,
        precision,
        pdl,
        cfg.BM,
        cfg.BN,
        cfg.BK,
        cfg.GROUP_M,
    )
    launch(GATE_UP_KERNEL, grid, args, consts, cfg.num_warps, cfg.num_stages)
    return h


def gated_rows(
    x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, activation: str,
    out: torch.Tensor,
) -> torch.Tensor:  # fmt: skip
    """down(act(gate(x2)) * up(x2)) into `out`: the gated GEMM, then the down GEMM."""
    h = torch.empty((x2.shape[0], w_gate.shape[0]), device=x2.device, dtype=x2.dtype)
    gate_up_rows(x2, unit_stride(w_gate), unit_stride(w_up), activation, h)
    return linear_rows(h, unit_stride(w_down), None, "none", out)


def _elementwise(kdef, op: str, tensors: tuple[torch.Tensor, ...], n_out: int, activation: str):
    """Launch a 1-D elementwise kernel over same-shape tensors; returns n_out fresh outputs."""
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape:
            raise ValueError(
                f"{op}: shapes differ: {tuple(first.shape)} vs {tuple(t.shape)}; pass equal shapes"
            )
    flat = tuple(t.contiguous() for t in tensors)
    outs = tuple(torch.empty_like(flat[0]) for _ in range(n_out))
    n = first.numel()
    if n > 0:
        cfg = elementwise_config(device_arch(first))
        launch(kdef, (triton.cdiv(n, cfg.BLOCK),), (*flat, *outs, n), (ACT_CODES[activation], cfg.BLOCK),
               cfg.num_warps, 1)  # fmt: skip
    return outs


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    check_activation(activation)
    check_tensors("act_and_mul", gate=gate, up=up)
    return _elementwise(ACT_AND_MUL, "act_and_mul", (gate, up), 1, activation)[0]


def act_and_mul_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(d gate, d up) of act(gate) * up for upstream gradient `grad`."""
    check_tensors("act_and_mul backward", grad=grad, gate=gate, up=up)
    return _elementwise(ACT_AND_MUL_BACKWARD, "act_and_mul backward", (grad, gate, up), 2, activation)


def activation_backward(grad: torch.Tensor, pre: torch.Tensor, activation: str) -> torch.Tensor:
    """grad * act'(pre), elementwise; `pre` is the pre-activation (for relu the output works too)."""
    check_tensors("activation backward", grad=grad, pre=pre)
    return _elementwise(ACTIVATION_BACKWARD, "activation backward", (grad, pre), 1, activation)[0]
