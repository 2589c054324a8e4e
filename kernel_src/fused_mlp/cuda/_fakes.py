"""Fake (meta) kernels of the C++ ops: output shapes, dtypes and strides (contiguous, but a weight gradient in
its weight's layout: K-major for a K-major weight), for torch.compile (the `*_infer` forms too: compiled
inference calls them)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _rows_like(x: Tensor, last: int) -> Tensor:
    return x.new_empty((*x.shape[:-1], last))


def linear(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str) -> Tensor:
    return _rows_like(x, weight.shape[0])


def _weight_grad(w: Tensor) -> Tensor:
    """As the C++ ops allocate a weight's gradient: K-major (the transpose of a contiguous [in, out]) stays
    K-major, any other layout gets a contiguous gradient (the op read a contiguous copy)."""
    if not w.is_contiguous() and w.stride(0) == 1 and w.stride(1) == w.shape[0]:
        return torch.empty_strided(w.shape, (1, w.shape[0]), dtype=w.dtype, device=w.device)
    return w.new_empty(w.shape)


def linear_backward(grad, x, weight, bias, y, activation) -> list[Tensor]:
    db = weight.new_empty(weight.shape[0] if bias is not None else 0)
    return [x.new_empty(x.shape), _weight_grad(weight), db]


def mlp(x: Tensor, weights: list[Tensor], biases: list[Tensor], activation: str) -> list[Tensor]:
    return [_rows_like(x, w.shape[0]) for w in weights]


def mlp_backward(grad, hidden_grads, x, weights, biases, outputs, activation) -> list[Tensor]:
    dbs = [w.new_empty(w.shape[0] if biases else 0) for w in weights]
    return [x.new_empty(x.shape), *[_weight_grad(w) for w in weights], *dbs]


def gated_mlp(x, w_gate, w_up, w_down, activation) -> list[Tensor]:
    """[y, h, gu]: gu = the (g, u) pre-activation planes [2, rows, I]."""
    inter = w_gate.shape[0]
    return [
        _rows_like(x, w_down.shape[0]),
        _rows_like(x, inter),
        x.new_empty((2, math.prod(x.shape[:-1]), inter)),
    ]


def gated_mlp_backward(grad, grad_h, x, w_gate, w_up, w_down, h, gu, activation) -> list[Tensor]:
    """[dx, (dw_gate, dw_up) as one [2, I, H] tensor, dw_down]."""
    return [x.new_empty(x.shape), w_gate.new_empty((2, *w_gate.shape)), w_down.new_empty(w_down.shape)]


def mlp_infer(x: Tensor, weights: list[Tensor], biases: list[Tensor], activation: str) -> Tensor:
    return _rows_like(x, weights[-1].shape[0])


def gated_mlp_infer(x, w_gate, w_up, w_down, activation) -> Tensor:
    return _rows_like(x, w_down.shape[0])


def act_and_mul(gate: Tensor, up: Tensor, activation: str) -> Tensor:
    return gate.new_empty(gate.shape)


def act_and_mul_backward(grad, gate, up, activation) -> list[Tensor]:
    return [gate.new_empty(gate.shape), gate.new_empty(gate.shape)]


FAKES = {
    "cuda_linear": linear,
    "cuda_linear_infer": linear,
    "cuda_linear_backward": linear_backward,
    "cuda_mlp": mlp,
    "cuda_mlp_infer": mlp_infer,
    "cuda_mlp_train": mlp,
    "cuda_mlp_backward": mlp_backward,
    "cuda_gated_mlp": gated_mlp,
    "cuda_gated_mlp_infer": gated_mlp_infer,
    "cuda_gated_mlp_train": gated_mlp,
    "cuda_gated_mlp_backward": gated_mlp_backward,
    "cuda_act_and_mul": act_and_mul,
    "cuda_act_and_mul_infer": act_and_mul,
    "cuda_act_and_mul_backward": act_and_mul_backward,
}
