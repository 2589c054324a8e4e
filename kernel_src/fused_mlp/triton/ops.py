"""The Triton backend's public ops (the module `fused_mlp` selects as its backend).

Each call takes one of three paths:
- custom op (`custom_ops`): under torch.compile tracing or when autograd needs a graph node;
- cached CUDA graph (`graphs`): CUDA inference forwards of `mlp`/`gated_mlp`, one graph replay per
  forward;
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
    biases = normalize_biases(weights, biases)
    if _needs_op(x, *weights, *biases):
        return custom_ops.mlp(x, list(weights), *custom_ops.split_biases(biases), activation)
    out = x.new_empty((*x.shape[:-1], weights[-1].shape[0]))
    if not graphs.usable(x):
        _mlp_checked(x, weights, biases, activation, out)
        return out
    # The key names everything the captured launches read; biases are fixed by their weights' shapes.
    key = ("mlp", activation, x.data_ptr(), x.shape, x.stride(), x.dtype, out.data_ptr(),
           *[(w.data_ptr(), w.shape, w.stride(), w.dtype) for w in weights],
           *[0 if b is None else b.data_ptr() for b in biases])  # fmt: skip
    if not graphs.CACHE.replay(key):
        graphs.CACHE.run(key, lambda: _mlp_checked(x, weights, biases, activation, out))
    return out


def _mlp_checked(x, weights, biases, activation, out) -> None:
    check_activation(activation)
    forward.check_mlp(x, weights, biases)
    forward.mlp_rows(forward.rows(x), weights, biases, activation, out.view(-1, out.shape[-1]))


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    if _needs_op(x, w_gate, w_up, w_down):
        return custom_ops.gated_mlp(x, w_gate, w_up, w_down, activation)
    out = x.new_empty((*x.shape[:-1], w_down.shape[0]))
    if not graphs.usable(x):
        _gated_checked(x, w_gate, w_up, w_down, activation, out)
        return out
    key = ("gated_mlp", activation, x.data_ptr(), x.shape, x.stride(), x.dtype, out.data_ptr(),
           *[(w.data_ptr(), w.shape, w.stride(), w.dtype) for w in (w_gate, w_up, w_down)])  # fmt: skip
    if not graphs.CACHE.replay(key):
        graphs.CACHE.run(key, lambda: _gated_checked(x, w_gate, w_up, w_down, activation, out))
    return out


def _gated_checked(x, w_gate, w_up, w_down, activation, out) -> None:
    check_activation(activation)
    forward.check_gated(x, w_gate, w_up, w_down)
    forward.gated_rows(forward.rows(x), w_gate, w_up, w_down, activation, out.view(-1, out.shape[-1]))


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    if _needs_op(gate, up):
        return custom_ops.act_and_mul(gate, up, activation)
    return forward.act_and_mul(gate, up, activation)
