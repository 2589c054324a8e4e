"""Eager PyTorch implementations of the public ops: the correctness oracle and the fallback body.

Same signatures as the package's public API (DESIGN.md §3); math runs in the input dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu")


def check_activation(activation: str) -> str:
    """Return `activation` when it is one of ACTIVATIONS, else raise a ValueError naming the choices."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; use one of {', '.join(ACTIVATIONS)}")
    return activation


def apply_activation(x: torch.Tensor, activation: str) -> torch.Tensor:
    """act(x) for one of ACTIVATIONS."""
    check_activation(activation)
    if activation == "relu":
        return F.relu(x)
    if activation == "gelu":
        return F.gelu(x)
    if activation == "gelu_tanh":
        return F.gelu(x, approximate="tanh")
    if activation == "silu":
        return F.silu(x)
    return x


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none"
) -> torch.Tensor:
    """act(x @ weight.T + bias); weight is [out_features, in_features] like nn.Linear."""
    return apply_activation(F.linear(x, weight, bias), activation)


def normalize_biases(
    weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None] | None
) -> list[torch.Tensor | None]:
    """One bias (or None) per weight; raise when there is no weight or the counts differ."""
    if len(weights) == 0:
        raise ValueError("mlp needs at least one weight")
    if biases is None:
        return [None] * len(weights)
    biases = list(biases)
    if len(biases) != len(weights):
        raise ValueError(
            f"mlp got {len(weights)} weights but {len(biases)} biases; pass one bias (or None) per layer"
        )
    return biases


def mlp(
    x: torch.Tensor,
    weights: Sequence[torch.Tensor],
    biases: Sequence[torch.Tensor | None] | None = None,
    activation: str = "relu",
) -> torch.Tensor:
    """Chain of linear layers, `activation` after every layer but the last."""
    biases = normalize_biases(weights, biases)
    last = len(weights) - 1
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = linear(x, w, b, activation if i < last else "none")
    return x


def act_and_mul(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """act(gate) * up, elementwise."""
    return apply_activation(gate, activation) * up


def gated_mlp(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    w_down: torch.Tensor,
    activation: str = "gelu_tanh",
) -> torch.Tensor:
    """down(act(gate(x)) * up(x)): GeGLU with gelu/gelu_tanh, SwiGLU with silu; no biases."""
    return F.linear(act_and_mul(F.linear(x, w_gate), F.linear(x, w_up), activation), w_down)
