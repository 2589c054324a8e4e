"""The CUDA backend's public ops (the module `fused_mlp` selects as its backend): one C++ op call per
public call, which checks, allocates and launches everything (kernel_src/fused_mlp/cuda/csrc/ops.cu).

Each call takes one of four paths:
- autograd must record it (grad enabled and an input requires grad), eagerly: a torch.autograd.Function
  (_autograd.Functions) whose forward and backward each make one raw C++ op call (no Python autograd kernel
  in the dispatcher: the registered-op path cost hundreds of µs of host time per training step);
- autograd must record it under torch.compile tracing: the registered op with its autograd formula, which
  the compiler differentiates;
- inference under torch.compile tracing: the `*_infer` op, which the compiler sees as one opaque op with
  a fake kernel;
- inference otherwise: the `*_infer` op through its raw C++ entry point (no Python dispatch frame, and no
  autograd layer: none is registered on it).
The wrapper itself only checks what C++ cannot report clearly (a CPU tensor, an unknown activation).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..reference import ACTIVATIONS, normalize_biases
from . import _autograd, _library

__all__ = ["act_and_mul", "gated_mlp", "linear", "mlp"]

_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


class _Ops:
    """The op entry points, bound once on first use (loading the extension happens then)."""

    def __init__(self) -> None:
        ns = _library.load()
        self.linear, self.mlp = ns.cuda_linear.default, ns.cuda_mlp.default
        self.gated_mlp, self.act_and_mul = ns.cuda_gated_mlp.default, ns.cuda_act_and_mul.default
        self.linear_infer, self.mlp_infer = ns.cuda_linear_infer.default, ns.cuda_mlp_infer.default
        self.gated_mlp_infer = ns.cuda_gated_mlp_infer.default
        self.act_and_mul_infer = ns.cuda_act_and_mul_infer.default
        # OpOverload.__call__ is one Python frame around this C++ callable; inference calls it directly.
        self.raw_linear, self.raw_mlp = self.linear_infer._op, self.mlp_infer._op
        self.raw_gated_mlp, self.raw_act_and_mul = self.gated_mlp_infer._op, self.act_and_mul_infer._op
        self.train = _autograd.Functions(ns)


_OPS: _Ops | None = None


def _ops() -> _Ops:
    global _OPS
    if _OPS is None:
        _OPS = _Ops()
    return _OPS


def _refuse(op: str, t: torch.Tensor, activation: str) -> None:
    """The clear error for what the fast path's checks found wrong (a CPU tensor or an unknown activation)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; use one of {', '.join(ACTIVATIONS)}")
    raise RuntimeError(
        f"fused_mlp.cuda.{op} needs a CUDA device: got a tensor on {t.device}; move the tensors to a "
        "GPU, or call fused_mlp (it sends CPU tensors to the eager reference)"
    )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """act(x @ weight.T + bias): one GEMM with the bias/activation epilogue fused (path table: Triton or cuBLASLt)."""
    if not x.is_cuda or activation not in ACTIVATIONS:
        _refuse("linear", x, activation)
    o = _OPS or _ops()
    if _grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    ):
        if _is_compiling():
            return o.linear(x, weight, bias, activation)
        return o.train.linear(x, weight, bias, activation)
    if _is_compiling():
        return o.linear_infer(x, weight, bias, activation)
    return o.raw_linear(x, weight, bias, activation)


def mlp(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor | None] | None = None,
    activation: str = "relu",
) -> torch.Tensor:
    """Chain of fused linears, `activation` after every layer but the last, all layers in one host call."""
    if not x.is_cuda or activation not in ACTIVATIONS:
        _refuse("mlp", x, activation)
    o = _OPS or _ops()
    bs = () if biases is None else biases
    if _grad_enabled() and _any_requires_grad(x, weights, bs):
        dense = _dense_biases(weights, biases)
        if _is_compiling():
            return o.mlp(x, list(weights), dense, activation)[-1]
        return o.train.mlp(x, activation, len(weights), *weights, *dense)
    if _is_compiling():
        return o.mlp_infer(x, list(weights), _dense_biases(weights, biases), activation)
    try:
        return o.raw_mlp(x, weights, bs, activation)
    except (RuntimeError, TypeError):
        if biases is None or all(b is not None for b in biases):
            raise  # a real error, not a None bias (which the op's schema cannot take): report it as is
    return o.raw_mlp(x, weights, _dense_biases(weights, biases), activation)


def _any_requires_grad(x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence) -> bool:
    if x.requires_grad:
        return True
    for t in weights:
        if t.requires_grad:
            return True
    for t in biases:
        if t is not None and t.requires_grad:
            return True
    return False


def _dense_biases(weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None] | None) -> list:
    """[] without biases, else one bias per layer (zeros for a layer without one inside a biased MLP)."""
    biases = normalize_biases(weights, biases)
    if all(b is None for b in biases):
        return []
    return [b if b is not None else w.new_zeros(w.shape[0]) for w, b in zip(weights, biases)]


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    """down(act(gate(x)) * up(x)); gate/up as one fused GEMM or two GEMMs + act_and_mul (path table)."""
    if not x.is_cuda or activation not in ACTIVATIONS:
        _refuse("gated_mlp", x, activation)
    o = _OPS or _ops()
    if _grad_enabled() and (
        x.requires_grad or w_gate.requires_grad or w_up.requires_grad or w_down.requires_grad
    ):
        if _is_compiling():
            return o.gated_mlp(x, w_gate, w_up, w_down, activation)[0]
        return o.train.gated_mlp(x, w_gate, w_up, w_down, activation)
    if _is_compiling():
        return o.gated_mlp_infer(x, w_gate, w_up, w_down, activation)
    return o.raw_gated_mlp(x, w_gate, w_up, w_down, activation)


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """act(gate) * up in one vectorized kernel (Triton or CUDA, path table)."""
    if not gate.is_cuda or activation not in ACTIVATIONS:
        _refuse("act_and_mul", gate, activation)
    o = _OPS or _ops()
    if _grad_enabled() and (gate.requires_grad or up.requires_grad):
        if _is_compiling():
            return o.act_and_mul(gate, up, activation)
        return o.train.act_and_mul(gate, up, activation)
    if _is_compiling():
        return o.act_and_mul_infer(gate, up, activation)
    return o.raw_act_and_mul(gate, up, activation)
