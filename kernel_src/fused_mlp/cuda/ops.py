"""The CUDA backend's public ops (the module `fused_mlp` selects as its backend): one host call into
C++ per public call. Inference skips the Python autograd layer (it dispatches straight to the CUDA
kernel); autograd and torch.compile go through the registered op, which has both.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..reference import check_activation, normalize_biases
from . import _library

__all__ = ["act_and_mul", "gated_mlp", "linear", "mlp"]


def _require_cuda(op: str, t: torch.Tensor) -> None:
    """Raise a clear error when the first input is not on a GPU, before torch's generic "no kernel for
    backend"; the C++ side checks the other inputs."""
    if not t.is_cuda:
        raise RuntimeError(
            f"fused_mlp.cuda.{op} needs a CUDA device: got a tensor on {t.device}; move the tensors to a "
            "GPU, or call fused_mlp (it sends CPU tensors to the eager reference)"
        )


def _ops():
    return _library.load()


def _needs_autograd(*tensors: torch.Tensor | None) -> bool:
    """True when the call must go through the registered op: compile is tracing, or autograd records it."""
    if torch.compiler.is_compiling():
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _call(needs_autograd: bool, op, *args):
    if needs_autograd:
        return op(*args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """act(x @ weight.T + bias): one cuBLASLt GEMM with bias+relu/gelu_tanh epilogue (gelu, silu: +1 kernel)."""
    check_activation(activation)
    _require_cuda("linear", x)
    return _call(_needs_autograd(x, weight, bias), _ops().cuda_linear.default, x, weight, bias, activation)


def mlp(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor | None] | None = None,
    activation: str = "relu",
) -> torch.Tensor:
    """Chain of fused linears, `activation` after every layer but the last, all layers in one host call."""
    check_activation(activation)
    weights = list(weights)
    biases = normalize_biases(weights, biases)
    _require_cuda("mlp", x)
    if all(b is None for b in biases):
        biases = []
    else:  # a layer without bias inside a biased MLP adds zeros
        biases = [b if b is not None else w.new_zeros(w.shape[0]) for w, b in zip(weights, biases)]
    outs = _call(
        _needs_autograd(x, *weights, *biases), _ops().cuda_mlp.default, x, weights, biases, activation
    )
    return outs[-1]


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    """down(act(gate(x)) * up(x)); gate and up in one tensor-core kernel whose epilogue writes act(g)*u."""
    check_activation(activation)
    _require_cuda("gated_mlp", x)
    y, _h = _call(
        _needs_autograd(x, w_gate, w_up, w_down),
        _ops().cuda_gated_mlp.default,
        x,
        w_gate,
        w_up,
        w_down,
        activation,
    )
    return y


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """act(gate) * up in one vectorized kernel."""
    check_activation(activation)
    _require_cuda("act_and_mul", gate)
    return _call(_needs_autograd(gate, up), _ops().cuda_act_and_mul.default, gate, up, activation)
