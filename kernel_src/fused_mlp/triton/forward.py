"""Kernel compositions on plain tensors: check arguments, pick the arch's config, allocate, launch.

No autograd and no dispatch here: `ops` decides when these run directly, under the eager autograd
Functions (`autograd`), or inside the registered custom ops (`custom_ops`, what torch.compile traces).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..reference import apply_activation, check_activation
from .act_and_mul import ACT_AND_MUL, ACT_AND_MUL_BACKWARD
from .activations import ACT_CODES
from .configs import GemmConfig, TmaConfig, cdiv, cublas_linear, elementwise_config, split_gate_up
from .decode import GEMV_GATE_UP, GEMV_LINEAR
from .gemm import (
    INTERPRET,
    decode,
    device_arch,
    gate_up_fits,
    is_kmajor,
    pick,
    portable,
    ptr_gate_up,
    ptr_linear,
    tma_gate_up,
    tma_gemm,
    tma_ok,
    vendor_linear,
)
from .hopper import EPI_ACT, EPI_ACT_STORE_PRE
from .launch import launch
from .linear import ACTIVATION_BACKWARD

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
__all__ = ["device_arch"]  # re-exported for the benchmarks' tuning loops


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
    if not first.is_cuda and not INTERPRET:
        raise RuntimeError(f"{op}: Triton kernels need CUDA tensors (or TRITON_INTERPRET=1 for CPU tensors)")


def rows(x: torch.Tensor) -> torch.Tensor:
    """x as a 2-D [rows, features] tensor with unit stride along features (a view when possible)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def unit_stride(w: torch.Tensor) -> torch.Tensor:
    return w if w.stride(-1) == 1 else w.contiguous()


def layer_weight(w: torch.Tensor) -> torch.Tensor:
    """A `linear` / `mlp` weight as linear_rows reads it in place: row-major (unit stride along K) or K-major
    (unit stride along N, as the transpose of transformers' Conv1D weight [in, out] is), else a contiguous copy."""
    return w if w.stride(-1) == 1 or (w.stride(0) == 1 and w.stride(1) >= w.shape[0]) else w.contiguous()


def check_linear_shapes(op: str, in_features: int, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    if weight.dim() != 2 or weight.shape[1] != in_features:
        raise ValueError(
            f"{op}: weight has shape {tuple(weight.shape)} but the input has {in_features} features; "
            "weight must be [out_features, in_features]"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{op}: bias has shape {tuple(bias.shape)}, expected ({weight.shape[0]},)")


def linear_rows(
    x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, activation: str, out: torch.Tensor | None = None,
    cfg: GemmConfig | TmaConfig | None = None, pre: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """out[M, N] = act(x2 @ w.T + b) with one GEMM launch; x2 rows and out unit-stride, w row-major or K-major
    (`layer_weight`; never copied); returns out (a new tensor when None). `pre` (training) also receives x2 @ w.T + b. `cfg` overrides the arch's tables (the
    tuning script measures candidates); without it, rows the arch's table gives to cuBLAS
    (configs.cublas_linear) go there."""
    M, K = x2.shape
    N = w.shape[0]
    if M == 0 or N == 0:
        return out if out is not None else x2.new_empty((M, N))
    if K == 0:
        raise ValueError("linear: in_features is 0; nothing to multiply")
    kmajor = is_kmajor(w)
    if (
        cfg is None
        and pre is None
        and not kmajor  # the decode kernels read weight rows along K
        and (dc := decode("linear", x2, M, N, N * K * w.element_size())) is not None
    ):
        out = x2.new_empty((M, N)) if out is None else out
        ptr_linear(x2, w, b, ACT_CODES[activation], out, dc, GEMV_LINEAR)
        return out
    if cfg is None and pre is None and cublas_linear(device_arch(x2), M, activation):
        return vendor_linear(x2, w, b, activation, out)
    if out is None:
        out = x2.new_empty((M, N))
    cfg = pick("linear", x2, M, N, cfg)
    b_op = w.t() if kmajor else w  # the Hopper kernel reads a K-major weight as B stored [K, N] (B_T)
    if isinstance(cfg, TmaConfig) and tma_ok(x2, b_op, out, pre):
        epi = EPI_ACT if pre is None else EPI_ACT_STORE_PRE
        tma_gemm(x2, b_op, out, M, N, K, cfg, b_t=kmajor, bias=b, aux=pre, act=ACT_CODES[activation], epi=epi)
        return out
    if isinstance(cfg, TmaConfig):
        cfg = portable("linear", x2, M)
    if pre is None:
        ptr_linear(x2, w, b, ACT_CODES[activation], out, cfg)
    else:  # the portable kernel has no pre-activation store: GEMM into pre, activation into out
        ptr_linear(x2, w, b, 0, pre, cfg)
        out.copy_(apply_activation(pre, activation))
    return out


def linear_rows_train(
    x2: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, activation: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """linear_rows that also returns what the activation's derivative reads in backward: (the output, nothing
    for "none", the output for relu (only its sign matters), else the pre-activation (the same launch stores
    it on Hopper))."""
    if activation in ("none", "relu"):
        out = linear_rows(x2, w, b, activation)
        return out, (None if activation == "none" else out)
    out = x2.new_empty((x2.shape[0], w.shape[0]))
    pre = torch.empty_like(out)
    linear_rows(x2, w, b, activation, out, pre=pre)
    return out, pre


def check_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> None:
    """The `linear` op's arguments: a known activation, one dtype and device, matching shapes."""
    check_activation(activation)
    check_tensors("linear", x=x, weight=weight, bias=bias)
    check_linear_shapes("linear", x.shape[-1], weight, bias)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """act(x @ weight.T + bias) for any leading batch dims."""
    check_linear(x, weight, bias, activation)
    out = linear_rows(rows(x), layer_weight(weight), bias, activation)
    return out.view(*x.shape[:-1], weight.shape[0])


def check_mlp(
    x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None]
) -> None:
    if len(weights) == 0:
        raise ValueError("mlp needs at least one weight")
    check_tensors("mlp", x=x)
    dtype, device = x.dtype, x.device
    features = x.shape[-1]
    for i, (w, b) in enumerate(zip(weights, biases)):
        # One comparison per tensor on the small-batch, host-bound path; check_tensors words the error.
        if (
            w.dtype != dtype
            or w.device != device
            or b is not None
            and (b.dtype != dtype or b.device != device)
        ):
            check_tensors(f"mlp layer {i}", x=x, weight=w, bias=b)
        if w.dim() != 2 or w.shape[1] != features or b is not None and b.shape != (w.shape[0],):
            check_linear_shapes(f"mlp layer {i}", features, w, b)
        features = w.shape[0]


def mlp_rows(
    x2: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None], activation: str,
    out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """The layer chain on 2-D rows, the last layer writing into `out` (a new tensor when None; returned);
    one GEMM launch per layer."""
    h = x2
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = linear_rows(h, layer_weight(w), b, activation if i < last else "none", out if i == last else None)
    return h


def mlp_rows_train(
    x2: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None], activation: str
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor | None]]:  # fmt: skip
    """mlp_rows that keeps what backward.chain_grads reads: (the output, every layer's input, x2 first; per
    hidden layer what act' reads, as linear_rows_train returns it)."""
    inputs, pres = [x2], []
    for w, b in zip(weights[:-1], biases[:-1]):
        h, pre = linear_rows_train(inputs[-1], layer_weight(w), b, activation)
        pres.append(pre)
        inputs.append(h)
    return linear_rows(inputs[-1], layer_weight(weights[-1]), biases[-1], "none"), inputs, pres


def check_gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> None:
    check_tensors("gated_mlp", x=x, w_gate=w_gate, w_up=w_up, w_down=w_down)
    check_linear_shapes("gated_mlp gate", x.shape[-1], w_gate, None)
    if w_up.shape != w_gate.shape:
        raise ValueError(f"gated_mlp: w_up has shape {tuple(w_up.shape)} but w_gate {tuple(w_gate.shape)}")
    check_linear_shapes("gated_mlp down", w_gate.shape[0], w_down, None)


def gate_up_rows(
    x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, activation: str, h: torch.Tensor,
    cfg: GemmConfig | TmaConfig | None = None, gu: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """h[M, I] = act(x2 @ w_gate.T) * (x2 @ w_up.T) with one GEMM launch; `gu` [2, M, I] (training) also
    receives the pre-activations g = gu[0], u = gu[1]."""
    M = x2.shape[0]
    N = w_gate.shape[0]
    if M == 0 or N == 0:
        return h
    if cfg is None and gu is None:  # the rows' and weights' own paths (a given cfg is a tuning run's)
        weight_bytes = 2 * N * x2.shape[1] * x2.element_size()
        if dc := decode("gate_up", x2, M, N, weight_bytes):
            ptr_gate_up(x2, w_gate, w_up, ACT_CODES[activation], h, dc, GEMV_GATE_UP)
            return h
        if split_gate_up(device_arch(x2), M, weight_bytes):
            return _split_gate_up(x2, w_gate, w_up, activation, h, x2.new_empty((2, M, N)))
    cfg = pick("gate_up", x2, M, N, cfg)
    if (
        isinstance(cfg, TmaConfig)
        and tma_ok(x2, w_gate, w_up, h, None if gu is None else gu[0])
        and gate_up_fits(w_gate, w_up)
    ):
        tma_gate_up(x2, w_gate, w_up, h, gu, ACT_CODES[activation], cfg)
        return h
    if isinstance(cfg, TmaConfig):
        cfg = portable("gate_up", x2, M)
    if gu is None:
        ptr_gate_up(x2, w_gate, w_up, ACT_CODES[activation], h, cfg)
        return h
    return _split_gate_up(x2, w_gate, w_up, activation, h, gu)  # the portable kernel keeps g, u in registers


def _split_gate_up(
    x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, activation: str, h: torch.Tensor, gu: torch.Tensor
) -> torch.Tensor:  # fmt: skip
    """gate_up as two GEMMs into gu = (g, u) [2, M, I], then h = act(g) * u; returns h."""
    linear_rows(x2, w_gate, None, "none", gu[0])
    linear_rows(x2, w_up, None, "none", gu[1])
    _elementwise(ACT_AND_MUL, "act_and_mul", (gu[0], gu[1]), activation, outs=(h,))
    return h


def gated_rows(
    x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, activation: str,
    out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """down(act(gate(x2)) * up(x2)) into `out` (a new tensor when None; returned): the gated GEMM, then the
    down GEMM."""
    h = x2.new_empty((x2.shape[0], w_gate.shape[0]))
    gate_up_rows(x2, unit_stride(w_gate), unit_stride(w_up), activation, h)
    return linear_rows(h, unit_stride(w_down), None, "none", out)


def gated_rows_train(
    x2: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, activation: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """gated_rows that also returns what backward needs: (the output, h = act(g) * u [M, I], gu = (g, u)
    [2, M, I])."""
    M, N = x2.shape[0], w_gate.shape[0]
    h = x2.new_empty((M, N))
    gu = x2.new_empty((2, M, N))
    gate_up_rows(x2, unit_stride(w_gate), unit_stride(w_up), activation, h, gu=gu)
    return linear_rows(h, unit_stride(w_down), None, "none"), h, gu


def _elementwise(
    kdef, op: str, tensors: tuple[torch.Tensor, ...], activation: str, n_out: int = 1,
    outs: tuple[torch.Tensor, ...] | None = None,
) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """Launch a 1-D elementwise kernel over same-shape tensors into `outs` (contiguous; default: n_out
    fresh tensors); returns the outputs."""
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape:
            raise ValueError(
                f"{op}: shapes differ: {tuple(first.shape)} vs {tuple(t.shape)}; pass equal shapes"
            )
    flat = tuple(t.contiguous() for t in tensors)
    outs = outs or tuple(torch.empty_like(flat[0]) for _ in range(n_out))
    n = first.numel()
    if n > 0:
        cfg = elementwise_config(device_arch(first))
        launch(kdef, (cdiv(n, cfg.BLOCK),), (*flat, *outs, n), (ACT_CODES[activation], cfg.BLOCK),
               cfg.num_warps, 1)  # fmt: skip
    return outs


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    check_activation(activation)
    check_tensors("act_and_mul", gate=gate, up=up)
    return _elementwise(ACT_AND_MUL, "act_and_mul", (gate, up), activation)[0]


def act_and_mul_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str,
    outs: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(d gate, d up) of act(gate) * up for upstream gradient `grad` (into `outs` when given)."""
    check_tensors("act_and_mul backward", grad=grad, gate=gate, up=up)
    return _elementwise(ACT_AND_MUL_BACKWARD, "act_and_mul backward", (grad, gate, up), activation, 2, outs)


def activation_backward(grad: torch.Tensor, pre: torch.Tensor, activation: str) -> torch.Tensor:
    """grad * act'(pre), elementwise; `pre` is the pre-activation (for relu the output works too)."""
    check_tensors("activation backward", grad=grad, pre=pre)
    return _elementwise(ACTIVATION_BACKWARD, "activation backward", (grad, pre), activation)[0]
