"""The Triton backend's public ops (the module `fused_mlp` selects as its backend): the portable
fallback, Triton kernels JIT-compiled (or taken from shipped AOT cubins) and launched from Python.

Each call takes one of two paths:
- custom op (`custom_ops`): under torch.compile tracing or when autograd needs a graph node;
- direct launches (`forward`): everything else, including the CPU interpreter.
There is no cache of captured CUDA graphs (keyed by addresses it thrashed in real models and captured
per call): users who want graph replay capture their model (every op here is capturable) or use
torch.compile(mode="reduce-overhead").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..reference import check_activation, normalize_biases
from . import custom_ops, forward


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
    check_activation(activation)
    forward.check_mlp(x, weights, biases)
    out = x.new_empty((*x.shape[:-1], weights[-1].shape[0]))
    forward.mlp_rows(forward.rows(x), weights, biases, activation, out.view(-1, out.shape[-1]))
    return out


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    if _needs_op(x, w_gate, w_up, w_down):
        return custom_ops.gated_mlp_recorded(x, w_gate, w_up, w_down, activation)
    check_activation(activation)
    forward.check_gated(x, w_gate, w_up, w_down)
    out = x.new_empty((*x.shape[:-1], w_down.shape[0]))
    forward.gated_rows(forward.rows(x), w_gate, w_up, w_down, activation, out.view(-1, out.shape[-1]))
    return out


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    if _needs_op(gate, up):
        return custom_ops.act_and_mul(gate, up, activation)
    return forward.act_and_mul(gate, up, activation)
