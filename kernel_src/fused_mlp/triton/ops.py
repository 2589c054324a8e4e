"""The Triton backend's public ops (the module `fused_mlp` selects as its backend): the portable
fallback, Triton kernels JIT-compiled (or taken from shipped AOT cubins) and launched from Python.

Each call takes one of three paths:
- custom op (`custom_ops`): under torch.compile tracing, which needs one opaque op with a fake kernel;
- eager autograd (`autograd`): when autograd must record the call (grad enabled and an input requires
  grad), a torch.autograd.Function that launches directly (no dispatcher, no recompute in backward);
- direct launches (`forward`): everything else, including the CPU interpreter.
There is no cache of captured CUDA graphs (keyed by addresses it thrashed in real models and captured
per call): users who want graph replay capture their model (every op here is capturable) or use
torch.compile(mode="reduce-overhead").
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..reference import check_activation, normalize_biases
from . import autograd, custom_ops, forward

_is_compiling = torch.compiler.is_compiling


def _records(*tensors: torch.Tensor | None) -> bool:
    """True when autograd has to record the call: grad enabled and an input requires grad."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    if _is_compiling():
        return custom_ops.linear(x, weight, bias, activation)
    if _records(x, weight, bias):
        return autograd.linear(x, weight, bias, activation)
    return forward.linear(x, weight, bias, activation)


def mlp(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor | None] | None = None,
    activation: str = "relu",
) -> torch.Tensor:
    biases = normalize_biases(weights, biases)
    if _is_compiling():
        return custom_ops.mlp(x, list(weights), *custom_ops.split_biases(biases), activation)
    if _records(x, *weights, *biases):
        return autograd.mlp(x, weights, biases, activation)
    check_activation(activation)
    forward.check_mlp(x, weights, biases)
    out = forward.mlp_rows(forward.rows(x), weights, biases, activation)
    return out.view(*x.shape[:-1], out.shape[-1])


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    if _is_compiling():
        return custom_ops.gated_mlp_recorded(x, w_gate, w_up, w_down, activation)
    if _records(x, w_gate, w_up, w_down):
        return autograd.gated_mlp(x, w_gate, w_up, w_down, activation)
    check_activation(activation)
    forward.check_gated(x, w_gate, w_up, w_down)
    out = forward.gated_rows(forward.rows(x), w_gate, w_up, w_down, activation)
    return out.view(*x.shape[:-1], out.shape[-1])


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    if _is_compiling():
        return custom_ops.act_and_mul(gate, up, activation)
    if _records(gate, up):
        return autograd.act_and_mul(gate, up, activation)
    return forward.act_and_mul(gate, up, activation)
