"""The Triton backend's public ops (the module `fused_mlp` selects as its backend).

Each call takes one of three paths:
- custom op (`custom_ops`): under torch.compile tracing or when autograd needs a graph node;
- cached CUDA graph (`graphs`): CUDA inference forwards of `mlp`/`gated_mlp` at small batch, one
  host call per forward;
- direct launches (`forward`): everything else, including the CPU interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..reference import check_activation, normalize_biases
from . import custom_ops, forward, graphs


def _needs_op(*tensors: torch.Tensor | None) -> bool:
    """True when the call must be a registered op: compile is tracing, or autograd has to record it."""
    if torch.compiler.is_compiling():
        return True
    if torch.is_grad_enabled():
        return any(t is not None and t.requires_grad for t in tensors)
    return False


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    if _needs_op(x, weight, bias):
        return custom_ops.linear(x, weight, bias, activation)
    return forward.linear(x, weight, bias, activation)


def mlp(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor | None] | None = None,
    activation: str = "relu",
) -> torch.Tensor:
    weights = list(weights)
    biases = normalize_biases(weights, biases)
    check_activation(activation)
    if _needs_op(x, *weights, *biases):
        return custom_ops.mlp(x, weights, *custom_ops.split_biases(biases), activation)
    x2 = forward.rows(x)
    out = torch.empty((x2.shape[0], weights[-1].shape[0]) if weights else (0,), device=x.device, dtype=x.dtype)
    if x.is_cuda and graphs.usable(x2):
        key = ("mlp", activation, graphs.tensor_key(x2), out.data_ptr(),
               *[graphs.tensor_key(w) for w in weights], *[graphs.tensor_key(b) for b in biases])  # fmt: skip
        graphs.CACHE.run(key, lambda: _mlp_checked(x, x2, weights, biases, activation, out))
    else:
        _mlp_checked(x, x2, weights, biases, activation, out)
    return out.view(*x.shape[:-1], weights[-1].shape[0])


def _mlp_checked(x, x2, weights, biases, activation, out) -> None:
    forward.check_mlp(x, weights, biases)
    forward.mlp_rows(x2, weights, biases, activation, out)


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    check_activation(activation)
    if _needs_op(x, w_gate, w_up, w_down):
        return custom_ops.gated_mlp(x, w_gate, w_up, w_down, activation)
    x2 = forward.rows(x)
    out = torch.empty((x2.shape[0], w_down.shape[0]), device=x.device, dtype=x.dtype)
    if x.is_cuda and graphs.usable(x2):
        key = ("gated_mlp", activation, graphs.tensor_key(x2), out.data_ptr(), graphs.tensor_key(w_gate),
               graphs.tensor_key(w_up), graphs.tensor_key(w_down))  # fmt: skip
        graphs.CACHE.run(key, lambda: _gated_checked(x, x2, w_gate, w_up, w_down, activation, out))
    else:
        _gated_checked(x, x2, w_gate, w_up, w_down, activation, out)
    return out.view(*x.shape[:-1], w_down.shape[0])


def _gated_checked(x, x2, w_gate, w_up, w_down, activation, out) -> None:
    forward.check_gated(x, w_gate, w_up, w_down)
    forward.gated_rows(x2, w_gate, w_up, w_down, activation, out)


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    if _needs_op(gate, up):
        return custom_ops.act_and_mul(gate, up, activation)
    return forward.act_and_mul(gate, up, activation)
